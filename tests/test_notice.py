"""What the model reads and writes: the notice, the replay line and the prompt sections,
counted in real tokens (cl100k_base) with the call ids real models send."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.backend import KernelBackend
from ptc_retry.core.fs import default_root
from ptc_retry.core.notice import (
    OfferedCall,
    failure_notice,
    parse_notice,
    partial_notice,
    prompt_section,
    read_notice,
    resume_call,
)

from .helpers import OnLoop, model_call_id, raw

SESSION_DIRS = [
    default_root() / "k3f9a1c2b7d",  # a kernel's session under the default root
    Path.home() / ".cache" / "agent-platform" / "ptc-retry" / "run-2024-06-01-ab12",
]


#: The shapes of the tool-call ids that models send.
ID_SHAPES = {"openai": ("call_", 24), "anthropic": ("toolu_01", 22)}

# A failing program over notice_min_bytes: 250 bytes, a wrong key in its last line.
PROGRAM = "\n".join(
    [f"row_{i} = {{'region': 'north', 'amount': {i * 10.5}}}" for i in range(6)]
    + ["total = sum(r['amount'] for r in [row_0, row_1, row_2, row_3, row_4, row_5])"]
    + ["row_0['regoin']"]
)


@pytest.fixture(scope="module")
def long_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint root of at least 60 characters, as an agent platform's might be."""
    root = tmp_path_factory.mktemp("agent-platform")
    root = root / ("checkpoints-" + "x" * max(0, 60 - len(str(root)) - 13))
    assert len(str(root)) >= 60
    return root


@pytest.fixture(scope="module")
def options(long_root: Path) -> dict[str, Any]:
    """The module's backend keeps its checkpoints under ``long_root``, in a session of a
    typical id's length."""
    return {"root": long_root, "session_id": "s0e7a1c2d"}


# -- the notice, as a real kernel writes it -------------------------------------------------


@pytest.mark.parametrize("shape", ID_SHAPES)
def test_the_notice_costs_at_most_40_tokens_with_real_call_ids_and_a_long_root(
    backend: KernelBackend, on_loop: OnLoop[Any], count_tokens: Callable[[str], int], shape: str
) -> None:
    prefix, length = ID_SHAPES[shape]
    for seed in range(3):
        call_id = model_call_id(prefix, length, seed)
        program = PROGRAM.replace("10.5", f"1{seed}.5")  # no repeated failure: no guard
        result = on_loop(backend.run_code(program, call_id=call_id, arguments=raw(program)))
        assert result.status == "error" and result.notice is not None
        assert call_id not in result.notice and str(backend.session_dir) not in result.notice
        assert count_tokens(result.notice) <= 40, result.notice


