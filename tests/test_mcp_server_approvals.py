"""``ptc-retry mcp --approve-destructive``: a program's call of an upstream tool marked
``destructiveHint`` waits for the person, whom the MCP host asks (elicitation), driven by
the official MCP client on a real kernel; the upstream counts the calls it ran."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import OnLoop
from .mcp_servers import StdioServer, stdio_server
from .test_mcp_upstream import needs_sdk

pytestmark = [pytest.mark.kernel, needs_sdk]

#: An upstream MCP server on stdio: ``send`` (destructive) appends to a file, ``peek`` reads.
MAIL_SERVER = """\
import sys
from pathlib import Path
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

outbox = Path(sys.argv[1])
server = MCPServer("mail")


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def send(to: str) -> str:
    '''Send an email.'''
    with outbox.open("a") as file:
        file.write(to + "\\n")
    return f"sent to {to}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False))
def peek() -> int:
    '''How many emails were sent.'''
    return len(outbox.read_text().splitlines()) if outbox.exists() else 0


server.run("stdio")
"""


class Person:
    """Answers the host's questions: allows emails to ann, declines the rest."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, context: Any, params: Any) -> Any:
        import mcp_types as types

        self.asked.append(params.message)
        allowed = '"to": "ann"' in params.message
        return types.ElicitResult(
            action="accept" if allowed else "decline",
            content={"approve": True} if allowed else None,
        )


@pytest.fixture(scope="module")
def outbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("outbox") / "sent.txt"


@pytest.fixture(scope="module")
def person() -> Person:
    return Person()


@pytest.fixture(scope="module")
def server(
    on_loop: OnLoop[Any],
    jupyter_path: Path,
    outbox: Path,
    person: Person,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[StdioServer]:
    script = tmp_path_factory.mktemp("mail") / "mail.py"
    script.write_text(MAIL_SERVER)
    upstream = f"mail={sys.executable} {script} {outbox}"
    root = tmp_path_factory.mktemp("mcp-approvals-root")
    options = ("--upstream", upstream, "--approve-destructive")
    # The initialize handshake: the 2026-07-28 protocol has no server-initiated requests
    # in the middle of a call, so a host speaking it is not asked (the call is denied).
    client = {"elicitation_callback": person, "mode": "legacy"}
    with stdio_server(on_loop, root, *options, **client) as started:
        yield started


def test_a_destructive_upstream_call_runs_only_once_the_person_allows_it(
    on_loop: OnLoop[Any], server: StdioServer, outbox: Path, person: Person
) -> None:
    program = (
        "print(await tools.mail_send(to='ann'))\n"
        "try:\n"
        "    await tools.mail_send(to='bob')\n"
        "except ptc_retry.ToolDenied as denied:\n"
        "    print('denied:', denied.reason)\n"
        "await tools.mail_peek()\n"
    )
    text, error = server.call(on_loop, program)

    assert not error, text
    assert "sent to ann" in text and "denied: the person did not allow this call" in text
    assert outbox.read_text().splitlines() == ["ann"]  # bob's email was never sent
    assert len(person.asked) == 2  # peek is not destructive: nobody was asked about it
    assert "mail_send" in person.asked[0]


def test_the_question_says_which_tool_which_arguments_and_what_each_answer_does(
    on_loop: OnLoop[Any], server: StdioServer, person: Person
) -> None:
    asked = len(person.asked)
    text, error = server.call(on_loop, "print(await tools.mail_send(to='ann'))\n")

    assert not error, text
    (question,) = person.asked[asked:]
    assert 'tools.mail_send with these arguments: {"to": "ann"}' in question
    assert "Allow: the call runs once, with exactly these arguments" in question
    assert "Deny (or decline): the call is not made" in question


def test_the_instructions_mark_only_the_destructive_tool(server: StdioServer) -> None:
    lines = [line for line in server.client.instructions.splitlines() if "tools.mail_" in line]
    marked = [line.split("(")[0] for line in lines if "waits for a person's approval" in line]
    assert marked == ["await tools.mail_send"]
