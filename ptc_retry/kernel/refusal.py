"""Refusing a cell: IPython parses it, shows the error and runs none of it.

The repeated-failure guard refuses a program with :class:`RetryGuardPaused`; an
interrupt that arrives while a program is being saved refuses it with
:class:`InterruptedBeforeRun`, so that nothing runs unsaved; a program that is only the
start of a call cut off mid-stream is saved and refused with :class:`CallCutOff`.
"""

from __future__ import annotations

import ast
from typing import Any

from IPython.core.error import InputRejected


class RetryGuardPaused(InputRejected):
    """The repeated-failure guard refused to run this program (``guard_mode = "pause"``)."""

    def __init__(self, message: str, report: dict[str, Any]) -> None:
        super().__init__(message)
        self.report = report

    def _render_traceback_(self) -> list[str]:
        # IPython shows this instead of a traceback: nothing ran, there are no frames.
        return [f"RetryGuardPaused: {self}"]


class InterruptedBeforeRun(InputRejected):
    """An interrupt arrived while the program was being saved: it did not run."""

    def __init__(self) -> None:
        super().__init__("interrupted while the program was being saved; nothing ran")

    def _render_traceback_(self) -> list[str]:
        return [f"KeyboardInterrupt: {self}"]


class CallCutOff(InputRejected):
    """The backend saved a tool call cut off mid-stream as far as it arrived: it does not
    run, and its notice says how to send the rest."""

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


class _Rejecter(ast.NodeTransformer):
    """An AST transformer that rejects every cell it sees."""

    def __init__(self, error: InputRejected) -> None:
        self.error = error

    def visit(self, node: ast.AST) -> Any:
        raise self.error


class Refuser:
    """Rejects the cell being run: a transformer that raises the error sits in the
    shell's ``ast_transformers`` only from :meth:`refuse` to :meth:`drop`."""

    def __init__(self, shell: Any) -> None:
        self._shell = shell
        self._rejecter: _Rejecter | None = None

    def refuse(self, error: InputRejected) -> None:
        self.drop()
        self._rejecter = _Rejecter(error)
        self._shell.ast_transformers.append(self._rejecter)

    def drop(self) -> None:
        if self._rejecter is not None:
            transformers = self._shell.ast_transformers
            if self._rejecter in transformers:
                transformers.remove(self._rejecter)
            self._rejecter = None


def refusal_output(
    refusal: RetryGuardPaused, *, show_report: bool
) -> tuple[type, BaseException, list[str]]:
    """What a refused program shows in place of the traceback IPython was about to show;
    with ``show_report``, the guard's report first, as ``application/json``."""
    if show_report:
        from IPython.display import display

        # Metadata only (ids, counts, times, tool, exception name), for tools.
        display({"application/json": refusal.report}, raw=True)
    return type(refusal), refusal, refusal._render_traceback_()