def test_the_notice_names_the_program_and_shows_the_call_to_send_as_a_template(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    backend.new_turn()
    result = on_loop(backend.run_code(PROGRAM, call_id=model_call_id("call_", 24, 7)))
    ref = result.reference
    assert ref is not None and ref.startswith("#")
    # The statements before the failure ran in no time: skipping them is not offered.
    assert result.notice == (
        f'[ptc-retry] Saved as {ref}. Small fix? Send only:\nawait ptc_retry.replay("{ref}", '
        '"<old>", "<new>")'
    )
    assert parse_notice(result.text) == ref
    # Without the helper, the file follows from the reference and the prompt section.
    number = ref.removeprefix("#")
    saved = backend.session_dir / "calls" / f"{number}.json"
    assert json.loads(saved.read_text("utf-8")) == {"code": PROGRAM}
    assert f"{backend.session_dir}" in backend.system_prompt()
    assert "calls/<n>.json" in backend.system_prompt()


# -- the replay line the model writes --------------------------------------------------------


@pytest.mark.parametrize("ref", ["#7", "#42", "#318"])
def test_the_replay_lines_fixed_part_costs_at_most_20_tokens(
    count_tokens: Callable[[str], int], ref: str
) -> None:
    # Everything but the old and new text, as the JSON arguments of the tool call.
    line = f'await ptc_retry.replay("{ref}", "", "")'
    assert count_tokens(json.dumps({"code": line})) <= 20


# -- the notice's words -----------------------------------------------------------------------


def test_each_line_of_every_notice_fits_in_120_characters_and_the_call_is_one() -> None:
    notices = [
        failure_notice("#1234"),
        failure_notice("#1234", completed=12),
        failure_notice("#1234", interrupted=True),
        failure_notice("#1234", time_limit=55.5),
        failure_notice("#1234", completed=3, repeated=3),
        failure_notice("#1234", completed=3, repeated=3, paused=True),
    ]
    for notice in notices:
        lines = notice.splitlines()
        assert all(len(line) <= 120 for line in lines), notice
        # The call to send is the second line, whole and alone; the others are ours.
        assert lines[1].startswith("await ptc_retry.") and lines[1].endswith(")"), notice
        assert all(line.startswith("[ptc-retry] ") for line in lines[:1] + lines[2:])


def test_the_guards_sentence_is_a_line_of_its_own() -> None:
    notice = failure_notice("#12", completed=3, repeated=3, paused=True)
    assert notice.splitlines()[-1] == (
        "[ptc-retry] 3 identical failures in a row: programs pause until the user's next "
        "instruction; tell the user what fails."
    )


def test_a_stopped_program_is_offered_going_on_not_a_fix() -> None:
    for notice in (
        failure_notice("#3", interrupted=True, completed=2),
        failure_notice("#3", time_limit=5, completed=2),
    ):
        assert notice.endswith(f"To go on:\n{resume_call('#3')}")
        assert "Small fix" not in notice and "replay(" not in notice
    assert failure_notice("#3", time_limit=5).startswith(
        "[ptc-retry] Stopped by the time limit (5 s); saved as #3."
    )


@pytest.mark.parametrize(
    "kind", [{"completed": 12}, {"interrupted": True}, {"time_limit": 55.5}], ids=str
)
def test_every_kind_of_notice_costs_at_most_40_tokens(
    count_tokens: Callable[[str], int], kind: dict[str, Any]
) -> None:
    assert count_tokens(failure_notice("#1234", **kind)) <= 40


def test_resume_is_offered_only_when_statements_completed() -> None:
    assert "resume=True" not in failure_notice("#3")
    assert failure_notice("#3", completed=1).endswith('"<old>", "<new>", resume=True)')


def test_the_notice_does_not_say_call_id_and_has_no_ansi_codes() -> None:
    notice = failure_notice("#7", completed=2, repeated=3)
    assert "call id" not in notice.lower() and "\x1b" not in notice


@pytest.mark.parametrize("ref", ["#1", "#9999", "c1", "call_Wd3kq0fJ2xLmN8pQ4rT6vY1z", 'a"b'])
def test_parse_notice_reads_back_the_reference(ref: str) -> None:
    for notice in (
        failure_notice(ref, completed=3, repeated=3),
        failure_notice(ref, time_limit=2.5),
        f"[ptc-retry] The kernel died (exit code 1). Saved as {ref}. To go on: " + resume_call(ref),
    ):
        assert parse_notice(f"KeyError: 'x'\n{notice}") == ref
    assert parse_notice("KeyError: 'x'") is None


@pytest.mark.parametrize(
    ("notice", "offered"),
    [
        (
            failure_notice("#7", repeated=3),
            OfferedCall("#7", 'await ptc_retry.replay("#7", "<old>", "<new>")', "replay"),
        ),
        (
            failure_notice("#10", completed=2),
            OfferedCall(
                "#10", 'await ptc_retry.replay("#10", "<old>", "<new>", resume=True)', "replay"
            ),
        ),
        (
            failure_notice('a"b', interrupted=True),
            OfferedCall('a"b', 'await ptc_retry.resume("a\\"b")', "resume"),
        ),
        (
            partial_notice("#4", "total = 1\nprint(tot"),
            OfferedCall("#4", 'await ptc_retry.extend("#4", "<rest>")', "extend"),
        ),
    ],
    ids=["replay", "resume=True", "resume", "extend"],
)
def test_read_notice_gives_the_call_to_send_and_its_reference(
    notice: str, offered: OfferedCall
) -> None:
    # As a traceback ends with it, and as a framework quotes it, indented.
    indented = "\n".join("    " + line for line in notice.splitlines())
    # As a chat quotes it in Markdown, and with CRLF line ends.
    quoted = "\n".join(f"{marks} {line}" for marks in (">", ">>") for line in notice.splitlines())
    crlf = notice.replace("\n", "\r\n")
    for text in (f"KeyError: 'x'\n{notice}", f"Error:\n{indented}\n", quoted, f"{crlf}\r\n"):
        assert read_notice(text) == offered
    assert offered.resumes is ("resume" in offered.call)
    assert read_notice("KeyError: 'x'") is None


# -- the prompt sections ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["code", "native"])
@pytest.mark.parametrize("session_dir", SESSION_DIRS, ids=["default-root", "long-path"])
def test_prompt_section_fits_in_150_tokens(
    count_tokens: Callable[[str], int], mode: str, session_dir: Path
) -> None:
    assert count_tokens(prompt_section(mode, session_dir=session_dir)) <= 150


@pytest.mark.parametrize("mode", ["code", "native"])
def test_prompt_section_is_the_same_bytes_for_a_session(mode: str) -> None:
    first = prompt_section(mode, session_dir=SESSION_DIRS[0]).encode()
    assert prompt_section(mode, session_dir=str(SESSION_DIRS[0])).encode() == first


def test_code_prompt_names_the_layout_the_helper_and_the_manual_recipe() -> None:
    text = prompt_section("code", session_dir="/s")
    for phrase in (
        "/s as JSON",
        "by-id/<call id>.json",
        "previous/1.json",
        "history.jsonl",
        "#n (calls/<n>.json)",
        'await ptc_retry.replay("#n", "<old text>", "<new text>")',
        "Only for a small correction; otherwise write a fresh program",
        "json.loads",
        "async function",
    ):
        assert phrase in text
