"""Native mode: a direct tool call cut off mid-stream is saved, and completed with ``append``.

A model streams a call's JSON arguments; when the stream stops part-way, ``call_partial``
journals what arrived (status ``partial``) and runs nothing, and an
``editPreviousToolCalling`` call with ``append`` sends only the rest and runs the whole
call. The pure tests drive ``NativeTools`` with one recording tool; the kernel tests drive
``KernelBackend(mode="native")``'s ``run_code``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.backend import KernelBackend
from ptc_retry.core.notice import prompt_section
from ptc_retry.core.partial import cut_arguments
from ptc_retry.native import EDIT_TOOL, EDIT_TOOL_DESCRIPTION, NativeTools, ToolResult
from ptc_retry.native.partial import (
    CUT_NO_TARGET,
    cut_saved_notice,
    cut_unsaved_notice,
    partial_notice,
    where_cut,
)
from ptc_retry.tokens import load_tokenizer

from .helpers import OnLoop, history, line_of, raw

# A letter with every kind of character a model streams: accents, CJK, an emoji (a surrogate
# pair when escaped), a tab, quotes, a backslash and Windows line ends.
LETTER = (
    "Chère équipe,\r\n"
    "le rapport de juin est prêt: 売上 +12% 🎉\r\n"
    '\tVoir "annexe" et C:\\rapports\\juin.\r\n'
    "Merci!"
)
ARGUMENTS = {"path": "notes/juin.txt", "content": LETTER}
OPENAI_ID = "call_Wd3kq0fJ2xLmN8pQ4rT6vY1z"
ANTHROPIC_ID = "toolu_01Wd3kq0fJ2xLmN8pQ4rT6v"


@dataclass
class Desk:
    """``NativeTools`` with one tool, ``write_file``, that records what it was called with."""

    tools: NativeTools
    written: list[dict[str, Any]] = field(default_factory=list)

    def cut(
        self, raw_arguments: str, call_id: str | None = None, name: str = "write_file"
    ) -> ToolResult:
        return self.tools.call_partial_sync(name, raw_arguments, call_id)

    def send(self, name: str, arguments: Any, call_id: str | None = None) -> ToolResult:
        return asyncio.run(self.tools.invoke(name, arguments, call_id))

    def complete(
        self, target: str, rest: str, call_id: str | None = None, **more: Any
    ) -> ToolResult:
        return self.send(EDIT_TOOL, {"call_id": target, "append": rest, **more}, call_id)

    @property
    def by_id(self) -> Path:
        return self.tools.journal.session_dir / "by-id"

    def saved(self, call_id: str) -> Any:
        return json.loads((self.by_id / f"{call_id}.json").read_text("utf-8"))

    def line(self, call_id: str) -> dict[str, Any]:
        return line_of(self.tools.journal.session_dir, call_id)


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[Desk]:
    tools = NativeTools(root=tmp_path / "root", session="s")
    desk = Desk(tools)

    @tools.register
    def write_file(path: str, content: str) -> str:
        """Write a text file."""
        if "TODO" in content:
            raise ValueError("content still has a TODO")
        desk.written.append({"path": path, "content": content})
        return f"wrote {len(content)} characters to {path}"

    yield desk
    tools.journal.close()


def cut_inside(raw_arguments: str, marker: str) -> str:
    """``raw_arguments`` up to (not including) the first ``marker``."""
    return raw_arguments[: raw_arguments.index(marker)]


def rest_of(cut: str, arguments: dict[str, Any]) -> tuple[str, str]:
    """``(key, rest)``: the string value ``cut`` stopped in, and what of it did not arrive."""
    found = cut_arguments(cut)
    assert found.open_key is not None
    return found.open_key, arguments[found.open_key][len(found.open_prefix) :]


# -- a cut inside a string value is saved, and nothing runs ------------------------------------


def test_a_call_cut_mid_string_is_saved_as_partial_and_runs_nothing(desk: Desk) -> None:
    whole = json.dumps(ARGUMENTS, ensure_ascii=False)
    cut = cut_inside(whole, "\\tVoir")

    result = desk.cut(cut, "call_1")

    assert (result.status, result.call_id, result.tool) == ("partial", "call_1", "write_file")
    assert result.notice == (
        '[ptc-retry] Saved; cut off in "content" after \'le rapport de juin est prêt: 売上 '
        '+12% 🎉\\r\\n\'. Send only the rest: editPreviousToolCalling({"call_id": "call_1", '
        '"append": "<rest>"})'
    )
    assert result.text == result.notice
    assert desk.written == []
    # The checkpoint: what decoded, the open string last; beside it, the text as it arrived.
    assert desk.saved("call_1") == {
        "path": "notes/juin.txt",
        "content": LETTER[: LETTER.index("\tVoir")],
    }
    assert (desk.by_id / "call_1.partial").read_bytes() == cut.encode("utf-8")
    line = desk.line("call_1")
    assert (line["tool"], line["status"], line["open_key"]) == ("write_file", "partial", "content")


def test_the_partial_file_holds_the_escaped_text_byte_for_byte(desk: Desk) -> None:
    escaped = json.dumps(ARGUMENTS, ensure_ascii=True)  # \u00e8, \ud83c\udf89, \r\n, \\
    cut = cut_inside(escaped, "\\tVoir")

    desk.cut(cut, "call_1")

    assert (desk.by_id / "call_1.partial").read_bytes() == cut.encode("ascii")
    assert desk.saved("call_1")["content"] == LETTER[: LETTER.index("\tVoir")]


@pytest.mark.parametrize("keep", range(1, 6), ids=lambda n: f"{n}-of-6")
def test_a_cut_inside_an_escape_keeps_the_text_before_it(desk: Desk, keep: int) -> None:
    whole = json.dumps({"path": "a.txt", "content": "café au lait"})  # "caf\u00e9 au lait"
    cut = whole[: whole.index("\\u00e9") + keep]  # "\", "\u", ... "\u00e": never whole

    result = desk.cut(cut, "call_1")

    assert result.status == "partial"
    assert desk.saved("call_1") == {"path": "a.txt", "content": "caf"}
    assert "after 'caf'" in result.text
    done = desk.complete("call_1", "é au lait", "call_2")
    assert done.text == "completed call_1 (write_file): wrote 12 characters to a.txt"
    assert desk.written == [{"path": "a.txt", "content": "café au lait"}]


def test_a_cut_between_the_halves_of_an_escaped_emoji_keeps_neither(desk: Desk) -> None:
    whole = json.dumps({"path": "a.txt", "content": "ok 🎉!"})  # "ok \ud83c\udf89!"
    cut = cut_inside(whole, "\\udf89")

    desk.cut(cut, "call_1")
    desk.complete("call_1", "🎉!", "call_2")

    assert desk.saved("call_1")["content"] == "ok "
    assert desk.written == [{"path": "a.txt", "content": "ok 🎉!"}]


def test_a_cut_right_after_the_opening_quote_saves_an_empty_string(desk: Desk) -> None:
    result = desk.cut('{"path": "a.txt", "content": "', "call_1")

    assert desk.saved("call_1") == {"path": "a.txt", "content": ""}
    assert result.text == (
        '[ptc-retry] Saved; cut off at the start of "content". Send only the rest: '
        'editPreviousToolCalling({"call_id": "call_1", "append": "<rest>"})'
    )
    desk.complete("call_1", "all of it", "call_2")
    assert desk.written == [{"path": "a.txt", "content": "all of it"}]


@pytest.mark.parametrize(
    ("cut", "where"),
    [
        pytest.param("", "before its arguments object began", id="nothing"),
        pytest.param("  ", "before its arguments object began", id="blank"),
        pytest.param('["a.txt", "con', "before its arguments object began", id="not-an-object"),
        pytest.param("{", "before its first argument", id="brace"),
        pytest.param('{"cont', "inside a key's name", id="inside-a-key"),
        pytest.param('{"content"', 'in "content"', id="after-a-key"),
        pytest.param('{"content": ', 'in "content"', id="before-a-value"),
        pytest.param('{"size": 12', 'in "size"', id="inside-a-number"),
        pytest.param('{"tags": ["a", ', 'in "tags"', id="inside-a-list"),
        pytest.param('{"tags": ["a", "b', 'in a string inside "tags"', id="inside-a-nested-string"),
        pytest.param('{"q": {"text": "wea', 'in a string inside "q"', id="inside-an-object"),
    ],
)
def test_a_cut_before_any_argument_arrived_whole_saves_nothing_and_says_where(
    desk: Desk, cut: str, where: str
) -> None:
    result = desk.cut(cut, "call_1")

    assert result.text == (
        f"[ptc-retry] The call was cut off {where}, which cannot be continued; nothing was "
        "saved or run. Send the whole call again."
    )
    assert (result.status, result.call_id, result.checkpoint) == ("error", None, None)
    assert list(desk.by_id.iterdir()) == []
    assert history(desk.tools.journal.session_dir) == []
    assert desk.written == []


def test_an_edit_cut_inside_its_patch_saves_nothing_and_says_where(desk: Desk) -> None:
    cut = '{"call_id": "call_0", "patch": [{"path": "content", "old_string": "ab'

    result = desk.cut(cut, "call_1", name=EDIT_TOOL)

    assert result.text == (
        '[ptc-retry] The call was cut off in a string inside "patch", which cannot be '
        "continued; nothing was saved or run. Send the whole call again."
    )
    assert list(desk.by_id.iterdir()) == []


@pytest.mark.parametrize("cut", ['{"append": "print(1', '{"patch": [], "append": "x'])
def test_an_edit_cut_before_it_names_its_target_saves_nothing(desk: Desk, cut: str) -> None:
    result = desk.cut(cut, "call_1", name=EDIT_TOOL)

    assert result.text == CUT_NO_TARGET
    assert (result.status, result.call_id) == ("error", None)
    assert list(desk.by_id.iterdir()) == []


def test_a_cut_call_of_an_unknown_tool_saves_nothing(desk: Desk) -> None:
    result = desk.cut('{"q": "wea', "call_1", name="search")

    assert (
        result.text == "unknown tool 'search'; the tools are: write_file, editPreviousToolCalling"
    )
    assert (result.status, result.ename, result.call_id) == ("error", "UnknownTool", None)
    assert list(desk.by_id.iterdir()) == []


def test_a_store_failure_asks_for_the_whole_call(
    desk: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(call: Any, raw_arguments: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(desk.tools.journal.store, "save_partial", refuse)

    result = desk.cut('{"path": "a.txt", "content": "abc', "call_1")

    assert result.status == "error" and result.call_id is None
    assert result.text == (
        "[ptc-retry] The call was cut off, and could not be saved ([Errno 28] No space left "
        "on device); nothing ran. Send the whole call again."
    )
    assert desk.line("call_1")["status"] == "error"  # its checkpoint was written: say so


def test_call_partial_sync_works_inside_a_running_event_loop(desk: Desk) -> None:
    async def in_loop() -> ToolResult:
        return desk.tools.call_partial_sync("write_file", '{"content": "ab', "call_1")

    assert asyncio.run(in_loop()).status == "partial"


# -- the notice ---------------------------------------------------------------------------------


def test_the_notice_quotes_the_last_100_characters_of_the_last_line() -> None:
    line = "x" * 95 + "abcdefghij"

    notice = partial_notice("c1", "text", f"first line\n{line}")

    assert f"after ...'{line[-100:]}'." in notice
    assert "first line" not in notice
    assert "after 'short'." in partial_notice("c1", "text", "first\nshort")


def test_the_notice_after_a_line_break_quotes_the_line_it_ended() -> None:
    assert "after 'def f():\\n'." in partial_notice("c1", "code", "import os\ndef f():\n")
    assert "after '\\r\\n'." in partial_notice("c1", "text", "a\r\n\r\n")


def test_the_notice_example_is_a_valid_completion_call() -> None:
    notice = partial_notice(OPENAI_ID, 'a "b"', "x")
    example = json.loads(notice[notice.index("(") + 1 : -1])

    assert example == {"call_id": OPENAI_ID, "append": "<rest>"}
    assert 'cut off in "a \\"b\\"" after' in notice


@pytest.mark.parametrize("call_id", [OPENAI_ID, ANTHROPIC_ID, "c1"])
def test_the_notice_costs_at_most_40_tokens_beyond_the_tail_and_the_id(call_id: str) -> None:
    tokenizer = load_tokenizer()
    if not tokenizer.available:
        pytest.skip(tokenizer.problem)
    tail = "    for row in rows:"
    notice = partial_notice(call_id, "content", f"import os\n{tail}")
    fixed = tokenizer.count(notice) - tokenizer.count(repr(tail)) - tokenizer.count(call_id)

    assert fixed <= 40, notice
    assert "\n" not in notice and "\x1b" not in notice
    nested = cut_arguments('{"path": "a", "tags": ["a", "b')
    unsaved = cut_unsaved_notice(nested)
    assert tokenizer.count(unsaved) - tokenizer.count('"tags"') <= 40, unsaved
    saved = cut_saved_notice(call_id, nested, ["tags", "content"])
    # Besides the id, where it stopped, the names and the example's entry for each of them
    # but the first (what the first costs is in the 40).
    second = ', {"path": "content", "value": "<value>"}'
    told = [call_id, where_cut(nested), ' "tags", "content"', "tags", second]
    assert second in saved
    assert tokenizer.count(saved) - sum(map(tokenizer.count, told)) <= 40, saved
    assert "\n" not in saved


# -- completing: append --------------------------------------------------------------------------


def test_a_completion_gives_the_result_of_the_uncut_call(desk: Desk) -> None:
    whole = json.dumps(ARGUMENTS, ensure_ascii=False)
    uncut = desk.send("write_file", whole, "call_whole")
    cut = cut_inside(whole, "juin.\\r")
    key, rest = rest_of(cut, ARGUMENTS)

    desk.cut(cut, "call_1")
    done = desk.complete("call_1", rest, "call_2")

    assert key == "content"
    assert done.text == f"completed call_1 (write_file): {uncut.text}"
    assert (done.status, done.tool, done.extend_of, done.replay_of) == (
        "ok",
        "write_file",
        "call_1",
        None,
    )
    assert desk.written == [ARGUMENTS, ARGUMENTS]
    # The completion is a call of write_file with the whole arguments, naming what it completed.
    assert desk.saved("call_2") == ARGUMENTS
    line = desk.line("call_2")
    assert (line["tool"], line["status"], line["extend_of"]) == ("write_file", "ok", "call_1")
    assert "replay_of" not in line
    assert desk.line("call_1")["status"] == "partial"  # the cut-off call stays as it arrived


#: What precedes a call that ran although it was cut: every argument write_file takes arrived.
RAN = '[ptc-retry] Cut off after "path", "content" arrived whole; write_file takes nothing else'


@pytest.mark.parametrize("ascii_only", [False, True], ids=["utf-8", "escaped"])
@pytest.mark.parametrize("order", [("path", "content"), ("content", "path")], ids="-".join)
def test_every_cut_position_writes_the_uncut_file_once_or_saves_nothing(
    desk: Desk, ascii_only: bool, order: tuple[str, ...]
) -> None:
    arguments = {key: ARGUMENTS[key] for key in order}
    whole = json.dumps(arguments, ensure_ascii=ascii_only)
    outcomes = {"ran": 0, "completed": 0, "refused": 0}
    for end in range(len(whole)):
        cut = whole[:end]
        written = len(desk.written)
        result = desk.cut(cut)
        if result.status == "ok":  # every argument arrived: it ran, as the whole call
            assert result.text.startswith(RAN), cut
            outcomes["ran"] += 1
        elif result.status == "partial":
            assert result.call_id is not None and len(desk.written) == written
            saved = desk.saved(result.call_id)
            found = cut_arguments(cut)
            more: dict[str, Any] = {}
            if found.open_key is not None:
                more["append"] = arguments[found.open_key][len(found.open_prefix) :]
            # Keys that never arrived come with the completion, as a patch of values.
            missing = [{"path": k, "value": v} for k, v in arguments.items() if k not in saved]
            if missing:
                more["patch"] = missing
            if found.open_key is None:  # the notice names what did not arrive
                assert all(json.dumps(key) in result.text for key in arguments if key not in saved)
            done = desk.send(EDIT_TOOL, {"call_id": result.call_id, **more})
            assert done.status == "ok" and done.extend_of == result.call_id, (cut, done.text)
            assert (desk.by_id / f"{result.call_id}.partial").read_bytes() == cut.encode()
            outcomes["completed"] += 1
        else:
            assert result.text.startswith("[ptc-retry] The call was cut off "), cut
            assert not cut_arguments(cut).values  # refused only when nothing arrived whole
            outcomes["refused"] += 1
            continue
        assert desk.written[written:] == [arguments], cut  # written once, whole
    assert outcomes["ran"] == 1 and outcomes["completed"] > len(LETTER)  # ran: before "}"
    assert outcomes["refused"] > 5
    assert len(desk.written) == outcomes["ran"] + outcomes["completed"]


def test_a_call_cut_after_every_argument_arrived_runs_once_and_says_what_was_cut(
    desk: Desk,
) -> None:
    whole = json.dumps({**ARGUMENTS, "mode": "overwrite"}, ensure_ascii=False)
    before_brace = json.dumps(ARGUMENTS, ensure_ascii=False)[:-1]

    cut_in_a_later_key = desk.cut(cut_inside(whole, "write"), "call_1")
    cut_before_the_brace = desk.cut(before_brace, "call_2")

    uncut = f"wrote {len(LETTER)} characters to notes/juin.txt"
    assert cut_in_a_later_key.text == f'{RAN}, so the call ran without "mode" (cut off).\n{uncut}'
    assert cut_before_the_brace.text == f"{RAN}, so the call ran.\n{uncut}"
    assert desk.written == [ARGUMENTS, ARGUMENTS]
    for call_id in ("call_1", "call_2"):
        assert desk.saved(call_id) == ARGUMENTS  # what ran, not what was cut
        assert desk.line(call_id)["status"] == "ok"
        assert not (desk.by_id / f"{call_id}.partial").exists()


def test_a_call_cut_before_an_optional_argument_runs_only_once_it_is_sent(desk: Desk) -> None:
    sent: list[dict[str, Any]] = []

    @desk.tools.register
    def send_email(to: str, body: str, dry_run: bool = False) -> str:
        """Send an email (counted on the host)."""
        sent.append({"to": to, "body": body, "dry_run": dry_run})
        return "drafted" if dry_run else "sent"

    whole = json.dumps({"to": "ops@example.com", "body": LETTER, "dry_run": True})

    result = desk.cut(cut_inside(whole, "true"), "call_1", name="send_email")

    assert result.status == "partial" and sent == []
    assert result.text == (
        '[ptc-retry] Saved; cut off in "dry_run". Send only "dry_run": editPreviousToolCalling('
        '{"call_id": "call_1", "patch": [{"path": "dry_run", "value": "<value>"}]})'
    )
    refused = desk.complete("call_1", "true", "call_2")
    assert "call_1 was cut off outside a string value" in refused.text and sent == []
    done = desk.send(
        EDIT_TOOL, {"call_id": "call_1", "patch": [{"path": "dry_run", "value": True}]}, "call_3"
    )
    assert done.text == "completed call_1 (send_email) with 1 patch entry: drafted"
    assert sent == [{"to": "ops@example.com", "body": LETTER, "dry_run": True}]
    assert desk.line("call_3")["extend_of"] == "call_1"
    assert desk.saved("call_1") == {"to": "ops@example.com", "body": LETTER}


def test_a_call_cut_in_its_first_argument_is_completed_only_with_the_later_ones(
    desk: Desk,
) -> None:
    wrote: list[tuple[str, str]] = []

    @desk.tools.register
    def overwrite(path: str, content: str = "") -> str:
        """Write a file, overwriting it (counted on the host)."""
        wrote.append((path, content))
        return f"wrote {len(content)} bytes"

    whole = json.dumps({"path": "report.txt", "content": "the quarterly numbers"})

    result = desk.cut(whole[: whole.index("rt.txt")], "call_1", name="overwrite")

    assert result.status == "partial" and wrote == []
    assert result.text == (
        "[ptc-retry] Saved; cut off in \"path\" after 'repo'. Send only the rest, and "
        '"content": editPreviousToolCalling({"call_id": "call_1", "append": "<rest>", '
        '"patch": [{"path": "content", "value": "<value>"}]})'
    )
    refused = desk.complete("call_1", "rt.txt", "call_2")  # the rest, without "content"
    assert refused.status == "error" and wrote == []  # it would have emptied the file
    assert 'would run without "content"' in refused.text
    done = desk.send(
        EDIT_TOOL,
        {"call_id": "call_1", "append": "rt.txt", "patch": [{"path": "content", "value": "q"}]},
        "call_3",
    )
    assert done.status == "ok" and wrote == [("report.txt", "q")]


@pytest.mark.parametrize(
    ("cut", "status"),
    [
        ('{"path": "a.txt", "content": "x \\ude00 y"', "ok"),
        ('{"content": "x \\ude00 y", "pa', "partial"),
        ('{"path": "a.txt \\ude00", "content": "x', "partial"),
    ],
    ids=["runs", "saved-outside-a-string", "saved-inside-a-string"],
)
def test_a_lone_surrogate_escape_that_arrived_whole_is_saved_as_its_escape(
    desk: Desk, cut: str, status: str
) -> None:
    result = desk.cut(cut, "call_1")

    assert result.status == status, result.text
    assert "not saved" not in result.text
    assert "\\ude00" in (desk.by_id / "call_1.json").read_text("utf-8")


@pytest.mark.parametrize(
    ("later", "where"),
    [('"note": "draft of ju', 'in "note"'), ('"mode": 64', 'in "mode"')],
    ids=["in-a-string", "in-a-number"],
)
def test_a_cut_in_a_key_the_tool_does_not_take_asks_only_for_what_it_takes(
    desk: Desk, later: str, where: str
) -> None:
    result = desk.cut(f'{{"content": {json.dumps(LETTER)}, {later}', "call_1")

    assert result.text == (
        f'[ptc-retry] Saved; cut off {where}. Send only "path": editPreviousToolCalling('
        '{"call_id": "call_1", "patch": [{"path": "path", "value": "<value>"}]})'
    )
    assert desk.saved("call_1") == {"content": LETTER}
    patch = [{"path": "path", "value": ARGUMENTS["path"]}]
    done = desk.send(EDIT_TOOL, {"call_id": "call_1", "patch": patch}, "call_2")
    assert (done.status, done.extend_of) == ("ok", "call_1")
    assert desk.written == [{"content": LETTER, "path": ARGUMENTS["path"]}]


def test_a_tool_that_takes_any_key_never_runs_cut_off(desk: Desk) -> None:
    logged: list[dict[str, Any]] = []

    @desk.tools.register
    def log(message: str, **fields: Any) -> str:
        """Log a message with any fields."""
        logged.append({"message": message, **fields})
        return "logged"

    before_brace = desk.cut('{"message": "disk full"', "call_1", name="log")
    in_a_field = desk.cut('{"level": 3, "mess', "call_2", name="log")

    assert before_brace.text == (
        '[ptc-retry] Saved; cut off after "message". Send only the rest: editPreviousToolCalling('
        '{"call_id": "call_1", "patch": [{"path": "<key>", "value": "<value>"}]})'
    )
    assert 'Send only "message": ' in in_a_field.text
    assert (before_brace.status, in_a_field.status, logged) == ("partial", "partial", [])


def test_a_call_cut_in_a_key_name_names_the_arguments_that_did_not_arrive(desk: Desk) -> None:
    result = desk.cut(f'{{"content": {json.dumps(LETTER)}, "pa', "call_1")

    assert result.text == (
        '[ptc-retry] Saved; cut off inside a key\'s name after "content". Send only "path": '
        'editPreviousToolCalling({"call_id": "call_1", "patch": [{"path": "path", "value": '
        '"<value>"}]})'
    )
    assert desk.line("call_1")["status"] == "partial" and "open_key" not in desk.line("call_1")


def filled(text: str, values: dict[str, Any]) -> dict[str, Any]:
    """The edit call ``text`` shows, as the model sends it: each ``"<value>"`` of its patch
    filled with the value of that entry's path."""
    found = re.search(r"editPreviousToolCalling\((\{.*\})\)", text)
    assert found is not None, text
    edit: dict[str, Any] = json.loads(found[1])
    for entry in edit.get("patch", []):
        assert entry["value"] == "<value>"
        entry["value"] = values[entry["path"]]
    return edit


