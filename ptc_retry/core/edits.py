"""The literal replacement step of a replay: ``old`` -> ``new`` in the program text.

Plain Python: this module knows nothing of IPython or Jupyter.

Each edit is a pair of exact strings. An ``old`` must occur exactly once in the
program (or at least once with ``replace_all=True``); anything else raises
:class:`~ptc_retry.core.errors.ReplayError` with a short message an LLM can act on:
how many matches there were and where, or, when there is none, the program lines
closest to ``old`` and whether the text is there with different whitespace or quotes.
"""

from __future__ import annotations

import bisect
import difflib
import heapq
from collections.abc import Iterable, Mapping, Sequence

from .errors import ReplayError

__all__ = ["apply_edits", "normalize_edits"]

_USAGE = 'replay(id, "old", "new") or replay(id, edits=[("old", "new"), ...])'

# Lines shown with a "no match" error, and the least similarity worth showing.
_NEAREST_LINES = 3
_MIN_RATIO = 0.6
# Bounds on the similarity work: lines scored in full, characters of a line or probe compared.
_CANDIDATES = 40
_PROBE_CHARS = 200
_LINE_CHARS = 1000
# How much of a program line or of ``old`` a message shows, and how many match positions.
_SHOW_LINE_CHARS = 120
_SHOW_OLD_CHARS = 80
_SHOW_POSITIONS = 5


def normalize_edits(
    old: str | None, new: str | None, edits: Iterable[Sequence[str]] | None
) -> list[tuple[str, str]]:
    """Return the edits of a replay call as a list of ``(old, new)`` pairs.

    Exactly one form must be used: the pair ``old, new`` or ``edits``, a non-empty
    list of 2-item ``(old, new)`` tuples or lists. Every ``old`` and ``new`` must be a
    ``str`` and every ``old`` non-empty; otherwise :class:`ReplayError` says what to pass.
    """
    pair_given = old is not None or new is not None
    if pair_given and edits is not None:
        raise ReplayError(f"Pass old and new, or edits, not both: {_USAGE}.")
    if not pair_given and edits is None:
        raise ReplayError(f"Nothing to replace: {_USAGE}.")
    if pair_given:
        if old is None or new is None:
            missing = "new" if new is None else "old"
            raise ReplayError(f"{missing} is missing: {_USAGE}.")
        return [_checked_pair(old, new, "")]
    if isinstance(edits, (str, bytes, bytearray, Mapping)) or not isinstance(edits, Iterable):
        raise ReplayError(
            f"edits must be a list of (old, new) pairs, got {type(edits).__name__}: {_USAGE}."
        )
    pairs: list[tuple[str, str]] = []
    for index, item in enumerate(edits):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            got = type(item).__name__
            if isinstance(item, (tuple, list)):
                got += f" of length {len(item)}"
            hint = ' (one pair also goes in a list: edits=[("old", "new")])' if got == "str" else ""
            raise ReplayError(f'edits[{index}] must be an ("old", "new") pair, got {got}{hint}.')
        pairs.append(_checked_pair(item[0], item[1], f"edits[{index}] "))
    if not pairs:
        raise ReplayError('edits is empty: pass at least one ("old", "new") pair.')
    return pairs


def apply_edits(code: str, edits: Sequence[tuple[str, str]], *, replace_all: bool = False) -> str:
    """Apply ``edits`` to ``code`` in order, each to the result of the previous one.

    Each ``old`` must occur exactly once (at least once with ``replace_all=True``,
    which then replaces every occurrence). Otherwise :class:`ReplayError` is raised
    and ``code`` is left as it was (strings are immutable: nothing is half-applied).
    """
    several = len(edits) > 1
    result = code
    for index, (old, new) in enumerate(edits):
        label = f"edits[{index}] " if several else ""
        _checked_pair(old, new, label)
        count = result.count(old)
        if count == 0:
            raise ReplayError(
                _no_match_message(
                    result, old, label, changed_by_earlier=(index > 0 and old in code)
                )
            )
        if count > 1 and not replace_all:
            raise ReplayError(_many_matches_message(result, old, label, count))
        result = result.replace(old, new) if replace_all else result.replace(old, new, 1)
    return result


def _checked_pair(old: object, new: object, label: str) -> tuple[str, str]:
    """Return ``(old, new)`` if both are strings and ``old`` is not empty, else raise."""
    for name, value in (("old", old), ("new", new)):
        if not isinstance(value, str):
            raise ReplayError(f"{label}{name} must be a str, got {type(value).__name__}.")
    if not old:
        raise ReplayError(f"{label}old is empty: pass the exact text to replace.")
    return old, new  # type: ignore[return-value]


def _many_matches_message(code: str, old: str, label: str, count: int) -> str:
    lines: list[str] = []
    line, last, pos = 1, 0, code.find(old)
    while pos >= 0 and len(lines) <= _SHOW_POSITIONS:
        line += code.count("\n", last, pos)
        if not lines or lines[-1] != str(line):
            lines.append(str(line))
        last, pos = pos, code.find(old, pos + len(old))
    more = ", ..." if pos >= 0 or len(lines) > _SHOW_POSITIONS else ""
    lines = lines[:_SHOW_POSITIONS]
    return (
        f"{label}old occurs {count} times (lines {', '.join(lines)}{more}): include more "
        "surrounding text so it occurs once, or pass replace_all=True."
    )


