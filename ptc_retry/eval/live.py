"""``ptc-retry eval --live``: the evaluation's failed programs, fixed by a real model.

Each scenario of one program (no files, host tools, time limit, restart or second program)
is played in two arms on real kernels. ON, the ptc-retry kernel: the model gets the prompt
section, the task, its own failed call and the result with the notice, and its next message
is the fix. OFF, the stock ``python3`` kernel: the same, without the prompt section or the
notice: the re-send arm. The fix is run and checked against the value the corrected program
ends with; its tokens are the API's own usage figures for that request. The failed call is
the scenario's program, put in the conversation as the model's: a model's own first program
would fail each run differently, and the fix is what is measured.

The API is OpenAI Chat Completions (``--api openai``, any compatible endpoint with
``--base-url``) or Anthropic Messages (``--api anthropic``), through the provider adapters
(``ptc_retry.integrations.openai``, ``.anthropic``); the key is the SDK's usual variable.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import secrets
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..backend import KernelBackend
from ..core.sentences import PREFIX
from ..integrations.replies import Continuation, ProviderAdapter, Reply, Stop, ToolCall
from .outcomes import same_value
from .runner import eval_backend, stock_backend, work_dir
from .scenarios import QUICK, SCENARIOS, Scenario
from .tables import fmt_pct

__all__ = ["APIS", "LiveOutcome", "live_scenarios", "main", "run_live"]


@dataclass(frozen=True)
class Api:
    """One API the live evaluation talks to: its key's variable, its SDK (and the extra
    that brings it), the model it asks by default, and the shape of its tool-call ids."""

    key: str
    sdk: str
    default_model: str
    id_prefix: str


APIS = {
    "openai": Api("OPENAI_API_KEY", "openai", "gpt-4.1-mini", "call_"),
    "anthropic": Api("ANTHROPIC_API_KEY", "anthropic", "claude-sonnet-4-5", "toolu_01"),
}
SYSTEM = "You write Python programs and run them with the run_code tool."
TASK = (
    "Run the program below with run_code and report the value it ends with. If it fails, fix "
    "it and run it again."
)
#: The calls a fix may be, as the notice and the prompt section teach them.
ADOPTED = ("replay", "extend", "resume")
#: What an Anthropic fix may write: the longest re-sent program (20 KB, about 8,400 tokens
#: of cl100k_base and more of Claude's) fits, and no Claude 4 model writes less (Opus 4's
#: limit). A request this long is streamed: the SDK refuses it otherwise.
_MAX_TOKENS = 32_000
#: The ``problem`` of a fix the output-token limit cut: it is not right, and not the model's
#: mistake.
CUT_PROBLEM = "the fix was cut by the output-token limit"


@dataclass
class LiveOutcome:
    """One arm's fix of one scenario. ``action``: what the model's fix was (``replay``,
    ``extend``, ``resume``, ``resend`` a program, ``answer`` without a call); ``right``: the
    fix ended with the expected value; the tokens are the fix request's, from the API."""

    scenario: str
    size: str
    arm: str
    notice: bool
    action: str
    right: bool
    input_tokens: int | None
    output_tokens: int | None
    problem: str | None = None


def live_scenarios(quick: bool = False) -> list[Scenario]:
    """The scenarios a live model can fix in one message (``quick``: those of them in the
    keyless evaluation's quick set)."""
    plain = [
        scenario
        for scenario in SCENARIOS
        if not (
            scenario.files
            or scenario.tools
            or scenario.timeout
            or scenario.restart
            or scenario.parallel
            or scenario.inspect
            or scenario.extra_keys
        )
    ]
    return [s for s in plain if s.name in QUICK] if quick else plain


def missing(api: str) -> str | None:
    """What stops a live run before it starts (no key, no SDK), as the line to print."""
    spec = APIS[api]
    if not os.environ.get(spec.key):
        return (
            f"ptc-retry eval --live: set {spec.key} to the key of the endpoint (--base-url, "
            f"default {spec.sdk}'s own); nothing was run"
        )
    if importlib.util.find_spec(spec.sdk) is None:
        return (
            f"ptc-retry eval --live: the {spec.sdk} SDK is missing: "
            f"pip install 'ptc-retry[{spec.sdk}]'"
        )
    return None