def test_a_call_cut_before_two_arguments_is_completed_by_the_edit_its_notice_shows(
    tmp_path: Path,
) -> None:
    tools = NativeTools(root=tmp_path / "root", session="s")
    saved: list[tuple[str, str, int]] = []

    @tools.register
    def save(path: str, content: str, mode: int = 0o644) -> str:
        """Save a file."""
        saved.append((path, content, mode))
        return "saved"

    values = {"path": "notes.txt", "content": "hello", "mode": 0o600}
    cut = tools.call_partial_sync("save", '{"path": "notes.txt", ', "call_1")
    assert 'Send only "content", "mode"' in cut.text

    # A model that sends one value of the two is shown, again, an edit with both.
    one = {"call_id": "call_1", "patch": [{"path": "content", "value": "hello"}]}
    refused = asyncio.run(tools.invoke(EDIT_TOOL, one, "call_2"))
    assert refused.status != "ok" and saved == []
    again = asyncio.run(tools.invoke(EDIT_TOOL, filled(refused.text, values), "call_3"))
    done = asyncio.run(tools.invoke(EDIT_TOOL, filled(cut.text, values), "call_4"))

    assert (again.status, done.status) == ("ok", "ok"), (again.text, done.text)
    assert saved == [("notes.txt", "hello", 0o600)] * 2
    tools.journal.close()


