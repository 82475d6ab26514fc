"""Results the host completed after the program stopped waiting for them (a time limit, an
interrupt, the kernel's death): the backend sends them with its next request, as
``metadata["ptc_retry"]["tool_results"]`` (``core.protocol.host_result``), and they are
appended to the recordings of the programs that made the calls before that request's program
runs, so that a replay or resume reuses them instead of making the calls again.

Exact: a line is appended only for a call of a program of this session whose recording does
not already say it succeeded, and whose own line, if it has one, names the same tool and
arguments. The appended line carries that line's ``k``, tool, arguments, statement, schema
and defaults, and ``"late": true``; being the call's last line, it is the call's truth (see
:func:`ptc_retry.core.session_files.latest_calls`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, TypeGuard

from ..core.session_files import latest_calls
from .call_lines import RECORDED, CallRecord, canonical

if TYPE_CHECKING:
    from .checkpoints import Checkpoints

logger = logging.getLogger(__name__)


def record_host_results(checkpoints: Checkpoints, entries: list[Any]) -> int:
    """Append a line to the program's recording for each entry the recording does not
    already hold as a success; the number of lines appended. Malformed entries, and entries
    that do not fit the recording, are left out (and logged)."""
    store = checkpoints.open()
    if store is None:
        return 0
    appended = 0
    recordings: dict[str, dict[int, dict[str, Any]]] = {}
    for entry in entries:
        if not _well_formed(entry):
            logger.info("a malformed tool result from the backend: %.200r", entry)
            continue
        program, k = entry["program"], entry["k"]
        if store.reference_of(program) is None:
            logger.info("a tool result for %r, which is no program of this session", program)
            continue
        if program not in recordings:
            lines = latest_calls(checkpoints.tool_calls(program))
            recordings[program] = {line["k"]: line for line in lines}
        line = _superseding(entry, recordings[program].get(k))
        if line is not None:
            checkpoints.record_tool_call(program, line)
            recordings[program][k] = line
            appended += 1
    return appended


def _well_formed(entry: Any) -> bool:
    if not isinstance(entry, dict) or "result" not in entry:
        return False
    program, k, tool = entry.get("program"), entry.get("k"), entry.get("tool")
    return (
        isinstance(program, str)
        and _is_int(k)
        and k >= 1
        and isinstance(tool, str)
        and not tool.startswith(RECORDED)  # run in the kernel: the host never completes one
    )


def _superseding(entry: dict[str, Any], line: dict[str, Any] | None) -> dict[str, Any] | None:
    """The line that records the host's result of the call ``line`` recorded (None: the
    kernel died before it wrote one); None when there is nothing to record."""
    program, k = entry["program"], entry["k"]
    if line is None:
        record = CallRecord(k, entry["tool"], entry.get("arguments"), None)
    elif line.get("ok") is True:
        return None  # the kernel took the result after all
    elif line.get("tool") != entry["tool"] or canonical(line.get("arguments")) != canonical(
        entry.get("arguments")
    ):
        logger.info("the host's result of call %d of %s is of another call: left out", k, program)
        return None
    else:
        # The kernel's own line says where and when the call was made (a resume needs its
        # statement) and how long the program waited for it.
        statement, started, waited = line.get("statement"), line.get("time"), line.get("duration")
        record = CallRecord(
            k, line["tool"], line.get("arguments"), statement if _is_int(statement) else None
        )
        if _is_number(started):
            record.started = started
        if _is_number(waited):
            record.duration = waited
        within = line.get("within")
        if _is_int(within):
            record.within = within
        if isinstance(line.get("schema"), str):
            record.schema = line["schema"]
        if isinstance(line.get("defaults"), dict):  # what the call is compared with
            record.defaults = line["defaults"]
    record.ok, record.result = True, entry["result"]
    return {**record.line(), "late": True}


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
