"""smolagents on a ptc-retry kernel: ``CodeAgent(..., executor=PtcRetryExecutor())``.

``PtcRetryExecutor`` is a ``smolagents.RemotePythonExecutor`` whose kernel is a
``KernelBackend``'s: a local ``ptc-retry`` kernel, or one behind a gateway
(``gateway_url=``, ``token=``). Each code action the agent runs is one call of the backend,
so a failed action's error ends with the notice and the model's next action can be the
one-line replay; ``executor.attach(agent)`` names each action with the id smolagents gives
it (``call_<n>``). ``pip install 'ptc-retry[smolagents]'`` brings smolagents.
"""

from __future__ import annotations

import json
import weakref
from typing import TYPE_CHECKING, Any

from smolagents.local_python_executor import CodeOutput
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents.remote_executors import RemotePythonExecutor
from smolagents.tools import Tool, get_tools_definition_code
from smolagents.utils import AgentError

from ..backend import KernelBackend, RunResult
from ..core.protocol import strip_ansi
from ..core.status import ResultStatus

if TYPE_CHECKING:
    from smolagents.agents import MultiStepAgent

__all__ = ["PtcRetryExecutor"]

#: The tool smolagents ends a run with: its calls are never recorded (it raises to end).
FINAL_ANSWER = "final_answer"

# Run in the kernel after the tools are defined: each tool's calls are recorded with the
# program that makes them, so a replay of that program gets their results back instead
# of calling them again (see ptc_retry.recorded).
_RECORD_TOOLS = """\
import ptc_retry as _ptc_retry
for _name in {names!r}:
    _tool = globals()[_name]
    if not getattr(_tool.forward, "__wrapped__", None):
        _tool.forward = _ptc_retry.recorded(_tool.forward)
del _name, _tool, _ptc_retry
"""


# Prints which of the (package, module) pairs the kernel cannot import.
_MISSING = """\
import importlib.util as _util
print(__import__("json").dumps([p for p, m in {pairs!r} if _util.find_spec(m) is None]))
del _util
"""
#: Packages whose module has another name.
_MODULES = {"pillow": "PIL", "scikit-learn": "sklearn", "beautifulsoup4": "bs4"}


