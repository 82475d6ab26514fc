"""Native mode: an agent loop's own tools, journaled call by call, and the
``editPreviousToolCalling`` tool that re-runs a failed call with a small fix or completes
a call that was cut off mid-stream.

    from ptc_retry.native import NativeTools
"""

from __future__ import annotations

from .definitions import EDIT_TOOL, EDIT_TOOL_DESCRIPTION, EDIT_TOOL_PARAMETERS, tool_definitions
from .journal import Position, ToolJournal
from .results import ToolFailure, ToolResult
from .tools import NativeTools, ToolFunction, current_call

__all__ = [
    "EDIT_TOOL",
    "EDIT_TOOL_DESCRIPTION",
    "EDIT_TOOL_PARAMETERS",
    "NativeTools",
    "Position",
    "ToolFailure",
    "ToolJournal",
    "ToolFunction",
    "ToolResult",
    "current_call",
    "tool_definitions",
]
