"""The recording of a program's tool calls without a kernel: what a replay reuses from it,
its file in the session, the listing, and the signatures ``tools.<name>`` gets."""

from __future__ import annotations

import asyncio
import inspect
import linecache
import os
from pathlib import Path
from typing import Any

import pytest

import ptc_retry
from ptc_retry.core.errors import ToolError
from ptc_retry.core.history_table import format_tool_calls
from ptc_retry.core.schema import schema_signature
from ptc_retry.core.store import CheckpointStore
from ptc_retry.kernel.call_lines import CallRecord, RecordedCalls, calls_made, in_order, json_copy
from ptc_retry.kernel.catalog import bind_arguments
from ptc_retry.kernel.fingerprint import code_digest, reads_digest
from ptc_retry.kernel.recording import Reuse, Reuses
from ptc_retry.sessions import SessionReader


def line(
    k: int, tool: str = "t", *, ok: bool = True, statement: int | None = 0, **more: Any
) -> dict[str, Any]:
    record = {"k": k, "tool": tool, "arguments": {"n": k}, "ok": ok, "statement": statement}
    record.update({"result": f"r{k}"} if ok else {"error": "E: no"})
    record.update(more)
    return record


def call(
    k: int, tool: str = "t", n: int | None = None, code: str | None = None, reads: str | None = None
) -> CallRecord:
    return CallRecord(k, tool, {"n": k if n is None else n}, 0, code, reads)


def taken(reuse: Reuse | Reuses, *calls: CallRecord) -> list[str | None]:
    found = [reuse.take(c) for c in calls]
    lines = [f[1] if isinstance(f, tuple) else f for f in found]
    return [None if line is None else line["result"] for line in lines]


def replaying(*reuses: Reuse) -> Reuses:
    """Replays running one inside the other, outermost first."""
    running = Reuses()
    for reuse in reuses:
        running.enter(reuse)
    return running


# -- what a replay reuses --------------------------------------------------------------------------


def test_calls_that_match_in_order_get_the_recorded_results() -> None:
    reuse = Reuse([line(1), line(2), line(3)], call_id="c1", source="#1")
    assert taken(replaying(reuse), call(1), call(2), call(3), call(4)) == ["r1", "r2", "r3", None]
    assert (reuse.reused, reuse.live) == (3, 1)
    assert reuse.sentence() == "ptc-retry: 3 tool results reused from #1; 1 call made live."


def test_a_call_that_differs_from_a_recorded_success_sends_every_later_one_live() -> None:
    reuse = Reuse([line(1), line(2), line(3)], call_id="c1", source="#1")
    assert taken(reuse, call(1), call(2, n=20), call(3)) == ["r1", None, None]
    assert taken(Reuse([line(1)], call_id="c1", source="#1"), call(1, tool="u")) == [None]


def test_a_retried_call_takes_the_success_that_followed_its_failures() -> None:
    # Recorded: x failed twice, then succeeded, then the email. The replay's first x gets
    # the success (it was made once already), and the email is the next call in place.
    records = [line(1, "x", ok=False), line(2, "x", ok=False), line(3, "x"), line(4, "email")]
    for record in records[:3]:
        record["arguments"] = {"n": 1}
    reuse = Reuse(records, call_id="c1", source="#1")
    assert taken(reuse, call(1, "x"), call(2, "email", n=4)) == ["r3", "r4"]


def test_a_caught_failure_goes_live_and_the_calls_after_it_are_reused() -> None:
    records = [line(1, "x", ok=False), line(2, "email"), line(3, "x")]
    records[2]["arguments"] = {"n": 1}  # x again, later: the program's own second call
    reuse = Reuse(records, call_id="c1", source="#1")
    assert taken(reuse, call(1, "x"), call(2, "email"), call(3, "x", n=1)) == [None, "r2", "r3"]


