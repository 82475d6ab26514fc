"""smolagents' ``CodeAgent`` on a ptc-retry kernel through ``PtcRetryExecutor``: a real agent,
a scripted model (no network), a real kernel."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

smolagents = pytest.importorskip("smolagents", reason="smolagents is an optional extra")

from smolagents import CodeAgent, tool  # noqa: E402
from smolagents.models import ChatMessage, MessageRole, Model  # noqa: E402

from ptc_retry.backend import KernelBackend  # noqa: E402
from ptc_retry.core.notice import parse_notice  # noqa: E402
from ptc_retry.integrations.smolagents import PtcRetryExecutor  # noqa: E402

from .helpers import PRICED_ORDERS, PRICED_TOTAL  # noqa: E402

pytestmark = pytest.mark.kernel

#: About 1 KB: two calls of the smolagents tool, then a wrong key.
STEP_ONE = PRICED_ORDERS.replace("await tools.lookup_price", "lookup_price").replace(
    'print("total:", total)', "final_answer(total)"
)


@tool
def lookup_price(item: str) -> float:
    """Look up the price of an item, writing each call to the file PTC_TEST_TOOL_LOG names.

    Args:
        item: The item's name.
    """
    import os

    with open(os.environ["PTC_TEST_TOOL_LOG"], "a") as log:
        log.write(item + "\n")
    return {"tea": 3.0, "milk": 2.0}.get(item, 1.0)


class Plain(str):
    """A reply of ``ScriptedModel`` sent as it is (a plan, or a reply without code)."""


class ScriptedModel(Model):
    """Answers each step with the next of ``steps``: a program, a function of the messages
    so far (the model reads its memory) that returns one, or a ``Plain`` reply."""

    def __init__(self, steps: list[str | Callable[[list[Any]], str]]) -> None:
        super().__init__(model_id="scripted")
        self.steps = list(steps)
        self.seen: list[list[Any]] = []

    def generate(self, messages: list[Any], **kwargs: Any) -> ChatMessage:
        self.seen.append(messages)
        step = self.steps.pop(0)
        if isinstance(step, Plain):
            return ChatMessage(role=MessageRole.ASSISTANT, content=str(step))
        code = step(messages) if callable(step) else step
        return ChatMessage(
            role=MessageRole.ASSISTANT, content=f"Thought: go.\n<code>\n{code}\n</code>"
        )


def _text(messages: list[Any]) -> str:
    parts = []
    for message in messages:
        content = message.content if hasattr(message, "content") else message.get("content")
        if isinstance(content, list):
            parts += [str(part.get("text", "")) for part in content if isinstance(part, dict)]
        else:
            parts.append(str(content))
    return "\n".join(parts)


def replay_line(messages: list[Any]) -> str:
    """What a model writes after reading the notice: the one-line fix."""
    reference = parse_notice(_text(messages).split("Call id: call_1")[-1])
    assert reference is not None, "the notice did not reach the model"
    return f"await ptc_retry.replay({json.dumps(reference)}, 'order[\"qyt\"]', 'order[\"qty\"]')"


def agent_on(
    executor: PtcRetryExecutor, model: Model, tools: list[Any] | None = None, **options: Any
) -> CodeAgent:
    """A ``CodeAgent`` on ``executor``, attached to it: its actions keep smolagents' ids."""
    return executor.attach(CodeAgent(tools=tools or [], model=model, executor=executor, **options))


@pytest.fixture
def tool_log(tmp_path: Path) -> Path:
    return tmp_path / "tool-calls.log"


@pytest.fixture
def executor(jupyter_path: Path, tmp_path: Path, tool_log: Path) -> Iterator[PtcRetryExecutor]:
    executor = PtcRetryExecutor(
        root=tmp_path / "checkpoints", keep=True, env={"PTC_TEST_TOOL_LOG": str(tool_log)}
    )
    yield executor
    executor.cleanup()


