"""Tool calls cut off mid-stream: the start of the program saved, the rest sent with
``await ptc_retry.extend("#n", "<rest>")``.

Reading a cut arguments string and the notice are pure; the calls run on real kernels,
locally, and one whole path (cut, extended, failed, replayed) behind a real Jupyter Kernel
Gateway too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.backend import KernelBackend
from ptc_retry.backend.code_mode import CUT_OFF_CELL
from ptc_retry.core.notice import (
    cut_after_arguments,
    parse_notice,
    partial_notice,
)
from ptc_retry.core.partial import CutPlace, cut_arguments, string_prefix
from ptc_retry.core.sentences import CUT_BEFORE_CODE, CUT_NOT_KEPT
from ptc_retry.tokens import load_tokenizer

from .gateway_server import KERNEL_GATEWAY
from .helpers import OnLoop, line_of, raw

#: Each backend test runs on a local kernel: the backend reads a cut before any transport,
#: and what it sends then is a program like any other (through a gateway, these tests ran
#: no line that the gateway's own tests do not: coverage.py, measured). One whole path runs
#: behind a real Kernel Gateway too.
TRANSPORTS = ["local"]

# About 5 KB, with string literals, quotes, an accent (\u00e9 in ASCII JSON) and comments.
LINES = ["data = {}"]
LINES += [f"data['k{i}'] = 'valeur é \"{i}\"' * 2  # note {i}" for i in range(110)]
LINES += ["print(len(data), sum(len(v) for v in data.values()))"]
PROGRAM = "\n".join(LINES) + "\n"
ARGUMENTS = json.dumps({"code": PROGRAM})  # ASCII: é is the escape \u00e9


def _after(text: str, marker: str, extra: int = 0) -> int:
    return text.index(marker) + len(marker) + extra


#: Where a stream may stop, as offsets into ARGUMENTS.
CUTS = {
    "mid-line": _after(ARGUMENTS, "# note 40", -2),
    "mid-string-literal": _after(ARGUMENTS, "data['k70'] = 'val"),
    "mid-escape": _after(ARGUMENTS, "data['k90'] = 'valeur \\u00"),
    "mid-quote-escape": _after(ARGUMENTS, "data['k95'] = 'valeur \\u00e9 \\"),
    "after-the-opening-quote": len('{"code": "'),
    "after-a-line-break": _after(ARGUMENTS, "# note 100\\n"),
}


# -- reading what arrived ---------------------------------------------------------------------


@pytest.mark.parametrize("text", [ARGUMENTS, json.dumps({"code": PROGRAM}, ensure_ascii=False)])
def test_every_cut_decodes_to_a_start_of_the_program(text: str) -> None:
    starts = 0
    for end in range(len(text) + 1):
        found = cut_arguments(text[:end]).string("code")
        if found is None:
            assert end < len('{"code": "')
            continue
        start, whole = found
        assert PROGRAM.startswith(start)
        assert whole == (end >= len(text) - 1)  # its closing quote arrived
        assert start == PROGRAM or not whole
        starts += 1
    assert starts == len(text) - len('{"code": "') + 1


def test_a_cut_escape_or_surrogate_half_is_left_out() -> None:
    assert string_prefix("caf\\u00") == "caf"
    assert string_prefix("say \\") == "say "
    assert string_prefix("a \\\\") == "a \\"  # an escaped backslash is whole
    assert string_prefix("smile \\ud83d") == "smile "  # its low half may still come
    assert string_prefix("smile \\ud83d\\ude00") == "smile \U0001f600"


def test_keys_before_and_after_the_program() -> None:
    text = json.dumps({"timeout": 30, "code": "print(1)\n", "note": "x"})
    assert cut_arguments(text[: text.index("print")]).string("code") == ("", False)
    whole = cut_arguments(text[: text.index('"note"') + 3])
    assert whole.string("code") == ("print(1)\n", True)
    assert whole.values == {"timeout": 30, "code": "print(1)\n"}
    assert cut_arguments('{"co').string("code") is None
    assert cut_arguments("").string("code") is None
    assert cut_arguments('{"code": 12').string("code") is None
    with pytest.raises(ValueError, match="JSON object"):
        cut_arguments('["code"')


def test_the_notice_quotes_where_the_program_stops_and_stays_short() -> None:
    tokenizer = load_tokenizer()
    for held, where in [
        ("x = 1\ny = [1, 2", "in line 2; saved as #4, ending 'y = [1, 2'."),
        ("x = 1\nprint(x)\n", "after line 2; saved as #4, ending 'print(x)\\n'."),
        ("", "before its first line; saved as #4."),
    ]:
        notice = partial_notice("#4", held)
        assert notice.startswith(f"[ptc-retry] Cut off {where} Send only what follows:\n")
        assert notice.endswith('await ptc_retry.extend("#4", "<rest>")')
        assert parse_notice(notice) == "#4"
        tail = notice.partition(", ending ")[2].partition(". Send")[0]
        if tokenizer.available:
            assert tokenizer.count(notice) - tokenizer.count(tail) <= 40
    long_line = partial_notice("#4", "x = '" + "ab" * 200)
    assert ", ending ...'" + "ab" * 50 + "'. Send" in long_line  # the line's last 100


# -- on real kernels --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def expected(backend: KernelBackend, on_loop: OnLoop[Any]) -> str:
    """What the program prints when it arrives whole."""
    text = on_loop(backend.handle_tool_call("run_code", ARGUMENTS, "call_whole"))
    assert text.startswith("110 "), text
    return text


def _extend_line(reference: str, rest: str) -> str:
    return raw(f"await ptc_retry.extend({reference!r}, {rest!r})")


@pytest.mark.parametrize("cut", sorted(CUTS))
def test_a_cut_call_goes_on_from_where_it_stopped(
    backend: KernelBackend, expected: str, on_loop: OnLoop[Any], cut: str
) -> None:
    arrived = ARGUMENTS[: CUTS[cut]]
    text = on_loop(backend.handle_partial_tool_call("run_code", arrived, f"call_{cut}"))

    result = backend.last_result
    assert result is not None and result.status == "partial"
    assert text == result.notice and text.startswith("[ptc-retry] Cut off ")
    assert result.reference is not None and f"extend({result.reference!r}"[:-1] in text.replace(
        '"', "'"
    )
    held, whole = cut_arguments(arrived).string("code") or ("", True)
    assert not whole
    rest = PROGRAM[len(held) :]
    extended = on_loop(
        backend.handle_tool_call("run_code", _extend_line(result.reference, rest), f"x_{cut}")
    )
    assert extended == expected
    if backend.gateway_url is None:  # the files are on this machine
        by_id = Path(str(result.checkpoint)).parent
        assert (by_id / f"call_{cut}.partial").read_bytes() == arrived.encode()
        assert json.loads((by_id / f"call_{cut}.json").read_text()) == {"code": held}
        history = [json.loads(line) for line in (by_id.parent / "history.jsonl").open()]
        lines = {line["id"]: line for line in history}
        assert lines[f"call_{cut}"]["status"] == "partial"
        assert lines[f"x_{cut}"]["extend_of"] == f"call_{cut}"
        assert json.loads((by_id / f"x_{cut}.json").read_text()) == {"code": PROGRAM}


def test_a_cut_in_a_later_key_that_never_finished_its_name_names_nothing(
    backend: KernelBackend, expected: str, on_loop: OnLoop[Any]
) -> None:
    arguments = json.dumps({"code": PROGRAM, "timeout": 30})
    arrived = arguments[: arguments.index('"timeout"') + 4]  # inside a later key's name
    text = on_loop(backend.handle_partial_tool_call("run_code", arrived, "call_later_key"))
    assert text == f"{cut_after_arguments('run_code', ['code'])}\n{expected}"
    assert text.startswith(
        '[ptc-retry] Cut off after "code" arrived whole; run_code takes nothing else, so the '
        "call ran.\n"
    )
    result = backend.last_result
    assert result is not None and (result.status, result.call_id) == ("ok", "call_later_key")


#: A short program, then keys run_code does not take, of every JSON kind.
SHORT = "numbers = [3, 4, 5]\nprint(sum(numbers), 'é')\n"
LATER = {
    "code": SHORT,
    "description": 'Sum «three» "numbers"',
    "tags": ["math", "demo"],
    "options": {"retries": 2, "label": "x"},
    "timeout": 30,
}
#: The same arguments as models write them: ASCII with escapes, compact UTF-8, indented.
ENCODINGS = {
    "escaped": json.dumps(LATER),
    "compact-utf-8": json.dumps(LATER, ensure_ascii=False, separators=(",", ":")),
    "indented": json.dumps(LATER, indent=2),
}


def _after_the_program(text: str) -> int:
    """The offset just after the closing quote of ``"code"`` in ``text``."""
    program = json.dumps(SHORT, ensure_ascii="é" not in text)
    return text.index(program) + len(program)


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_every_cut_after_the_program_ended_holds_it_whole(encoding: str) -> None:
    text = ENCODINGS[encoding]
    places = set()
    for end in range(_after_the_program(text), len(text) + 1):
        cut = cut_arguments(text[:end])
        assert cut.string("code") == (SHORT, True), end
        # Only values that arrived whole are kept: never a number that could go on.
        assert all(LATER[key] == value for key, value in cut.values.items()), end
        assert cut.cut_key is None or cut.cut_key in LATER
        places.add(cut.place)
    assert places == set(CutPlace) - {CutPlace.NOTHING}


def test_a_number_at_the_end_of_what_arrived_counts_as_cut() -> None:
    assert cut_arguments('{"code": "x", "n": 12').values == {"code": "x"}
    assert cut_arguments('{"code": "x", "n": 12').cut_key == "n"
    assert cut_arguments('{"code": "x", "n": 12 ').values == {"code": "x", "n": 12}
    assert cut_arguments('{"code": "x", "ok": true').values == {"code": "x", "ok": True}
    deep = cut_arguments('{"code": "x", "n": ' + "[" * 100_000)  # deeper than Python decodes
    assert (deep.values, deep.place, deep.cut_key) == ({"code": "x"}, CutPlace.VALUE, "n")
    assert cut_arguments("{" + "[" * 100_000).place is CutPlace.KEY  # no key is an array


def test_a_key_given_twice_takes_its_last_value() -> None:
    assert cut_arguments('{"code": "a", "code": "b"').string("code") == ("b", True)
    assert cut_arguments('{"code": "a", "code": "b').string("code") == ("b", False)
    assert cut_arguments('{"code": "a", "code": 5').string("code") is None
    assert cut_arguments('{"code": "a", "code"').values == {}


def test_a_kernel_asked_to_run_nothing_of_a_whole_program_says_how_to_run_it(
    backend: KernelBackend, short_expected: str, on_loop: OnLoop[Any]
) -> None:
    arrived = json.dumps({"code": SHORT, "note": "x"})[:-5]
    result = on_loop(
        backend.run_code(CUT_OFF_CELL, arguments=arrived, partial=True, call_id="c_k1")
    )

    assert result.status == "partial" and result.reference is not None
    assert result.notice == (
        f'[ptc-retry] Cut off after "code" arrived whole; saved as {result.reference}, not run. '
        f'To run it:\nawait ptc_retry.extend("{result.reference}", "")'
    )
    assert parse_notice(result.notice) == result.reference
    tokenizer = load_tokenizer()
    if tokenizer.available:
        assert tokenizer.count(partial_notice("#12", SHORT, whole=True)) <= 40
    line = result.notice.partition("To run it:\n")[2]
    assert on_loop(backend.handle_tool_call("run_code", raw(line))) == short_expected


@pytest.fixture(scope="module")
def short_expected(backend: KernelBackend, on_loop: OnLoop[Any]) -> str:
    text = on_loop(backend.handle_tool_call("run_code", raw(SHORT), "call_short_whole"))
    assert text.rstrip() == "12 é"
    return text


def _cut_line(arrived: str) -> str:
    cut = cut_arguments(arrived)
    ignored = [key for key in cut.values if key != "code"]
    return cut_after_arguments("run_code", ["code"], ignored, cut.cut_key)


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_every_cut_after_the_program_ended_runs_it_as_the_whole_call(
    backend: KernelBackend, short_expected: str, on_loop: OnLoop[Any], encoding: str
) -> None:
    if backend.gateway_url is not None and encoding != "compact-utf-8":
        pytest.skip("the backend reads the cut before any transport: one encoding is enough")
    whole = ENCODINGS[encoding].encode("utf-8")
    start = _after_the_program(ENCODINGS[encoding])
    start = len(ENCODINGS[encoding][:start].encode("utf-8"))
    for end in range(start, len(whole)):  # every byte, so also inside « and »
        arrived = whole[:end]
        call_id = f"call_after_{encoding}_{end}"
        text = on_loop(backend.handle_partial_tool_call("run_code", arrived, call_id))
        shown = arrived.decode("utf-8", errors="ignore")
        assert text == f"{_cut_line(shown)}\n{short_expected}", (end, text)
        assert "Send only what follows" not in text
        result = backend.last_result
        assert result is not None and (result.status, result.call_id) == ("ok", call_id)
    if backend.gateway_url is None:  # the files are on this machine
        by_id = Path(str(result.checkpoint)).parent
        assert json.loads((by_id / f"{call_id}.json").read_text()) == {"code": SHORT}
        assert not (by_id / f"{call_id}.partial").exists()
        assert line_of(by_id.parent, call_id)["status"] == "ok"
    # Whole, the closing brace included: an ordinary call, with its ordinary line.
    text = on_loop(backend.handle_partial_tool_call("run_code", whole, f"call_{encoding}_whole"))
    assert text.startswith('[ptc-retry] Ignored "description", "options", "tags", "timeout"')
    assert text.endswith(short_expected)


def test_the_line_names_what_the_call_went_without() -> None:
    arrived = ENCODINGS["escaped"]
    arrived = arrived[: arrived.index('"math"') + 3]
    assert _cut_line(arrived) == (
        '[ptc-retry] Cut off after "code" arrived whole; run_code takes nothing else, so the '
        'call ran without "description", "tags" (cut off).'
    )
    tokenizer = load_tokenizer()
    if tokenizer.available:
        names = tokenizer.count(' "description", "tags" (cut off)')
        assert tokenizer.count(_cut_line(arrived)) - names <= 40


def test_a_failing_program_cut_after_it_ended_is_replayed_without_calling_a_tool_again(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    paid: list[str] = []

    def pay_h6(invoice: str) -> str:
        """Pay an invoice (counted on the host)."""
        paid.append(invoice)
        return f"paid {invoice}"

    backend.register_tool(pay_h6)
    program = (
        "receipt = await tools.pay_h6(invoice='INV-7')\n"
        + "".join(f"line_{i} = 'padding so the notice is offered {i}'\n" for i in range(6))
        + "print(receipt.uper())\n"
    )
    arguments = json.dumps({"code": program, "description": "Pay INV-7 and show it"})
    arrived = arguments[: arguments.index("and show")]
    text = on_loop(backend.handle_partial_tool_call("run_code", arrived, "call_pay"))

    assert text.startswith(
        '[ptc-retry] Cut off after "code" arrived whole; run_code takes nothing else, so the '
        'call ran without "description" (cut off).\n'
    )
    assert "AttributeError" in text and paid == ["INV-7"]
    result = backend.last_result
    assert result is not None and result.status == "error" and result.notice is not None
    assert parse_notice(text) == result.reference
    # Exactly what the notice says to send, its placeholders filled in.
    offered = result.notice.partition("Send only:\n")[2]
    line = offered.replace('"<old>"', '"uper"').replace('"<new>"', '"upper"')
    assert line.startswith(f'await ptc_retry.replay("{result.reference}"')
    fixed = on_loop(backend.handle_tool_call("run_code", raw(line), "call_pay_fix"))
    assert "PAID INV-7" in fixed.splitlines()
    assert paid == ["INV-7"]  # the host paid once


@pytest.mark.parametrize(
    "arrived", ['{"co', "", '{"timeout": 3', '{"code": 5', '{"code": "print(1)", "code": 5']
)
def test_a_call_cut_before_its_program_began_saves_nothing(
    backend: KernelBackend, on_loop: OnLoop[Any], arrived: str
) -> None:
    text = on_loop(backend.handle_partial_tool_call("run_code", arrived, "call_nothing"))
    assert text == CUT_BEFORE_CODE.render()
    assert backend.last_result is None  # nothing ran
    line = "await ptc_retry.extend('call_nothing', 'x')"
    refused = on_loop(backend.handle_tool_call("run_code", raw(line)))
    assert "ReplayError" in refused and "call_nothing" in refused


def test_a_continuation_cut_off_in_turn_is_extended_again(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    program = "parts = ['one', 'two', 'three']\nprint('-'.join(parts))\n"
    arrived = json.dumps({"code": program})[:30]
    on_loop(backend.handle_partial_tool_call("run_code", arrived, "call_chain1"))
    first = backend.last_result
    assert first is not None and first.reference is not None
    held = (cut_arguments(arrived).string("code") or ("", False))[0]
    # The extend call is cut off too, inside its rest.
    continuation = json.loads(_extend_line(first.reference, program[len(held) :]))["code"]
    arguments = json.dumps({"code": continuation})
    arrived_again = arguments[: arguments.index("three")]
    on_loop(backend.handle_partial_tool_call("run_code", arrived_again, "call_chain2"))
    second = backend.last_result
    assert second is not None and second.reference is not None
    held_again = (cut_arguments(arrived_again).string("code") or ("", False))[0]
    text = on_loop(
        backend.handle_tool_call(
            "run_code", _extend_line(second.reference, continuation[len(held_again) :])
        )
    )
    assert text.rstrip() == "one-two-three"
    names = on_loop(backend.run_code("parts"))  # the program's names are the kernel's now
    assert names.value == "['one', 'two', 'three']"


@pytest.mark.transports("local", KERNEL_GATEWAY)
def test_a_combined_program_that_fails_gets_the_notice_and_is_replayed(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    program = "prices = {'tea': 3, 'milk': 2}\n" * 8 + "print(prices['cofee'])\n"
    arrived = json.dumps({"code": program})[:-20]
    on_loop(backend.handle_partial_tool_call("run_code", arrived, "call_fails"))
    cut = backend.last_result
    assert cut is not None and cut.reference is not None
    held = (cut_arguments(arrived).string("code") or ("", False))[0]
    rest = program[len(held) :] + "# " + "padding " * 30  # long enough for a notice
    failed = on_loop(backend.handle_tool_call("run_code", _extend_line(cut.reference, rest)))
    assert "KeyError: 'cofee'" in failed
    combined = backend.last_result
    assert combined is not None and combined.reference is not None
    assert f"ptc_retry.replay({json.dumps(combined.reference)}" in failed
    line = f"await ptc_retry.replay({combined.reference!r}, 'cofee', 'tea')"
    assert on_loop(backend.handle_tool_call("run_code", raw(line))).rstrip() == "3"


def test_extending_a_call_that_was_not_cut_off_is_refused(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    on_loop(backend.handle_tool_call("run_code", raw("whole = 1"), "call_not_cut"))
    line = "await ptc_retry.extend('call_not_cut', 'more = 2')"
    text = on_loop(backend.handle_tool_call("run_code", raw(line)))
    assert "ReplayError: " in text
    assert "was not cut off (its status is ok)" in text and "ptc_retry.replay" in text


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_unicode_and_crlf_programs(
    backend: KernelBackend, on_loop: OnLoop[Any], newline: str
) -> None:
    program = newline.join(["mot = 'naïve 日本 😀'", "print(mot, len(mot))"]) + newline
    arguments = json.dumps({"code": program}, ensure_ascii=False)
    arrived = arguments[: arguments.index("本") + 1]
    on_loop(backend.handle_partial_tool_call("run_code", arrived, f"call_u{len(newline)}"))
    cut = backend.last_result
    assert cut is not None and cut.reference is not None
    held = (cut_arguments(arrived).string("code") or ("", False))[0]
    assert held.endswith("日本")
    text = on_loop(
        backend.handle_tool_call("run_code", _extend_line(cut.reference, program[len(held) :]))
    )
    assert text.rstrip() == "naïve 日本 😀 10"


def test_a_cut_off_call_is_no_failure_for_the_guard_and_takes_a_new_instruction(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    backend.new_turn()
    on_loop(backend.run_code('%config PtcRetry.guard_mode = "pause"'))
    try:
        for _ in range(2):
            on_loop(backend.run_code("1 / 0"))
        on_loop(backend.handle_partial_tool_call("run_code", '{"code": "1 / ', "call_g1"))
        third = on_loop(backend.run_code("1 / 0"))  # the third identical failure in a row
        assert third.metadata is not None and third.metadata["guard"]["paused"] is True
        backend.new_turn()  # the new instruction reaches the kernel with a cut-off call
        on_loop(backend.handle_partial_tool_call("run_code", '{"code": "print(', "call_g2"))
        assert on_loop(backend.run_code("print('runs')")).text.rstrip() == "runs"
    finally:
        on_loop(backend.run_code('%config PtcRetry.guard_mode = "observe"'))


def test_a_kernel_without_ptc_retry_keeps_nothing_and_says_so(
    jupyter_path: Path, tmp_path: Path, on_loop: OnLoop[Any]
) -> None:
    stock = KernelBackend(kernel_name="python3", extension=False, root=tmp_path)
    on_loop(stock.start())
    try:
        arrived = '{"code": "print(\'ran\')\\nx = '
        assert (
            on_loop(stock.handle_partial_tool_call("run_code", arrived, "call_s1"))
            == CUT_NOT_KEPT.render()
        )
        assert stock.last_result is not None and stock.last_result.text == "[no output]"
        # A whole program needs nothing of ptc-retry: it runs there too.
        whole = '{"code": "print(\'ran\')", "no'
        text = on_loop(stock.handle_partial_tool_call("run_code", whole, "call_s2"))
        assert text == f"{cut_after_arguments('run_code', ['code'])}\nran"
    finally:
        on_loop(stock.shutdown())


def test_bytes_cut_inside_a_character_leave_that_character_out(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    arrived = '{"code": "print(\'caf\u00e9'.encode()[:-1]  # the stream stopped inside é
    text = on_loop(backend.handle_partial_tool_call("run_code", arrived, "call_b1"))
    cut = backend.last_result
    assert cut is not None and cut.reference is not None
    assert text.endswith(f'extend("{cut.reference}", "<rest>")') and "\ufffd" not in text
    if backend.gateway_url is None:
        by_id = Path(str(cut.checkpoint)).parent
        assert (by_id / "call_b1.partial").read_bytes() == arrived[:-1]
    extended = on_loop(backend.handle_tool_call("run_code", _extend_line(cut.reference, "é')\n")))
    assert extended.rstrip() == "café"


@pytest.mark.parametrize(
    ("arrived", "said"),
    [
        (b'{"code": "x = \xff\xfe 1', "not UTF-8"),
        ('{"code": "x = \'\ud83d', "surrogates not allowed"),
        ('{"code": "x = 1  # \\ude00 z', "lone surrogate"),
        ('{"code": "x = 1 \\q', "not JSON"),
    ],
)
def test_arguments_that_cannot_be_kept_say_so_and_save_nothing(
    backend: KernelBackend, on_loop: OnLoop[Any], arrived: str | bytes, said: str
) -> None:
    text = on_loop(backend.handle_partial_tool_call("run_code", arrived, "call_bad"))
    assert said in text and "send the whole call again" in text.lower()
    assert backend.last_result is None  # the kernel was not asked


def test_a_cut_off_call_is_extended_not_replayed_or_resumed(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    on_loop(backend.handle_partial_tool_call("run_code", '{"code": "total = 1 +', "call_r1"))
    lines = ("await ptc_retry.replay('call_r1', '1', '2')", "await ptc_retry.resume('call_r1')")
    for line in lines:
        text = on_loop(backend.handle_tool_call("run_code", raw(line)))
        assert "ReplayError" in text and "was cut off mid-stream and never ran" in text
        assert 'await ptc_retry.extend("#' in text
    itself = "await ptc_retry.extend('call_r2', '1')"
    text = on_loop(backend.handle_tool_call("run_code", raw(itself), "call_r2"))
    assert "is this extend call itself; extend the call that was cut off" in text