def test_windows_line_ends_survive_a_cut_between_cr_and_lf(desk: Desk) -> None:
    whole = json.dumps({"path": "a.txt", "content": "one\r\ntwo\r\n"})
    cut = cut_inside(whole, "\\ntwo")  # ends with the escaped \r

    result = desk.cut(cut, "call_1")
    desk.complete("call_1", "\ntwo\r\n", "call_2")

    assert "after 'one\\r'" in result.text
    assert desk.written == [{"path": "a.txt", "content": "one\r\ntwo\r\n"}]


def test_a_completion_that_was_itself_cut_off_is_completed_in_turn(desk: Desk) -> None:
    whole = json.dumps(ARGUMENTS, ensure_ascii=False)
    cut = cut_inside(whole, "le rapport")
    _, rest = rest_of(cut, ARGUMENTS)
    desk.cut(cut, "call_1")
    first = json.dumps({"call_id": "call_1", "append": rest}, ensure_ascii=False)

    # The completion's own arguments are cut off twice; each part is saved, none runs.
    second = desk.cut(cut_inside(first, "\\tVoir"), "call_2", name=EDIT_TOOL)
    assert second.text == (
        '[ptc-retry] Saved; cut off in "append" after \'le rapport de juin est prêt: 売上 '
        '+12% 🎉\\r\\n\'. Send only the rest: editPreviousToolCalling({"call_id": "call_2", '
        '"append": "<rest>"})'
    )
    sent_second = rest[: rest.index("\tVoir")]
    third_whole = json.dumps({"call_id": "call_2", "append": rest[len(sent_second) :]})
    third = desk.cut(cut_inside(third_whole, "juin"), "call_3", name=EDIT_TOOL)
    assert third.status == "partial" and desk.written == []

    done = desk.complete("call_3", "juin.\r\nMerci!", "call_4")

    assert (
        done.text
        == f"completed call_1 (write_file): wrote {len(LETTER)} characters to notes/juin.txt"
    )
    assert desk.written == [ARGUMENTS]
    for call_id in ("call_2", "call_3"):
        line = desk.line(call_id)
        assert (line["tool"], line["status"], line["open_key"]) == (EDIT_TOOL, "partial", "append")
    line = desk.line("call_4")
    assert (line["tool"], line["extend_of"]) == ("write_file", "call_1")
    assert desk.saved("call_4") == ARGUMENTS


