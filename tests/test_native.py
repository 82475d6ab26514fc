"""Native mode: the tool-call journal, editPreviousToolCalling, its notice, prompt and schemas.

A scripted agent loop drives three plain tools (no kernel): ``write_file`` rejects content
that still holds a TODO or FIXME marker, ``submit_config`` rejects a port that is not an
integer, ``lookup`` reads a table.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptc_retry.core.errors import StoreError
from ptc_retry.core.fs import default_root
from ptc_retry.core.notice import native_failure_notice, prompt_section
from ptc_retry.core.patch import apply_patch, validate_patch
from ptc_retry.core.store import CheckpointStore
from ptc_retry.native import (
    EDIT_TOOL,
    EDIT_TOOL_DESCRIPTION,
    EDIT_TOOL_PARAMETERS,
    NativeTools,
    Position,
    ToolFailure,
    ToolJournal,
    current_call,
    tool_definitions,
)

# write_file's content; with its path, over notice_min_bytes.
PROGRAM = """\
import json
import time
import urllib.request

RETRIES = 3  # TODO: read from the environment
BACKOFF = 0.5
FEEDS = ["https://example.com/news.json", "https://example.com/events.json"]


def fetch(url, retries=RETRIES):
    for attempt in range(retries):
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return json.load(response)
        except OSError as error:
            print("fetching", url, "failed on attempt", attempt, error)
            time.sleep(BACKOFF * 2**attempt)
    return {"url": url, "ok": False}


def fetch_all(urls=FEEDS):
    return {url: fetch(url) for url in urls}