def test_a_failed_action_is_fixed_by_a_one_line_replay(
    executor: PtcRetryExecutor, tool_log: Path
) -> None:
    model = ScriptedModel([STEP_ONE, replay_line])
    agent = agent_on(executor, model, [lookup_price], max_steps=4)

    answer = agent.run("What do the orders cost?")

    assert answer == PRICED_TOTAL and 1000 < len(STEP_ONE) < 1300
    failed = agent.memory.steps[1]
    assert failed.error is not None
    message = str(failed.error)
    assert "KeyError: 'qyt'" in message and "\x1b" not in message
    assert message.rstrip().splitlines()[-2].startswith("[ptc-retry] Saved as #")
    assert len(model.steps) == 0 and len(agent.memory.steps) == 3  # task, failure, replay
    session = executor.backend.session_dir
    assert session is not None
    saved = json.loads((session / "by-id" / "call_1.json").read_text())
    assert saved == {"code": STEP_ONE}  # step 1's program, byte for byte
    assert tool_log.read_text().splitlines() == ["tea", "milk"]  # the replay reused both
    history = [json.loads(line) for line in (session / "history.jsonl").open()]
    replayed = next(line for line in history if line["id"] == "call_2")
    assert replayed["replay_of"] == "call_1"
    assert replayed["tool_calls"] == {"reused": 2, "live": 0}


def test_after_a_reset_the_replay_fixes_this_run_s_program_not_the_last_run_s(
    executor: PtcRetryExecutor, tool_log: Path
) -> None:
    # smolagents numbers the actions of each run from call_1 again: both runs' first actions
    # are "Call id: call_1" to the model. The second run asks for other items.
    second_run = STEP_ONE.replace('["tea", "milk"]', '["coffee", "milk"]').replace(
        '"tea"', '"coffee"'
    )
    by_call_id = "await ptc_retry.replay('call_1', 'order[\"qyt\"]', 'order[\"qty\"]')"

    def memory_shows_call_1(messages: list[Any]) -> str:
        assert "Call id: call_1" in _text(messages)
        return by_call_id

    agent = agent_on(executor, ScriptedModel([STEP_ONE, replay_line]), [lookup_price], max_steps=4)
    agent.run("What do the orders cost?")
    agent.model = ScriptedModel([second_run, memory_shows_call_1, replay_line])

    answer = agent.run("And these orders?", reset=True)

    assert answer == 3 * (1.0 * 2 + 2.0 * 3 + 1.0 * 1 + 2.0 * 4)  # coffee: 1.0
    refused = str(agent.memory.steps[2].error)
    assert "ReplayError: call id 'call_1' names 2 programs" in refused
    assert "(call_1), #" in refused and "(call_1.2); give the reference" in refused
    # Each run's tools ran once: the refused replay ran nothing, the replay reused the rest.
    assert tool_log.read_text().splitlines() == ["tea", "milk", "coffee", "milk"]


def test_final_answer_ends_the_run_without_a_notice(executor: PtcRetryExecutor) -> None:
    model = ScriptedModel(["x = 6 * 7\nfinal_answer(x)"])
    agent = agent_on(executor, model, max_steps=2)

    assert agent.run("Compute.") == 42
    assert "[ptc-retry]" not in str(agent.memory.steps[1].observations or "")
    assert agent.memory.steps[1].error is None


def test_a_kernel_death_in_a_step_is_reported_and_the_next_step_works(
    executor: PtcRetryExecutor,
) -> None:
    model = ScriptedModel(
        [
            "print('before')\nimport os\nos._exit(3)",
            "final_answer('alive')",
        ]
    )
    agent = agent_on(executor, model, max_steps=3)

    assert agent.run("Survive.") == "alive"
    died = str(agent.memory.steps[1].error)
    assert re.search(r"kernel died", died) and "exit code 3" in died