def test_append_and_a_patch_add_the_keys_that_never_arrived(desk: Desk) -> None:
    result = desk.cut('{"content": "Hello, wor', "call_1")  # "path" was to come after it

    done = desk.complete("call_1", "ld", "call_2", patch=[{"path": "path", "value": "a.txt"}])

    assert result.status == "partial"
    assert (
        done.text
        == "completed call_1 (write_file) with 1 patch entry: wrote 12 characters to a.txt"
    )
    assert desk.written == [{"content": "Hello, world", "path": "a.txt"}]


def test_a_patch_alone_edits_what_arrived_and_runs_it(desk: Desk) -> None:
    desk.cut('{"path": "a.txt", "content": "Helo, world', "call_1")

    done = desk.send(
        EDIT_TOOL,
        {
            "call_id": "call_1",
            "patch": [{"path": "content", "old_string": "Helo", "new_string": "Hello"}],
        },
        "call_2",
    )

    assert (
        done.text == "replayed call_1 (write_file) with 1 patch entry: wrote 12 characters to a.txt"
    )
    assert desk.line("call_2")["replay_of"] == "call_1"


def test_a_completion_that_fails_gets_the_notice_and_can_be_fixed_by_a_patch(desk: Desk) -> None:
    desk.tools.notice_min_bytes = 0
    desk.cut('{"path": "a.txt", "content": "RETRIES = 3', "call_1")

    failed = desk.complete("call_1", "  # TODO: read it from the environment", "call_2")
    fix = {
        "path": "content",
        "old_string": "  # TODO: read it from the environment",
        "new_string": "",
    }
    fixed = desk.send(EDIT_TOOL, {"call_id": "call_2", "patch": [fix]}, "call_3")

    assert failed.text.startswith("completed call_1 (write_file); it failed: ValueError")
    assert failed.notice is not None and '"call_id": "call_2"' in failed.notice
    assert (
        fixed.text
        == "replayed call_2 (write_file) with 1 patch entry: wrote 11 characters to a.txt"
    )