"""
FIXED = PROGRAM.replace("  # TODO: read from the environment", "")
TABLE = {"region": "eu-west-1", "owner": "ops"}
FINAL_SENTENCE = "Only for a small correction; otherwise call the tool again with fresh arguments."


@dataclass
class Workspace:
    """The three tools, what they did, and a scripted model that sends tool calls."""

    tools: NativeTools
    files: dict[str, str] = field(default_factory=dict)
    configs: list[dict[str, Any]] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)  # the tool of every invocation
    sent: dict[str, str] = field(default_factory=dict)  # call id -> raw arguments
    count: int = 0

    def send(self, *calls: tuple[str, Any]) -> list[str]:
        """One model message: its tool calls, run in order; returns the texts the model reads."""
        self.tools.journal.new_message()
        return [asyncio.run(self.tools.call(name, raw, cid)) for cid, name, raw in self.ids(calls)]

    def ids(self, calls: tuple[tuple[str, Any], ...]) -> list[tuple[str, str, str]]:
        numbered = []
        for name, arguments in calls:
            self.count += 1
            raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
            self.sent[f"call_{self.count}"] = raw
            numbered.append((f"call_{self.count}", name, raw))
        return numbered

    @property
    def journal(self) -> ToolJournal:
        return self.tools.journal

    @property
    def session_dir(self) -> Path:
        return self.tools.journal.session_dir

    def saved(self, call_id: str) -> bytes:
        return (self.session_dir / "by-id" / f"{call_id}.json").read_bytes()

    def line(self, call_id: str) -> dict[str, Any]:
        [line] = [line for line in self.journal.store.history() if line["id"] == call_id]
        return line


def make_workspace(root: Path, session: str = "s", **options: Any) -> Workspace:
    tools = NativeTools(root=root, session=session, **options)
    ws = Workspace(tools)

    @tools.register
    def write_file(path: str, content: str) -> str:
        """Write a text file.

        Overwrites an existing file.
        """
        ws.runs.append("write_file")
        for marker in ("TODO", "FIXME"):
            if marker in content:
                line = content[: content.index(marker)].count("\n") + 1
                raise ValueError(f"content still has a {marker} on line {line}")
        ws.files[path] = content
        return f"wrote {len(content)} characters to {path}"

    @tools.register
    async def submit_config(config: dict) -> dict:  # type: ignore[type-arg]
        ws.runs.append("submit_config")
        await asyncio.sleep(0)
        port = config.get("port")
        if not isinstance(port, int):
            raise TypeError(f"config.port must be an integer, got {type(port).__name__}")
        ws.configs.append(config)
        return {"accepted": True, "port": port}

    @tools.register(name="lookup")
    def look_up(key: str) -> str:
        ws.runs.append("lookup")
        return TABLE[key]

    return ws


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return make_workspace(tmp_path / "root")


def edit(target: str | int, *entries: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """An editPreviousToolCalling call: a call id, or an int for previous_ordinal."""
    locator = "call_id" if isinstance(target, str) else "previous_ordinal"
    return EDIT_TOOL, {locator: target, "patch": list(entries)}


def fix(path: str, old: str, new: str, **more: Any) -> dict[str, Any]:
    return {"path": path, "old_string": old, "new_string": new, **more}


TODO_FIX = fix("content", "  # TODO: read from the environment", "")


def tokens_by_bytes(text: str) -> float:
    return len(text.encode("utf-8")) / 4


def tokens_by_words(text: str) -> int:
    # Words and runs of punctuation (NLTK's wordpunct rule).
    return len(re.findall(r"\w+|[^\w\s]+", text))


# -- the whole loop: fail, notice, edit, success ------------------------------------------------


def test_a_failed_call_gets_the_notice_and_one_edit_fixes_it(ws: Workspace) -> None:
    [failed] = ws.send(("write_file", {"path": "fetch.py", "content": PROGRAM}))
    assert failed == (
        "ValueError: content still has a TODO on line 5\n"
        + native_failure_notice("call_1", field="content")
    )
    assert failed.endswith(
        '[ptc-retry] Arguments saved as "call_1". Small fix? Don\'t re-send; call '
        'editPreviousToolCalling({"call_id": "call_1", "patch": [{"path": "content", '
        '"old_string": "<old>", "new_string": "<new>"}]})'
    )

    [replayed] = ws.send(edit("call_1", TODO_FIX))

    assert replayed == (
        f"replayed call_1 (write_file) with 1 patch entry: wrote {len(FIXED)} characters "
        "to fetch.py"
    )
    assert ws.files == {"fetch.py": FIXED}
    assert ws.runs == ["write_file", "write_file"]
    first, second = ws.line("call_1"), ws.line("call_2")
    assert (first["tool"], first["status"], first["ename"]) == ("write_file", "error", "ValueError")
    assert (second["tool"], second["status"], second["replay_of"]) == ("write_file", "ok", "call_1")


def test_a_wrong_type_is_fixed_by_replacing_the_whole_value(ws: Workspace) -> None:
    config = {  # over notice_min_bytes
        "name": "fetcher",
        "port": "8080",
        "schedule": "*/5 * * * *",
        "feeds": ["https://example.com/news.json", "https://example.com/events.json"],
        "description": (
            "Polls the news and events feeds every five minutes, keeps the last day of "
            "items and serves them as JSON to the dashboard. A failed fetch is retried "
            "three times with exponential backoff before the feed is reported as down."
        ),
        "headers": {"User-Agent": "fetcher/2.1 (+https://example.com/bots)"},
        "retention_hours": 24,
        "owner": "ops",
        "alerts": "ops-alerts@example.com",
    }
    [failed] = ws.send(("submit_config", {"config": config}))
    assert failed.startswith("TypeError: config.port must be an integer, got str\n")
    # The example in the notice points at the longest string, the likeliest place of a fix.
    assert failed.endswith(native_failure_notice("call_1", field="config.description"))

    [replayed] = ws.send(edit(1, {"path": "config.port", "value": 8080}))

    assert replayed == (
        'replayed call_1 (submit_config) with 1 patch entry: {"accepted": true, "port": 8080}'
    )
    assert ws.configs == [{**config, "port": 8080}]


def test_bytes_on_disk_equal_the_raw_argument_strings(ws: Workspace) -> None:
    odd = '{ "path" : "n\\u00e9.txt",\n  "content": "caf\u00e9 \\"q\\"\\n\\ttab"}'
    ws.send(
        ("write_file", odd),
        ("lookup", '{"key":"region"}'),
        ("write_file", {"path": "fetch.py", "content": PROGRAM}),
    )
    ws.send(edit("call_9", TODO_FIX))  # fails: its own raw arguments stay as sent

    for call_id, raw in ws.sent.items():
        assert ws.saved(call_id) == raw.encode("utf-8"), call_id
    assert ws.files == {"n\u00e9.txt": 'caf\u00e9 "q"\n\ttab'}


def test_a_replay_saves_the_patched_arguments_as_its_own_checkpoint(ws: Workspace) -> None:
    ws.send(("write_file", {"path": "fetch.py", "content": PROGRAM}))
    ws.send(edit("call_1", TODO_FIX))

    assert json.loads(ws.saved("call_2")) == {"path": "fetch.py", "content": FIXED}
    assert ws.saved("call_1") == ws.sent["call_1"].encode()  # the original is untouched
    assert ws.journal.tool_of("call_2") == "write_file"


# -- parallel calls and previous_ordinal ------------------------------------------------------


def test_calls_of_one_message_become_previous_in_their_order(ws: Workspace) -> None:
    ws.send(
        ("lookup", {"key": "region"}),
        ("write_file", {"path": "fetch.py", "content": PROGRAM}),
    )
    # The edit is the second call of its message: previous/ is still the message before.
    texts = ws.send(("lookup", {"key": "owner"}), edit(2, TODO_FIX))

    assert texts[0] == "ops"
    assert texts[1].startswith("replayed call_2 (write_file) with 1 patch entry: wrote")
    assert ws.files == {"fetch.py": FIXED}
    previous = ws.session_dir / "previous"
    assert (previous / "1.json").read_bytes() == ws.sent["call_1"].encode()
    assert (previous / "2.json").read_bytes() == ws.sent["call_2"].encode()
    assert [ws.line(c)["step"] for c in ("call_1", "call_2", "call_3", "call_4")] == [1, 1, 2, 2]
    assert [ws.line(c)["ordinal"] for c in ("call_1", "call_2", "call_3", "call_4")] == [1, 2, 1, 2]


def test_previous_ordinal_works_when_the_edit_is_the_first_call_of_its_message(
    ws: Workspace,
) -> None:
    ws.send(
        ("write_file", {"path": "fetch.py", "content": PROGRAM}),
        ("lookup", {"key": "region"}),
    )
    [replayed, looked_up] = ws.send(edit(1, TODO_FIX), ("lookup", {"key": "owner"}))

    assert replayed.startswith("replayed call_1 (write_file)")
    assert looked_up == "ops"


def test_concurrent_calls_are_numbered_in_the_order_they_start(ws: Workspace) -> None:
    async def message() -> list[str]:
        ws.journal.new_message()
        return await asyncio.gather(
            ws.tools.call("submit_config", '{"config": {"port": 1}}', "a"),
            ws.tools.call("lookup", '{"key": "owner"}', "b"),
            ws.tools.call("submit_config", '{"config": {"port": 2}}', "c"),
        )

    assert asyncio.run(message())[1] == "ops"
    ws.send(("lookup", {"key": "region"}))  # the next message's first call rebuilds previous/
    assert [ws.journal.load(n)[0] for n in (1, 2, 3)] == ["a", "b", "c"]


def test_without_new_message_every_call_is_a_message_of_its_own(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "root")
    tools = ws.tools
    asyncio.run(tools.call("lookup", '{"key": "owner"}', "call_1"))
    raw = json.dumps({"path": "fetch.py", "content": PROGRAM})
    asyncio.run(tools.call("write_file", raw, "call_2"))
    edit_raw = json.dumps({"previous_ordinal": 1, "patch": [TODO_FIX]})

    text = asyncio.run(tools.call(EDIT_TOOL, edit_raw, "call_3"))

    assert text.startswith("replayed call_2 (write_file)")


# -- successive fixes accumulate ----------------------------------------------------------------


@pytest.mark.parametrize("second_target", ["call_2", 1], ids=["by-call-id", "by-ordinal"])
def test_a_failing_replay_then_a_corrected_one_accumulates_the_fixes(
    ws: Workspace, second_target: str | int
) -> None:
    content = PROGRAM.replace("print(", "print(  # FIXME: use logging\n        ")
    ws.send(("write_file", {"path": "fetch.py", "content": content}))

    [failed_replay] = ws.send(edit("call_1", TODO_FIX))

    assert failed_replay == (
        "replayed call_1 (write_file) with 1 patch entry; it failed: "
        "ValueError: content still has a FIXME on line 16\n"
        + native_failure_notice("call_2", field="content")  # the replay's own id
    )

    [replayed] = ws.send(edit(second_target, fix("content", "  # FIXME: use logging", "")))

    assert replayed.startswith("replayed call_2 (write_file) with 1 patch entry: wrote")
    [written] = ws.files.values()
    assert "TODO" not in written and "FIXME" not in written
    assert json.loads(ws.saved("call_3"))["content"] == written
    assert ws.line("call_2")["replay_of"] == "call_1"
    assert ws.line("call_2")["status"] == "error"
    assert ws.line("call_3")["replay_of"] == "call_2"
    assert ws.line("call_3")["status"] == "ok"


def test_a_patch_with_several_entries_applies_them_in_order(ws: Workspace) -> None:
    ws.send(("write_file", {"path": "fetch.py", "content": PROGRAM}))

    [text] = ws.send(
        edit(
            "call_1",
            TODO_FIX,
            fix("content", "RETRIES = 3", "RETRIES = 5"),
            {"path": "path", "value": "net/fetch.py"},
        )
    )

    assert text.startswith("replayed call_1 (write_file) with 3 patch entries: ")
    assert ws.files == {"net/fetch.py": FIXED.replace("RETRIES = 3", "RETRIES = 5")}


def test_a_replay_whose_tool_fails_on_the_patched_arguments_names_the_replay(
    ws: Workspace,
) -> None:
    ws.send(("write_file", {"path": "fetch.py", "content": PROGRAM}))

    [text] = ws.send(edit("call_1", {"path": "path"}))  # deletes a required argument

    assert text.startswith("replayed call_1 (write_file) with 1 patch entry; it failed: TypeError")
    assert "missing 1 required" in text
    assert text.endswith(native_failure_notice("call_2", field="content"))


# -- every error of editPreviousToolCalling ------------------------------------------------------

ERRORS = [
    pytest.param(
        {"call_id": "call_1", "previous_ordinal": 1, "patch": [TODO_FIX]},
        'give exactly one of "call_id" (e.g. "call_3") and "previous_ordinal" (1 = the first '
        "call of your previous message), not both",
        id="both-locators",
    ),
    pytest.param(
        {"patch": [TODO_FIX]},
        'give exactly one of "call_id" (e.g. "call_3") and "previous_ordinal" (1 = the first '
        "call of your previous message), one is missing",
        id="no-locator",
    ),
    pytest.param(
        {"call_id": "call_1", "patch": []},
        "patch is empty: give at least one entry",
        id="empty-patch",
    ),
    pytest.param(
        {"call_id": "call_1"},
        '"patch" is missing: give a list of entries',
        id="no-patch",
    ),
    pytest.param(
        {"call_id": "call_99", "patch": [TODO_FIX]},
        "no saved call has the id 'call_99'; the latest ids are: call_2, call_1",
        id="unknown-id",
    ),
    pytest.param(
        {"previous_ordinal": 3, "patch": [TODO_FIX]},
        "previous_ordinal 3 is out of range: your previous message made 2 tool calls "
        "(previous_ordinal 1 to 2); or give a call_id (latest: call_2, call_1)",
        id="ordinal-out-of-range",
    ),
    pytest.param(
        {"previous_ordinal": 0, "patch": [TODO_FIX]},
        "previous_ordinal must be an integer from 1 (1 = the first call of your previous "
        "message), got 0",
        id="ordinal-zero",
    ),
    pytest.param(
        {"previous_ordinal": True, "patch": [TODO_FIX]},
        "previous_ordinal must be an integer from 1",
        id="ordinal-bool",
    ),
    pytest.param(
        {"previous_ordinal": "1", "patch": [TODO_FIX]},
        "previous_ordinal must be an integer from 1 (1 = the first call of your previous "
        'message), got "1"',
        id="ordinal-string",
    ),
    pytest.param(
        {"call_id": "", "patch": [TODO_FIX]},
        'call_id must be a non-empty string like "call_3", got ""',
        id="empty-call-id",
    ),
    pytest.param(
        {"call_id": "call_3", "patch": [TODO_FIX]},
        "call_3 is this editPreviousToolCalling call itself; name an earlier call",
        id="itself",
    ),
    pytest.param(
        {"call_id": "call_1", "patch": [fix("content", 3, "5")]},
        "patch[0].old_string must be a string, got a number",
        id="old-string-not-a-string",
    ),
    pytest.param(
        {"call_id": "call_1", "patch": [fix("content", "RETRIES = 4", "RETRIES = 5")]},
        'call_1 (write_file) is unchanged: patch[0] (path "content"): old_string occurs 0 '
        "times in the string there",
        id="zero-matches",
    ),
    pytest.param(
        {"call_id": "call_1", "patch": [fix("content", "retries", "tries")]},
        'call_1 (write_file) is unchanged: patch[0] (path "content"): old_string occurs 2 '
        "times; add surrounding text so it occurs exactly once",
        id="several-matches",
    ),
    pytest.param(
        {"call_id": "call_1", "patch": [fix("contents", "a", "b")]},
        'has no key "contents"; the keys there are "content", "path" (did you mean "content"?)',
        id="path-not-there",
    ),
    pytest.param(
        {"call_id": "call_2", "patch": [fix("key", "region", "owner")]},
        "",  # a successful lookup can be edited too: this case is the control
        id="control-success",
    ),
    pytest.param(
        {"call_id": "call_1", "patch": [TODO_FIX], "dry_run": True},
        "unknown argument 'dry_run'; editPreviousToolCalling takes call_id or "
        "previous_ordinal, and patch",
        id="unknown-argument",
    ),
    pytest.param(
        '{"call_id": "call_1", "patch": [',
        "the arguments are not valid JSON",
        id="invalid-json",
    ),
    pytest.param(
        '["call_1"]',
        "the arguments are a JSON list, not an object",
        id="not-an-object",
    ),
]


@pytest.mark.parametrize(("arguments", "message"), ERRORS)
def test_edit_errors_are_explicit_and_run_nothing(
    ws: Workspace, arguments: Any, message: str
) -> None:
    ws.send(
        ("write_file", {"path": "fetch.py", "content": PROGRAM}),
        ("lookup", {"key": "region"}),
    )
    before = ws.saved("call_1")
    runs = list(ws.runs)

    [text] = ws.send((EDIT_TOOL, arguments))

    if not message:
        assert text == "replayed call_2 (lookup) with 1 patch entry: ops"
        return
    assert text.startswith(f"{EDIT_TOOL} failed, nothing ran"), text
    assert message in text
    assert ws.runs == runs  # no tool ran
    assert ws.saved("call_1") == before
    assert ws.saved("call_3") == ws.sent["call_3"].encode()  # the edit call itself, as sent
    line = ws.line("call_3")
    assert (line["tool"], line["status"]) == (EDIT_TOOL, "error")
    assert line["ename"] in ("PatchError", "CheckpointError")
    assert "[ptc-retry] Arguments saved" not in text  # an edit that did not run has no notice


def test_a_null_locator_counts_as_absent(ws: Workspace) -> None:
    ws.send(("write_file", {"path": "fetch.py", "content": PROGRAM}))
    arguments = {"call_id": None, "previous_ordinal": 1, "patch": [TODO_FIX]}

    [text] = ws.send((EDIT_TOOL, arguments))

    assert text.startswith("replayed call_1 (write_file)")


def test_a_call_id_sent_twice_is_refused_and_the_notice_names_the_second_call(
    ws: Workspace,
) -> None:
    def send(name: str, arguments: dict[str, Any], call_id: str) -> str:
        ws.journal.new_message()
        return asyncio.run(ws.tools.call(name, json.dumps(arguments), call_id))

    send("write_file", {"path": "a.py", "content": PROGRAM}, "call_1")
    failed = send("write_file", {"path": "b.py", "content": PROGRAM}, "call_1")  # numbered again
    assert failed.endswith(native_failure_notice("call_1.2", field="content"))

    refused = send(EDIT_TOOL, {"call_id": "call_1", "patch": [TODO_FIX]}, "call_2")
    assert refused.startswith(f"{EDIT_TOOL} failed, nothing ran")
    assert "call id 'call_1' names 2 programs" in refused
    assert "#1 (call_1), #2 (call_1.2); give the reference of the one you mean" in refused
    assert ws.runs == ["write_file", "write_file"]

    fixed = send(EDIT_TOOL, {"call_id": "call_1.2", "patch": [TODO_FIX]}, "call_3")
    assert fixed.startswith("replayed call_1.2 (write_file)")
    assert ws.files == {"b.py": FIXED}


def test_an_edit_that_did_not_apply_points_at_the_call_it_aimed_at(ws: Workspace) -> None:
    ws.send(("write_file", {"path": "fetch.py", "content": PROGRAM}))
    ws.send(edit("call_1", fix("content", "RETRIES = 4", "RETRIES = 5")))

    [text] = ws.send(edit(1, TODO_FIX))  # previous/1 is the failed edit, not the write

    assert text == (
        f"{EDIT_TOOL} failed, nothing ran: call_2 is an {EDIT_TOOL} call that did not apply, "
        'so nothing of it can re-run; fix the call it was aimed at (call_id "call_1") with a '
        "new patch"
    )


def test_an_edit_of_a_tool_that_is_not_registered_says_so(ws: Workspace) -> None:
    call = ws.journal.begin('{"cmd": "ls"}', tool="shell", call_id="call_0")
    ws.journal.finish(call, "ok")

    [text] = ws.send(edit("call_0", fix("cmd", "ls", "ls -l")))

    assert text == (
        f"{EDIT_TOOL} failed, nothing ran, call_0 (shell) is unchanged: call_0 was a call of "
        "'shell', which is not a tool here (write_file, submit_config, lookup); call a tool "
        "with fresh arguments"
    )


def test_an_edit_of_arguments_that_are_not_an_object_says_so(ws: Workspace) -> None:
    [refused] = ws.send(("lookup", '["region"]'))
    assert refused == "the arguments of lookup are a JSON list, not an object; send an object"

    [text] = ws.send(edit("call_1", {"path": "key", "value": "owner"}))

    assert text.startswith(f"{EDIT_TOOL} failed, nothing ran: checkpoint ")
    assert "holds a list, not a JSON object" in text


def test_previous_ordinal_with_no_previous_message_says_so(ws: Workspace) -> None:
    [text] = ws.send(edit(1, TODO_FIX))

    assert text == (
        f"{EDIT_TOOL} failed, nothing ran: previous_ordinal 1 is out of range: your previous "
        "message made no tool calls; or give a call_id (latest: none)"
    )


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)
KEYS = st.sampled_from(["call_id", "previous_ordinal", "patch", "path", "content", "key", "x"])
ENTRIES = st.fixed_dictionaries(
    {"path": st.sampled_from(["content", "key", "path", "a.b", "x[0]", "", "[", 3])},
    optional={"value": JSON_VALUES, "old_string": JSON_VALUES, "new_string": st.text(max_size=5)},
)
CALL_ARGUMENTS = st.dictionaries(
    KEYS,
    JSON_VALUES
    | st.sampled_from(["call_1", "call_2", "nope", 1, 2, 0])
    | st.lists(ENTRIES, max_size=2),
    max_size=4,
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=st.sampled_from(["write_file", "lookup", EDIT_TOOL, "nope"]),
    raw=st.text(max_size=40) | CALL_ARGUMENTS.map(json.dumps),
)
def test_any_arguments_are_saved_as_sent_and_never_raise(
    ws: Workspace, name: str, raw: str
) -> None:
    if not ws.sent:
        ws.send(
            ("write_file", {"path": "fetch.py", "content": PROGRAM}),
            ("lookup", {"key": "region"}),
        )
    [(call_id, _, _)] = ws.ids(((name, raw),))
    ws.journal.new_message()

    result = asyncio.run(ws.tools.invoke(name, raw, call_id))

    assert result.status in ("ok", "error")
    assert result.call_id == call_id
    if result.replay_of is None:
        assert ws.saved(call_id) == raw.encode()
    else:
        assert json.loads(ws.saved(call_id)) is not None
    assert ws.line(call_id)["status"] == result.status


# -- direct calls: the registry ----------------------------------------------------------------


def test_an_unknown_tool_is_journaled_and_the_tools_are_listed(ws: Workspace) -> None:
    [text] = ws.send(("delete_file", {"path": "x"}))

    assert text == (
        f"unknown tool 'delete_file'; the tools are: write_file, submit_config, lookup, {EDIT_TOOL}"
    )
    assert ws.line("call_1")["ename"] == "UnknownTool"
    assert ws.saved("call_1") == ws.sent["call_1"].encode()


def test_invalid_json_arguments_are_saved_and_refused_without_notice(ws: Workspace) -> None:
    raw = '{"path": "fetch.py", "content": "' + "x" * 300  # cut off

    [text] = ws.send(("write_file", raw))

    assert text.startswith("the arguments of write_file are not valid JSON (")
    assert "[ptc-retry]" not in text  # a replay could not parse it either
    assert ws.saved("call_1") == raw.encode()


def test_decoded_arguments_are_saved_as_their_json(ws: Workspace) -> None:
    # Anthropic's tool_use blocks carry "input" already decoded.
    text = asyncio.run(ws.tools.call("lookup", {"key": "owner"}, "toolu_1"))

    assert text == "ops"
    assert ws.saved("toolu_1") == b'{"key": "owner"}'


def test_empty_arguments_mean_no_arguments(tmp_path: Path) -> None:
    tools = NativeTools(root=tmp_path, session="s")
    tools.register(lambda: "pong", name="ping")

    assert tools.call_sync("ping", "", "call_1") == "pong"


def test_call_sync_works_inside_a_running_event_loop(tmp_path: Path) -> None:
    tools = NativeTools(root=tmp_path, session="s")
    tools.register(lambda: "pong", name="ping")

    async def inside_a_loop() -> str:
        return tools.call_sync("ping", "{}", "call_1")

    assert asyncio.run(inside_a_loop()) == "pong"


def test_a_call_given_its_position_is_recorded_there(ws: Workspace) -> None:
    ws.journal.new_message(turn=1)
    asyncio.run(ws.tools.invoke("lookup", '{"key": "owner"}', "call_p1", position=Position(4, 9)))
    asyncio.run(ws.tools.invoke("lookup", '{"key": "owner"}', "call_p2"))

    assert (ws.line("call_p1")["turn"], ws.line("call_p1")["step"]) == (4, 9)
    assert (ws.line("call_p2")["turn"], ws.line("call_p2")["step"]) == (1, ws.journal.step)


def test_functions_given_to_a_call_run_instead_of_the_registered_ones(ws: Workspace) -> None:
    def other_lookup(key: str) -> str:
        return f"other {key}"

    [failed] = ws.send(("lookup", {"key": "missing"}))
    direct = asyncio.run(
        ws.tools.invoke("lookup", '{"key": "owner"}', functions={"lookup": other_lookup})
    )
    edit_call = edit("call_1", {"path": "key", "value": "region"})
    edited = asyncio.run(ws.tools.invoke(*edit_call, functions={"lookup": other_lookup}))

    assert failed.startswith("KeyError")
    assert direct.text == "other owner"
    assert edited.text == "replayed call_1 (lookup) with 1 patch entry: other region"
    assert ws.runs == ["lookup"]  # the registered function ran only for the first call
    assert ws.tools.definitions("openai")[2]["function"]["name"] == "lookup"


def test_sync_and_async_tools_and_their_results_as_text(tmp_path: Path) -> None:
    async def stats() -> dict[str, Any]:
        return {"files": 2, "names": ["a", "\u00e9"]}

    tools = NativeTools(root=tmp_path, session="s", tools={"stats": stats, "nothing": lambda: None})

    assert tools.call_sync("stats", "{}") == '{"files": 2, "names": ["a", "\u00e9"]}'
    assert tools.call_sync("nothing", "{}") == "null"


def test_a_tool_failure_reads_as_its_own_text(tmp_path: Path) -> None:
    tools = NativeTools(root=tmp_path, session="s")

    @tools.register
    def run_code(code: str) -> str:
        raise ToolFailure("Traceback (most recent call last):\nNameError: x", ename="NameError")

    text = tools.call_sync("run_code", json.dumps({"code": PROGRAM}), "call_1")

    assert text == (
        "Traceback (most recent call last):\nNameError: x\n"
        + native_failure_notice("call_1", field="code")
    )
    assert tools.journal.store.history()[-1]["ename"] == "NameError"


def test_the_running_tool_sees_its_own_call(ws: Workspace) -> None:
    seen: list[tuple[str, str | None, str | None]] = []

    @ws.tools.register
    def echo(text: str) -> str:
        call = current_call()
        assert call is not None
        seen.append((call.id, call.replay_of, ws.journal.tool_of(call.id)))
        return text

    ws.send(("echo", {"text": "hi"}))
    ws.send(edit("call_1", {"path": "text", "value": "ho"}))

    assert seen == [("call_1", None, "echo"), ("call_2", "call_1", "echo")]
    assert current_call() is None


def test_an_interrupted_tool_is_recorded_and_the_interrupt_goes_on(tmp_path: Path) -> None:
    tools = NativeTools(root=tmp_path, session="s")

    @tools.register
    def hang() -> str:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tools.call_sync("hang", "{}", "call_1")
    assert tools.journal.store.history()[-1]["status"] == "interrupted"


def test_a_store_failure_never_stops_a_tool_and_is_reported_once(ws: Workspace) -> None:
    ws.journal.store.close()  # every later begin raises StoreError

    texts = ws.send(("lookup", {"key": "owner"}), ("lookup", {"key": "region"}))

    assert texts[0].startswith("ops\n[ptc-retry] the arguments were not saved (")
    assert texts[1] == "eu-west-1"


def test_a_replay_whose_patched_arguments_cannot_be_saved_still_runs(ws: Workspace) -> None:
    ws.send(("write_file", {"path": "fetch.py", "content": PROGRAM}))
    store = ws.journal.store

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    store.replace_arguments = refuse  # type: ignore[method-assign]
    [text] = ws.send(edit("call_1", TODO_FIX))

    assert text.startswith("replayed call_1 (write_file) with 1 patch entry: wrote")
    assert text.endswith(
        "\n[ptc-retry] the patched arguments were not saved ([Errno 28] No space left on device)"
    )
    assert ws.files == {"fetch.py": FIXED}
    assert ws.line("call_2")["replay_of"] == "call_1"


@pytest.mark.parametrize(
    ("size", "minimum", "noticed"),
    [
        (149, 150, False),
        (150, 150, True),
        (151, 150, True),
        (40, 0, True),
        (400, 500, False),
        (499, None, False),  # None: the default, 500
        (500, None, True),
    ],
)
def test_the_notice_needs_arguments_of_at_least_notice_min_bytes(
    tmp_path: Path, size: int, minimum: int | None, noticed: bool
) -> None:
    options = {} if minimum is None else {"notice_min_bytes": minimum}
    ws = make_workspace(tmp_path / "root", **options)
    head = {"path": "p", "content": "TODO \u00e9"}  # non-ASCII: the size is in UTF-8 bytes
    padding = size - len(json.dumps(head, ensure_ascii=False).encode())
    raw = json.dumps({**head, "content": head["content"] + "x" * padding}, ensure_ascii=False)
    assert len(raw.encode()) == size

    [text] = ws.send(("write_file", raw))

    assert text.startswith("ValueError: content still has a TODO on line 1")
    assert (native_failure_notice("call_1", field="content") in text) is noticed


# -- registering -----------------------------------------------------------------------------


def test_register_takes_every_form_and_refuses_clashes(tmp_path: Path) -> None:
    tools = NativeTools(root=tmp_path, session="s")

    @tools.register
    def a() -> str:
        return "a"

    @tools.register(name="b2", description="B.")
    def b() -> str:
        return "b"

    tools.register(lambda: "c", name="c")

    assert tools.names == ["a", "b2", "c"]
    assert "b2" in tools and EDIT_TOOL in tools and "b" not in tools
    with pytest.raises(ValueError, match="already registered"):
        tools.register(a)
    with pytest.raises(ValueError, match="is built in"):
        tools.register(a, name=EDIT_TOOL)
    with pytest.raises(ValueError, match="give the tool a name"):
        tools.register(lambda: None, name="")


def test_a_journal_takes_a_store_or_a_location_not_both(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "s")
    journal = ToolJournal(store)
    assert journal.session_dir == tmp_path / "s"
    with pytest.raises(ValueError):
        ToolJournal(store, root=tmp_path)
    with pytest.raises(ValueError):
        NativeTools(journal, session="s")


def test_a_reopened_session_edits_calls_of_the_earlier_process(tmp_path: Path) -> None:
    first = make_workspace(tmp_path / "root", session="run")
    first.send(("write_file", {"path": "fetch.py", "content": PROGRAM}))
    first.journal.close()

    second = make_workspace(tmp_path / "root", session="run")
    second.count = 1
    [text] = second.send(edit("call_1", TODO_FIX))  # the tool is known from history.jsonl

    assert text.startswith("replayed call_1 (write_file)")
    assert second.line("call_2")["step"] == 2  # the step numbers go on


# -- the notice and the prompt section ----------------------------------------------------------


def test_the_notice_is_short_plain_and_never_repeats_the_error(ws: Workspace) -> None:
    [text] = ws.send(("write_file", {"path": "fetch.py", "content": PROGRAM}))
    error, notice = text.split("\n")

    assert notice == native_failure_notice("call_1", field="content")
    assert tokens_by_bytes(notice) <= 50
    assert tokens_by_words(notice) <= 50
    assert "\x1b" not in notice and "Call id" not in notice
    assert "TODO" not in notice and "ValueError" not in notice
    # The example is a valid call of the tool: its arguments pass the schema's checks.
    example = json.loads(notice[notice.index("(") + 1 : -1])
    assert example["call_id"] == "call_1"
    validate_patch(example["patch"])


def test_the_notice_example_field_falls_back_to_a_placeholder() -> None:
    assert '"path": "<field>"' in native_failure_notice("c1")
    assert '"path": "items[0][\\"a.b\\"]"' in native_failure_notice("c1", field='items[0]["a.b"]')


def test_the_native_prompt_section_fits_in_180_tokens(tmp_path: Path) -> None:
    long_dir = Path.home() / ".cache" / "agent-platform" / "ptc-retry" / "run-2024-06-01-ab12"
    for session_dir in (
        NativeTools(root=tmp_path, session="s").journal.session_dir,
        default_root() / "s1a2b3c4d",
        long_dir,
        None,
    ):
        text = prompt_section("native", session_dir=session_dir)
        assert tokens_by_bytes(text) <= 180, (session_dir, tokens_by_bytes(text))
        assert tokens_by_words(text) <= 180, (session_dir, tokens_by_words(text))


def test_the_native_prompt_section_is_byte_identical_for_a_session(tmp_path: Path) -> None:
    tools = NativeTools(root=tmp_path, session="s")
    text = tools.prompt_section()

    assert text == tools.prompt_section()
    tools.journal.close()
    assert NativeTools(root=tmp_path, session="s").prompt_section().encode() == text.encode()
    assert text == prompt_section("native", session_dir=str(tmp_path / "s"))


def test_the_native_prompt_section_teaches_the_tool_with_three_examples(tmp_path: Path) -> None:
    session_dir = tmp_path / "s"
    text = prompt_section("native", session_dir=session_dir)

    for needed in (str(session_dir), "by-id/<id>.json", "previous/1.json", "history.jsonl"):
        assert needed in text
    assert EDIT_TOOL in text and "call_id" in text and "previous_ordinal" in text
    assert text.endswith(FINAL_SENTENCE + "\n")
    assert "\x1b" not in text
    assert "a patch of entries like:" in text
    examples = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert len(examples) == 3
    assert all(len(json.dumps(entry)) <= 70 for entry in examples)  # short
    # Each is one patch entry, and they apply: a typo in a long text, a stale value in a
    # nested field, a wrong type replaced by a whole value.
    arguments = {
        "text": "Dear team, teh report for June is attached; comments by Friday please.",
        "q": {"since": "2023-06-01", "limit": 50},
        "port": "80",
    }
    for entry in examples:
        arguments = apply_patch(arguments, [entry])
    assert arguments == {
        "text": "Dear team, the report for June is attached; comments by Friday please.",
        "q": {"since": "2024-06-01", "limit": 50},
        "port": 80,
    }


def test_prompt_section_refuses_an_unknown_mode() -> None:
    with pytest.raises(ValueError, match="mode='code' or mode='native'"):
        prompt_section("direct")


# -- tool definitions ------------------------------------------------------------------------

_SCHEMA_TYPES = {"object", "array", "string", "integer", "number", "boolean", "null"}
_SCHEMA_KEYS = {
    "type",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "minimum",
    "minItems",
    "minLength",
    "description",
}


def check_schema(schema: Any, where: str = "schema") -> None:
    """A structural check of the JSON Schema subset function-calling APIs accept."""
    assert isinstance(schema, dict), where
    assert set(schema) <= _SCHEMA_KEYS, (where, set(schema) - _SCHEMA_KEYS)
    if "type" in schema:
        assert schema["type"] in _SCHEMA_TYPES, where
    if "description" in schema:
        assert isinstance(schema["description"], str) and schema["description"], where
    for key in ("minimum", "minItems", "minLength"):
        if key in schema:
            assert type(schema[key]) is int, (where, key)
    if "properties" in schema:
        assert schema.get("type") == "object", where
        for name, sub in schema["properties"].items():
            check_schema(sub, f"{where}.{name}")
    if "required" in schema:
        assert isinstance(schema["required"], list), where
        assert set(schema["required"]) <= set(schema.get("properties", {})), where
    if "items" in schema:
        assert schema.get("type") == "array", where
        check_schema(schema["items"], f"{where}[]")
    if "additionalProperties" in schema:
        assert isinstance(schema["additionalProperties"], bool), where


def test_the_edit_tool_schema_is_well_formed() -> None:
    check_schema(EDIT_TOOL_PARAMETERS)
    properties = EDIT_TOOL_PARAMETERS["properties"]
    assert set(properties) == {"previous_ordinal", "call_id", "patch", "append"}
    assert properties["previous_ordinal"]["type"] == "integer"
    assert properties["previous_ordinal"]["minimum"] == 1
    assert properties["call_id"]["type"] == "string"
    assert properties["append"]["type"] == "string"
    assert "required" not in EDIT_TOOL_PARAMETERS  # patch, append, or both
    entry = properties["patch"]["items"]
    assert entry["required"] == ["path"]
    assert {k: v.get("type") for k, v in entry["properties"].items()} == {
        "path": "string",
        "value": None,  # any JSON value
        "old_string": "string",
        "new_string": "string",
        "replace_all": "boolean",
    }


def test_the_edit_tool_description_teaches_the_entries_and_paths() -> None:
    for needed in (
        "{path, old_string, new_string}",
        "{path, value}",
        "{path}",
        "replace_all",
        "items[0].name",
        "call_id",
        "previous_ordinal",
        FINAL_SENTENCE,
    ):
        assert needed in EDIT_TOOL_DESCRIPTION
    assert len(EDIT_TOOL_DESCRIPTION.splitlines()) <= 8


def test_openai_definitions_wrap_the_loops_tools_and_the_edit_tool(ws: Workspace) -> None:
    definitions = ws.tools.definitions("openai")

    json.dumps(definitions)
    assert [d["type"] for d in definitions] == ["function"] * 4
    functions = [d["function"] for d in definitions]
    assert [f["name"] for f in functions] == ["write_file", "submit_config", "lookup", EDIT_TOOL]
    for function in functions:
        assert set(function) == {"name", "description", "parameters"}
        check_schema(function["parameters"], function["name"])
    write_file = functions[0]
    assert write_file["description"] == "Write a text file."
    assert write_file["parameters"] == {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
        "additionalProperties": False,
    }
    assert functions[1]["parameters"]["properties"] == {"config": {"type": "object"}}
    assert functions[3]["parameters"] == EDIT_TOOL_PARAMETERS


def test_anthropic_definitions_use_input_schema(ws: Workspace) -> None:
    definitions = ws.tools.definitions("anthropic")

    for definition in definitions:
        assert set(definition) == {"name", "description", "input_schema"}
        check_schema(definition["input_schema"], definition["name"])
    assert definitions[-1] == {
        "name": EDIT_TOOL,
        "description": EDIT_TOOL_DESCRIPTION,
        "input_schema": EDIT_TOOL_PARAMETERS,
    }


def test_tool_definitions_takes_given_schemas_and_returns_copies() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    mine = {"name": "search", "description": "Search.", "parameters": schema}

    [search, edit_tool] = tool_definitions("openai", [mine])
    edit_tool["function"]["parameters"]["properties"].clear()

    assert search["function"] == mine
    assert EDIT_TOOL_PARAMETERS["properties"]  # unchanged
    assert [d["name"] for d in tool_definitions("anthropic")] == [EDIT_TOOL]
    with pytest.raises(ValueError, match="use 'openai' or 'anthropic'"):
        tool_definitions("gemini")
    with pytest.raises(ValueError, match="needs a non-empty name"):
        tool_definitions("openai", [{"description": "x"}])


def test_a_registered_schema_wins_over_the_signature(tmp_path: Path) -> None:
    tools = NativeTools(root=tmp_path, session="s")
    schema = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
    tools.register(lambda **kw: "", name="run_code", description="Run.", parameters=schema)

    [run_code, _] = tools.definitions("anthropic")

    assert run_code == {"name": "run_code", "description": "Run.", "input_schema": schema}


def test_native_mode_imports_no_ipython_and_no_jupyter() -> None:
    code = (
        "import sys, ptc_retry.native; "
        "print(sorted({'IPython', 'jupyter_client'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_a_closed_journal_refuses_to_begin(tmp_path: Path) -> None:
    journal = ToolJournal(root=tmp_path, session="s")
    journal.close()
    with pytest.raises(StoreError):
        journal.begin("{}", tool="x")
