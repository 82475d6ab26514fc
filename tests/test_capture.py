"""What the model reads of a program's outputs, and what is kept of them: ``Capture`` fed
message contents directly, no kernel."""

from __future__ import annotations

import base64

from ptc_retry.backend.capture import MAX_RAW_OUTPUTS, Capture, strip_ansi


def stream(text: str, name: str = "stdout") -> dict[str, str]:
    return {"name": name, "text": text}


def test_streams_read_as_printed_and_merge_into_one_output_per_stream() -> None:
    capture = Capture(1000)
    capture.add("stream", stream("a\n"))
    capture.add("stream", stream("b\n"))
    capture.add("stream", stream("oops\n", "stderr"))

    assert capture.text() == "a\nb\noops\n"
    assert capture.outputs == [
        {"output_type": "stream", "name": "stdout", "text": "a\nb\n"},
        {"output_type": "stream", "name": "stderr", "text": "oops\n"},
    ]
    assert (capture.total, capture.truncated) == (9, False)


def test_long_text_keeps_its_head_and_tail_around_a_marker() -> None:
    capture = Capture(100)
    for n in range(1000):
        capture.add("stream", stream(f"{n:04d}\n"))

    head, tail = capture.text().split("\n[... 4,900 characters cut ...]\n")
    assert head == "".join(f"{n:04d}\n" for n in range(10))
    assert tail == "".join(f"{n:04d}\n" for n in range(990, 1000))
    assert capture.truncated and capture.total == 5000


def test_one_huge_piece_is_cut_without_keeping_it_whole() -> None:
    capture = Capture(100)
    capture.add("stream", stream("H" * 10 + "x" * 1_000_000 + "T" * 10))

    text = capture.text()
    assert text.startswith("H" * 10) and text.endswith("T" * 10)
    assert "[... 999,920 characters cut ...]" in text
    assert sum(len(part) for part in capture.tail) == 50


def test_a_rich_output_starts_a_line_and_reads_as_its_text_plain() -> None:
    capture = Capture(1000)
    capture.add("stream", stream("no newline"))
    capture.add("execute_result", {"data": {"text/plain": "42"}, "execution_count": 3})

    assert capture.text() == "no newline\n42\n"
    assert capture.outputs[-1] == {
        "output_type": "execute_result",
        "data": {"text/plain": "42"},
        "metadata": {},
        "execution_count": 3,
    }


def test_binary_data_and_text_less_displays_read_as_placeholders() -> None:
    png = base64.b64encode(bytes(12_345)).decode()
    capture = Capture(1000)
    capture.add("display_data", {"data": {"image/png": png, "text/plain": "<chart>"}})
    capture.add("display_data", {"data": {"text/html": "<b>hi</b>"}})

    assert capture.text() == "[image/png output, 12.3 kB]\n<chart>\n[text/html output, 9 B]\n"


def test_a_traceback_loses_its_ansi_codes_and_the_error_is_always_kept() -> None:
    capture = Capture(1000, max_raw=10)
    capture.add("stream", stream("x" * 20))
    traceback = ["\x1b[31mTraceback\x1b[0m", "KeyError: 'regoin'"]
    capture.add("error", {"ename": "KeyError", "evalue": "'regoin'", "traceback": traceback})

    assert capture.text() == "x" * 20 + "\nTraceback\nKeyError: 'regoin'\n"
    assert [o["output_type"] for o in capture.outputs] == ["stream", "error"]
    assert capture.outputs[0]["text"] == "x" * 10 and capture.truncated
    assert capture.outputs[1]["traceback"] == traceback  # the raw output keeps it as sent


def test_an_error_without_a_traceback_reads_as_its_name_and_value() -> None:
    capture = Capture(1000)
    capture.add("error", {"ename": "ValueError", "evalue": "bad"})
    assert capture.text() == "ValueError: bad\n"


def test_raw_outputs_stop_at_their_count() -> None:
    capture = Capture(1000)
    for n in range(MAX_RAW_OUTPUTS + 5):
        capture.add("display_data", {"data": {"text/plain": str(n)}})

    assert len(capture.outputs) == MAX_RAW_OUTPUTS and capture.truncated


def test_strip_ansi_removes_colours_and_titles_only() -> None:
    assert strip_ansi("\x1b[1;31mred\x1b[0m \x1b]0;title\x07plain") == "red plain"
    assert strip_ansi("no codes") == "no codes"