def test_append_to_a_call_that_was_not_cut_off_is_refused(desk: Desk) -> None:
    desk.send("write_file", {"path": "a.txt", "content": "whole"}, "call_1")

    refused = desk.complete("call_1", " and more", "call_2")

    assert refused.text == (
        f"{EDIT_TOOL} failed, nothing ran, call_1 (write_file) is unchanged: call_1 was not cut "
        'off, so "append" has nothing to go on from; fix it with a patch (old_string/new_string, '
        "or value) instead"
    )
    assert desk.written == [{"path": "a.txt", "content": "whole"}]
    assert desk.line("call_2")["status"] == "error"


def test_a_completed_call_takes_no_second_append(desk: Desk) -> None:
    desk.cut('{"path": "a.txt", "content": "ab', "call_1")
    desk.complete("call_1", "c", "call_2")

    refused = desk.complete("call_2", "d", "call_3")
    again = desk.complete("call_1", "cd", "call_4")  # the cut-off call itself: as often as needed

    assert "call_2 was not cut off" in refused.text
    assert again.status == "ok"
    assert [w["content"] for w in desk.written] == ["abc", "abcd"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        pytest.param(
            {"call_id": "call_1", "append": 3},
            '"append" must be a string (the rest of the value the call was cut off in, exactly '
            "as it goes on), got a number",
            id="not-a-string",
        ),
        pytest.param(
            {"call_id": "call_1"},
            '"patch" is missing: give a list of entries, e.g. [{"path": "content", '
            '"old_string": "...", "new_string": "..."}]; to complete a call that was cut off, '
            'give "append": the rest of it',
            id="neither",
        ),
        pytest.param(
            {"call_id": "call_1", "append": "x", "extra": 1},
            "unknown argument 'extra'; editPreviousToolCalling takes call_id or previous_ordinal, "
            "and patch or append",
            id="unknown-argument",
        ),
    ],
)
def test_a_wrong_append_is_refused_and_runs_nothing(
    desk: Desk, arguments: dict[str, Any], message: str
) -> None:
    desk.cut('{"path": "a.txt", "content": "ab', "call_1")

    refused = desk.send(EDIT_TOOL, arguments, "call_2")

    assert refused.text == f"{EDIT_TOOL} failed, nothing ran: {message}"
    assert desk.written == []