def test_a_retry_loop_that_stops_sooner_still_reuses_the_calls_after_it() -> None:
    # Recorded: x failed twice and the loop gave up; live, x succeeds at once this time.
    records = [line(1, "x", ok=False), line(2, "x", ok=False), line(3, "email")]
    records[1]["arguments"] = {"n": 1}
    reuse = Reuse(records, call_id="c1", source="#1")
    assert taken(reuse, call(1, "x"), call(2, "email", n=3)) == [None, "r3"]


def test_a_gather_with_one_failed_call_reuses_the_others() -> None:
    records = [line(1, "a"), line(2, "b", ok=False), line(3, "c"), line(4, "email")]
    reuse = Reuse(records, call_id="c1", source="#1")
    batch = (call(1, "a"), call(2, "b"), call(3, "c"), call(4, "email"))
    assert taken(reuse, *batch) == ["r1", None, "r3", "r4"]


def test_a_call_that_differs_from_recorded_failures_and_success_ends_the_reuse() -> None:
    records = [line(1, "x", ok=False), line(2, "email")]
    reuse = Reuse(records, call_id="c1", source="#1")
    assert taken(reuse, call(1, "y"), call(2, "email")) == [None, None]


def test_a_call_without_its_line_ends_what_can_be_matched() -> None:
    reuse = Reuse(in_order([line(1), line(3)]).lines, call_id="c1", source="#1")  # k 2 lost
    assert taken(reuse, call(1), call(2), call(3)) == ["r1", None, None]
    assert not in_order([line(1), line(3)]).complete
    assert not in_order([line(1)], total=2).complete and in_order([line(1)], total=1).complete
    assert calls_made({"tool_calls": {"reused": 1, "live": 2}}) == 3
    assert calls_made({"tool_calls": {"reused": True, "live": 2}}) is None
    assert calls_made({"status": "unfinished"}) is None and calls_made(None) is None


def test_the_last_line_of_a_call_wins() -> None:
    # The host completed a call the kernel saw fail: its later line is the call's truth.
    records = [line(1), line(2, ok=False), line(2, result="late")]
    reuse = Reuse(in_order(records).lines, call_id="c1", source="#1")
    assert taken(reuse, call(1), call(2)) == ["r1", "late"]


def test_a_result_recorded_as_not_reusable_runs_again_without_ending_the_match() -> None:
    reuse = Reuse([line(1, reusable=False), line(2)], call_id="c1", source="#1")
    assert taken(reuse, call(1), call(2)) == [None, "r2"]
    damaged = line(1)
    del damaged["result"]  # says it succeeded, holds nothing to give
    reuse = Reuse([damaged, line(2)], call_id="c1", source="#1")
    assert taken(reuse, call(1), call(2)) == [None, "r2"]


def test_a_recorded_function_whose_code_or_reads_changed_goes_live_and_the_next_matches() -> None:
    records = [line(1, code="aaaa", reads="rrrr"), line(2)]
    edited, changed = call(1, code="bbbb", reads="rrrr"), call(1, code="aaaa", reads="ssss")
    unreadable = call(1, code="aaaa")  # its reads could not be fingerprinted
    unreadable.reusable = False
    for first in (edited, changed, unreadable):
        assert taken(Reuse(records, call_id="c1", source="#1"), first, call(2)) == [None, "r2"]
    same = call(1, code="aaaa", reads="rrrr")
    assert taken(Reuse(records, call_id="c1", source="#1"), same, call(2)) == ["r1", "r2"]


def test_the_calls_made_within_a_reused_recorded_call_are_passed_over() -> None:
    # k 1 a recorded function that made k 2, which made k 3; then k 4 at top level.
    records = [line(1, "f"), line(2, within=1), line(3, within=2), line(4)]
    reuse = Reuse(records, call_id="c1", source="#1")
    assert taken(reuse, call(1, "f"), call(4)) == ["r1", "r4"]


def test_the_calls_made_within_a_recorded_call_that_goes_live_are_matched() -> None:
    records = [line(1, "f", ok=False), line(2, within=1), line(3)]
    reuse = Reuse(records, call_id="c1", source="#1")
    assert taken(reuse, call(1, "f"), call(2), call(3)) == [None, "r2", "r3"]


