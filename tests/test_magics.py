"""What a person at the notebook sees, in one shared ptc-retry kernel: the magics name the
program the next cell's replay runs, a program has one name everywhere, a person's own
commands are not programs, and a resume says where it starts."""

from __future__ import annotations

import re

import pytest

from ptc_retry.core.protocol import strip_ansi

from .helpers import Execution, Kernel, StartKernel, history, latest_line_of, raw


@pytest.fixture(scope="module")
def kernel(start_shared_kernel: StartKernel) -> Kernel:
    return start_shared_kernel("magics")


def reference(kernel: Kernel, ran: Execution) -> str:
    """The ``#n`` the program of ``ran`` was saved as."""
    assert ran.ptc is not None
    return f"#{latest_line_of(kernel.session_dir, ran.ptc['call_id'])['n']}"


def traceback_text(ran: Execution) -> str:
    assert ran.error is not None, ran.outputs
    return strip_ansi("\n".join(ran.error["traceback"]))


def last_row(kernel: Kernel) -> dict[str, str]:
    """The last row of ``%ptc_history``, by column: cells are read under their headers."""
    header, *rows = kernel.execute("%ptc_history 1").displayed.splitlines()[1:]
    starts = [match.start() for match in re.finditer(r"\S+", header)]
    ends = [*starts[1:], None]
    return {header[a:b].strip(): rows[-1][a:b].strip() for a, b in zip(starts, ends, strict=True)}


def test_ptc_show_n_shows_the_program_that_replay_n_runs_in_the_next_cell(kernel: Kernel) -> None:
    kernel.execute("print('the one before')")
    last = kernel.execute("print('the last program')")

    shown = kernel.execute("%ptc_show 1")
    header, code = shown.stdout.split("\n", 1)
    assert code == "print('the last program')\n"
    assert header.startswith(f"# {reference(kernel, last)} (")
    assert "what replay(1, ...) runs in the next cell" in header
    # A cell of magics is not a step: the next cell's replay(1) is the program shown.
    replayed = kernel.execute("await ptc_retry.replay(1, 'the last', 'the shown')")
    assert replayed.stdout == "the shown program\n"


def test_a_replayed_programs_frames_carry_the_name_its_notice_gives_it(kernel: Kernel) -> None:
    failed = kernel.execute('def price(row):\n    return row["cost"]\n\nprice({"amount": 3})\n')
    again = kernel.execute(f"await ptc_retry.replay({reference(kernel, failed)!r}, 'cost', 'sum')")

    text = traceback_text(again)
    assert again.error["ename"] == "KeyError"
    assert f"File <ptc-retry {reference(kernel, again)}>" in text
    assert not re.search(r"<ptc-retry (?!#)", text)
    # ptc-retry's own frames are left out, without IPython's line in their place.
    assert "skipping hidden" not in text and "replay.py" not in text


def test_unloading_and_loading_are_a_persons_commands_not_programs(kernel: Kernel) -> None:
    program = kernel.execute("kept = 'a program'")
    lines = len(history(kernel.session_dir))

    kernel.execute("%unload_ext ptc_retry")
    loaded = kernel.execute("%load_ext ptc_retry")

    assert len(history(kernel.session_dir)) == lines
    said = f"ptc-retry: every program is saved in {kernel.session_dir} before it runs.\n"
    assert loaded.stdout == said
    row = last_row(kernel)
    assert (row["ref"], row["id"]) == (reference(kernel, program), program.ptc["call_id"])
    assert kernel.execute("%ptc_show 1").stdout.endswith("\nkept = 'a program'\n")


def test_ptc_history_names_the_programs_size_code_bytes(kernel: Kernel) -> None:
    code = "size = 'ünïcode'  # program"
    ran = kernel.execute(code)

    row = last_row(kernel)
    assert "bytes" not in row
    assert row["code_bytes"] == str(len(code.encode()))
    line = latest_line_of(kernel.session_dir, ran.ptc["call_id"])
    assert line["bytes"] == len(raw(code).encode())  # the saved arguments


LOOP = """\
done = []
for page in range(4):
    done.append(page)
    if page == 2 and not fixed:
        raise RuntimeError("page 2 failed")
print("pages", done)
"""


def test_a_resume_says_which_statement_it_starts_at_and_history_shows_it(kernel: Kernel) -> None:
    failed = kernel.execute("fixed = False\n" + LOOP)
    ref = reference(kernel, failed)

    resumed = kernel.execute(f"await ptc_retry.replay({ref!r}, 'not fixed', 'fixed', resume=True)")

    assert resumed.status == "ok", resumed.error
    assert resumed.stderr == (
        f"ptc-retry: resuming {ref} at line 3 (for page in range(4):); "
        "the loop starts again from its first iteration.\n"
    )
    assert resumed.stdout == "pages [0, 1, 2, 0, 1, 2, 3]\n"  # `done = []` did not run again
    row = last_row(kernel)
    assert (row["replay_of"], row["resumed_from"]) == (ref, "2")


def test_a_resume_at_a_statement_that_is_no_loop_says_only_where(kernel: Kernel) -> None:
    failed = kernel.execute("first = 1\nsecond = first + undefined\nprint(second)\n")
    ref = reference(kernel, failed)

    resumed = kernel.execute(f"await ptc_retry.replay({ref!r}, 'undefined', '1', resume=True)")

    assert resumed.stdout == "2\n"
    assert resumed.stderr == f"ptc-retry: resuming {ref} at line 2 (second = first + 1).\n"