#: A fix is one request: an Anthropic stream the network cuts is not continued (the
#: continuation would add its own request and text to what is measured); the run ends on
#: its error.
_ONE_REQUEST = Continuation(budget=0)


def _client_and_adapter(
    api: str, kb: KernelBackend, base_url: str | None
) -> tuple[ProviderAdapter[Any], Any]:
    """The adapter on ``kb`` and the SDK's create method (a client of its own per arm)."""
    if api == "openai":
        import openai

        from ..integrations.openai import ChatCompletions

        client = openai.AsyncOpenAI(base_url=base_url)
        return ChatCompletions(kb), client.chat.completions.create
    import anthropic

    from ..integrations.anthropic import Messages

    anthropic_client = anthropic.AsyncAnthropic(base_url=base_url)
    return Messages(kb, _ONE_REQUEST), anthropic_client.messages.create


def _endpoint_of(api: str, base_url: str | None) -> str:
    """The URL the SDK's client sends the requests to: ``base_url``, else what the SDK
    itself takes (its ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``, else the API's own)."""
    module = importlib.import_module(APIS[api].sdk)
    client = module.OpenAI if api == "openai" else module.Anthropic
    with client(base_url=base_url) as probe:  # builds no connection; closed at once
        return str(probe.base_url)


def _failure(api: str, endpoint: str, exc: Exception) -> str:
    """How a run that stopped on ``exc`` says so: a connection that failed, or the answer."""
    module = importlib.import_module(APIS[api].sdk)
    if isinstance(exc, module.APIConnectionError):
        return f"could not reach {endpoint} ({exc!s})"
    return f"the API answered {exc!s}"


def _api_error(api: str) -> type[Exception]:
    """The SDK's base class of the errors its API answers with (a refused key, a model
    that does not exist, a connection that cannot be made)."""
    module = importlib.import_module(APIS[api].sdk)
    error: type[Exception] = module.APIError
    return error


def _params(
    api: str, model: str, kb: KernelBackend, system: str, messages: list[Any]
) -> dict[str, Any]:
    if api == "openai":
        chat = [{"role": "system", "content": system}, *messages]
        return {"model": model, "messages": chat, "tools": kb.tool_schemas("openai")}
    return {
        "model": model,
        "max_tokens": _MAX_TOKENS,
        "system": system,
        "messages": messages,
        "tools": kb.tool_schemas("anthropic"),
    }


def action_of(reply: Reply) -> str:
    """What a fix was: the ptc-retry call its program makes, a program re-sent, or none."""
    codes = []
    for call in reply.tool_calls:
        arguments = call.arguments
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = {}
        if isinstance(arguments, Mapping):
            codes.append(str(arguments.get("code", "")))
    if not codes:
        return "answer"
    for name in ADOPTED:
        if any(f"ptc_retry.{name}(" in code for code in codes):
            return name
    return "resend"


async def _play(
    api: str,
    model: str,
    base_url: str | None,
    kb: KernelBackend,
    scenario: Scenario,
    arm: str,
) -> LiveOutcome:
    """Fail the scenario's program as the model's call, ask the model for the fix, run it."""
    adapter, create = _client_and_adapter(api, kb, base_url)
    prefix = APIS[api].id_prefix
    call_id = prefix + secrets.token_hex(12)[: 30 - len(prefix)]
    failed_call = ToolCall(call_id, "run_code", json.dumps({"code": scenario.program}))
    failed = await adapter.step(Reply(tool_calls=[failed_call], stop=Stop.TOOL_CALLS))
    notice = PREFIX.strip() in failed.results[0].text
    system = SYSTEM + ("\n" + kb.system_prompt() if arm == "on" else "")
    messages = [adapter.user(f"{TASK}\n\n```python\n{scenario.program}```"), *failed.messages]
    params = _params(api, model, kb, system, messages)
    # Streamed on Anthropic only, where the SDK refuses a long request otherwise; a
    # Chat-compatible endpoint may send no usage in a stream.
    if api == "anthropic":
        reply = await adapter.stream(create, **params)
    else:
        reply = adapter.reply_of(await create(**params))
    tokens = reply.tokens
    fix = await adapter.step(reply)
    result = kb.last_result
    right = bool(fix.results) and result is not None and same_value(result.value, scenario.expected)
    problem = None if failed.results[0].status == "error" else "the program did not fail"
    if reply.stop is Stop.LENGTH:
        problem = CUT_PROBLEM
    return LiveOutcome(
        scenario.name,
        scenario.size,
        arm,
        notice,
        action_of(reply),
        right,
        tokens.input_tokens,
        tokens.output_tokens,
        problem,
    )


