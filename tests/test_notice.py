"""What the model reads: the notice and the prompt sections, counted in real tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptc_retry.eval.tokens import load_tokenizer
from ptc_retry.notice import failure_notice, parse_notice, prompt_section
from ptc_retry.store import default_root

SESSION_DIRS = [
    default_root() / "k3f9a1c2b7d",  # a kernel's session under the default root
    Path.home() / ".cache" / "agent-platform" / "ptc-retry" / "run-2024-06-01-ab12",
]


@pytest.fixture(scope="module")
def count():  # type: ignore[no-untyped-def]
    tokenizer = load_tokenizer()
    if not tokenizer.available:
        pytest.skip(tokenizer.problem)
    return tokenizer.count


@pytest.mark.parametrize("mode", ["code", "native"])
@pytest.mark.parametrize("session_dir", SESSION_DIRS, ids=["default-root", "long-path"])
def test_prompt_section_fits_in_180_tokens(count, mode: str, session_dir: Path) -> None:  # type: ignore[no-untyped-def]
    assert count(prompt_section(mode, session_dir=session_dir)) <= 180


@pytest.mark.parametrize("mode", ["code", "native"])
def test_prompt_section_is_the_same_bytes_for_a_session(mode: str) -> None:
    first = prompt_section(mode, session_dir=SESSION_DIRS[0]).encode()
    assert prompt_section(mode, session_dir=str(SESSION_DIRS[0])).encode() == first


def test_code_prompt_names_the_layout_the_helper_and_the_manual_recipe() -> None:
    text = prompt_section("code", session_dir="/s")
    for phrase in (
        "/s/by-id/<id>.json",
        "previous/1.json",
        "history.jsonl",
        'await ptc_retry.replay("<id>", "<old text>", "<new text>")',
        "Only for a small correction; otherwise write a fresh program",
        "json.loads",
        "async function",
    ):
        assert phrase in text


def test_notice_costs_a_few_dozen_tokens(count) -> None:  # type: ignore[no-untyped-def]
    notice = failure_notice("c7", SESSION_DIRS[0] / "by-id" / "c7.json")
    assert count(notice) <= 60


def test_notice_does_not_say_call_id_and_has_no_ansi_codes() -> None:
    notice = failure_notice("call_7", "/s/by-id/call_7.json", completed=2, time_limit=5)
    assert "call id" not in notice.lower() and "\x1b" not in notice


@pytest.mark.parametrize("call_id", ["c1", "call_Wd3kq0fJ2xLmN8pQ4rT6vY1z", "a.b-c"])
def test_parse_notice_reads_back_the_id_and_path(call_id: str) -> None:
    path = f"/tmp/with space/by-id/{call_id}.json"
    notice = failure_notice(call_id, path, completed=3, time_limit=2.5, repeated=3)
    assert parse_notice(f"KeyError: 'x'\n{notice}") == (call_id, path)
    assert parse_notice("KeyError: 'x'") is None