def _no_match_message(code: str, old: str, label: str, *, changed_by_earlier: bool) -> str:
    parts = [f"{label}old not found in the program: {_show(old)}."]
    if changed_by_earlier:
        parts.append(
            "An earlier edit changed this text (edits apply in order, each to the result of "
            "the previous one): write old as it reads after those edits."
        )
    probe_index, probe = _probe_line(code, old)
    nearest = _nearest_lines(code, probe)
    if nearest:
        of_line = f" to line {probe_index + 1} of old" if probe_index else ""
        parts.append(f"Nearest lines{of_line}:")
        parts.extend(f"  line {number}: {_clip(text)}" for number, text in nearest)
    elif not changed_by_earlier:
        parts.append("No program line resembles it: check that the target is the right program.")
    loose = _loose_match(code, old)
    if loose is not None:
        lineno, what = loose
        parts.append(
            f"The text differs only in {what} (at line {lineno}): copy old exactly from there."
        )
    return "\n".join(parts)


def _probe_line(code: str, old: str) -> tuple[int, str]:
    """The line of ``old`` to find neighbours for: (its 0-based index in old, stripped text).

    Several lines: the first non-blank one that the program does not contain is where
    ``old`` goes wrong, so its neighbours are the useful ones; when every line is
    there (only the joins differ), the first non-blank line. Blank ``old``: ``(0, "")``.
    """
    lines = [(i, text.strip()) for i, text in enumerate(old.split("\n")) if text.strip()]
    if not lines:
        return 0, ""
    missing = next((line for line in lines if line[1] not in code), lines[0])
    # Index 0 means "old's first non-blank line": no need to say which line it is.
    return (0 if missing is lines[0] else missing[0]), missing[1]


def _nearest_lines(code: str, probe: str) -> list[tuple[int, str]]:
    """The program lines most similar to ``probe``, best first, as ``(line number, line)``.

    ``probe`` is often a fragment of a line, so a line scores the better of its
    difflib ratio to ``probe`` and the best ratio of a ``probe``-sized window of it.
    That is costly, so only the ``_CANDIDATES`` distinct lines sharing the most
    character pairs with ``probe`` are scored: a 1 MB program takes a fraction of
    a second.
    """
    probe = probe[:_PROBE_CHARS]
    if not probe:
        return []
    wanted = _pairs(probe)
    first_seen: dict[str, tuple[int, str]] = {}
    for lineno, line in enumerate(code.split("\n"), 1):
        text = line.strip()
        if text and text not in first_seen:
            first_seen[text] = (lineno, line.rstrip())
    candidates = heapq.nlargest(
        _CANDIDATES, first_seen, key=lambda text: len(wanted & _pairs(text[:_LINE_CHARS]))
    )
    scored = []
    for text in candidates:
        score = _similarity(probe, text[:_LINE_CHARS])
        if score >= _MIN_RATIO:
            lineno, line = first_seen[text]
            scored.append((-score, lineno, line))
    return [(lineno, line) for _, lineno, line in sorted(scored)[:_NEAREST_LINES]]


def _pairs(text: str) -> set[str]:
    """The set of adjacent character pairs of ``text`` (the text itself if shorter)."""
    return {text[i : i + 2] for i in range(len(text) - 1)} or {text}


def _similarity(probe: str, line: str) -> float:
    """difflib ratio of ``probe`` to ``line`` or to the best ``probe``-sized window of it."""
    matcher = difflib.SequenceMatcher(None, probe, line, autojunk=False)
    best = matcher.ratio()
    window = difflib.SequenceMatcher(None, autojunk=False)
    window.set_seq2(probe)
    for probe_at, line_at, size in matcher.get_matching_blocks():
        if size:
            start = max(0, line_at - probe_at)
            window.set_seq1(line[start : start + len(probe)])
            best = max(best, window.ratio())
    return best


def _loose_match(code: str, old: str) -> tuple[int, str] | None:
    """Where ``old`` would occur if whitespace, quote style, or both were ignored.

    Returns ``(line number, what differs)``, or None.
    """
    pos = _one_quote(code).find(_one_quote(old))
    if pos >= 0:
        return code.count("\n", 0, pos) + 1, "quote style"
    needle = "".join(old.split())
    if not needle:
        return None
    squeezed_lines = ["".join(line.split()) for line in code.split("\n")]
    starts, offset = [], 0
    for text in squeezed_lines:
        starts.append(offset)
        offset += len(text)
    haystack = "".join(squeezed_lines)
    for what, transform in (("whitespace", _same), ("whitespace and quote style", _one_quote)):
        pos = transform(haystack).find(transform(needle))
        if pos >= 0:
            # The last line starting at or before pos holds the match's first character.
            return bisect.bisect_right(starts, pos), what
    return None


def _same(text: str) -> str:
    return text


def _one_quote(text: str) -> str:
    return text.replace("'", '"')


def _show(text: str) -> str:
    """``repr`` of ``text``, abbreviated when long (the caller knows the full text)."""
    if len(text) <= _SHOW_OLD_CHARS:
        return repr(text)
    return f"{text[: _SHOW_OLD_CHARS - 20]!r}... ({len(text)} chars)"


def _clip(line: str) -> str:
    return line if len(line) <= _SHOW_LINE_CHARS else line[:_SHOW_LINE_CHARS] + "..."