def test_a_null_append_counts_as_absent(desk: Desk) -> None:
    desk.cut('{"path": "a.txt", "content": "ab', "call_1")
    fix = {"path": "content", "old_string": "ab", "new_string": "abc"}

    done = desk.send(EDIT_TOOL, {"call_id": "call_1", "append": None, "patch": [fix]}, "call_2")

    assert done.text.startswith("replayed call_1 (write_file) with 1 patch entry")


def test_a_cut_off_call_is_completed_by_previous_ordinal(desk: Desk) -> None:
    desk.tools.journal.new_message()
    desk.send("write_file", {"path": "a.txt", "content": "first"}, "call_1")
    desk.cut('{"path": "b.txt", "content": "sec', "call_2")
    desk.tools.journal.new_message()

    done = desk.send(EDIT_TOOL, {"previous_ordinal": 2, "append": "ond"}, "call_3")

    assert done.text == "completed call_2 (write_file): wrote 6 characters to b.txt"


def test_a_cut_off_edit_call_that_names_itself_is_refused(desk: Desk) -> None:
    desk.cut('{"call_id": "call_1", "append": "ab', "call_1", name=EDIT_TOOL)

    refused = desk.complete("call_1", "c", "call_2")

    assert "call_1 is this editPreviousToolCalling call itself" in refused.text
    assert desk.written == []


