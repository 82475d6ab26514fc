"""Every sentence the model reads has one home, ``core/sentences.py``: each fits its token
budget with the ids real models send, and no other module writes a notice by hand."""

from __future__ import annotations

import ast
import contextlib
import json
import re
import string
from collections.abc import Callable
from pathlib import Path

import pytest

from ptc_retry.core.sentences import PREFIX, SENTENCES, Sentence

from .helpers import model_call_id

PACKAGE = Path(__file__).resolve().parent.parent / "ptc_retry"


#: The shapes of the tool-call ids that models send.
ID_SHAPES = {
    "openai": model_call_id("call_", 24, 24),
    "anthropic": model_call_id("toolu_01", 22, 22),
}
#: Sentences that end a traceback: a notebook must not break them mid-word.
NOTICE_LINES = ["NOTICE_FAILED", "NOTICE_INTERRUPTED", "NOTICE_TIME_LIMIT", "CUT_AFTER_CODE"]
GUARD_LINES = ["GUARD_REPEATED", "GUARD_PAUSED"]


def rendered(sentence: Sentence, call_id: str) -> str:
    """``sentence`` with its example values, ``call_id`` in each id field, ``#1234`` as the
    reference (the kernel names every saved program ``#n``)."""
    fields: dict[str, object] = dict(sentence.example)
    for name in sentence.fields:
        if name == "reference":
            fields[name] = "#1234"
        elif name == "call_id" or name.endswith("_id"):
            fields[name] = call_id
    return sentence.render(**fields)


@pytest.mark.parametrize("shape", ID_SHAPES)
@pytest.mark.parametrize("name", SENTENCES)
def test_every_sentence_fits_its_budget_with_real_call_ids(
    count_tokens: Callable[[str], int], name: str, shape: str
) -> None:
    sentence = SENTENCES[name]
    text = rendered(sentence, ID_SHAPES[shape])
    assert count_tokens(text) <= sentence.budget, f"{name}: {count_tokens(text)} tokens: {text}"


@pytest.mark.parametrize("name", SENTENCES)
def test_every_example_fills_the_fields_its_template_has(name: str) -> None:
    sentence = SENTENCES[name]
    ids = {
        field
        for field in sentence.fields
        if field in ("reference", "call_id") or field.endswith("_id")
    }
    assert set(sentence.example) == sentence.fields - ids
    assert "\x1b" not in sentence.text


@pytest.mark.parametrize("name", NOTICE_LINES + GUARD_LINES)
def test_each_notice_line_fits_in_120_characters(name: str) -> None:
    text = rendered(SENTENCES[name], ID_SHAPES["openai"])
    lines = (text if text.startswith(PREFIX) else PREFIX + text).split("\n")
    assert all(len(line) <= 120 for line in lines), lines


@pytest.mark.parametrize("name", NOTICE_LINES)
def test_the_call_a_notice_offers_is_a_line_of_its_own(name: str) -> None:
    # A notebook breaks a long line at any character: alone, the call fits and stays whole.
    said, call = rendered(SENTENCES[name], ID_SHAPES["openai"]).split("\n")
    assert said.startswith(PREFIX) and "await" not in said
    assert call.startswith("await ptc_retry.") and call.endswith(")") and len(call) <= 70


@pytest.mark.parametrize("name", SENTENCES)
def test_a_sentence_s_opening_is_what_each_rendering_starts_with(name: str) -> None:
    sentence = SENTENCES[name]
    assert rendered(sentence, ID_SHAPES["openai"]).startswith(sentence.opening)


def test_the_json_conversion_quotes_a_reference_as_a_string_literal() -> None:
    sentence = Sentence("await ptc_retry.resume({reference!j})", 15)
    assert sentence.render(reference='a"b') == 'await ptc_retry.resume("a\\"b")'
    assert sentence.fields == {"reference"}


#: The words of a sentence the model reads: the notice prefix, and those of a tool result
#: that ran nothing, which starts with ``Error: ``; on the rooms a program's output comes
#: from, also what the kernel says on stderr, which starts with ``ptc-retry: ``.
HAND_WRITTEN = (PREFIX.strip(), "Nothing ran", "Nothing was saved or run")
REFUSAL_START = "Error: "
STDERR_START, STDERR_ROOMS = "ptc-retry: ", ("kernel", "backend", "native")


