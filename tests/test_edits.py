"""The literal replacement step of a replay: exact matches, and errors an LLM can act on."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from ptc_retry.core.edits import apply_edits, normalize_edits
from ptc_retry.core.errors import PtcRetryError, ReplayError

PROGRAM = """\
import time

def fetch(url, retries=3):
    for attempt in range(retries):
        try:
            return get(url, timeout=10)
        except OSError:
            time.sleep(1)

data = fetch("https://example.org/a")
more = fetch('https://example.org/b', retries = 3)
print(len(data))
"""


def replay_error(code: str, edits: list[tuple[str, str]], **kwargs: Any) -> str:
    with pytest.raises(ReplayError) as info:
        apply_edits(code, edits, **kwargs)
    return str(info.value)


# --- normalize_edits --------------------------------------------------------------------


def test_a_pair_becomes_one_edit() -> None:
    assert normalize_edits("retries=3", "retries=5", None) == [("retries=3", "retries=5")]


def test_edits_accept_tuples_and_lists() -> None:
    assert normalize_edits(None, None, [("a", "b"), ["c", "d"]]) == [("a", "b"), ("c", "d")]


def test_new_may_be_empty() -> None:
    assert normalize_edits("print(x)\n", "", None) == [("print(x)\n", "")]


@pytest.mark.parametrize(
    ("old", "new", "edits"),
    [("a", "b", [("a", "b")]), (None, None, None), ("a", None, None), (None, "b", None)],
    ids=["both forms", "neither form", "old without new", "new without old"],
)
def test_wrong_form_explains_both_forms(old: Any, new: Any, edits: Any) -> None:
    with pytest.raises(ReplayError) as info:
        normalize_edits(old, new, edits)
    message = str(info.value)
    assert 'replay(id, "old", "new")' in message
    assert 'replay(id, edits=[("old", "new"), ...])' in message


@pytest.mark.parametrize(
    ("old", "new", "edits", "expected"),
    [
        (3, "b", None, "old must be a str, got int"),
        ("a", b"b", None, "new must be a str, got bytes"),
        (None, None, [("a", "b"), ("c", None)], "edits[1] new must be a str, got NoneType"),
        (None, None, "ab", "edits must be a list of (old, new) pairs, got str"),
        (None, None, {"a": "b"}, "edits must be a list of (old, new) pairs, got dict"),
        (None, None, 5, "edits must be a list of (old, new) pairs, got int"),
        (None, None, [("a", "b", "c")], 'edits[0] must be an ("old", "new") pair, got tuple of'),
        (None, None, ["ab"], 'edits[0] must be an ("old", "new") pair, got str'),
    ],
)
def test_wrong_types_name_the_argument_and_the_type(
    old: Any, new: Any, edits: Any, expected: str
) -> None:
    with pytest.raises(ReplayError, match=re.escape(expected)):
        normalize_edits(old, new, edits)


def test_a_bare_pair_as_edits_gets_a_hint() -> None:
    with pytest.raises(ReplayError) as info:
        normalize_edits(None, None, ("old text", "new text"))
    assert str(info.value) == (
        'edits[0] must be an ("old", "new") pair, got str '
        '(one pair also goes in a list: edits=[("old", "new")]).'
    )


def test_empty_old_is_refused() -> None:
    with pytest.raises(ReplayError, match="old is empty"):
        normalize_edits("", "x", None)
    with pytest.raises(ReplayError, match=r"edits\[0\] old is empty"):
        normalize_edits(None, None, [("", "x")])


def test_empty_edits_list_is_refused() -> None:
    with pytest.raises(ReplayError, match="edits is empty"):
        normalize_edits(None, None, [])


def test_replay_error_is_a_ptc_retry_error() -> None:
    assert issubclass(ReplayError, PtcRetryError)


# --- apply_edits: success -----------------------------------------------------------------


def test_one_edit_replaces_its_only_match() -> None:
    result = apply_edits(PROGRAM, [("timeout=10", "timeout=30")])
    assert result == PROGRAM.replace("timeout=10", "timeout=30")


def test_edits_apply_in_order_each_on_the_previous_result() -> None:
    assert apply_edits("a = 1\n", [("a = 1", "b = 2"), ("b = 2", "c = 3")]) == "c = 3\n"


def test_replace_all_replaces_every_match() -> None:
    assert apply_edits("x x x", [("x", "y")], replace_all=True) == "y y y"


def test_replacement_text_is_literal() -> None:
    assert apply_edits("a.b", [(".", r"\1 $0 \n")]) == r"a\1 $0 \nb"


# --- apply_edits: several matches -----------------------------------------------------------


def test_several_matches_give_count_lines_and_advice() -> None:
    message = replay_error(PROGRAM, [("fetch(", "get(")])
    assert message == (
        "old occurs 3 times (lines 3, 10, 11): include more surrounding text so it occurs "
        "once, or pass replace_all=True."
    )


def test_several_matches_list_the_first_lines_only() -> None:
    code = "".join(f"x = {i}\n" for i in range(20))
    message = replay_error(code, [("x = ", "y = ")])
    assert "occurs 20 times (lines 1, 2, 3, 4, 5, ...)" in message


def test_several_matches_on_one_line_list_the_line_once() -> None:
    assert "occurs 3 times (lines 2)" in replay_error("a\nx x x\n", [("x", "y")])


def test_several_matches_name_the_edit_when_there_are_several() -> None:
    message = replay_error(PROGRAM, [("import time", "import time as t"), ("fetch(", "get(")])
    assert message.startswith("edits[1] old occurs 3 times")


# --- apply_edits: no match ----------------------------------------------------------------


def test_no_match_shows_old_and_the_nearest_lines() -> None:
    message = replay_error(PROGRAM, [("retries=5", "retries=7")])
    assert message == (
        "old not found in the program: 'retries=5'.\n"
        "Nearest lines:\n"
        "  line 3: def fetch(url, retries=3):\n"
        "  line 11: more = fetch('https://example.org/b', retries = 3)\n"
        "  line 4:     for attempt in range(retries):"
    )


def test_no_match_names_the_edit_when_there_are_several() -> None:
    message = replay_error(PROGRAM, [("import time", "import time as t"), ("sleep(2)", "")])
    assert message.startswith("edits[1] old not found in the program: 'sleep(2)'.")
    assert "  line 8:             time.sleep(1)" in message


def test_no_match_with_different_whitespace_says_so() -> None:
    message = replay_error(PROGRAM, [("fetch(url,retries=3)", "x")])
    assert message.endswith(
        "The text differs only in whitespace (at line 3): copy old exactly from there."
    )


def test_no_match_with_different_indentation_says_so() -> None:
    old = "for attempt in range(retries):\n    try:"
    message = replay_error(PROGRAM, [(old, "x")])
    assert "differs only in whitespace (at line 4)" in message


def test_no_match_with_different_quotes_says_so() -> None:
    message = replay_error(PROGRAM, [("fetch('https://example.org/a')", "x")])
    assert "differs only in quote style (at line 10)" in message


def test_no_match_with_different_quotes_and_whitespace_says_so() -> None:
    message = replay_error(PROGRAM, [('fetch("https://example.org/b", retries=3)', "x")])
    assert "differs only in whitespace and quote style (at line 11)" in message


def test_no_match_in_a_later_line_of_old_shows_that_lines_neighbours() -> None:
    old = "        try:\n            return get(url, timeout=20)\n"
    message = replay_error(PROGRAM, [(old, "x")])
    assert "Nearest lines to line 2 of old:\n  line 6:             return get(url, timeout=10)" in (
        message
    )


def test_no_match_without_any_similar_line_suggests_checking_the_target() -> None:
    message = replay_error(PROGRAM, [("import numpy as np", "x")])
    assert message == (
        "old not found in the program: 'import numpy as np'.\n"
        "No program line resembles it: check that the target is the right program."
    )


def test_no_match_after_an_earlier_edit_changed_the_text_says_so() -> None:
    message = replay_error(PROGRAM, [("timeout=10", "timeout=30"), ("timeout=10", "x")])
    assert "An earlier edit changed this text" in message


def test_long_old_is_abbreviated() -> None:
    old = "value = compute()\n" * 50
    message = replay_error(PROGRAM, [(old, "x")])
    first_line = message.splitlines()[0]
    assert first_line.endswith(f"... ({len(old)} chars).")
    assert len(first_line) < 120


def test_long_program_lines_are_clipped() -> None:
    code = "x = '" + "a" * 500 + "'\n"
    message = replay_error(code, [("x = 'b", "y")])
    shown = [line for line in message.splitlines() if line.startswith("  line 1: ")]
    assert shown and shown[0].endswith("...") and len(shown[0]) < 140


def test_no_match_in_a_one_megabyte_program_is_fast() -> None:
    code = "".join(f"result_{i} = compute(item_{i}, limit={i % 7})\n" for i in range(25_000))
    assert len(code) > 1_000_000
    started = time.perf_counter()
    message = replay_error(code, [("result_777 = compute(item_777, limit=9)", "x")])
    assert time.perf_counter() - started < 5  # about 0.1 s on a laptop
    assert "\n  line 778: result_777 = compute(item_777, limit=0)\n" in message


# --- properties -----------------------------------------------------------------------------

text = st.text(alphabet=st.characters(codec="utf-8"), max_size=60)
nonempty = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=12)


@given(prefix=text, old=nonempty, suffix=text, new=text)
def test_a_unique_old_is_replaced_exactly(prefix: str, old: str, suffix: str, new: str) -> None:
    code = prefix + old + suffix
    assume(code.count(old) == 1)
    assert apply_edits(code, [(old, new)]) == prefix + new + suffix


@given(prefix=text, old=nonempty, suffix=text, new=text)
def test_one_match_is_str_replace_once(prefix: str, old: str, suffix: str, new: str) -> None:
    code = prefix + old + suffix
    assume(code.count(old) == 1)
    assert apply_edits(code, [(old, new)]) == code.replace(old, new, 1)


@given(prefix=text, old=nonempty, suffix=text, new=text)
def test_replace_all_is_str_replace(prefix: str, old: str, suffix: str, new: str) -> None:
    code = prefix + old + suffix
    assert apply_edits(code, [(old, new)], replace_all=True) == code.replace(old, new)


@given(prefix=text, old=nonempty, suffix=text, new=text)
def test_several_matches_raise_unless_replace_all(
    prefix: str, old: str, suffix: str, new: str
) -> None:
    code = prefix + old + suffix + old
    with pytest.raises(ReplayError, match=f"old occurs {code.count(old)} times"):
        apply_edits(code, [(old, new)])


@given(
    code=text,
    edits=st.lists(st.tuples(text, text), max_size=3),
    replace_all=st.booleans(),
)
def test_apply_edits_raises_only_replay_error(
    code: str, edits: list[tuple[str, str]], replace_all: bool
) -> None:
    try:
        apply_edits(code, edits, replace_all=replace_all)
    except ReplayError as error:
        assert str(error)


anything = st.one_of(
    st.none(),
    st.integers(),
    text,
    st.binary(max_size=5),
    st.lists(st.one_of(st.none(), text, st.integers()), max_size=3),
    st.tuples(text, text),
    st.dictionaries(text, text, max_size=2),
)


@given(old=anything, new=anything, edits=st.one_of(anything, st.lists(anything, max_size=3)))
def test_normalize_edits_raises_only_replay_error(old: Any, new: Any, edits: Any) -> None:
    try:
        pairs = normalize_edits(old, new, edits)
    except ReplayError as error:
        assert str(error)
    else:
        assert pairs and all(isinstance(o, str) and o and isinstance(n, str) for o, n in pairs)
