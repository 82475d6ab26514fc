"""``ptc-retry eval --live`` against the scripted model of ``tests/model_server.py``: the
usage figures in the report are the ones the API reported, adoption is counted from the
model's calls, and without a key nothing runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai", reason="openai is an optional extra (ptc-retry[openai])")
pytest.importorskip("anthropic", reason="anthropic is an optional extra (ptc-retry[anthropic])")

from ptc_retry.cli import main as cli  # noqa: E402
from ptc_retry.eval import live  # noqa: E402
from ptc_retry.eval.scenarios import by_name  # noqa: E402
from ptc_retry.tokens import load_tokenizer  # noqa: E402

from .helpers import follow, notices_in, raw  # noqa: E402
from .model_server import Call, ModelServer, Reply, Request  # noqa: E402

#: The usage each arm's fix reports: a replay is short, a re-sent program long.
REPLAY_USAGE, RESEND_USAGE = (900, 40), (800, 400)


def _scripted_fix(request: Request) -> Reply:
    """The model: it reads the failed call's result; after a notice it sends the replay the
    notice teaches, else it re-sends the corrected program."""
    body = json.dumps(request.body)
    (scenario,) = [s for s in live.live_scenarios() if json.dumps(s.program)[1:-1] in body]
    messages = request.body["messages"]
    result = messages[-1]["content"]
    text = result if isinstance(result, str) else result[0]["content"]
    notices = notices_in(text)
    if notices:
        old, new = scenario.edits[0]
        return Reply(
            calls=[Call("run_code", raw(follow(notices[0], old=old, new=new)))], usage=REPLAY_USAGE
        )
    return Reply(calls=[Call("run_code", raw(scenario.corrected))], usage=RESEND_USAGE)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_without_a_key_it_says_what_to_set_and_exits_2_before_anything_runs(
    api: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.delenv(live.APIS[api].key, raising=False)
    with ModelServer() as server:
        code = cli(
            ["eval", "--live", "--api", api, "--base-url", server.url, "--out", str(tmp_path)]
        )
        assert code == 2 and server.requests == []
    assert f"set {live.APIS[api].key}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no report either (and no kernel: not marked)


@pytest.mark.parametrize(
    ("api", "names"),
    [("openai", ["150b-under-threshold", "1k-wrong-key"]), ("anthropic", ["1k-wrong-key"])],
)
def test_a_live_run_reads_the_usage_and_counts_adoption(
    api: str,
    names: list[str],
    jupyter_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(live.APIS[api].key, "scripted")
    scenarios = by_name(names)
    with ModelServer() as server:
        server.script(*[_scripted_fix] * (2 * len(scenarios)))
        url = server.openai_url if api == "openai" else server.url
        code = live.main(api, "scripted-model", url, tmp_path, scenarios=scenarios)
        requests = list(server.requests)
    assert code == 0 and len(requests) == 2 * len(scenarios)
    report: dict[str, Any] = json.loads((tmp_path / "report.json").read_text())
    fixes = {(fix["scenario"], fix["arm"]): fix for fix in report["fixes"]}
    assert fixes["1k-wrong-key", "on"]["action"] == "replay"
    assert fixes["1k-wrong-key", "off"]["action"] == "resend"
    assert all(fix["right"] for fix in fixes.values())
    assert report["offered"] == report["adopted"] == 1 and report["adoption"] == 1.0
    on_resends = len(scenarios) - 1  # the program under the notice threshold is re-sent
    assert report["on"]["output_tokens"] == 40 + 400 * on_resends
    assert report["off"]["output_tokens"] == 400 * len(scenarios)
    assert report["off"]["input_tokens"] == 800 * len(scenarios)
    markdown = (tmp_path / "report.md").read_text()
    assert "scripted-model" in markdown and report["run"]["date"] in markdown
    # Only ON's requests carry the prompt section.
    systems = [json.dumps(r.body.get("system") or r.body["messages"][0]) for r in requests]
    assert sum("ptc_retry.replay" in system for system in systems) == len(scenarios)


def _failed_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """A live run that ends on its first request, with status 1 and no report: what it
    printed, and its error."""
    code = live.main("openai", "m", None, tmp_path, scenarios=by_name(["1k-wrong-key"]))
    out, err = capsys.readouterr()
    assert code == 1 and not (tmp_path / "report.md").exists()
    return out, err


@pytest.mark.usefixtures("jupyter_path")
@pytest.mark.parametrize("reachable", [True, False], ids=["refused", "unreachable"])
def test_a_failed_run_names_the_endpoint_the_client_uses_and_how_the_request_failed(
    reachable: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "wrong")
    with ModelServer() as server:
        server.script(Reply(status=401), Reply(status=401))
        url = server.openai_url
        monkeypatch.setenv("OPENAI_BASE_URL", url)  # the SDK's own setting, no --base-url
        if reachable:
            out, err = _failed_run(tmp_path, capsys)
    if not reachable:  # nothing listens there once the server is closed
        out, err = _failed_run(tmp_path, capsys)
    assert f"m at {url}/" in out and "own endpoint" not in out
    if reachable:
        assert "the API answered" in err and "scripted error 401" in err
    else:
        assert f"could not reach {url}/" in err and "answered" not in err


def _model_with_an_output_limit(request: Request) -> Reply:
    """The re-send arm's model that writes at most ``max_tokens`` (counted as cl100k_base,
    fewer than Claude's tokenizer makes of the same program): a longer program is cut there,
    as the API cuts it (``stop_reason: "max_tokens"``)."""
    body = json.dumps(request.body)
    (scenario,) = [s for s in live.live_scenarios() if json.dumps(s.program)[1:-1] in body]
    arguments = raw(scenario.corrected)
    needed = load_tokenizer().count(arguments)
    assert needed is not None
    limit = int(request.body["max_tokens"])
    if needed <= limit:
        return Reply(calls=[Call("run_code", arguments)], usage=(800, needed))
    cut = arguments[: len(arguments) * limit // needed]
    return Reply(calls=[Call("run_code", cut)], stop="length", usage=(800, limit))


def test_the_longest_re_sent_program_fits_what_an_anthropic_fix_may_write(
    jupyter_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Opus 4 is the Claude model whose SDK refuses the most requests not streamed.
    monkeypatch.setenv("ANTHROPIC_API_KEY", "scripted")
    scenario = max(live.live_scenarios(), key=lambda s: len(s.corrected))
    with ModelServer() as server:
        server.script(_model_with_an_output_limit, _model_with_an_output_limit)
        code = live.main("anthropic", "claude-opus-4-0", server.url, tmp_path, scenarios=[scenario])
    assert code == 0
    report: dict[str, Any] = json.loads((tmp_path / "report.json").read_text())
    assert [(f["action"], f["right"], f["problem"]) for f in report["fixes"]] == [
        ("resend", True, None)
    ] * 2


def test_a_fix_cut_by_the_output_limit_is_reported_as_cut(
    jupyter_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "scripted")
    scenario = by_name(["1k-wrong-key"])[0]
    cut = Reply(calls=[Call("run_code", raw(scenario.corrected)[:300])], stop="length")
    with ModelServer() as server:
        server.script(cut, cut)
        code = live.main("openai", "m", server.openai_url, tmp_path, scenarios=[scenario])
    assert code == 0
    report: dict[str, Any] = json.loads((tmp_path / "report.json").read_text())
    for fix in report["fixes"]:
        assert not fix["right"] and fix["problem"] == live.CUT_PROBLEM
    assert live.CUT_PROBLEM in (tmp_path / "report.md").read_text()