def _hand_written(path: Path) -> list[int]:
    """The lines of ``path`` with a string constant (an f-string's literal parts too) that
    writes one of ``HAND_WRITTEN`` itself (or, in ``STDERR_ROOMS``, starts a stderr line)."""
    tree = ast.parse(path.read_text("utf-8"))
    starts = (REFUSAL_START, STDERR_START) if path.parent.name in STDERR_ROOMS else REFUSAL_START
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and (node.value.startswith(starts) or any(marker in node.value for marker in HAND_WRITTEN))
    ]


def test_no_module_but_the_sentences_writes_a_notice_or_a_refusal_by_hand() -> None:
    found = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "sentences.py" and (lines := _hand_written(path))
    }
    assert found == {}


# -- the docs and the notebooks quote the sentences as they render ----------------------------

ROOT = PACKAGE.parent
QUOTED_IN = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "notebooks").glob("*.ipynb")),
]
#: What a quoted sentence starts with: the notice prefix anywhere, the stderr prefix only at
#: the start of a line or a code span (elsewhere it is prose: "with or without ptc-retry:").
ANYWHERE, AT_START = PREFIX, "ptc-retry: "
ELIDED = "..."


def _parts(sentence: Sentence, *, prefixed: bool) -> list[str | None]:
    """The template as literal texts and fields (None), the notice prefix first when
    ``prefixed`` and the template has none of its own."""
    parts: list[str | None] = [PREFIX] if prefixed and not sentence.text.startswith(PREFIX) else []
    for literal, name, _, _ in string.Formatter().parse(sentence.text):
        parts.append(literal.replace("{{", "{").replace("}}", "}"))
        if name is not None:
            parts.append(None)
    return parts


def _regex(parts: list[str | None]) -> str:
    return "".join("(.*?)" if part is None else re.escape(part) for part in parts)


def _matches(parts: list[str | None], quote: str) -> bool:
    """Whether ``quote`` is a rendering of ``parts``, or, ending in ``...``, the start of one."""
    if not quote.endswith(ELIDED):
        return re.fullmatch(_regex(parts), quote, re.S) is not None
    start = quote[: -len(ELIDED)].rstrip()
    for i, part in enumerate(parts):
        cuts = [part[:j] for j in range(len(part) + 1)] if part is not None else []
        for cut in cuts:
            if re.fullmatch(_regex(parts[:i]) + re.escape(cut), start, re.S):
                return True
        if part is None and re.fullmatch(_regex(parts[: i + 1]), start, re.S):
            return True
    return False


def _quote_from(text: str, index: int) -> str:
    """The sentence that starts at ``index``: to the end of the line (and the next line, when
    it is the call a notice offers), or, inside a JSON string, to the end of that string,
    decoded."""
    if index and text[index - 1] == '"':
        with contextlib.suppress(ValueError):
            return str(json.JSONDecoder().raw_decode(text, index - 1)[0])
    line, _, after = text[index:].partition("\n")
    line = line.rstrip()
    call = after.split("\n", 1)[0].strip()
    if line.startswith(PREFIX) and call.startswith("await ptc_retry."):
        return f"{line}\n{call}"  # a notice's call, on the line after its sentence
    inside = re.match(r'(?:[^"\\]|\\.)*(?=")', line)  # the rest of an enclosing JSON string
    if '\\"' in line and inside is not None:
        with contextlib.suppress(ValueError):
            return str(json.loads(f'"{inside.group()}"'))
    return line


def _quotes_in_text(text: str) -> list[str]:
    """Every quoted sentence in ``text``: in code spans (which may wrap), then in the lines
    around them."""
    quotes = []
    spans = re.compile(r"(?<!`)`([^`]+)`(?!`)")
    for match in spans.finditer(text):
        span = " ".join(match.group(1).split())
        if ANYWHERE in span or span.startswith(AT_START):
            found = span.find(ANYWHERE) if ANYWHERE in span else 0
            quotes.append(_quote_from(span, found))
    rest = spans.sub(" ", text)
    lines = rest.splitlines()
    for i, line in enumerate(lines):
        both = "\n".join(lines[i : i + 2])  # the line and the next, where a notice's call is
        if ANYWHERE in line:
            quotes.append(_quote_from(both, line.index(ANYWHERE)))
        elif line.lstrip().startswith(AT_START):
            quotes.append(_quote_from(both, line.index(AT_START)))
    return quotes


