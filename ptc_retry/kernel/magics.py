"""The magics for a person at the notebook: ``%ptc_history``, ``%ptc_show``, ``%ptc_guard``,
and which cells are not an agent's calls because of them."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.display import display

from ..core import sentences as said
from ..core.errors import PtcRetryError
from ..core.history_table import format_history, format_tool_calls, history_html
from ..core.layout import MAX_DIGITS
from .host import Host

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell


MAGIC_NAMES = {"line": ["ptc_history", "ptc_show", "ptc_guard"]}

# A person's commands to ptc-retry: its magics, with no ``{expression}`` or ``$name`` that
# IPython would expand (and so run) in their arguments, and loading or unloading the
# extension.
_OWN_MAGIC = rf"%(?:{'|'.join(MAGIC_NAMES['line'])})\b[^\n{{$]*"
_LOAD = r"%(?:load_ext|unload_ext|reload_ext)[ \t]+ptc_retry[ \t]*"
# A cell that only runs those (and blank or comment lines) is not a call.
_OWN_MAGICS_ONLY = re.compile(rf"(?:[ \t]*(?:{_OWN_MAGIC}|{_LOAD}|#[^\n]*)?\n)*")
# From a backend, loading or unloading the extension is a program like any other: saved,
# and refused while the guard pauses (a fresh extension would otherwise lift the pause).
_OWN_MAGICS_ONLY_FROM_BACKEND = re.compile(rf"(?:[ \t]*(?:{_OWN_MAGIC}|#[^\n]*)?\n)*")
_PERSON_RESET = re.compile(r"\s*%ptc_guard[ \t]+reset\s*")

#: What to type, said after a magic's refusal of what it was given.
HISTORY_USAGE = "usage: %ptc_history [N], the last N programs (N from 1, default 20)"
SHOW_USAGE = (
    "usage: %ptc_show #N (program N of the session), %ptc_show N (what replay(N, ...) runs "
    "in the next cell) or %ptc_show <call id>"
)
GUARD_USAGE = "usage: %ptc_guard (its state) or %ptc_guard reset (start it fresh)"


def only_own_magics(source: str, *, from_backend: bool = False) -> bool:
    """Whether a cell runs nothing but these magics (with nothing IPython expands in their
    arguments) and, unless a backend sent it, ``%load_ext``, ``%unload_ext`` or
    ``%reload_ext ptc_retry``: a person's commands, which take no number or id."""
    pattern = _OWN_MAGICS_ONLY_FROM_BACKEND if from_backend else _OWN_MAGICS_ONLY
    return pattern.fullmatch(source + "\n") is not None


def is_person_reset(source: str, *, from_backend: bool) -> bool:
    """Whether a cell is a person's ``%ptc_guard reset``, which lifts a guard's pause.

    It is exactly that one line, and its request carries no ``metadata["ptc_retry"]``.
    The rule rests on what a model cannot choose: it writes a cell's text, not the
    request's metadata. So the line inside a larger program, run from Python, or sent
    by a backend with our metadata, resets nothing. A client that sends no metadata
    cannot be told from a person.
    """
    return not from_backend and _PERSON_RESET.fullmatch(source) is not None


@magics_class
class PtcRetryMagics(Magics):
    """Magics for a person at the notebook."""

    def __init__(self, shell: InteractiveShell, extension: Host) -> None:
        super().__init__(shell)
        self.extension = extension

    @line_magic
    def ptc_history(self, line: str) -> None:
        """%ptc_history [N]: the last N calls of this session (default 20), displayed as
        text (``format_history``) and as an HTML table."""
        text = line.strip()
        if text and not (text.isascii() and text.isdigit() and text.strip("0")):
            raise UsageError(
                f"%ptc_history takes a number of programs, not {text!r}\n{HISTORY_USAGE}"
            )
        store = self.extension.checkpoints.open()
        if store is None:
            return
        # More programs than a session can hold: all of them (and no int of 5,000 digits).
        count = (int(text) if len(text) <= MAX_DIGITS else None) if text else 20
        lines, where = store.history(), store.session_dir
        # Plain text for a terminal and for a model; a table for a notebook, which a
        # narrow output scrolls rather than breaking it inside its cells.
        shown = {
            "text/plain": format_history(lines, session_dir=where, last=count),
            "text/html": history_html(lines, session_dir=where, last=count),
        }
        display(shown, raw=True)

    @line_magic
    def ptc_show(self, line: str) -> None:
        """%ptc_show #N|ID|N: the program saved as #N, or for a call id; for a number N, the
        program that ``replay(N, ...)`` runs when typed in the next cell. The first line
        names it (``#n`` and its id) and where it is saved."""
        text = line.strip()
        if not text:
            raise UsageError(f"%ptc_show needs the program to show\n{SHOW_USAGE}")
        store = self.extension.checkpoints.open()
        if store is None:
            return
        position = _position(text)
        try:
            # A cell of magics does not move previous/, but the next cell will.
            target = store.next_previous_id(position) if position is not None else text
            call_id, code = store.load_code(target)
            path = store.path_for(call_id)
        except PtcRetryError as exc:
            raise UsageError(f"{exc}\n{SHOW_USAGE}") from None
        ref = store.reference_of(call_id)
        name = f"{ref} ({call_id})" if ref else call_id
        if position is not None:
            name += f", what replay({position}, ...) runs in the next cell"
        print(f"# {name}: {path}\n{code}")
        records = self.extension.checkpoints.tool_calls(call_id)
        if records:
            end = "" if code.endswith("\n") else "\n"
            print(f"{end}{format_tool_calls(records, call_id)}")

    @line_magic
    def ptc_guard(self, line: str) -> None:
        """%ptc_guard: the repeated-failure guard's state. %ptc_guard reset: start it fresh.

        A reset lifts a pause; it works only as a person's cell of its own (see
        :func:`is_person_reset`), so a model's program cannot lift a pause.
        """
        extension = self.extension
        word = line.strip()
        if word in ("", "status"):
            print(extension.guard.status(extension.checkpoints.person_name))
        elif word == "reset":
            running = extension.programs.outermost()
            if running is None or not running.person_reset:
                print(said.GUARD_NOT_RESET.render(), file=sys.stderr)
                return
            extension.guard.reset()
            print(said.GUARD_RESET.render())
        else:
            raise UsageError(f"%ptc_guard takes no argument or reset, not {word!r}\n{GUARD_USAGE}")


def _position(text: str) -> int | None:
    """The step position ``text`` writes, if it is digits; one past any position there can
    be when it has too many to convert."""
    if not (text.isascii() and text.isdigit()):
        return None
    return int(text) if len(text) <= MAX_DIGITS else 10**MAX_DIGITS