def test_a_resume_matches_the_calls_of_the_statements_it_runs() -> None:
    records = RecordedCalls([line(1, statement=0), line(2, statement=2), line(3, statement=2)])
    reuse = Reuse(records.from_statement(2), call_id="c1", source="#1")
    assert taken(reuse, call(2), call(3)) == ["r2", "r3"]
    # Lines that do not say their statement: no telling which calls the resume makes again.
    unknown = RecordedCalls([line(1, statement=None), line(2, statement=2)])
    assert unknown.from_statement(2) == [] and unknown.from_statement(0) == unknown.lines


# -- replays inside replays ------------------------------------------------------------------------


def test_a_nested_replay_takes_the_place_of_its_calls_in_the_outer_recording() -> None:
    # Program #2 replayed #1 (its two calls reused) and sent an email; its replay replays #1
    # again inside it: the outer recording holds all three calls, the email included.
    outer = Reuse([line(1), line(2), line(3, "email")], call_id="c2", source="#2")
    inner = Reuse([line(1), line(2)], call_id="c1", source="#1")
    running = Reuses()
    assert running.enter(outer) and not running.enter(inner)
    assert taken(running, call(1), call(2)) == ["r1", "r2"]
    running.leave(inner)
    found = running.take(call(3, "email"))
    assert found is not None and found[0] is outer
    assert (outer.reused, outer.live, inner.reused) == (3, 0, 2)
    assert outer.sentence() == "ptc-retry: 3 tool results reused from #2; 0 calls made live."


def test_a_nested_replay_serves_the_calls_its_outer_recording_lacks() -> None:
    outer = Reuse([], call_id="c4", source="#4")  # an extend of a cut-off call: it never ran
    inner = Reuse([line(1)], call_id="c3", source="#3")
    running = replaying(outer, inner)
    assert taken(running, call(1), call(2)) == ["r1", None]
    assert outer.sentence() == "ptc-retry: 1 tool result reused from #3; 1 call made live."


def test_a_fresh_replay_makes_the_calls_of_its_nested_replays_live_too() -> None:
    outer = Reuse([line(1)], call_id="c2", source="#2", fresh=True)
    inner = Reuse([line(1)], call_id="c1", source="#1")
    assert taken(replaying(outer, inner), call(1)) == [None]


def test_nothing_reused_means_nothing_said() -> None:
    reuse = Reuse([], call_id="c1", source="#1")
    assert taken(reuse, call(1)) == [None] and reuse.sentence() is None


@pytest.mark.parametrize(
    "value, same",
    [
        ({"a": [1, 2.5, None, True, "x"]}, True),
        ((1, 2), False),  # would come back a list
        ({1: "a"}, False),  # an int key would come back a str
        (float("nan"), False),
        (object(), False),
        ([1, True], True),
    ],
)
def test_only_results_json_gives_back_unchanged_are_reusable(value: Any, same: bool) -> None:
    assert json_copy(value)[0] is same


def test_the_listing_shows_each_call_in_order() -> None:
    records = [line(2, "flaky", ok=False, duration=0.5), line(1, "double", duration=0.01234)]
    records[1].update(reused=True, reused_from="c3")
    assert format_tool_calls(records, "c4").splitlines() == [
        "# tool calls: 2 (tool-calls/c4.jsonl)",
        "#   k  tool    status  seconds  reused",
        "#   1  double  ok        0.012  c3",
        "#   2  flaky   error     0.500",
    ]


# -- what a recorded function reads ---------------------------------------------------------------


# A module of the program's own (a config.py beside the notebook), made in sys.modules.
CONFIG = (
    "import sys, types\n"
    "sys.modules['ptc_config'] = types.ModuleType('ptc_config')\n"
    "sys.modules['ptc_config'].RATE = 0.5\n"
)
CHANGE = "sys.modules['ptc_config'].RATE = 2.0"