def _texts(path: Path) -> list[str]:
    """The texts of a doc, or of a notebook's markdown cells and outputs (ANSI codes off)."""
    if path.suffix != ".ipynb":
        return [path.read_text("utf-8")]
    texts = []
    for cell in json.loads(path.read_text("utf-8"))["cells"]:
        if cell["cell_type"] == "markdown":
            texts.append("".join(cell["source"]))
        for output in cell.get("outputs", []):
            texts.append("".join(output.get("text", "")))
            texts.append("\n".join(output.get("traceback", [])))
            texts.append("".join(output.get("data", {}).get("text/plain", "")))
    return [re.sub(r"\x1b\[[0-9;]*m", "", text) for text in texts]


QUOTES = [
    (path.relative_to(ROOT).as_posix(), quote)
    for path in QUOTED_IN
    for text in _texts(path)
    for quote in _quotes_in_text(text)
]


def test_the_docs_and_notebooks_quote_sentences() -> None:
    assert len(QUOTES) >= 20 and any(where.endswith(".ipynb") for where, _ in QUOTES)


@pytest.mark.parametrize(("where", "quote"), QUOTES, ids=[f"{w}:{q[:40]}" for w, q in QUOTES])
def test_every_quoted_sentence_is_one_as_its_template_renders_it(where: str, quote: str) -> None:
    # A notice's line is PREFIX and a sentence; a sentence may also be quoted without it.
    prefixed = quote.startswith(PREFIX)
    candidates = [_parts(sentence, prefixed=prefixed) for sentence in SENTENCES.values()]
    # The evaluation's report writes a notice's lines in one table cell, " / " between them.
    quotes = {quote, quote.replace(" / await ptc_retry.", "\nawait ptc_retry.")}
    assert any(_matches(parts, q) for parts in candidates for q in quotes), f"{where}: {quote}"


def test_a_quote_that_differs_from_every_template_is_caught() -> None:
    notice = _parts(SENTENCES["NOTICE_FAILED"], prefixed=True)
    good = (
        PREFIX
        + 'Saved as #4. Small fix? Send only:\nawait ptc_retry.replay("#4", "<old>", "<new>")'
    )
    assert _matches(notice, good) and _matches(notice, "[ptc-retry] Saved as #4. ...")
    assert not _matches(notice, good.replace("Send only", "Send"))
    assert not _matches(notice, "[ptc-retry] Saved at #4. ...")


#: Sentences quoted whole, several lines long: found by how they begin.
LONG = ["CODE_PROMPT", "NATIVE_PROMPT", "RUN_CODE_DESCRIPTION", "NATIVE_RUN_CODE_DESCRIPTION"]


def _long_quotes(name: str) -> list[tuple[str, str]]:
    """``(where, text from there on)`` for each place a doc or a notebook quotes ``name``."""
    head = SENTENCES[name].text.split("{", 1)[0][:40]
    found = []
    for path in QUOTED_IN:
        for text in _texts(path):
            for match in re.finditer(re.escape(head), text):
                rest = text[match.start() :]
                if match.start() and text[match.start() - 1] == '"':  # inside a JSON string
                    with contextlib.suppress(ValueError):
                        rest = str(json.JSONDecoder().raw_decode(text, match.start() - 1)[0])
                found.append((path.relative_to(ROOT).as_posix(), rest))
    return found


@pytest.mark.parametrize("name", LONG)
def test_the_notebooks_show_each_prompt_section_and_description_as_it_renders(name: str) -> None:
    # The two run_code descriptions begin alike: a quote may be either.
    head = SENTENCES[name].text[:40]
    alike = [_regex(_parts(s, prefixed=False)) for s in SENTENCES.values() if s.text[:40] == head]
    for where, rest in _long_quotes(name):
        assert any(re.match(regex, rest, re.S) for regex in alike), f"{where}: {rest[:300]}"