def test_a_reopened_session_completes_a_cut_off_call_of_an_earlier_process(
    desk: Desk, tmp_path: Path
) -> None:
    desk.cut('{"path": "a.txt", "content": "ab', "call_1")
    desk.tools.journal.close()
    later = Desk(NativeTools(root=tmp_path / "root", session="s"))
    later.tools.register(lambda path, content: f"{path}: {content}", name="write_file")

    done = later.complete("call_1", "c", "call_2")

    assert later.tools.journal.store.warning is None  # the .partial file is no stray entry
    assert done.text == "completed call_1 (write_file): a.txt: abc"
    later.tools.journal.close()


# -- what the model is told up front ------------------------------------------------------------


def test_the_edit_tool_teaches_append() -> None:
    line = "For a call cut off mid-string, give append: the rest, exactly as it goes on"
    assert line in EDIT_TOOL_DESCRIPTION


def test_the_native_prompt_teaches_append_in_one_sentence() -> None:
    text = prompt_section("native", session_dir="/s")
    [sentence] = [line for line in text.splitlines() if "append" in line]

    assert sentence == 'Cut off mid-string? Send only the rest as "append" instead of a patch.'


# -- through a kernel: KernelBackend(mode="native") ---------------------------------------------

PROGRAM = """\
prices = {"café": 3.5, "thé": 2.0, "crêpe": 4.25}
order = ["café", "crêpe", "café"]
total = sum(prices[item] for item in order)
print(f"{len(order)} items: {', '.join(order)}")
print(f"total: {total:.2f} €")
round(total * 1.1, 2)
"""


@pytest.fixture(scope="module")
def options(options: dict[str, Any]) -> dict[str, Any]:
    return {**options, "mode": "native"}


