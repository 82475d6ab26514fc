"""KernelBackend end to end on local kernels, started by the backend itself. What the local
and the gateway transport share is tested over both in ``test_backend_transports.py``.

Tests that leave the kernel usable share one backend (``backend``) and use distinct
call ids; tests that kill or restart a kernel share another (``fragile``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.backend import (
    BackendError,
    GatewayKernel,
    KernelBackend,
    KernelStartError,
    LocalKernel,
)
from ptc_retry.backend.capture import MAX_RAW_OUTPUT_CHARS
from ptc_retry.core import sentences as said
from ptc_retry.core.notice import parse_notice
from ptc_retry.core.sentences import Sentence
from ptc_retry.core.status import ResultStatus

from .helpers import ORDERS, OnLoop, history, line_of, raw, until_printed

PROGRAM = ORDERS  # over notice_min_bytes, one wrong literal: "regoin" for "region"
SUMMARY = "{'north': 162.75, 'south': 95.75, 'east': 310.0}"


# -- the agent loop -------------------------------------------------------------------------


def test_run_result_carries_the_kernels_facts(backend: KernelBackend, on_loop: OnLoop[Any]) -> None:
    result = on_loop(backend.run_code(PROGRAM, call_id="call_f1", arguments=raw(PROGRAM)))

    assert result.status == "error"
    assert (result.ename, result.evalue) == ("KeyError", "'regoin'")
    assert result.call_id == "call_f1"
    assert result.checkpoint == str(backend.session_dir / "by-id" / "call_f1.json")
    assert result.notice is not None and result.text.endswith("\n" + result.notice)
    assert result.text.count("[ptc-retry]") == 1
    assert result.metadata["notice"] == result.notice
    assert result.outputs[-1]["output_type"] == "error"
    assert backend.last_result is result


def test_value_is_the_last_expression(backend: KernelBackend, on_loop: OnLoop[Any]) -> None:
    result = on_loop(backend.run_code("answer = 6 * 7\nanswer", call_id="call_v1"))
    assert (result.status, result.value, result.text) == ("ok", "42", "42")
    assert on_loop(backend.run_code("quiet = 1", call_id="call_v2")).text == "[no output]"


def test_calls_without_an_id_get_distinct_ids(backend: KernelBackend, on_loop: OnLoop[Any]) -> None:
    first = on_loop(backend.run_code("1"))
    second = on_loop(backend.run_code("2"))
    assert first.call_id != second.call_id
    assert {first.call_id, second.call_id} <= {h["id"] for h in history(backend.session_dir)}


def test_parallel_calls_of_one_message_share_a_step(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    async def one_message() -> list[str]:
        step = backend.next_step()
        calls = [("call_p1", "part_one = 'left'"), ("call_p2", "part_two = 'right'")]
        return await asyncio.gather(
            *(backend.handle_tool_call("run_code", raw(c), i, step=step) for i, c in calls)
        )

    on_loop(one_message())
    on_loop(backend.run_code("print(part_one, part_two)", call_id="call_p3"))

    p1, p2 = line_of(backend.session_dir, "call_p1"), line_of(backend.session_dir, "call_p2")
    assert p1["step"] == p2["step"] and (p1["ordinal"], p2["ordinal"]) == (1, 2)
    assert json.loads((backend.session_dir / "previous" / "2.json").read_text()) == {
        "code": "part_two = 'right'"
    }


def test_calls_on_one_backend_run_one_at_a_time(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    program = "import time\norder = globals().setdefault('order', [])\ntime.sleep(0.2)\n"

    async def three_at_once() -> None:
        await asyncio.gather(
            *(
                backend.run_code(f"{program}order.append({n})", call_id=f"call_o{n}")
                for n in (1, 2, 3)
            )
        )

    on_loop(three_at_once())
    assert on_loop(backend.run_code("order", call_id="call_o4")).value == "[1, 2, 3]"


# -- what the model reads ---------------------------------------------------------------------


def test_long_output_keeps_head_and_tail_with_a_marker(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    code = "for i in range(20_000):\n    print(f'{i:06d}')"  # 140,000 characters
    result = on_loop(backend.run_code(code, call_id="call_t1"))

    assert result.truncated and result.output_chars == 140_000
    head, tail = result.text.split("\n[... 120,000 characters cut ...]\n")
    assert head.startswith("000000\n000001\n") and len(head) == 10_000
    assert tail.endswith("019998\n019999") and len(tail) == 9_999  # its final newline trimmed


def test_notice_survives_truncation_once(backend: KernelBackend, on_loop: OnLoop[Any]) -> None:
    code = "print('x' * 100_000)\n" + PROGRAM
    result = on_loop(backend.run_code(code, call_id="call_t2", arguments=raw(code)))

    assert result.notice is not None and result.text.endswith("\n" + result.notice)
    assert result.text.count(result.notice) == 1
    assert "characters cut" in result.text


def test_binary_output_is_a_placeholder(backend: KernelBackend, on_loop: OnLoop[Any]) -> None:
    code = (
        "import base64\nfrom IPython.display import display\n"
        "png = base64.b64encode(bytes(12_345)).decode()\n"
        "display({'image/png': png, 'text/plain': '<chart>'}, raw=True)"
    )
    result = on_loop(backend.run_code(code, call_id="call_b1"))

    assert result.text == "[image/png output, 12.3 kB]\n<chart>"
    assert result.outputs[0]["data"]["image/png"].startswith("AAAA")


def test_ansi_codes_are_stripped_from_output(backend: KernelBackend, on_loop: OnLoop[Any]) -> None:
    result = on_loop(backend.run_code("print('\\x1b[31mred\\x1b[0m plain')", call_id="call_b2"))
    assert result.text == "red plain"


def test_unicode_round_trips(backend: KernelBackend, on_loop: OnLoop[Any]) -> None:
    code = "label = 'naïve → ünïcödé 🐍'\nprint(label)\nlabel[::-1]"
    arguments = raw(code)
    result = on_loop(backend.run_code(code, call_id="call_u1", arguments=arguments))

    assert result.text == "naïve → ünïcödé 🐍\n'🐍 édöcïnü → evïan'"
    assert Path(result.checkpoint).read_bytes() == arguments.encode()


def test_huge_output_is_held_bounded(backend: KernelBackend, on_loop: OnLoop[Any]) -> None:
    code = (
        "import sys\n"
        "for n in range(50):\n"
        "    sys.stdout.write(('HEAD' if n == 0 else '') + 'x' * 999_999 + '\\n')\n"
        "    sys.stdout.flush()\n"
        "print('TAIL')"
    )
    tracemalloc.start()
    try:
        result = on_loop(backend.run_code(code, call_id="call_h1"))
        held, _ = tracemalloc.get_traced_memory()  # what is still allocated: the result
    finally:
        tracemalloc.stop()

    assert result.output_chars > 50_000_000
    assert result.text.startswith("HEAD") and result.text.endswith("TAIL")
    assert len(result.text) < backend.max_output_chars + 100
    assert sum(len(o.get("text", "")) for o in result.outputs) <= MAX_RAW_OUTPUT_CHARS
    assert held < 5_000_000


# -- arguments the model got wrong ------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments", "says"),
    [
        ("run_code", "print(1)", "not valid JSON"),
        ("run_code", "", "not valid JSON"),
        ("run_code", '["print(1)"]', "not an array"),
        ("run_code", '"{\\"code\\": \\"print(1)\\"}"', "not a string"),
        ("run_code", '{"source": "print(1)"}', 'needs "code"'),
        ("run_code", '{"code": 5}', "not a number"),
        ("run_code", '{"code": null}', "not null"),
        ("run_code", '{"code": {"lines": []}}', "not an object"),
        ("run_code", '{"code": "print(\\ud800)"}', "lone surrogate"),
        ("run_python", '{"code": "print(1)"}', "no tool named 'run_python'"),
    ],
)
def test_malformed_tool_calls_never_reach_the_kernel(
    backend: KernelBackend, on_loop: OnLoop[Any], tool: str, arguments: str, says: str
) -> None:
    text = on_loop(backend.handle_tool_call(tool, arguments, "call_bad"))

    assert text.startswith("Error: ") and text.endswith("Nothing ran.")
    assert says in text
    assert backend.last_result is None  # not the result of an earlier call
    assert "call_bad" not in {h["id"] for h in history(backend.session_dir)}
    assert not (backend.session_dir / "by-id" / "call_bad.json").exists()


def test_keys_beside_code_are_ignored_and_named_and_the_program_runs(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    arguments = '{"description": "sum it", "code": "print(1 + 1)",  "timeout": 9}'
    text = on_loop(backend.handle_tool_call("run_code", arguments, "call_keys"))

    assert text == '[ptc-retry] Ignored "description", "timeout": run_code takes only "code".\n2'
    # The checkpoint keeps the arguments byte for byte, so a replay can edit the program.
    saved = backend.session_dir / "by-id" / "call_keys.json"
    assert saved.read_bytes() == arguments.encode()
    assert line_of(backend.session_dir, "call_keys")["status"] == "ok"


def test_a_failing_program_with_a_stray_key_gets_the_notice_and_replays(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    backend.new_turn()
    arguments = json.dumps({"code": PROGRAM, "explanation": "group the orders by region"})
    failed = on_loop(backend.handle_tool_call("run_code", arguments, "call_k1"))
    reference = parse_notice(failed)
    assert failed.startswith('[ptc-retry] Ignored "explanation"') and reference is not None

    line = f"await ptc_retry.replay({reference!r}, 'row[\"regoin\"]', 'row[\"region\"]')"
    fixed = on_loop(backend.handle_tool_call("run_code", raw(line), "call_k2"))
    assert fixed.endswith(SUMMARY)


def test_decoded_arguments_are_accepted(backend: KernelBackend, on_loop: OnLoop[Any]) -> None:
    text = on_loop(
        backend.handle_tool_call("run_code", {"code": "print('from a dict')"}, "call_d1")
    )
    assert text == "from a dict"
    assert json.loads((backend.session_dir / "by-id" / "call_d1.json").read_text()) == {
        "code": "print('from a dict')"
    }


# -- time limits ------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), "5", True])
def test_a_timeout_that_is_not_a_positive_number_of_seconds_is_refused(
    backend: KernelBackend, on_loop: OnLoop[Any], timeout: Any
) -> None:
    with pytest.raises(ValueError, match="^timeout must be a number of seconds > 0, or None"):
        on_loop(backend.run_code("1", call_id="call_bad_timeout", timeout=timeout))
    assert "call_bad_timeout" not in {h["id"] for h in history(backend.session_dir)}


SLEEPER = "import time\nprint('waiting', flush=True)\ntime.sleep(60)"


@pytest.mark.parametrize(
    ("program", "notice"),
    [(SLEEPER, said.SHORT_TIME_LIMIT), ("# " + "x" * 250 + "\n" + SLEEPER, said.NOTICE_TIME_LIMIT)],
    ids=["too short to replay", "replayable"],
)
def test_a_program_the_kernels_time_limit_stopped_is_told_so_once(
    backend: KernelBackend, on_loop: OnLoop[Any], program: str, notice: Sentence
) -> None:
    result = on_loop(backend.run_code(program, timeout=1))

    assert result.status == ResultStatus.TIMEOUT and not result.restarted
    assert result.notice is not None and notice.opening in result.notice
    # The kernel's notice said it: the backend adds no note of its own time limit.
    assert said.TIMEOUT_KEPT.opening not in result.text, result.text


@pytest.mark.parametrize("timeout", [float("inf"), 10**400, 1e12])
def test_a_timeout_too_long_ever_to_pass_means_no_limit(
    backend: KernelBackend, on_loop: OnLoop[Any], timeout: float
) -> None:
    result = on_loop(backend.run_code("6 * 7", call_id="call_long_timeout", timeout=timeout))

    assert (result.status, result.value, result.text) == ("ok", "42", "42")
    assert KernelBackend(default_timeout=timeout).default_timeout is None


@pytest.mark.parametrize("option", ["interrupt_grace", "time_limit_margin"])
@pytest.mark.parametrize("value", [10**400, float("inf"), float("nan"), -1, "5", True])
def test_a_margin_that_is_not_a_number_of_seconds_is_refused_in_one_line(
    option: str, value: Any
) -> None:
    with pytest.raises(ValueError) as refused:
        KernelBackend(**{option: value})

    assert str(refused.value).startswith(f"{option} must be a number of seconds >= 0")
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 150


# -- kernel death -----------------------------------------------------------------------------


def test_sigkill_from_outside_is_reported_as_died(
    fragile: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    code = "import time\nprint('waiting', flush=True)\ntime.sleep(60)"

    async def kill_while_running() -> Any:
        call = asyncio.ensure_future(fragile.run_code(code, call_id="call_k1", timeout=120))
        await until_printed(fragile, "waiting")
        os.kill(fragile.kernel_manager.provisioner.pid, signal.SIGKILL)
        return await call

    result = on_loop(kill_while_running())

    assert result.status == "died" and result.duration < 15
    assert result.text.startswith("waiting\n") and "SIGKILL" in result.text
    assert on_loop(fragile.run_code("6 * 7", call_id="call_k2")).value == "42"


def test_a_program_that_kills_its_kernel_under_a_reused_id_is_named_by_its_reference(
    fragile: KernelBackend, on_loop: OnLoop[Any], tmp_path: Path
) -> None:
    on_loop(fragile.run_code("earlier = 1", call_id="call_again"))
    flag = tmp_path / "died-once"
    code = f"import os, pathlib\nprint('second program')\nflag = pathlib.Path({str(flag)!r})\n"
    code += "if not flag.exists():\n    flag.touch()\n    os._exit(3)\n"

    died = on_loop(fragile.run_code(code, call_id="call_again"))  # the id comes again

    assert died.status == "died" and died.call_id == "call_again.2"
    assert died.checkpoint is not None and died.checkpoint.endswith("call_again.2.json")
    offered = re.search(r'To go on: (await ptc_retry\.resume\("(#[0-9]+)"\))', died.text)
    assert offered is not None, died.text
    resumed = on_loop(fragile.run_code(offered.group(1), call_id="call_resume"))
    assert resumed.status == "ok", resumed.text
    assert "second program" in resumed.text


# -- prompt, tools, lifecycle -----------------------------------------------------------------


def test_system_prompt_names_this_session(tmp_path: Path) -> None:
    kb = KernelBackend(root=tmp_path, session_id="agent-7")
    assert str(tmp_path / "agent-7") in kb.system_prompt()
    assert kb.system_prompt() == kb.system_prompt()


def test_tool_schema_in_the_openai_and_anthropic_shapes() -> None:
    kb = KernelBackend()
    openai = kb.tool_schema("openai")
    anthropic = kb.tool_schema("anthropic")

    assert openai["type"] == "function" and openai["function"]["name"] == "run_code"
    assert anthropic["name"] == "run_code"
    schema = anthropic["input_schema"]
    assert schema == openai["function"]["parameters"]
    assert schema["required"] == ["code"] and schema["additionalProperties"] is False
    assert schema["properties"]["code"]["type"] == "string"
    assert kb.tool_schemas("anthropic") == [anthropic]
    with pytest.raises(ValueError, match="openai"):
        kb.tool_schema("gemini")


def test_a_backend_runs_on_the_transport_it_is_given(
    on_loop: OnLoop[Any], options: dict[str, Any]
) -> None:
    transport = LocalKernel(env=options["env"])

    async def session() -> tuple[KernelBackend, Any]:
        async with KernelBackend(transport=transport, root=options["root"]) as kb:
            assert kb.connection is transport and kb.kernel_manager is transport.manager
            return kb, await kb.run_code("6 * 7", call_id="call_tr1")

    kb, result = on_loop(session())
    assert result.value == "42" and kb.transport is transport and kb.connection is None


def test_a_transport_and_kernel_keywords_are_not_given_together() -> None:
    with pytest.raises(ValueError, match="give transport= or kernel_name, cwd, not both"):
        KernelBackend(transport=LocalKernel(), kernel_name="python3", cwd="/tmp")
    with pytest.raises(ValueError, match="mode='native' does not work through a gateway"):
        KernelBackend(mode="native", transport=GatewayKernel("http://127.0.0.1:1"))
    with pytest.raises(ValueError, match="always loads ptc-retry.*extension=False"):
        KernelBackend(extension=False)
    assert KernelBackend(kernel_name="python3", extension=False).extension is False


def test_a_misspelt_kernel_keyword_is_a_type_error_not_a_default() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'kernal_name'"):
        KernelBackend(kernal_name="python3")  # type: ignore[call-arg]
    assert KernelBackend(kernel_name="python3").kernel_name == "python3"


def test_where_checkpoints_are_read_is_the_transport_s_to_say() -> None:
    assert LocalKernel().checkpoints_here and not GatewayKernel("http://h:1").checkpoints_here
    local = KernelBackend(root="/tmp/ptc-checkpoints", session_id="s1")
    assert local.session_dir == Path("/tmp/ptc-checkpoints/s1")
    remote = KernelBackend(gateway_url="http://127.0.0.1:1", root="/srv/ptc")
    assert remote.session_dir is None and remote.root == Path("/srv/ptc")


def test_unknown_kernel_name_is_a_clear_error(
    on_loop: OnLoop[Any], options: dict[str, Any]
) -> None:
    kb = KernelBackend(kernel_name="no-such-kernel", **options)
    with pytest.raises(KernelStartError, match="no kernel named 'no-such-kernel'.*ptc-retry"):
        on_loop(kb.start())


@pytest.mark.transports("local")
@pytest.mark.parametrize("deaths", [1, 2], ids=["once", "every time"])
def test_a_kernel_that_dies_as_it_starts_is_started_once_more(
    on_loop: OnLoop[Any], options: dict[str, Any], tmp_path: Path, deaths: int
) -> None:
    # As a kernel does whose port another process bound first: it dies before kernel_info.
    ipython = tmp_path / "ipython"
    startup = ipython / "profile_default" / "startup"
    startup.mkdir(parents=True)
    starts = tmp_path / "starts"
    (startup / "00-die.py").write_text(
        f"import os, pathlib\nstarts = pathlib.Path({str(starts)!r})\n"
        "n = int(starts.read_text()) if starts.exists() else 0\n"
        f"starts.write_text(str(n + 1))\nif n < {deaths}:\n    os._exit(1)\n"
    )
    kb = KernelBackend(
        session_id=f"dies-{deaths}", root=options["root"], env={"IPYTHONDIR": str(ipython)}
    )
    try:
        if deaths == 1:
            on_loop(kb.start())
            assert on_loop(kb.run_code("6 * 7")).value == "42"
        else:
            with pytest.raises(KernelStartError, match="died as it started, 2 times"):
                on_loop(kb.start())
    finally:
        on_loop(kb.shutdown())
    assert starts.read_text() == "2"


def test_run_code_before_start_is_a_clear_error() -> None:
    with pytest.raises(BackendError, match="start"):
        asyncio.run(KernelBackend().run_code("1"))


def test_four_backends_run_concurrently(on_loop: OnLoop[Any], options: dict[str, Any]) -> None:
    async def four() -> tuple[list[str], float]:
        backends = [KernelBackend(**options) for _ in range(4)]
        await asyncio.gather(*(kb.start() for kb in backends))
        try:
            await asyncio.gather(*(kb.run_code(f"mine = {n}") for n, kb in enumerate(backends)))
            started = time.monotonic()
            results = await asyncio.gather(
                *(kb.run_code("import time\ntime.sleep(1)\nmine") for kb in backends)
            )
            return [r.value for r in results], time.monotonic() - started
        finally:
            await asyncio.gather(*(kb.shutdown() for kb in backends))

    values, elapsed = on_loop(four())

    assert values == ["0", "1", "2", "3"]
    assert elapsed < 3.5  # four one-second programs overlapped


def test_shutdown_removes_the_session_directory(
    on_loop: OnLoop[Any], options: dict[str, Any]
) -> None:
    kb = KernelBackend(**options)
    on_loop(kb.start())
    on_loop(kb.run_code("1"))
    assert kb.session_dir.is_dir()

    on_loop(kb.shutdown())

    assert not kb.session_dir.exists()
    on_loop(kb.shutdown())  # again: nothing to do


def test_shutdown_keep_keeps_the_checkpoints(on_loop: OnLoop[Any], options: dict[str, Any]) -> None:
    async def session() -> KernelBackend:
        async with KernelBackend(**options) as kb:
            await kb.run_code("1", call_id="call_keep")
            await kb.shutdown(keep=True)
        return kb

    kb = on_loop(session())
    assert (kb.session_dir / "by-id" / "call_keep.json").exists()


def test_a_second_backend_given_a_started_backend_s_session_is_refused_at_its_start(
    on_loop: OnLoop[Any], options: dict[str, Any]
) -> None:
    # Neither has run a program yet: the first kernel must hold its session all the same,
    # or the second kernel would move to "shared.2" while its backend's prompt, approvals
    # and shutdown named "shared", the first's.
    async def two() -> tuple[BackendError, KernelBackend]:
        first = KernelBackend(session_id="shared", **options)
        second = KernelBackend(session_id="shared", **options)
        await first.start()
        try:
            with pytest.raises(BackendError) as refused:
                await second.start()
            await first.run_code("1", call_id="call_first")
            return refused.value, first
        finally:
            await second.shutdown()
            await first.shutdown(keep=True)

    refused, first = on_loop(two())

    assert "the session 'shared'" in str(refused) and "in use by another kernel" in str(refused)
    assert first.session_dir is not None
    assert (first.session_dir / "by-id" / "call_first.json").exists()
    # The refused backend made nothing: no "shared.2" beside it.
    assert not (first.session_dir.parent / "shared.2").exists()


def test_a_second_native_backend_on_a_held_session_is_refused_and_makes_nothing(
    on_loop: OnLoop[Any], options: dict[str, Any]
) -> None:
    async def two() -> tuple[BackendError, KernelBackend]:
        first = KernelBackend(mode="native", session_id="native-held", **options)
        second = KernelBackend(mode="native", session_id="native-held", **options)
        await first.start()
        try:
            with pytest.raises(BackendError) as refused:
                await second.start()
            return refused.value, first
        finally:
            await second.shutdown()
            await first.shutdown(keep=True)

    refused, first = on_loop(two())

    assert "the session 'native-held'" in str(refused) and "in use" in str(refused)
    assert first.session_dir is not None and first.session_dir.name == "native-held"
    assert not (first.session_dir.parent / "native-held.2").exists()


def test_sync_twins_run_a_program(options: dict[str, Any]) -> None:
    with KernelBackend(**options) as kb:
        result = kb.run_code_sync("print('sync')", call_id="call_y1")
        text = kb.handle_tool_call_sync("run_code", raw("21 * 2"), "call_y2")
    assert (result.status, result.text, text) == ("ok", "sync", "42")
    assert not kb.session_dir.exists()


def test_another_ipython_kernel_gets_the_extension_through_argv(
    on_loop: OnLoop[Any], options: dict[str, Any]
) -> None:
    async def session() -> tuple[Any, Any]:
        async with KernelBackend(kernel_name="python3", **options) as kb:
            failed = await kb.run_code(PROGRAM, call_id="call_n1", arguments=raw(PROGRAM))
            fix = "await ptc_retry.replay('call_n1', 'row[\"regoin\"]', 'row[\"region\"]')"
            return failed, await kb.run_code(fix, call_id="call_n2")

    failed, fixed = on_loop(session())

    assert failed.metadata is None and failed.status == "error"
    assert failed.call_id == "call_n1" and failed.checkpoint.endswith("by-id/call_n1.json")
    assert failed.notice is not None and failed.text.endswith("\n" + failed.notice)
    assert fixed.status == "ok" and fixed.text.startswith("regions:")


def test_ptc_retry_kernel_starts_where_no_kernelspec_is_installed(
    on_loop: OnLoop[Any], options: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_client.kernelspec import KernelSpecManager

    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "nothing"))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "nothing-either"))
    if "ptc-retry" in KernelSpecManager().find_kernel_specs():
        pytest.skip("a ptc-retry kernelspec is installed system-wide here")

    async def session() -> Any:
        async with KernelBackend(**options) as kb:
            return await kb.run_code("'fresh machine'", call_id="call_fresh")

    result = on_loop(session())
    assert result.value == "'fresh machine'"
    assert result.metadata["call_id"] == "call_fresh"  # only the ptc-retry kernel sends this
