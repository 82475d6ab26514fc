"""Every sentence the model reads, each a named ``Sentence``: a template and its token budget.

This module is the one home of those words: the failure notices, the prompt sections, the
``run_code`` and ``editPreviousToolCalling`` descriptions, the refusals and the backend's
notes. The code that says them (``core/notice.py``, the backend, the kernel extension)
renders them with ``Sentence.render``; the docs and the notebooks quote them as rendered.

A template is ``str.format`` text, plus the conversion ``!j`` (the value as a JSON string:
``{reference!j}`` gives ``"#7"``). ``budget`` is the most cl100k_base tokens the sentence may
cost, rendered with its ``example`` values and with the ids real models send (``call_`` + 24
characters, ``toolu_01`` + 22) in every field named ``call_id`` or ending in ``_id``, and
``#1234`` in ``reference``; tests/test_sentences.py checks each one. A notice line stays
under about 120 characters, and the call a notice tells the model to send is a line of its
own: JupyterLab and Notebook 7 break an error output's lines at any character
(``word-break: break-all``), so only a line that fits stays whole.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EDIT_TOOL", "PREFIX", "SENTENCES", "Sentence"]

#: Every notice starts with this, so a reader (or a framework) can find it in a traceback.
PREFIX = "[ptc-retry] "
#: The name of native mode's replay tool, as the model sees it.
EDIT_TOOL = "editPreviousToolCalling"


class _Formatter(string.Formatter):
    """``str.format`` with one more conversion: ``!j``, the value as a JSON string."""

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion == "j":
            return json.dumps(value, ensure_ascii=False)
        return super().convert_field(value, conversion)


_FORMATTER = _Formatter()


@dataclass(frozen=True)
class Sentence:
    """A sentence the model reads: ``text`` (a template) and ``budget`` (tokens, at most)."""

    text: str
    budget: int
    #: Values for the fields that are not ids: the longest a real one is likely to be.
    example: Mapping[str, object] = field(default_factory=dict)

    def render(self, **fields: object) -> str:
        """The sentence with ``fields`` filled in; KeyError names a field not given."""
        return _FORMATTER.format(self.text, **fields)

    @property
    def fields(self) -> frozenset[str]:
        """The names of the fields the template holds."""
        return frozenset(name for _, name, _, _ in _FORMATTER.parse(self.text) if name)

    @property
    def opening(self) -> str:
        """The template's words before its first field: what every rendering starts with, by
        which code that reads a rendered text (a reply's notice) tells this sentence."""
        literal = next(iter(_FORMATTER.parse(self.text)), ("", None, None, None))[0]
        return literal.replace("{{", "{").replace("}}", "}")


_RESUME = "await ptc_retry.resume({reference!j})"
_LOST = "all variables, imports and definitions are lost."
_TIME_LIMIT = "Stopped after {seconds:g} s (the time limit of this call)."
_SEND_AGAIN = "Send the whole call again."

# -- the kernel's notices, the last line of a stopped program's traceback -------------------

#: A failed program: the fix, as a template with two literal placeholders. ``resume`` is
#: ``RESUME_FLAG`` when the statements that completed need not run again, else empty.
NOTICE_FAILED = Sentence(
    PREFIX + "Saved as {reference}. Small fix? Send only:\n"
    'await ptc_retry.replay({reference!j}, "<old>", "<new>"{resume})',
    40,
    {"resume": ", resume=True"},
)
#: ``resume`` of ``NOTICE_FAILED``: in the template itself, as the model copies it, because
#: it costs far less than a sentence explaining it.
RESUME_FLAG = ", resume=True"
#: An interrupted program: going on, not a fix.
NOTICE_INTERRUPTED = Sentence(
    PREFIX + "Interrupted; saved as {reference}. To go on:\n" + _RESUME, 40
)
#: A program the kernel's time limit stopped.
NOTICE_TIME_LIMIT = Sentence(
    PREFIX
    + "Stopped by the time limit ({seconds:g} s); saved as {reference}. To go on:\n"
    + _RESUME,
    40,
    {"seconds": 55.5},
)
#: The time limit's words in the notice of a program too short for a replay.
SHORT_TIME_LIMIT = Sentence("Stopped by the time limit ({seconds:g} s).", 15, {"seconds": 55.5})
#: The call that goes on with a stopped program.
RESUME_CALL = Sentence(_RESUME, 15)
#: A program stopped before tool calls that need a person's approval (ApprovalPending's
#: message, the last line of its traceback): it goes on by itself once they are decided.
NOTICE_PAUSED = Sentence(
    PREFIX + "Paused before {calls} for a person's approval; saved as {reference}. "
    "Do not send it again: it goes on once decided.",
    40,
    {"calls": "tools.send_email and 12 more"},
)
#: The calls a pause names when more than one waits: the first, and how many more wait
#: (each one is listed in the result's ``pending``), however many a ``gather`` made.
WAITING_CALLS = Sentence("tools.{tool} and {more} more", 10, {"tool": "send_email", "more": 12})
#: What a program that is sent again while it waits for approval gets: nothing ran.
STILL_WAITS = Sentence(
    PREFIX + "Not run: {reference} still waits for a person's approval before {calls}. "
    "Do not send it again: it goes on once decided.",
    40,
    {"calls": "tools.send_email and 12 more"},
)
#: The repeated-failure guard's line, once per streak (``guard_mode = "observe"``).
GUARD_REPEATED = Sentence(
    "{count} identical failures in a row: change the program, do not repeat it.", 20, {"count": 3}
)
#: The same in ``guard_mode = "pause"``.
GUARD_PAUSED = Sentence(
    "{count} identical failures in a row: programs pause until the user's next instruction; "
    "tell the user what fails.",
    25,
    {"count": 3},
)
#: What a program the guard refuses shows instead of running (RetryGuardPaused's evalue);
#: ``first`` and ``last`` name the streak's programs by ``#n`` (a call id where none is known).
GUARD_REFUSAL = Sentence(
    "{tool} failed {count} times in a row with the same {ename} ({first} at "
    "{first_time} to {last} at {last_time}), so this program was not run. Do not retry: "
    "tell the user what fails. Programs run again after the user's next instruction, or after "
    "a person runs %ptc_guard reset alone in a notebook cell.",
    130,
    {
        "tool": "run_code",
        "count": 3,
        "ename": "ModuleNotFoundError",
        "first": "#1234",
        "last": "#1236",
        "first_time": "12:00:01",
        "last_time": "12:00:09",
    },
)
#: Said when a person loads the extension in a cell (``%load_ext ptc_retry``).
LOADED = Sentence(
    "ptc-retry: every program is saved in {session_dir} before it runs.",
    40,
    {"session_dir": "/tmp/ptc-retry-1000/k3f9a1c2b7d"},
)
#: Said on stderr when the program's namespace already has a ``tools`` of its own.
TOOLS_NAME_TAKEN = Sentence(
    "ptc-retry: `tools` is a name of this kernel's own, so the agent's tools are at "
    "`ptc_retry.tools`.",
    35,
)
#: After a replay or resume that reused recorded tool results: the calls counted exactly.
TOOL_RESULTS_REUSED = Sentence(
    "ptc-retry: {reused} tool {results} reused from {sources}; {live} {calls} made live.",
    30,
    {"reused": 12, "results": "results", "sources": "#12 and #13", "live": 2, "calls": "calls"},
)
#: Said once on stderr when the store fails (``problem``: what failed, and why).
STORE_PROBLEM = Sentence(
    "ptc-retry: {problem}. Programs still run as usual.",
    35,
    {"problem": "could not save the program (OSError: [Errno 28] No space left on device)"},
)
#: The ``problem`` of ``STORE_PROBLEM`` when the disk is full and a program's tool-call lines
#: pass ``PtcRetry.unwritten_tool_calls_bytes`` in memory: kept without their results, then
#: (past twice the cap) dropped from call ``k`` on.
TOOL_CALLS_THINNED = Sentence(
    "kept the tool calls of {call_id} without their results, for want of disk: a fix of it "
    "makes those calls live again",
    45,
)
TOOL_CALLS_DROPPED = Sentence(
    "dropped the tool-call lines of {call_id} from call {k} on, for want of disk and memory: "
    "a fix of it makes those calls live",
    50,
    {"k": 1234},
)
#: Said on stderr when a resume must run the whole program (``reason``: why).
RUN_WHOLE = Sentence(
    "ptc-retry: {reason}: running the whole program.",
    50,
    {
        "reason": "the kernel restarted after call_Wd3kq0fJ2xLmN8pQ4rT6vY1z ran, so what it "
        "computed is gone"
    },
)

#: ``RUN_WHOLE``'s reasons (``call_id``: the program's ``#n`` where it has one, else its
#: id): the kernel that ran it is gone (it died or restarted).
RUN_WHOLE_RESTARTED = Sentence(
    "the kernel restarted after {call_id} ran, so what it computed is gone", 35
)
#: ``RUN_WHOLE``'s reason for a resume of a program that did not fail.
RUN_WHOLE_DID_NOT_FAIL = Sentence("{call_id} did not fail, so there is nothing to skip", 30)
#: ``RUN_WHOLE``'s reason for going on with a paused program after another one ran.
RUN_WHOLE_RAN_SINCE_PAUSE = Sentence(
    "another program ran after {call_id} paused, so the names it bound may have changed", 35
)
#: ``RUN_WHOLE``'s reason for a resume after ``%reset``: the names the program bound are gone.
RUN_WHOLE_NAMESPACE_RESET = Sentence(
    "the namespace was reset after {call_id} ran, so what it bound is gone", 35
)
#: ``RUN_WHOLE``'s reason once the turn's resumes are used (``budget``: how many it has).
RUN_WHOLE_RESUMES_USED = Sentence(
    "this turn has used its {budget} resumes (PtcRetry.max_resumes_per_turn)", 25, {"budget": 3}
)
#: Said on stderr when a program calls a helper without ``await`` (``call``: the call as
#: written, the arguments after the target elided).
NOT_AWAITED = Sentence(
    "ptc_retry.{call} did not run: it must be awaited. Write: await ptc_retry.{call}",
    70,
    {"call": "replay('toolu_01A09q90qw90lq917835lq9x', ...)"},
)
#: Said on stderr when ``%ptc_guard reset`` runs anywhere but a person's cell of its own.
GUARD_NOT_RESET = Sentence(
    "ptc-retry: nothing was reset. %ptc_guard reset works only as a cell of its own, run by a "
    "person at the notebook.",
    35,
)
#: Said when a person's ``%ptc_guard reset`` lifts the guard's pause.
GUARD_RESET = Sentence("ptc-retry: the guard starts fresh; programs run again.", 15)
#: Said on stderr when a resume skips statements: the one it starts at (``statement``: its
#: first line, quoted) and, for a loop, ``LOOP_FROM_START``.
RESUMED_AT = Sentence(
    "ptc-retry: resuming {reference} at line {line} ({statement}){loop}.",
    45,
    {
        "line": 1234,
        "statement": "for page in range(first_page, last_page + 1, step_between_p...",
        "loop": "; the loop starts again from its first iteration",
    },
)
#: ``loop`` of ``RESUMED_AT`` when the statement it starts at is a loop.
LOOP_FROM_START = "; the loop starts again from its first iteration"

# -- calls cut off mid-stream ---------------------------------------------------------------

#: The start of the program was saved; ``where`` says where the cut fell (``in line 4``),
#: ``ending`` quotes how that line ends (``, ending 'total +='``), or is empty.
CUT_IN_PROGRAM = Sentence(
    PREFIX + "Cut off {where}; saved as {reference}{ending}. Send only what follows:\n"
    'await ptc_retry.extend({reference!j}, "<rest>")',
    95,
    {"where": "in line 1234", "ending": ", ending ..." + repr("x = " * 25)},
)
#: The program arrived whole in a request that asked the kernel to run nothing.
CUT_AFTER_CODE = Sentence(
    PREFIX + 'Cut off after "code" arrived whole; saved as {reference}, not run. To run '
    'it:\nawait ptc_retry.extend({reference!j}, "")',
    40,
)
#: Cut off after every argument the tool takes came whole, so it ran: ``arrived`` names
#: them, ``without`` what it went without (`` without "description" (cut off)``) or is empty.
CUT_AFTER_ARGUMENTS = Sentence(
    PREFIX + "Cut off after {arrived} arrived whole; {tool} takes nothing else, so the call "
    "ran{without}.",
    40,
    {"arrived": '"code"', "tool": "run_code", "without": ' without "description" (cut off)'},
)
#: Cut off before its program began: there is nothing to go on from.
CUT_BEFORE_CODE = Sentence(
    PREFIX
    + "The call was cut off before its program began; nothing was saved or run. "
    + _SEND_AGAIN,
    30,
)
#: What arrived of a cut-off call is not the start of a JSON object.
CUT_NOT_JSON = Sentence(
    PREFIX + "The call was cut off, and what arrived is not JSON ({problem}): nothing was "
    "saved or run. " + _SEND_AGAIN,
    50,
    {"problem": "the arguments must be a JSON object, and this begins with '['"},
)
#: The program of a cut-off call holds a lone surrogate escape: it cannot be saved.
CUT_LONE_SURROGATE = Sentence(
    PREFIX + "The call was cut off, and {problem} (a lone surrogate escape): nothing was "
    "saved or run. Send the whole call again, the escape fixed.",
    55,
    {"problem": '"code" cannot be sent to the kernel: surrogates not allowed at index 1234'},
)
#: The kernel could not save a cut-off call (``problem`` says why).
CUT_NOT_SAVED = Sentence(
    PREFIX
    + "This call was cut off and could not be saved ({problem}); nothing ran. "
    + _SEND_AGAIN,
    45,
    {"problem": "OSError: [Errno 28] No space left on device"},
)
#: The kernel has no ptc-retry, so it keeps no cut-off call.
CUT_NOT_KEPT = Sentence(
    PREFIX + "The call was cut off, and this kernel does not keep cut-off calls "
    "(ptc-retry is not loaded in it); nothing ran. " + _SEND_AGAIN,
    45,
)
#: A direct tool call (native mode) cut off where nothing of it can be kept.
NATIVE_CUT_UNSAVED = Sentence(
    PREFIX + "The call was cut off {where}, which cannot be continued; nothing was saved or "
    "run. " + _SEND_AGAIN,
    40,
    {"where": 'inside a key\'s name after "description"'},
)
#: A direct tool call cut off after some of its arguments arrived: the edit call that adds
#: ``what`` is missing (``example``: its arguments, as JSON).
NATIVE_CUT_SAVED = Sentence(
    PREFIX + "Saved; cut off {where}. Send only {what}: " + EDIT_TOOL + "({example})",
    95,
    {
        "where": "in \"content\" after 'def main():\\n'",
        "what": 'the rest, and "dry_run"',
        "example": '{"call_id": "call_Wd3kq0fJ2xLmN8pQ4rT6vY1z", "append": "<rest>", "patch": '
        '[{"path": "dry_run", "value": "<value>"}]}',
    },
)
#: An edit call cut off before it named the call it edits.
NATIVE_CUT_NO_TARGET = Sentence(
    PREFIX + "The " + EDIT_TOOL + " call was cut off before it said which call it edits; "
    "nothing was saved or run. Send it again in full.",
    35,
)
#: The journal could not save a cut-off direct tool call.
NATIVE_CUT_NOT_SAVED = Sentence(
    PREFIX
    + "The call was cut off, and could not be saved ({problem}); nothing ran. "
    + _SEND_AGAIN,
    40,
    {"problem": "[Errno 28] No space left on device"},
)

# -- the backend's notes, lines of the text a run_code call returns -------------------------

#: The kernel had died between two calls; it was restarted before this one.
KERNEL_REVIVED = Sentence(
    PREFIX + "The kernel had died since the last call ({how}) and was restarted before this "
    "program ran: earlier variables, imports and definitions are lost.",
    50,
    {"how": "exit code -9: killed by SIGKILL, maybe out of memory"},
)
#: The kernel died while this program ran. ``SAVED_GO_ON`` may follow, after a space.
KERNEL_DIED = Sentence(
    PREFIX + "The kernel died while running this program ({how}) and was restarted: " + _LOST,
    45,
    {"how": "exit code -9: killed by SIGKILL, maybe out of memory"},
)
#: A program that ran past its time limit and did not stop when interrupted.
TIMEOUT_RESTARTED = Sentence(
    PREFIX + _TIME_LIMIT + " It did not stop within {grace:g} s of the interrupt, so the "
    "kernel was restarted: " + _LOST,
    55,
    {"seconds": 55.5, "grace": 2.5},
)
#: After ``KERNEL_DIED`` or ``TIMEOUT_RESTARTED``: how to go on with the saved program.
SAVED_GO_ON = Sentence("Saved as {call_id}. To go on: await ptc_retry.resume({call_id!j})", 70)
#: A program the backend's time limit stopped, the kernel still running.
TIMEOUT_KEPT = Sentence(
    PREFIX + _TIME_LIMIT + " The output above is what it printed until then; the kernel "
    "kept its variables.",
    40,
    {"seconds": 55.5},
)
#: The kernel aborted the request (an earlier one in its queue failed).
ABORTED = Sentence(PREFIX + "The kernel aborted this program before it ran.", 15)
#: The arguments had keys beside ``"code"``: the program ran, and the model is told once.
IGNORED_KEYS = Sentence(
    PREFIX + 'Ignored {keys}: run_code takes only "code".',
    25,
    {"keys": '"description", "explanation", "language"'},
)
#: A rich output (an image, a PDF) in a result's text: its type and decoded size.
OUTPUT_PLACEHOLDER = Sentence(
    "[{mime} output, {size}]", 12, {"mime": "image/png", "size": "123.4 kB"}
)

# -- a helper that cannot do what was asked, and says which call can -----------------------

#: ``replay`` of a call that was cut off mid-stream: it never ran, so only its rest is sent.
REPLAY_OF_CUT = Sentence(
    "{reference} was cut off mid-stream and never ran; send only the rest: "
    'await ptc_retry.extend({reference!j}, "<rest>")',
    35,
)
#: ``replay`` or ``extend`` of a ``#n`` that names the call itself: a session that began
#: again (a thread that outlived its process, on a new session) numbers from 1 again.
REFERENCE_IS_ITSELF = Sentence(
    "no program before this one is {reference} in this session: {reference} names this "
    "{action} call itself. A reference read in an earlier session names nothing here; "
    "send the whole program again",
    45,
    {"action": "replay"},
)
#: ``extend`` of a call that was not cut off. ``why``: its status, or that it has none.
EXTEND_NOT_CUT = Sentence(
    "{reference} was not cut off ({why}): extend only goes on with a call whose arguments "
    "stopped part-way; fix a program with ptc_retry.replay",
    45,
    {"why": "it has no history line"},
)

# -- tool calls that run nothing ------------------------------------------------------------

#: A call of a tool the backend does not offer.
NO_SUCH_TOOL = Sentence(
    "Error: there is no tool named {name!r}; the tools are: {offered}. Nothing ran.",
    30,
    {"name": "python_interpreter", "offered": f"run_code, {EDIT_TOOL}"},
)
#: Native mode: a direct call of a tool the registry does not hold.
NATIVE_NO_SUCH_TOOL = Sentence(
    "unknown tool {name!r}; the tools are: {offered}",
    25,
    {"name": "python_interpreter", "offered": f"write_file, submit_config, lookup, {EDIT_TOOL}"},
)
#: Arguments that are not JSON.
ARGUMENTS_NOT_JSON = Sentence(
    "Error: the arguments of {tool} are not valid JSON ({problem}). Send a JSON object such "
    'as {{"code": "print(1)"}}. Nothing ran.',
    50,
    {"tool": "run_code", "problem": "Unterminated string starting at: line 1 column 10 (char 9)"},
)
#: Arguments that are JSON, but not an object.
ARGUMENTS_NOT_OBJECT = Sentence(
    'Error: the arguments of {tool} must be a JSON object such as {{"code": "print(1)"}}, '
    "not {kind}. Nothing ran.",
    35,
    {"tool": "run_code", "kind": "an array"},
)
#: ``run_code`` arguments that hold no program (``problem``: one of the three below).
NOT_RUN = Sentence(
    "Error: {problem} Nothing ran.",
    35,
    {"problem": "run_code needs \"code\": a string holding the Python program; it got 'program'."},
)
NO_CODE = Sentence(
    'run_code needs "code": a string holding the Python program{got}.',
    30,
    {"got": "; it got 'description', 'language', 'program'"},
)
CODE_NOT_STRING = Sentence(
    '"code" must be a string holding the Python program, not {kind}.', 20, {"kind": "an array"}
)
CODE_LONE_SURROGATE = Sentence(
    '"code" holds a lone surrogate ({reason} at index {index}); fix the escape.',
    25,
    {"reason": "surrogates not allowed", "index": 123456},
)
#: Arguments that came as bytes that are not UTF-8.
ARGUMENTS_NOT_UTF8 = Sentence(
    "Error: the arguments of {tool} are not UTF-8 ({problem}). Nothing ran.",
    40,
    {"tool": "run_code", "problem": "invalid start byte"},
)
#: Native mode: arguments that are neither JSON text nor an object.
NATIVE_ARGUMENTS_NOT_OBJECT = Sentence(
    "Error: the arguments of {tool} must be a JSON object, not {kind}. Nothing ran.",
    30,
    {"tool": "submit_config", "kind": "list"},
)
_NOT_SAVED = "Nothing was saved or run; send the whole call again."
#: The arguments of a call cut off mid-stream, as they arrived, are not UTF-8.
CUT_NOT_UTF8 = Sentence(
    "Error: the arguments of {tool} are not UTF-8 ({problem}). " + _NOT_SAVED,
    40,
    {"tool": "run_code", "problem": "invalid start byte"},
)
#: The arguments of a call cut off mid-stream cannot go out to the kernel (``problem``).
CUT_NOT_SENT = Sentence(
    "Error: {problem}. " + _NOT_SAVED,
    45,
    {"problem": "the arguments of run_code cannot be sent to the kernel: surrogates not allowed"},
)
#: A text that cannot be encoded as UTF-8 (a lone surrogate) cannot go out to the kernel.
CANNOT_SEND = Sentence(
    "{what} cannot be sent to the kernel: {reason} at index {index}",
    25,
    {"what": '"code"', "reason": "surrogates not allowed", "index": 123456},
)

#: A host tool's result (or a program's argument) holds a dict key that is not a str: JSON
#: would turn it into a string silently, so a program would get ``{"1": ...}`` for
#: ``{1: ...}``. It is refused instead, and says what to return.
NOT_STR_KEY = Sentence(
    "has the dict key {key} ({kind}{place}), which JSON would turn into the string "
    "{text!j}; use str keys",
    40,
    {
        "key": "1234567.25",
        "kind": "float",
        "place": " at [0]['rows'][12]",
        "text": "1234567.25",
    },
)

# -- the static prompt sections and the tools' descriptions --------------------------------

#: Code mode's system-prompt section (``prompt_section(mode="code")``).
CODE_PROMPT = Sentence(
    """\
Programs are saved in {session_dir} as JSON {{"code": ...}}: by-id/<call id>.json, \
previous/1.json (last), history.jsonl. A failure's notice names it #n (calls/<n>.json). \
Small fix? Send only:
await ptc_retry.replay("#n", "<old text>", "<new text>")
It replaces one exact match, reruns; several: edits=[(old, new), ...]. Only for a small \
correction; otherwise write a fresh program. Cut off? Send only the rest. No helper? \
json.loads the file, edit "code", run as an async function.
""",
    155,
    {"session_dir": "/home/someone/.cache/agent-platform/ptc-retry/run-2024-06-01-ab12"},
)
#: Heads the code-mode section's list of the host's tools, one ``tool_line`` each.
TOOLS_PROMPT = Sentence(
    "Programs can call the host's tools (JSON in and out; asyncio.gather runs several at once):\n",
    25,
)
#: How the prompt section marks a tool that needs a person's approval, after its line.
TOOL_NEEDS_APPROVAL = Sentence(" (waits for a person's approval)", 10)
#: Native mode's system-prompt section (``prompt_section(mode="native")``). Each example
#: line is a valid patch.
NATIVE_PROMPT = Sentence(
    """\
Tool calls are saved in {session_dir}: by-id/<id>.json, previous/1.json, history.jsonl. Fix \
a failed call without re-sending it: editPreviousToolCalling with call_id or previous_ordinal \
and a patch of entries like:
{{"path":"text","old_string":"teh","new_string":"the"}}
{{"path":"q.since","old_string":"2023","new_string":"2024"}}
{{"path":"port","value":80}}
Cut off mid-string? Send only the rest as "append" instead of a patch.
Only for a small correction; otherwise call the tool again with fresh arguments.
""",
    155,
    {"session_dir": "/home/someone/.cache/agent-platform/ptc-retry/run-2024-06-01-ab12"},
)
#: A failed direct tool call's result ends with this (native mode); ``example`` is the
#: ``editPreviousToolCalling`` arguments that fix it, as JSON.
NATIVE_NOTICE = Sentence(
    PREFIX + 'Arguments saved as "{call_id}". '
    "Small fix? Don't re-send; call " + EDIT_TOOL + "({example})",
    110,
    {
        "example": '{"call_id": "call_Wd3kq0fJ2xLmN8pQ4rT6vY1z", "patch": [{"path": "q.since", '
        '"old_string": "<old>", "new_string": "<new>"}]}'
    },
)

_RUN_CODE = (
    "Run a Python program in a persistent Jupyter kernel: variables, imports and definitions "
    "stay for later calls, and top-level await works. Returns what the program printed, the "
    "value of its last expression, or the error with its traceback. "
)
#: ``run_code``'s description in code mode.
RUN_CODE_DESCRIPTION = Sentence(
    _RUN_CODE + "A failed program is saved; its notice names it (#n) so a small fix can be "
    "sent as one line with ptc_retry.replay.",
    80,
)
#: Follows ``RUN_CODE_DESCRIPTION``, after a space, when programs can call host tools.
RUN_CODE_TOOLS = Sentence(
    "Programs can call the host's tools with await: {names}.",
    30,
    {"names": "tools.search, tools.fetch_page, tools.read_file, tools.write_file"},
)
#: ``run_code`` in native mode: the fix goes through the edit tool, never ``ptc_retry.replay``.
NATIVE_RUN_CODE_DESCRIPTION = Sentence(
    _RUN_CODE + "A failed call is saved: fix a small mistake with " + EDIT_TOOL + ' (path "code") '
    "instead of re-sending the program.",
    80,
)
#: ``editPreviousToolCalling``'s description.
EDIT_TOOL_DESCRIPTION = Sentence(
    """\
Re-run one of your earlier tool calls with a small fix instead of re-sending all its \
arguments. Name the call by call_id, or by previous_ordinal (n-th call of your previous \
message, from 1); not both. The patch entries apply in order to the call's JSON arguments:
- {{path, old_string, new_string}}: replace text inside the string at path; old_string must \
occur exactly once (replace_all: true replaces every occurrence)
- {{path, value}}: replace the whole value (any JSON type)
- {{path}}: delete the key (or array item)
A path names a value from the top-level keys: content, config.mode, items[0].name.
For a call cut off mid-string, give append: the rest, exactly as it goes on (a patch may \
follow).
Only for a small correction; otherwise call the tool again with fresh arguments.""",
    185,
)

# -- a reply the network cut off (the provider SDK adapters, ptc_retry.integrations) --------

#: The request that follows a stream the network cut: the model goes on where it stopped.
CONTINUE_CUT_REPLY = Sentence(
    "Your previous reply was cut off by a network error{where}. Continue it from exactly "
    "where it stopped; do not repeat any of it.",
    30,
    {"where": " while you were reasoning"},
)
#: After it, the end of what arrived (``what``: reasoning, or text that cannot go back as
#: the model's own message), at most ``Continuation.quote_limit`` characters of it.
CUT_REPLY_QUOTE = Sentence(
    "\n\nIt ended with this {what}:\n\n{quote}",
    25,
    {"what": "reasoning", "quote": "Then the sum over every row, qty times price."},
)

#: After the result of a reply's last whole tool call, when the network cut the reply there:
#: the model hears that more may have been coming.
CUT_AFTER_CALL = Sentence(
    "\n\nYour reply was cut off by a network error after this call; anything you meant to "
    "say or call after it did not arrive.",
    30,
)

# -- the MCP server ---------------------------------------------------------------------

#: The end of the MCP server's instructions when upstream servers did not start: their names.
UPSTREAMS_NOT_STARTED = Sentence(
    "\nThese upstream MCP servers did not start, so programs cannot call their tools in this "
    "session: {names}.\n",
    30,
    {"names": "filesystem, github, postgres"},
)
#: A call that needs approval is denied with this when the MCP host cannot ask the person.
CANNOT_ASK = Sentence(
    "this call needs a person's approval, and the MCP host could not be asked (no "
    "elicitation on this connection), so it was not made",
    30,
)
#: What a call is denied with when the person, asked through the MCP host, did not allow it.
PERSON_DECLINED = Sentence(
    "the person did not allow this call ({action})", 15, {"action": "decline"}
)
#: A ``run_code`` call the MCP server could not run: the kernel is gone for good.
MCP_KERNEL_GONE = Sentence(
    "Error: {problem}",
    40,
    {"problem": "the kernel died and could not be restarted (KernelStartError: no kernelspec)"},
)
#: A ``run_code`` call the MCP server could not run: a fault of its own.
MCP_SERVER_FAULT = Sentence(
    "Error: the server could not run this call: {ename}: {problem}",
    40,
    {"ename": "RuntimeError", "problem": "the backend is not running"},
)

#: Every sentence above, by name.
SENTENCES: dict[str, Sentence] = {
    name: value for name, value in list(globals().items()) if isinstance(value, Sentence)
}