def test_a_resume_at_a_statement_of_several_lines_quotes_its_first_as_going_on(
    kernel: Kernel,
) -> None:
    failed = kernel.execute("first = 1\nsecond = dict(\n    a=first,\n    b=undefined,\n)\n")
    ref = reference(kernel, failed)

    resumed = kernel.execute(f"await ptc_retry.replay({ref!r}, 'undefined', '2', resume=True)")

    assert resumed.status == "ok", resumed.error
    assert resumed.stderr == f"ptc-retry: resuming {ref} at line 2 (second = dict( ...).\n"


@pytest.mark.parametrize(
    ("magic", "said", "usage"),
    [
        ("%ptc_show abc", "no checkpoint for call id 'abc'", "usage: %ptc_show #N"),
        ("%ptc_show 99", "no previous/99.json for the next cell", "usage: %ptc_show #N"),
        ("%ptc_show", "needs the program to show", "%ptc_show <call id>"),
        ("%ptc_history --bogus", "not '--bogus'", "usage: %ptc_history [N]"),
        ("%ptc_guard nonsense", "not 'nonsense'", "usage: %ptc_guard (its state)"),
    ],
)
def test_a_magic_given_bad_arguments_is_a_usage_error_saying_what_to_type(
    kernel: Kernel, magic: str, said: str, usage: str
) -> None:
    kernel.execute("print('a program to show')")

    refused = kernel.execute(magic)

    assert refused.status == "error"
    # IPython prints a UsageError as one message, without a traceback of our code.
    assert refused.error is None and "Traceback" not in refused.stderr
    first, second = refused.stderr.splitlines()
    assert first.startswith("UsageError: ") and said in first
    assert usage in second
    assert refused.ptc is not None and refused.ptc["call_id"] is None  # not a program


def test_a_position_0_or_a_reference_0_is_refused_with_the_nearest_that_exists(
    kernel: Kernel,
) -> None:
    last = kernel.execute("print('the only program of its step')")
    ref = reference(kernel, last)

    shown = kernel.execute("%ptc_show 0")
    assert f"numbered from 1; the nearest is 1 ({ref})." in shown.stderr
    assert '"#0"' not in shown.stderr  # no program #0 to point at
    replayed = kernel.execute("await ptc_retry.replay(0, 'only', 'one')")
    assert replayed.error is not None
    assert replayed.error["ename"] == "ReplayError"
    assert f"numbered from 1; the nearest is 1 ({ref})." in replayed.error["evalue"]
    by_reference = kernel.execute("await ptc_retry.replay('#0', 'only', 'one')")
    assert by_reference.error is not None
    assert "its programs are #1 to #" in by_reference.error["evalue"]
    assert "; the nearest is #1." in by_reference.error["evalue"]


def test_after_reset_the_next_program_has_ptc_retry_and_tools_again(kernel: Kernel) -> None:
    kernel.execute("%reset -f")

    after = kernel.execute("print(ptc_retry.__name__, type(tools).__name__)")

    assert after.status == "ok", after.error
    assert after.stdout == "ptc_retry Tools\n"
    assert kernel.execute("print('also in the cell after')").stdout == "also in the cell after\n"


def test_a_resume_after_reset_runs_the_whole_program_and_says_so(kernel: Kernel) -> None:
    failed = kernel.execute("fixed = False\n" + LOOP)
    ref = reference(kernel, failed)
    kernel.execute("%reset -f")

    resumed = kernel.execute(f"await ptc_retry.replay({ref!r}, 'not fixed', 'fixed', resume=True)")

    assert resumed.status == "ok", resumed.error
    assert resumed.stderr == (
        f"ptc-retry: the namespace was reset after {ref} ran, so what it bound is gone: "
        "running the whole program.\n"
    )
    assert resumed.stdout == "pages [0, 1, 2, 3]\n"  # `done = []` ran again


def test_numbers_too_long_to_convert_are_refused_with_the_nearest_not_a_value_error(
    kernel: Kernel,
) -> None:
    kernel.execute("print('one program at least')")
    digits = "9" * 5000  # past the 4,300 digits Python converts
    for cell in (f"%ptc_show {digits}", f"%ptc_show #{digits}"):
        shown = kernel.execute(cell)
        assert shown.error is None and shown.stderr.startswith("UsageError: no "), shown.stderr
    assert "the nearest is #" in kernel.execute(f"%ptc_show #{digits}").stderr
    listed = kernel.execute(f"%ptc_history {digits}")
    assert listed.error is None and "one program at least" not in listed.stderr
    assert "ok" in listed.displayed
    nearest = kernel.execute(f"await ptc_retry.replay('#{digits}', 'a', 'b')").error
    assert nearest is not None and nearest["ename"] == "ReplayError", nearest
    assert "the nearest is #" in nearest["evalue"]
    for call in ("replay(10**5000, 'a', 'b')", "resume(-(10**5000))"):
        ran = kernel.execute(f"await ptc_retry.{call}").error
        assert ran is not None and ran["ename"] == "ReplayError", ran
        assert len(ran["evalue"]) < 1000 and "The most recent are: #" in ran["evalue"]


def test_ptc_history_of_no_programs_is_refused_rather_than_listing_all(kernel: Kernel) -> None:
    kernel.execute("print('listed')")
    for zero in ("0", "000"):
        listed = kernel.execute(f"%ptc_history {zero}")
        assert listed.displayed == "", listed.displayed
        assert listed.stderr.startswith(
            f"UsageError: %ptc_history takes a number of programs, not '{zero}'"
        )