@pytest.mark.parametrize(
    "program, change, expected",
    [
        ("RATE = 0.5\ndef f(x): return x * RATE", "RATE = 2.0", "differs"),
        ("RATE = 0.5\ndef f(x): return x * RATE", "RATE = 0.5", "same"),
        ("R = [0.5]\ndef f(x): return x * R[0]", "R.append(1)", "differs"),
        (
            "import types\nconfig = types.ModuleType('config')\nconfig.RATE = 0.5\n"
            "def f(x): return x * config.RATE",
            "config.RATE = 2.0",
            "differs",
        ),
        ("import json, math\ndef f(x): return json.dumps(x) + str(math.pi)", "", "same"),
        (CONFIG + "def f():\n    from ptc_config import RATE\n    return RATE", CHANGE, "differs"),
        (CONFIG + "def f():\n    import ptc_config as c\n    return c.RATE", CHANGE, "differs"),
        (CONFIG + "def f():\n    import ptc_config\n    return ptc_config.RATE", CHANGE, "differs"),
        (
            CONFIG + "exec('class Rates:\\n    EUR = 0.5\\n', vars(sys.modules['ptc_config']))\n"
            "import ptc_config\ndef f(x): return x * ptc_config.Rates.EUR",
            "ptc_config.Rates.EUR = 2.0",
            "differs",
        ),
        (
            "def helper(x): return x\ndef f(x): return helper(x)",
            "def helper(x): return -x",
            "differs",
        ),
        ("N = 1\ndef helper(): return N\ndef f(): return helper()", "N = 2", "differs"),
        ("class C: pass\nc = C()\nc.rate = 1\ndef f(): return c.rate", "c.rate = 2", "differs"),
        ("class C:\n    rate = 1\ndef f(): return C.rate", "C.rate = 2", "differs"),
        (
            "import collections\nP = collections.namedtuple('P', 'rate')\nR = P(1)\n"
            "def f(): return R.rate",
            "R = P(2)",
            "differs",
        ),
        ("def f(n): return 1 if n < 2 else n * f(n - 1)", "", "same"),
        (
            "class T:\n    def go(self): return self.rate\nt = T()\nt.rate = 1\nf = t.go",
            "t.rate = 2",
            "differs",
        ),
        # The object's own __getattr__ is never run to fingerprint it.
        (
            "class P:\n    def __getattr__(self, name): raise RuntimeError\n"
            "p = P()\ndef f(): return p",
            "",
            "same",
        ),
        ("import threading\nlock = threading.Lock()\ndef f(): return lock", "", "unknown"),
        ("def f(): return globals()['x']", "", "unknown"),
        ("BIG = [list(range(9))] * 20_000\ndef f(): return BIG", "BIG[0] = []", "differs"),
        ("class C: pass\nBIG = [C() for _ in range(20_000)]\ndef f(): return BIG", "", "unknown"),
    ],
)
def test_what_a_recorded_function_reads_is_fingerprinted_or_unknown(
    program: str, change: str, expected: str
) -> None:
    namespace: dict[str, Any] = {"__name__": "program"}
    exec(program, namespace)
    before = reads_digest(namespace["f"])
    exec(change, namespace)
    after = reads_digest(namespace["f"])
    if expected == "unknown":
        assert before is None and after is None
    else:
        assert before is not None and (before == after) is (expected == "same")