def test_a_cut_off_program_runs_nothing_and_its_completion_gives_the_uncut_result(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    whole = raw(PROGRAM)
    uncut = on_loop(backend.handle_tool_call("run_code", whole, "k_whole"))
    kernel_calls = len(history(backend.kernel_session_dir))
    cut = cut_inside(whole, "sum(")
    _, rest = rest_of(cut, {"code": PROGRAM})

    text = on_loop(backend.handle_partial_tool_call("run_code", cut, "k_cut"))

    assert text == partial_notice("k_cut", "code", PROGRAM[: PROGRAM.index("sum(")])
    assert "after 'total = '" in text
    assert len(history(backend.kernel_session_dir)) == kernel_calls  # nothing reached the kernel
    assert (backend.session_dir / "by-id" / "k_cut.partial").read_bytes() == cut.encode()
    assert line_of(backend.session_dir, "k_cut")["status"] == "partial"

    done = on_loop(
        backend.handle_tool_call(EDIT_TOOL, {"call_id": "k_cut", "append": rest}, "k_done")
    )

    assert uncut == "3 items: café, crêpe, café\ntotal: 11.25 €\n12.38"
    assert done == f"completed k_cut (run_code): {uncut}"
    assert line_of(backend.session_dir, "k_done")["extend_of"] == "k_cut"
    kernel = backend.kernel_session_dir
    assert line_of(kernel, "k_done")["status"] == "ok"  # the kernel ran it under the edit's id
    assert json.loads((kernel / "by-id" / "k_done.json").read_text("utf-8")) == {"code": PROGRAM}


def test_a_cut_off_completion_of_a_program_is_completed_in_turn(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    whole = json.dumps({"code": PROGRAM})  # escaped: "caf\u00e9", "cr\u00eape"
    cut = whole[: whole.index("\\u00e9") + 3]  # inside the escape
    on_loop(backend.handle_partial_tool_call("run_code", cut, "k_c1"))
    _, rest = rest_of(cut, {"code": PROGRAM})
    completion = json.dumps({"call_id": "k_c1", "append": rest})
    second = cut_inside(completion, "\\u00eape")

    text = on_loop(backend.handle_partial_tool_call(EDIT_TOOL, second, "k_c2"))
    _, more = rest_of(second, {"append": rest})

    assert text == partial_notice("k_c2", "append", rest[: -len(more)])
    done = on_loop(backend.handle_tool_call(EDIT_TOOL, {"call_id": "k_c2", "append": more}, "k_c3"))

    assert done == "completed k_c1 (run_code): 3 items: café, crêpe, café\ntotal: 11.25 €\n12.38"


def test_cut_off_calls_of_one_message_are_numbered_for_previous_ordinal(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    step = backend.next_step()
    first = on_loop(backend.handle_tool_call("run_code", raw("print('one')"), "k_m1", step=step))
    on_loop(backend.handle_partial_tool_call("run_code", '{"code": "print(\'tw', "k_m2", step=step))
    assert first == "one"
    assert [line_of(backend.session_dir, i)["ordinal"] for i in ("k_m1", "k_m2")] == [1, 2]

    done = on_loop(
        backend.handle_tool_call(EDIT_TOOL, {"previous_ordinal": 2, "append": "o')"}, "k_m3")
    )

    assert done == "completed k_m2 (run_code): two"


def test_every_cut_after_a_program_ended_runs_it_in_native_mode(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    program = "print(sum([3, 4, 5]))\n"
    arguments = {"code": program, "description": "Sum «three»", "tags": ["a", "b"], "n": 25}
    whole = json.dumps(arguments, ensure_ascii=False)
    start = whole.index(json.dumps(program)) + len(json.dumps(program))
    ran = '[ptc-retry] Cut off after "code" arrived whole; run_code takes nothing else, so the'
    for end in range(start, len(whole)):
        cut = cut_arguments(whole[:end])
        without = f' without "{cut.cut_key}" (cut off)' if cut.cut_key is not None else ""
        call_id = f"k_after_{end}"

        text = on_loop(backend.handle_partial_tool_call("run_code", whole[:end], call_id))

        assert text == f"{ran} call ran{without}.\n12", (end, text)
        assert line_of(backend.session_dir, call_id)["status"] == "ok"
        assert line_of(backend.kernel_session_dir, call_id)["status"] == "ok"


def test_a_program_cut_after_it_ended_runs_in_the_message_it_was_sent_in(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    step = backend.next_step()
    first = on_loop(backend.handle_tool_call("run_code", raw("print('one')"), "k_s1", step=step))
    cut = json.dumps({"code": "print('two')", "note": "second"})[:-8]
    second = on_loop(backend.handle_partial_tool_call("run_code", cut, "k_s2", step=step))

    assert (first, second.splitlines()[-1]) == ("one", "two")
    assert backend.last_tool_result is not None and backend.last_tool_result.call_id == "k_s2"
    kernel = [line_of(backend.kernel_session_dir, i) for i in ("k_s1", "k_s2")]
    assert kernel[0]["step"] == kernel[1]["step"]  # one model message, as it was sent
    assert [line_of(backend.session_dir, i)["ordinal"] for i in ("k_s1", "k_s2")] == [1, 2]


def test_a_failing_program_cut_after_it_ended_is_fixed_by_the_patch_its_notice_shows(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    program = "".join(f"row_{i} = {{'id': {i}, 'note': 'padding {i}'}}\n" for i in range(14))
    program += "print(row_13['nite'])\n"  # a typo, after more than 500 bytes
    cut = json.dumps({"code": program, "description": "Show the last note"})[:-10]

    failed = on_loop(backend.handle_partial_tool_call("run_code", cut, "k_f1"))

    assert failed.startswith('[ptc-retry] Cut off after "code" arrived whole; ')
    assert "KeyError: 'nite'" in failed
    offered = failed.rpartition("editPreviousToolCalling(")[2][:-1]  # the notice's example
    fix = json.loads(offered.replace("<old>", "'nite'").replace("<new>", "'note'"))
    assert fix["patch"][0]["path"] == "code"
    fixed = on_loop(backend.handle_tool_call(EDIT_TOOL, fix, "k_f2"))
    assert fixed == "replayed k_f1 (run_code) with 1 patch entry: padding 13"