async def _play_all(
    api: str, model: str, base_url: str | None, scenarios: Sequence[Scenario], work: Path
) -> list[LiveOutcome]:
    on = eval_backend(work, "on")
    off = stock_backend(work, "off")
    outcomes: list[LiveOutcome] = []
    try:
        await asyncio.gather(on.start(), off.start())
        for number, scenario in enumerate(scenarios, 1):
            print(f"[{number}/{len(scenarios)}] {scenario.name} ...", end=" ", flush=True)
            pair = await asyncio.gather(
                _play(api, model, base_url, off, scenario, "off"),
                _play(api, model, base_url, on, scenario, "on"),
            )
            outcomes += pair
            print("; ".join(f"{o.arm} {o.action} {_verdict(o, 'right', 'WRONG')}" for o in pair))
    finally:
        await asyncio.gather(on.shutdown(), off.shutdown(), return_exceptions=True)
    return outcomes


def run_live(
    api: str, model: str, base_url: str | None, scenarios: Sequence[Scenario]
) -> list[LiveOutcome]:
    """Play ``scenarios`` in both arms against the model; one outcome per scenario and arm."""
    from jupyter_core.utils import run_sync

    work = work_dir()
    try:
        return list(run_sync(_play_all)(api, model, base_url, list(scenarios), work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def figures(outcomes: Sequence[LiveOutcome]) -> dict[str, Any]:
    """Per arm: fixes, right results, the fixes' input and output tokens; ON's adoption
    (the fixes after a notice that were a replay, extend or resume)."""

    def arm(name: str) -> dict[str, Any]:
        mine = [o for o in outcomes if o.arm == name]
        return {
            "fixes": len(mine),
            "right": sum(o.right for o in mine),
            "input_tokens": sum(o.input_tokens or 0 for o in mine),
            "output_tokens": sum(o.output_tokens or 0 for o in mine),
        }

    on, off = arm("on"), arm("off")
    offered = [o for o in outcomes if o.arm == "on" and o.notice]
    adopted = sum(o.action in ADOPTED for o in offered)

    def saved(key: str) -> float | None:
        return 1 - on[key] / off[key] if off[key] else None

    total_on, total_off = (
        on["input_tokens"] + on["output_tokens"],
        off["input_tokens"] + off["output_tokens"],
    )
    return {
        "on": on,
        "off": off,
        "offered": len(offered),
        "adopted": adopted,
        "adoption": adopted / len(offered) if offered else None,
        "saved_output": saved("output_tokens"),
        "saved_total": 1 - total_on / total_off if total_off else None,
    }


def headline(run: dict[str, Any], numbers: dict[str, Any]) -> str:
    on, off = numbers["on"], numbers["off"]
    return (
        f"{run['model']} ({run['api']}), {run['date']}: {numbers['adopted']} of "
        f"{numbers['offered']} fixes after a notice were a replay, extend or resume "
        f"({fmt_pct(numbers['adoption'])}); right result {on['right']}/{on['fixes']} with "
        f"ptc-retry, {off['right']}/{off['fixes']} re-sending. The fixes cost "
        f"{on['output_tokens']:,} output tokens with ptc-retry and {off['output_tokens']:,} "
        f"re-sending ({fmt_pct(numbers['saved_output'])} fewer); "
        f"{fmt_pct(numbers['saved_total'])} fewer counting input tokens."
    )


def _verdict(outcome: LiveOutcome, right: str, wrong: str) -> str:
    """Whether the fix was right, with what went wrong around it, if anything did."""
    said = right if outcome.right else wrong
    return f"{said} ({outcome.problem})" if outcome.problem else said


def render(run: dict[str, Any], numbers: dict[str, Any], outcomes: Sequence[LiveOutcome]) -> str:
    """``report.md``: the headline, the figures per arm, and each scenario's two fixes."""
    lines = [
        "# ptc-retry live evaluation",
        "",
        headline(run, numbers),
        "",
        f"Model `{run['model']}` through {run['api']} ({run['endpoint']}), {run['date']}, "
        f"{run['seconds']} s. Tokens are the API's usage figures for the request that made "
        "each fix: input (the conversation so far, the notice included) and output (the fix).",
        "",
        "| arm | fixes | right result | input tokens | output tokens |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, label in (("off", "re-send (stock kernel)"), ("on", "ptc-retry")):
        arm = numbers[name]
        lines.append(
            f"| {label} | {arm['fixes']} | {arm['right']} | {arm['input_tokens']:,} | "
            f"{arm['output_tokens']:,} |"
        )
    lines += [
        "",
        "| scenario | size | ptc-retry's fix | right | in / out "
        "| re-send's fix | right | in / out |",
        "|---|---|---|---|---:|---|---|---:|",
    ]
    by_name: dict[str, dict[str, LiveOutcome]] = {}
    for outcome in outcomes:
        by_name.setdefault(outcome.scenario, {})[outcome.arm] = outcome
    for name, arms in by_name.items():
        on, off = arms["on"], arms["off"]
        lines.append(
            f"| {name} | {on.size} | {on.action}{'' if on.notice else ' (no notice)'} | "
            f"{_verdict(on, 'yes', 'no')} | {on.input_tokens} / {on.output_tokens} | "
            f"{off.action} | {_verdict(off, 'yes', 'no')} | "
            f"{off.input_tokens} / {off.output_tokens} |"
        )
    return "\n".join(lines) + "\n"


def write(
    out: Path, run: dict[str, Any], outcomes: Sequence[LiveOutcome]
) -> tuple[list[Path], str]:
    """Write ``report.md`` and ``report.json`` to ``out``; return their paths and the headline."""
    numbers = figures(outcomes)
    out.mkdir(parents=True, exist_ok=True)
    markdown, data = out / "report.md", out / "report.json"
    markdown.write_text(render(run, numbers, outcomes), encoding="utf-8")
    detail = {"run": run, **numbers, "fixes": [asdict(o) for o in outcomes]}
    data.write_text(json.dumps(detail, indent=2) + "\n", encoding="utf-8")
    return [markdown, data], headline(run, numbers)


def main(
    api: str = "openai",
    model: str | None = None,
    base_url: str | None = None,
    out: str | os.PathLike[str] = "eval-live-report",
    quick: bool = False,
    scenarios: Sequence[Scenario] | None = None,
) -> int:
    """Run the live evaluation and write its report to ``out``. 2 without a key or the SDK
    (before anything runs); 1 when the API refuses a request (its error is printed, and no
    report written); else 0: what the model did is the measurement."""
    problem = missing(api)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    model = model or APIS[api].default_model
    chosen = list(scenarios) if scenarios is not None else live_scenarios(quick)
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    endpoint = _endpoint_of(api, base_url)
    print(f"ptc-retry eval --live: {len(chosen)} scenarios, {model} at {endpoint}, two arms")
    started = time.monotonic()
    try:
        outcomes = run_live(api, model, base_url, chosen)
    except _api_error(api) as exc:
        failure = _failure(api, endpoint, exc)
        print(f"\nptc-retry eval --live: {failure}; no report", file=sys.stderr)
        return 1
    run = {
        "api": api,
        "model": model,
        "endpoint": endpoint,
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(time.monotonic() - started, 1),
        "quick": quick,
    }
    paths, line = write(Path(out), run, outcomes)
    print(f"\n{line}\n")
    for path in paths:
        print(f"wrote {path}")
    return 0