def test_a_source_that_linecache_holds_for_another_code_does_not_hide_an_edit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every exec compiles under "<string>": whatever linecache holds for that name (a
    # traceback, another library) is another code's source, and must not make two
    # different bodies look the same.
    stale = (1, None, ["def helper(x): return x\n"], "<string>")
    monkeypatch.setitem(linecache.cache, "<string>", stale)
    namespace: dict[str, Any] = {}
    exec("def helper(x): return x", namespace)
    before = code_digest(namespace["helper"])
    exec("def helper(x): return -x", namespace)
    assert inspect.getsource(namespace["helper"]) == "def helper(x): return x\n"  # stale
    assert code_digest(namespace["helper"]) != before


# -- the file in the session -----------------------------------------------------------------------


def test_the_recording_is_appended_to_its_own_file(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "s")
    assert not (store.session_dir / "tool-calls").exists()  # made at the first tool call
    assert store.tool_calls("c1") == []
    store.record_tool_call("c1", line(1))
    store.record_tool_call("c1", line(2))
    path = store.session_dir / "tool-calls" / "c1.jsonl"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct((path.parent).stat().st_mode & 0o777) == "0o700"
    assert [r["k"] for r in store.tool_calls("c1")] == [1, 2]
    store.close()
    assert [r["k"] for r in SessionReader(store.session_dir).tool_calls("c1")] == [1, 2]
    reopened = CheckpointStore(tmp_path, "s")
    assert [r["k"] for r in reopened.tool_calls("c1")] == [1, 2]
    reopened.close()


def test_a_torn_line_is_skipped_and_the_next_one_starts_fresh(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "s")
    store.record_tool_call("c1", line(1))
    path = store.session_dir / "tool-calls" / "c1.jsonl"
    with path.open("ab") as file:
        file.write(b'{"k": 2, "tool"')  # a process died mid-write
    store.record_tool_call("c1", line(3))
    assert [r["k"] for r in store.tool_calls("c1")] == [1, 3]
    store.close()


def test_a_link_planted_as_the_recording_is_never_followed(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "s")
    store.record_tool_call("c1", line(1))
    outside = tmp_path / "outside.jsonl"
    outside.write_text("")
    os.symlink(outside, store.session_dir / "tool-calls" / "c2.jsonl")
    with pytest.raises(OSError):
        store.record_tool_call("c2", line(1))
    with pytest.raises(OSError):
        store.tool_calls("c2")
    assert outside.read_text() == ""
    assert SessionReader(store.session_dir).tool_calls("c2") == []
    store.close()


# -- tools.<name> ----------------------------------------------------------------------------------


def test_a_signature_follows_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "customer": {"type": "string"},
            "limit": {"type": "integer", "default": 10},
            "since": {"type": ["string", "null"]},
            "region": {"type": "string"},
        },
        "required": ["customer", "region"],
    }
    assert str(schema_signature(schema)) == (
        "(customer: str, limit: int = 10, since: str | None = ..., *, region: str, **kwargs)"
    )
    closed = {"properties": {"q": {}}, "additionalProperties": False}
    assert str(schema_signature(closed)) == "(q=...)"
    odd = {"properties": {"first-name": {"type": "string"}}}
    assert str(schema_signature(odd)) == "(**arguments)"


def test_arguments_bind_by_position_in_the_schema_order() -> None:
    signature = schema_signature({"properties": {"a": {}, "b": {}}, "required": ["a"]})
    assert bind_arguments("t", signature, (1, 2), {}) == {"a": 1, "b": 2}
    assert bind_arguments("t", signature, (1,), {"c": [3]}) == {"a": 1, "c": [3]}
    with pytest.raises(ToolError, match=r"tools\.t\(a, b=\.\.\., \*\*kwargs\): missing"):
        bind_arguments("t", signature, (), {})
    with pytest.raises(ToolError, match="argument 'a' is a bytes, not JSON"):
        bind_arguments("t", signature, (b"x",), {})


def test_without_ptc_retry_loaded_a_tool_says_no_backend_is_attached() -> None:
    tool = ptc_retry.tools.search
    assert repr(ptc_retry.tools) == "<tools: none (no agent backend attached)>"
    assert dir(ptc_retry.tools) == [] and inspect.iscoroutinefunction(tool)
    with pytest.raises(ToolError, match="no agent backend is attached"):
        asyncio.run(tool(q="x"))
    with pytest.raises(AttributeError):
        ptc_retry.tools._repr_html_  # noqa: B018  (display probes are no tools)