def test_the_agent_s_runs_are_turns_and_its_actions_are_numbered_as_smolagents_does(
    executor: PtcRetryExecutor,
) -> None:
    # smolagents numbers an action by the steps in its memory: each run's task and plan, and
    # a step whose reply held no code, count too, though the executor sees none of them.
    steps: list[Any] = [Plain("Plan: set a."), Plain("No code in this reply."), "a = 1"]
    agent = agent_on(executor, ScriptedModel([*steps, "final_answer(a)"]), planning_interval=5)
    agent.run("First.")
    agent.model = ScriptedModel([Plain("Plan: add one."), "final_answer(a + 1)"])
    assert agent.run("Second.", reset=False) == 2
    session = executor.backend.session_dir
    assert session is not None
    history = [json.loads(line) for line in (session / "history.jsonl").open()]
    actions = [(line["id"], line["turn"]) for line in history if line["id"].startswith("call_")]
    assert actions == [("call_3", 1), ("call_4", 1), ("call_7", 2)]
    tool_calls = [
        step.tool_calls[0].id for step in agent.memory.steps if getattr(step, "tool_calls", None)
    ]
    assert tool_calls == ["call_3", "call_4", "call_7"]


def test_an_executor_no_agent_was_attached_to_gives_its_actions_the_backend_s_ids(
    executor: PtcRetryExecutor,
) -> None:
    agent = CodeAgent(tools=[], model=ScriptedModel(["final_answer(5)"]), executor=executor)

    assert agent.run("Five.") == 5
    session = executor.backend.session_dir
    assert session is not None
    history = [json.loads(line) for line in (session / "history.jsonl").open()]
    assert not [line for line in history if line["id"].startswith("call_")]
    assert re.fullmatch(r"c\d+", history[-1]["id"])  # the notice names it #n, not call_1


def test_attach_takes_only_the_agent_made_on_the_executor(executor: PtcRetryExecutor) -> None:
    other = CodeAgent(tools=[], model=ScriptedModel([]))
    with pytest.raises(ValueError, match=r"executor= this executor"):
        executor.attach(other)


def test_cleanup_leaves_no_kernel_process(jupyter_path: Path, tmp_path: Path) -> None:
    executor = PtcRetryExecutor(root=tmp_path / "checkpoints")
    pid = executor.backend.kernel_manager.provisioner.pid
    executor.cleanup()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_flood_of_output_reaches_the_agent_bounded_with_its_end(
    executor: PtcRetryExecutor,
) -> None:
    out = executor("for i in range(200_000): print('row', i)\nprint('END')")
    limit = executor.backend.max_output_chars
    assert len(out.logs) < limit + 200 and "characters cut ...]" in out.logs
    assert out.logs.rstrip().endswith("END")


def test_an_executor_used_after_cleanup_says_to_make_a_new_one(
    jupyter_path: Path, tmp_path: Path
) -> None:
    executor = PtcRetryExecutor(root=tmp_path / "checkpoints")
    executor.cleanup()
    executor.cleanup()  # twice is fine
    with pytest.raises(smolagents.utils.AgentError, match="cleaned up.*make a new one"):
        executor("x = 1")


def test_a_paused_action_is_no_error_and_the_person_s_approval_gives_the_final_answer(
    jupyter_path: Path, tmp_path: Path
) -> None:
    """An action that pauses before a call that waits for a person is an observation, not
    an error that smolagents answers with "Now let's retry": its pause line says not to
    send it again. ``executor.approve(ref)`` goes on with it and reads its end as any
    action's: here its ``final_answer``."""
    outbox: list[str] = []

    def send_email(to: str, body: str) -> str:
        """Send an email."""
        outbox.append(to)
        return "sent"

    backend = KernelBackend(root=tmp_path / "checkpoints")
    backend.register_tool(send_email, approval=True)
    executor = PtcRetryExecutor(backend=backend)
    try:
        emailing = 'r = await tools.send_email(to="ann", body="hi")\nfinal_answer(r)'
        model = ScriptedModel([emailing, "final_answer('waiting for a person')"])
        agent = agent_on(executor, model, max_steps=3)

        assert agent.run("Email Ann.") == "waiting for a person"
        paused = agent.memory.steps[1]
        assert paused.error is None and outbox == []
        observed = str(paused.observations)
        assert "[ptc-retry] Paused before tools.send_email" in observed
        assert "retry" not in observed.lower().split("do not send it again")[-1]
        (waiting,) = backend.pending_approvals()

        done = executor.approve(waiting.reference)

        assert done is not None and done.is_final_answer and done.output == "sent"
        assert outbox == ["ann"]
    finally:
        executor.cleanup()
