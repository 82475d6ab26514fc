"""The words the model reads, chosen and filled in: the failure notice and the static prompt
section (their templates and budgets live in ``core/sentences.py``).

Both are plain text with no ANSI codes. The notice is short, whatever the call ids and the
checkpoint root, because it is paid on every failure; the prompt section is byte-identical
for a session so it never breaks a prompt cache.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import sentences as said
from .schema import signature_text
from .sentences import PREFIX
from .status import Mode

#: Below this many bytes of arguments a failure gets no notice. The evaluation's
#: break-even (``ptc-retry eval``, docs/eval.md), rounded up: from there on a replay line
#: and the notice cost less than re-sending the program.
NOTICE_MIN_BYTES = 200

#: The same threshold for native mode (``ptc_retry.native``): its notice names the call id
#: and shows a whole ``editPreviousToolCalling`` call, so it costs more and pays later.
NATIVE_NOTICE_MIN_BYTES = 500


def _quoted(reference: str) -> str:
    return json.dumps(reference, ensure_ascii=False)


def failure_notice(
    reference: str,
    *,
    interrupted: bool = False,
    completed: int = 0,
    time_limit: float | None = None,
    repeated: int = 0,
    paused: bool = False,
) -> str:
    """The text appended to a stopped program's traceback: two lines, three with the guard's.

    ``reference`` names the saved program (``"#7"``; a call id where no number is known).
    A failure offers the fix as a template with two literal placeholders,
    ``await ptc_retry.replay("#7", "<old>", "<new>")``, ending in ``, resume=True`` when
    ``completed`` statements would not have to run again (the caller passes 0 where
    skipping them would save too little to be worth it). A program that was
    stopped (``interrupted``, or by the ``time_limit``) offers going on instead:
    ``await ptc_retry.resume("#7")``. The guard's sentence follows, on a line of its own,
    when this is the ``repeated``-th identical failure in a row. The call to send is a
    line of its own, after the line that says what happened: a notebook breaks a line
    that does not fit at any character, and a short line alone stays whole. Each line
    stays under about 120 characters; the error itself is never repeated, and neither
    is the word "call id" (some frameworks print their own).
    """
    if time_limit:
        lines = [said.NOTICE_TIME_LIMIT.render(reference=reference, seconds=time_limit)]
    elif interrupted:
        lines = [said.NOTICE_INTERRUPTED.render(reference=reference)]
    else:
        resume = said.RESUME_FLAG if completed > 0 else ""
        lines = [said.NOTICE_FAILED.render(reference=reference, resume=resume)]
    if repeated:
        lines.append(PREFIX + guard_sentence(repeated, paused=paused))
    return "\n".join(lines)


def resume_call(reference: str) -> str:
    """``await ptc_retry.resume("#7")``: the call that goes on with a stopped program."""
    return said.RESUME_CALL.render(reference=reference)


# The call to send is the line after the notice's first, or ends that line: the whole rest
# of the line, from "await" to its last parenthesis. Its line may be indented, and quoted as
# Markdown quotes a reply (``> ``, ``>> ``).
_NOTICE = re.compile(
    re.escape(PREFIX)
    + r"[^\n]*?(?:\n[ \t>]*)?(?P<call>await ptc_retry\.(?P<helper>replay|resume|extend)\("
    + r"(?P<ref>\"(?:[^\"\\]|\\.)*\")[^\n]*\))"
)


@dataclass(frozen=True)
class OfferedCall:
    """The call a notice tells the model to send, read back from its text."""

    #: The program it names: ``"#7"``, or a call id where no number was known.
    reference: str
    #: The call exactly as the notice offers it, placeholders and all:
    #: ``await ptc_retry.replay("#7", "<old>", "<new>", resume=True)``.
    call: str
    #: Which helper it calls: ``"replay"``, ``"resume"`` or ``"extend"``.
    helper: str

    @property
    def resumes(self) -> bool:
        """Whether it goes on from where the program stopped instead of running it whole:
        ``resume(...)``, or ``replay(..., resume=True)``."""
        return self.helper == "resume" or self.call.endswith(said.RESUME_FLAG + ")")


def read_notice(text: str) -> OfferedCall | None:
    """The call the first notice in ``text`` offers, with the reference it names.

    ``text`` is a traceback, a tool result or any text that holds a notice as the kernel
    wrote it (its lines may be indented, as a framework quotes them, or quoted with ``> ``
    as Markdown quotes them; CRLF line ends are read as LF). None when ``text``
    holds no notice that offers a call (a guard's sentence alone, a native-mode notice).
    """
    match = _NOTICE.search(text)
    if match is None:
        return None
    return OfferedCall(json.loads(match.group("ref")), match.group("call"), match.group("helper"))


def parse_notice(text: str) -> str | None:
    """The reference (``"#7"``, or a call id) of the program a notice in ``text`` names:
    ``read_notice(text).reference``.

    For clients that see only the traceback (a kernel that sends no reply metadata).
    None when ``text`` holds no notice that names a program.
    """
    offered = read_notice(text)
    return offered.reference if offered is not None else None


def short_failure_notice(
    *, time_limit: float | None = None, repeated: int = 0, paused: bool = False
) -> str | None:
    """The notice of a program below ``notice_min_bytes``: only what it must not miss.

    None when there is nothing to say: the time limit that stopped it and the
    guard's sentence are said even for a one-line program.
    """
    parts = []
    if time_limit:
        parts.append(said.SHORT_TIME_LIMIT.render(seconds=time_limit))
    if repeated:
        parts.append(guard_sentence(repeated, paused=paused))
    return f"{PREFIX}{' '.join(parts)}" if parts else None


def guard_sentence(repeated: int, *, paused: bool = False) -> str:
    """The repeated-failure guard's sentence, said once per streak."""
    sentence = said.GUARD_PAUSED if paused else said.GUARD_REPEATED
    return sentence.render(count=repeated)


#: The longest tail of a cut-off program's last line a notice quotes, in characters.
TAIL_CHARS = 100


def last_line(text: str) -> str:
    """Where a cut-off ``text`` stops: its last line as far as it goes, or, when it ends just
    after a line break, the line before it with its break ('' for an empty text)."""
    last = text.rsplit("\n", 1)[-1]
    if not last and "\n" in text:
        last = text.rsplit("\n", 2)[-2] + "\n"
    return last


def quoted_end(line: str) -> str:
    """``repr`` of the last ``TAIL_CHARS`` characters of ``line``, ``...`` before when longer."""
    return ("..." if len(line) > TAIL_CHARS else "") + repr(line[-TAIL_CHARS:])


def partial_notice(reference: str, program: str, *, whole: bool = False) -> str:
    """What a call cut off mid-stream is told: where its saved ``program`` stops (the line,
    and the exact end of that line, quoted) and the call that sends only the rest; for a
    ``whole`` program (the cut fell after ``"code"``, in a request that asked the kernel
    to run nothing), the call that runs it with nothing added."""
    if whole:
        return said.CUT_AFTER_CODE.render(reference=reference)
    lines = program.count("\n")
    last = last_line(program)
    if not last:
        where = "before its first line"
    elif last.endswith("\n"):
        where = f"after line {lines}"
    else:
        where = f"in line {lines + 1}"
    ending = f", ending {quoted_end(last)}" if last else ""
    return said.CUT_IN_PROGRAM.render(where=where, reference=reference, ending=ending)


def cut_after_arguments(
    tool: str, arrived: Sequence[str], ignored: Sequence[str] = (), cut_key: str | None = None
) -> str:
    """The line before the result of a call cut off after every argument ``tool`` takes
    (``arrived``) came whole, so it ran as it is. It names what the call went without: the
    keys that arrived whole but that ``tool`` does not take (``ignored``), then the key the
    cut fell in (``cut_key``), when its name arrived."""
    dropped = [_quoted(key) for key in ignored]
    if cut_key is not None:
        dropped.append(f"{_quoted(cut_key)} (cut off)")
    without = f" without {', '.join(dropped)}" if dropped else ""
    return said.CUT_AFTER_ARGUMENTS.render(
        arrived=", ".join(map(_quoted, arrived)), tool=tool, without=without
    )


def native_failure_notice(call_id: str, *, field: str = "<field>") -> str:
    """The one sentence appended to a failed direct tool call's result (native mode).

    It says the arguments are saved, names the call id and shows the one
    ``editPreviousToolCalling`` call that fixes it; it never repeats
    the error. No path: a tool-calling model addresses saved calls by id, and the prompt
    section already names the directory. ``field`` is the example's patch path: the
    caller's best guess of the value to fix.
    """
    patch = [{"path": field, "old_string": "<old>", "new_string": "<new>"}]
    example = json.dumps({"call_id": call_id, "patch": patch}, ensure_ascii=False)
    return said.NATIVE_NOTICE.render(call_id=call_id, example=example)


def prompt_section(
    mode: str = "code",
    session_dir: str | Path | None = None,
    *,
    tools: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The system-prompt section that teaches the model to replay instead of re-send.

    ``mode="code"`` teaches the ``ptc_retry.replay`` helper, ``mode="native"`` the
    ``editPreviousToolCalling`` tool (``ptc_retry.native``).
    ``session_dir`` is the directory the kernel saves this session's programs in
    (``CheckpointStore.session_dir``); without it the text names the default
    location pattern. ``tools`` (code mode): the host's tools programs can call, as
    ``{"name", "description", "parameters"}``, listed a line each. The result depends only
    on its arguments.
    """
    if mode not in tuple(Mode):
        raise ValueError(f"prompt_section: unknown mode {mode!r}; use mode='code' or mode='native'")
    where = str(session_dir) if session_dir is not None else "<checkpoint root>/<session>"
    if mode == Mode.NATIVE:
        if tools:
            raise ValueError("prompt_section: tools in programs are listed in code mode only")
        return said.NATIVE_PROMPT.render(session_dir=where)
    section = said.CODE_PROMPT.render(session_dir=where)
    if not tools:
        return section
    lines = [
        tool_line(t["name"], t.get("description") or "", t["parameters"], t.get("approval"))
        for t in tools
    ]
    return section + said.TOOLS_PROMPT.render() + "".join(line + "\n" for line in lines)


def tool_line(
    name: str, description: str, parameters: Mapping[str, Any], approval: object = None
) -> str:
    """``await tools.name(a: int, b: str = ...)  # description``: one host tool, one line;
    a tool whose calls may need a person's approval (``approval`` true) says so at its end."""
    call = f"await tools.{name}({signature_text(parameters)})"
    summary = " ".join(description.split())
    line = f"{call}  # {summary}" if summary else call
    return line + said.TOOL_NEEDS_APPROVAL.render() if approval else line


#: The Python name of each JSON schema type, as a tool's signature shows it.