class PtcRetryExecutor(RemotePythonExecutor):
    """Runs a smolagents ``CodeAgent``'s code actions in a ptc-retry kernel.

    ``backend``: a ``KernelBackend`` that is not started yet (default: a new one made with
    ``backend_options``, such as ``gateway_url=``, ``token=``, ``root=``,
    ``default_timeout=``); the executor starts it and ``cleanup()`` shuts it down, keeping
    its checkpoints when ``keep=True``. ``additional_imports`` are pip-installed in the
    kernel, as smolagents' other remote executors do.

    A failed action raises smolagents' ``AgentError`` whose message is the traceback
    without ANSI codes, ending in the notice; what the action printed first is in
    ``state["_print_outputs"]``, where the agent puts it in its memory too. ``final_answer``
    ends the run without a notice. The tools smolagents defines in the kernel are recorded
    like ``@ptc_retry.recorded`` functions. An action that pauses for a person's approval
    is no error: its logs are the pause line, and ``approve(ref)`` or ``deny(ref, reason)``
    go on with it. ``prompt_section()`` is the text to add to the
    agent's instructions so the model knows the replay line. ``attach(agent)`` gives each
    action the id smolagents gives it; without it, actions get the backend's ``c<N>`` ids.
    """

    def __init__(
        self,
        additional_imports: list[str] | None = None,
        logger: AgentLogger | None = None,
        *,
        allow_pickle: bool = False,
        backend: KernelBackend | None = None,
        keep: bool = False,
        **backend_options: Any,
    ) -> None:
        if backend is not None and backend_options:
            raise TypeError("pass either backend=... or KernelBackend options, not both")
        super().__init__(
            list(additional_imports or []),
            logger or AgentLogger(level=LogLevel.INFO),
            allow_pickle=allow_pickle,
        )
        self.backend = backend if backend is not None else KernelBackend(**backend_options)
        self.keep = keep
        #: What the latest action printed, for the agent's memory when it fails.
        self.state: dict[str, Any] = {}
        # The agent whose actions this runs (attach): its memory numbers them.
        self._agent: weakref.ref[MultiStepAgent] | None = None
        # What smolagents sent, defined again in a kernel that restarted.
        self._tools: dict[str, Tool] = {}
        self._variables: dict[str, Any] = {}
        self._restoring = False
        self.backend.start_sync()
        if self.additional_imports:
            self.installed_packages = self.install_packages(self.additional_imports)

    def prompt_section(self) -> str:
        """The system-prompt section that teaches the model the replay line (code mode)."""
        return self.backend.system_prompt()

    def attach(self, agent: MultiStepAgent) -> MultiStepAgent:
        """Name each code action ``agent`` runs as smolagents does, and return ``agent``.

        smolagents gives an action the tool-call id ``call_<n>``, ``n`` the number of steps
        in ``agent.memory`` when it runs: a run's task, its planning steps and the steps whose
        code did not parse count too, and a run with ``reset=True`` starts again from 1. The
        executor reads that count from the agent's memory as each action starts, so the id
        under which a program is saved is the one the model reads in its memory.
        ValueError when ``agent`` was not made with ``executor=`` this executor.
        """
        if getattr(agent, "python_executor", None) is not self:
            raise ValueError(
                "attach() takes the agent made with executor= this executor: "
                "CodeAgent(..., executor=executor)"
            )
        self._agent = weakref.ref(agent)
        return agent

    # -- smolagents' contract -----------------------------------------------------------------

    def __call__(self, code_action: str) -> CodeOutput:
        """Run one code action of the agent: as the call smolagents numbers it once
        ``attach`` named the agent, else under the backend's next ``c<N>`` id."""
        agent = self._agent() if self._agent is not None else None
        call_id = f"call_{len(agent.memory.steps)}" if agent is not None else None
        return self._run(code_action, call_id=call_id)

    def run_code_raise_errors(self, code: str) -> CodeOutput:
        """Run ``code`` (the tools' definitions, variables, a package install): a call of
        its own with the backend's next ``c<N>`` id."""
        return self._run(code, call_id=None)

    def install_packages(self, additional_imports: list[str]) -> list[str]:
        """pip-install into the kernel's own Python (``%pip``) the packages it cannot import
        yet; smolagents asks for numpy and pillow whenever it sends ``final_answer``."""
        if not additional_imports:
            return []
        pairs = [(p, _MODULES.get(p, p.replace("-", "_"))) for p in additional_imports]
        missing = json.loads(self._run(_MISSING.format(pairs=pairs), call_id=None).logs)
        if missing:
            self.logger.log(self._run(f"%pip install -q {' '.join(missing)}", call_id=None).logs)
        return list(additional_imports)

    def send_variables(self, variables: dict[str, Any]) -> None:
        # smolagents sends the state at the start of every run: a task, a person's turn.
        self.backend.new_turn()
        self._variables = dict(variables)
        super().send_variables(variables)

    def send_tools(self, tools: dict[str, Tool]) -> None:
        self._tools = dict(tools)
        final = tools.get(FINAL_ANSWER)
        if final is not None and "_forward" in vars(type(final)):
            # Patched to raise by an earlier run, and defined in the kernel then: patching it
            # twice would break it, so smolagents' later runs leave it as it is.
            tools = {name: tool for name, tool in tools.items() if name != FINAL_ANSWER}
        super().send_tools(tools)
        self._record_tools()

    def approve(self, ref: str) -> CodeOutput | None:
        """Approve what ``ref`` names (``backend.pending_approvals()``) and go on with its
        action (``KernelBackend.approve``): its end as an action's, a ``final_answer``
        included (``is_final_answer``), or ``AgentError`` for a failure. None while other
        calls of the action still wait."""
        return self._decided(self.backend.approve_sync(ref))

    def deny(self, ref: str, reason: str = "") -> CodeOutput | None:
        """Deny what ``ref`` names, with ``reason``: the action gets
        ``ptc_retry.ToolDenied(reason)`` at that call, and ends as ``approve`` says."""
        return self._decided(self.backend.deny_sync(ref, reason))

    def _decided(self, result: RunResult | None) -> CodeOutput | None:
        return None if result is None else self._output(result)

    def cleanup(self) -> None:
        """Stop the kernel (its checkpoints go too, unless ``keep``)."""
        self.backend.shutdown_sync(keep=self.keep)

    def delete(self) -> None:
        self.cleanup()

    # -- internals -------------------------------------------------------------------------

    def _record_tools(self) -> None:
        names = sorted(name for name in self._tools if name != FINAL_ANSWER)
        if names and all(isinstance(self._tools[name], Tool) for name in names):
            self._run(_RECORD_TOOLS.format(names=names), call_id=None)

    def _restore(self) -> None:
        """Define the tools and variables again in a kernel that restarted."""
        self._restoring = True
        try:
            if self._variables:
                super().send_variables(self._variables)
            code = get_tools_definition_code(self._tools) if self._tools else ""
            if code:
                self._run(code, call_id=None)
                self._record_tools()
        finally:
            self._restoring = False

    def _run(self, code: str, *, call_id: str | None) -> CodeOutput:
        if self.backend.closed:
            raise AgentError(
                "this PtcRetryExecutor was cleaned up and its kernel stopped; make a new one",
                self.logger,
            )
        return self._output(self.backend.run_code_sync(code, call_id=call_id))

    def _output(self, result: RunResult) -> CodeOutput:
        """``result`` as smolagents reads an action's end: its output, its final answer, an
        ``AgentError`` for a failure; a pause for a person's approval is an observation
        (smolagents answers an error with "Now let's retry", which a pause must not get)."""
        if result.restarted and not self._restoring:
            self._restore()
        logs = _printed(result)
        self.state = {"_print_outputs": logs}
        error = _error(result)
        if error is not None and error.get("ename") == self.FINAL_ANSWER_EXCEPTION:
            value = self._deserialize_final_answer(str(error.get("evalue", "")), self.allow_pickle)
            return CodeOutput(output=value, logs=logs, is_final_answer=True)
        if result.status == ResultStatus.PAUSED:
            return CodeOutput(output=None, logs=result.text, is_final_answer=False)
        if result.status != ResultStatus.OK:
            raise AgentError(_error_text(result, error), self.logger)
        return CodeOutput(output=result.value, logs=logs, is_final_answer=False)


def _printed(result: RunResult) -> str:
    """What the action printed; when that was more than the backend keeps whole, the text
    the model would read: its head and tail around ``[... n characters cut ...]``."""
    if result.truncated:
        return result.text
    return "".join(
        str(output.get("text", ""))
        for output in result.outputs
        if output.get("output_type") == "stream"
    )


def _error(result: RunResult) -> dict[str, Any] | None:
    for output in result.outputs:
        if output.get("output_type") == "error":
            return output
    return None


def _error_text(result: RunResult, error: dict[str, Any] | None) -> str:
    """The traceback without ANSI codes (its last lines the notice); for a timeout, a dead
    kernel or a refusal, the text the backend wrote for the model."""
    if result.status == "error" and error is not None:
        return strip_ansi("\n".join(str(line) for line in error.get("traceback") or ()))
    return result.text
