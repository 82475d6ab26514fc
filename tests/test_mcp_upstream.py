"""Code Mode over other MCP servers: upstream servers' tools as host tools of a backend.

The configuration and the names are pure. The rest runs real upstream servers from the
registries, started as a host starts them (``mcp-server-time`` from PyPI, and
``@modelcontextprotocol/server-filesystem`` through ``npx``), under one real kernel.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.backend import KernelBackend
from ptc_retry.backend.host_tools import HostTool, HostTools
from ptc_retry.core.notice import parse_notice
from ptc_retry.mcp.upstream import (
    UpstreamConfig,
    UpstreamConfigError,
    UpstreamError,
    Upstreams,
    add_upstream_arguments,
    describe,
    result_value,
    tool_name,
    upstream_configs,
)
from ptc_retry.mcp.upstream_config import parse_spec, read_config

from .helpers import OnLoop, StartBackend, raw

NPX = shutil.which("npx")
needs_npx = pytest.mark.skipif(
    NPX is None, reason="npx (Node.js) is not installed: the filesystem server comes from npm"
)
#: The console script pip installs for mcp-server-time (the test extra), as a host runs it.
TIME_SERVER = str(Path(sys.executable).with_name("mcp-server-time"))
needs_sdk = pytest.mark.skipif(
    importlib.util.find_spec("mcp") is None or not Path(TIME_SERVER).exists(),
    reason="mcp and mcp-server-time are test extras of the newest releases only (the SDK 2.x "
    "needs a newer Python stack than the oldest-versions environment has)",
)
#: An upstream that cannot start: it says why on stderr and exits.
BROKEN = [sys.executable, "-c", "import sys; print('boom: no API token', file=sys.stderr); exit(3)"]


# -- the configuration -----------------------------------------------------------------------


def test_a_config_file_gives_each_enabled_server_its_command_or_url(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    servers = {
        "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
        "remote": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X-K": "v"}},
        "off": {"command": "nothing", "disabled": True},
    }
    path.write_text(json.dumps({"mcpServers": servers}, indent=2))

    assert read_config(path) == [
        UpstreamConfig("time", command="uvx", args=("mcp-server-time",), env={"TZ": "UTC"}),
        UpstreamConfig("remote", url="http://127.0.0.1:9/mcp", headers={"X-K": "v"}),
    ]
    # VS Code keeps them under "servers".
    assert read_config({"servers": {"t": {"command": "x"}}}) == [UpstreamConfig("t", "x")]


def test_a_config_reads_environment_variables_as_hosts_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PTC_TEST_TOKEN", "s3cret")
    monkeypatch.delenv("PTC_TEST_UNSET", raising=False)
    server = {
        "command": "${PTC_TEST_UNSET:-uvx}",
        "args": ["--token=${PTC_TEST_TOKEN}", "$PLAIN"],
        "env": {"TOKEN": "${PTC_TEST_TOKEN}", "SAME": "${env:PTC_TEST_TOKEN}"},
    }

    (config,) = read_config({"mcpServers": {"api": server}})

    assert (config.command, config.args) == ("uvx", ("--token=s3cret", "$PLAIN"))
    assert config.env == {"TOKEN": "s3cret", "SAME": "s3cret"}
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {\n  "api": {\n    "url": "https://x/${PTC_TEST_UNSET}"\n}}}')
    with pytest.raises(UpstreamConfigError) as raised:
        read_config(path)
    assert str(raised.value).startswith(f"{path}, line 3: mcpServers.api.url uses ")
    assert "${PTC_TEST_UNSET}, which is not set in the environment" in str(raised.value)


MALFORMED = [
    ('{\n  "mcpServers": {\n    "time": {"command": "uvx",}\n  }\n}', "line 3", "not JSON"),
    ('{\n  "servers2": {}\n}', "line 1", '"mcpServers"'),
    (
        '{"mcpServers": {\n  "a": {"command": "x"},\n  "time": {\n    "args": "mcp-server-time"\n'
        "  }\n}}",
        "line 3",
        'mcpServers.time needs a "command"',
    ),
    (
        '{"mcpServers": {\n  "a": {"command": "x"},\n  "time": {\n    "command": "uvx",\n'
        '    "args": "mcp-server-time"\n  }\n}}',
        "line 5",
        "mcpServers.time.args must be a list",
    ),
    (
        '{"mcpServers": {\n  "time": {\n    "command": "uvx",\n    "env": {"TZ": 1}\n  }\n}}',
        "line 4",
        "mcpServers.time.env must be an object of strings",
    ),
    (
        '{"mcpServers": {\n  "old": {\n    "type": "sse",\n    "url": "http://x"\n  }\n}}',
        "line 3",
        "mcpServers.old.type 'sse' is not supported",
    ),
]


@pytest.mark.parametrize(("text", "line", "said"), MALFORMED)
def test_a_malformed_config_names_the_line_and_the_key(
    tmp_path: Path, text: str, line: str, said: str
) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(text)

    with pytest.raises(UpstreamConfigError) as raised:
        read_config(path)

    assert str(raised.value).startswith(f"{path}, {line}"), raised.value
    assert said in str(raised.value)


def test_an_upstream_spec_is_a_command_split_as_a_shell_would_or_a_url() -> None:
    assert parse_spec("fs=npx -y '@modelcontextprotocol/server-filesystem' '/tmp/my dir'") == (
        UpstreamConfig(
            "fs",
            command="npx",
            args=("-y", "@modelcontextprotocol/server-filesystem", "/tmp/my dir"),
        )
    )
    assert parse_spec("api=https://example.org/mcp") == UpstreamConfig(
        "api", url="https://example.org/mcp"
    )
    for bad in ["uvx mcp-server-time", "=uvx", "time=", "time='unclosed"]:
        with pytest.raises(UpstreamConfigError, match="--upstream"):
            parse_spec(bad)


def test_the_command_line_takes_a_config_file_and_repeated_upstreams(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {"time": {"command": "mcp-server-time"}}}')
    parser = argparse.ArgumentParser()
    add_upstream_arguments(parser)

    given = parser.parse_args(["--config", str(path), "--upstream", "fs=npx -y server /tmp"])

    assert upstream_configs(given) == [
        UpstreamConfig("time", command="mcp-server-time"),
        UpstreamConfig("fs", command="npx", args=("-y", "server", "/tmp")),
    ]
    twice = parser.parse_args(["--config", str(path), "--upstream", "time=other"])
    with pytest.raises(UpstreamConfigError, match="two upstream servers are named 'time'"):
        upstream_configs(twice)
    assert upstream_configs(parser.parse_args([])) == []


def test_a_tools_name_is_its_server_and_its_name_as_one_python_name() -> None:
    assert tool_name("time", "get_current_time") == "time_get_current_time"
    assert tool_name("my-fs", "read.file v2") == "my_fs_read_file_v2"
    assert tool_name("1password", "get") == "mcp_1password_get"
    assert all(tool_name(s, t).isidentifier() for s, t in [("a b", "-"), ("_", "x"), ("é", "y")])


# -- real upstream servers, under a real kernel ----------------------------------------------


#: A real MCP server on streamable HTTP (the SDK's own): ``add_note`` appends to a file,
#: ``wait`` notes its cancellation in another.
NOTES_SERVER = """\
import sys
import anyio
from pathlib import Path
from mcp.server.mcpserver import MCPServer

notes = Path(sys.argv[2])
server = MCPServer("notes")


@server.tool()
def add_note(text: str) -> str:
    \"\"\"Append a note to the notebook.\"\"\"
    with notes.open("a") as file:
        file.write(text + "\\n")
    return f"noted: {text}"


@server.tool()
async def wait(seconds: float) -> str:
    \"\"\"Answer after some seconds; a wait cancelled before says so in events.txt.\"\"\"
    try:
        await anyio.sleep(seconds)
    except BaseException:  # the cancellation of the client's call
        with (notes.parent / "events.txt").open("a") as file:
            file.write("wait cancelled\\n")
        raise
    return "waited"


server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
"""


@pytest.fixture(scope="module")
def notes_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The URL of a running HTTP MCP server, and the file its ``add_note`` appends to."""
    if needs_sdk.args[0]:
        pytest.skip(needs_sdk.kwargs["reason"])
    directory = tmp_path_factory.mktemp("notes")
    (directory / "server.py").write_text(NOTES_SERVER)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    notes = directory / "notes.txt"
    process = subprocess.Popen(
        [sys.executable, str(directory / "server.py"), str(port), str(notes)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as client:
            if client.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    else:
        process.kill()
        pytest.fail("the HTTP MCP server did not listen within 30 s")
    yield f"http://127.0.0.1:{port}/mcp", notes
    process.terminate()
    process.wait(10)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one directory the filesystem server may touch."""
    return tmp_path_factory.mktemp("upstream-files").resolve()


@pytest.fixture(scope="module")
def upstreams(
    files: Path, notes_server: tuple[str, Path], on_loop: OnLoop[Any]
) -> Iterator[Upstreams]:
    """The servers of every test below, each as a host would configure it."""
    servers: dict[str, Any] = {
        "time": {"command": TIME_SERVER, "args": ["--local-timezone", "UTC"]},
        "notes": {"type": "http", "url": notes_server[0]},
        "broken": {"command": BROKEN[0], "args": BROKEN[1:]},
    }
    if NPX is not None:
        servers["filesystem"] = {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", str(files)],
        }
    started = Upstreams.from_config({"mcpServers": servers}, startup_timeout=120)
    on_loop(started.start())
    yield started
    on_loop(started.close())


@pytest.fixture(scope="module")
def backend(
    start_backend: StartBackend, upstreams: Upstreams, options: dict[str, Any]
) -> KernelBackend:
    """The module's backend, whose programs can call every started upstream's tools."""
    started = start_backend(**options)
    upstreams.register(started)
    return started


def test_an_upstream_that_does_not_start_is_named_with_its_stderr_and_the_rest_go_on(
    upstreams: Upstreams, backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    failure = str(upstreams.failures["broken"])
    assert failure.startswith("upstream 'broken' (")
    assert "did not start" in failure and "boom: no API token" in failure
    assert list(upstreams.failures) == ["broken"]

    result = on_loop(
        backend.run_code("await tools.time_get_current_time(timezone='UTC')", timeout=30)
    )
    assert result.status == "ok", result.text
    assert on_loop(backend.run_code("1 + 1")).value == "2"


def test_the_prompt_lists_each_tool_with_its_signature_and_its_hints(
    backend: KernelBackend,
) -> None:
    prompt = backend.system_prompt()

    assert "await tools.time_get_current_time(timezone: str, **kwargs)  # [read-only" in prompt
    assert (
        "await tools.time_convert_time(source_timezone: str, time: str, target_timezone: str"
        in prompt
    )
    if NPX is not None:
        assert re.search(
            r"await tools\.filesystem_write_file\(path: str, content: str.*\)  # "
            r"\[destructive, idempotent\] Create a new file",
            prompt,
        ), prompt
        assert "tools.filesystem_read_text_file(path: str" in prompt
    assert "broken" not in prompt


def test_help_shows_the_signature_and_the_description(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    result = on_loop(backend.run_code("help(tools.time_convert_time)", timeout=30))

    assert result.status == "ok", result.text
    shown = " ".join(result.text.replace("(", "( ").split())  # pydoc may wrap the signature
    assert "time_convert_time( source_timezone: str, time: str, target_timezone: str" in shown
    assert "[read-only" in shown and "Convert time between timezones" in shown


def test_a_program_gets_the_structured_content_and_can_gather_calls(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    program = (
        "import asyncio\n"
        "utc, tokyo = await asyncio.gather(\n"
        "    tools.time_get_current_time(timezone='UTC'),\n"
        "    tools.time_get_current_time('Asia/Tokyo'),\n"
        ")\n"
        "print(type(utc).__name__, utc['timezone'], tokyo['timezone'])\n"
        "moved = await tools.time_convert_time(source_timezone='UTC', time='12:00', "
        "target_timezone='Asia/Tokyo')\n"
        "moved['target']['datetime'][11:16]"
    )

    result = on_loop(backend.run_code(program, timeout=30))

    assert result.status == "ok", result.text
    assert result.text.startswith("dict UTC Asia/Tokyo")
    assert result.value == "'21:00'"


def test_an_upstream_error_is_a_tool_error_in_the_program(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    program = (
        "try:\n"
        "    await tools.time_get_current_time(timezone='Mars/Olympus_Mons')\n"
        "except ptc_retry.ToolError as error:\n"
        "    print(error)\n"
    )

    result = on_loop(backend.run_code(program, timeout=30))

    assert result.status == "ok", result.text
    assert "tools.time_get_current_time: UpstreamError: upstream 'time': " in result.text
    assert "Mars/Olympus_Mons" in result.text


@needs_npx
def test_a_replay_of_a_program_that_wrote_a_file_does_not_write_it_again(
    backend: KernelBackend, files: Path, on_loop: OnLoop[Any]
) -> None:
    report = files / "report.txt"
    program = f"""\
rows = [
    {{"city": "Paris", "orders": 120, "returns": 4}},
    {{"city": "Lyon", "orders": 75, "returns": 2}},
    {{"city": "Nice", "orders": 31, "returns": 3}},
    {{"city": "Lille", "orders": 58, "returns": 1}},
]
lines = [f"{{row['city']}}: {{row['orders']}} orders, {{row['returns']}} returns" for row in rows]
saved = await tools.filesystem_write_file(path={str(report)!r}, content="\\n".join(lines) + "\\n")
print(saved["content"] if isinstance(saved, dict) else saved)
listing = await tools.filesystem_list_directory(path={str(files)!r})
rates = {{row["city"]: round(row["returns"] / row["orders"], 3) for row in rows}}
worst = max(rates, key=rates.get)
print("worst return rate:", worst, rates[worst])
print("orders in all:", sum(row["ordres"] for row in rows))
"""
    failed = on_loop(backend.handle_tool_call("run_code", raw(program), "call_up1"))
    assert "KeyError: 'ordres'" in failed, failed
    written = report.stat()
    reference = parse_notice(failed)
    assert reference is not None, failed

    line = f"await ptc_retry.replay({reference!r}, 'row[\"ordres\"]', 'row[\"orders\"]')"
    fixed = on_loop(backend.handle_tool_call("run_code", raw(line), "call_up2"))

    assert "orders in all: 284" in fixed, fixed
    assert "worst return rate: Nice 0.097" in fixed
    # Exactly one write: the file is the one the failed program wrote, untouched since.
    after = report.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_ctime_ns) == (
        written.st_ino,
        written.st_mtime_ns,
        written.st_ctime_ns,
    )
    assert report.read_text().count("Paris") == 1


@needs_npx
def test_a_path_outside_the_servers_directories_is_its_error(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    result = on_loop(
        backend.run_code("await tools.filesystem_read_text_file(path='/etc/hostname')")
    )

    assert (result.status, result.ename) == ("error", "ToolError"), result.text
    assert "upstream 'filesystem'" in (result.evalue or "")
    assert "outside allowed directories" in (result.evalue or "")


def child_processes(word: str, parent: int | None = None) -> list[int]:
    """The children of ``parent`` (default: this process) whose command line holds ``word``."""
    parent = os.getpid() if parent is None else parent
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            its_parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):
            continue
        if its_parent == parent and word in command:
            found.append(int(entry.name))
    return found


def test_an_upstream_that_dies_fails_its_call_naming_it_and_the_next_call_restarts_it(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    (pid,) = child_processes("mcp-server-time")
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pid in child_processes("mcp-server-time") and time.monotonic() < deadline:
        time.sleep(0.05)
    ask = "(await tools.time_get_current_time(timezone='UTC'))['timezone']"

    died = on_loop(backend.run_code(ask, timeout=30))

    assert (died.status, died.ename) == ("error", "ToolError"), died.text
    assert "upstream 'time' stopped" in (died.evalue or "")
    assert "next call starts the server again" in (died.evalue or "")

    started = time.monotonic()
    again = on_loop(backend.run_code(ask, timeout=30))
    assert (again.status, again.value) == ("ok", "'UTC'"), again.text
    assert time.monotonic() - started < 20
    assert len(child_processes("mcp-server-time")) == 1


# -- a tool built from a schema; a server that never answers; one reached over HTTP ----------


def test_a_tool_built_from_a_schema_is_named_and_checked_as_a_registered_one() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}

    async def search(**arguments: Any) -> Any:
        return arguments

    tools = HostTools()
    with pytest.raises(ValueError, match="must be a Python identifier"):
        tools.add(HostTool("web-search", "Search.", schema, search, is_async=True))
    tools.add(HostTool("web_search", "Search.", schema, search, is_async=True))
    with pytest.raises(ValueError, match="already registered"):
        tools.add(HostTool("web_search", "Again.", schema, search, is_async=True))

    ok, refused = asyncio.run(
        tools.answer(
            [
                {"id": 1, "tool": "web_search", "arguments": {"q": "mcp"}},
                {"id": 2, "tool": "web_search", "arguments": {"q": 7}},
            ]
        )
    )
    assert ok == {"id": 1, "ok": True, "result": {"q": "mcp"}}
    assert not refused["ok"] and "'q' must be a string" in refused["error"]
    assert "it takes (q: str, **kwargs)" in refused["error"]


@needs_sdk
def test_a_server_that_never_answers_is_given_up_on_and_stopped() -> None:
    silent = UpstreamConfig("silent", command=sys.executable, args=("-c", SILENT))

    async def start() -> tuple[str, float]:
        upstreams = Upstreams([silent], startup_timeout=1)
        started = time.monotonic()
        async with upstreams:
            return str(upstreams.failures["silent"]), time.monotonic() - started

    failure, seconds = asyncio.run(asyncio.wait_for(start(), 20))

    assert failure.startswith("upstream 'silent' (") and "no answer within 1 s" in failure
    assert "listening, never answering" in failure  # its stderr
    assert seconds < 8
    assert child_processes(SILENT) == []


#: A stdio "server" that says so on stderr and then reads nothing.
SILENT = "import sys, time; print('listening, never answering', file=sys.stderr); time.sleep(60)"


def test_an_http_upstreams_call_is_reused_by_a_replay(
    backend: KernelBackend, notes_server: tuple[str, Path], on_loop: OnLoop[Any]
) -> None:
    _, notes = notes_server
    program = (
        "saved = await tools.notes_add_note(text='buy milk')\n"
        "print(saved)\n"
        "total = len(saved) / zero\n"
    )
    failed = on_loop(backend.run_code(program, timeout=30))
    assert failed.status == "error" and "noted: buy milk" in failed.text, failed.text

    line = f"await ptc_retry.replay({failed.call_id!r}, '/ zero', '/ 2')"
    fixed = on_loop(backend.run_code(line, timeout=30))

    assert fixed.status == "ok" and "noted: buy milk" in fixed.text, fixed.text
    assert notes.read_text() == "buy milk\n"  # one call reached the server


def test_a_program_stopped_by_its_time_limit_cancels_its_upstream_call(
    backend: KernelBackend, notes_server: tuple[str, Path], on_loop: OnLoop[Any]
) -> None:
    events = notes_server[1].parent / "events.txt"
    started = time.monotonic()

    stopped = on_loop(backend.run_code("await tools.notes_wait(seconds=60)", timeout=2))

    assert stopped.status == "timeout", stopped.text
    assert time.monotonic() - started < 10
    on_loop(_eventually(events.exists, 10))  # the loop runs while the cancellation goes out
    assert events.read_text() == "wait cancelled\n"  # the upstream's handler was cancelled too
    after = on_loop(backend.run_code("await tools.notes_wait(seconds=0)", timeout=20))
    assert (after.status, after.value) == ("ok", "{'result': 'waited'}"), after.text


async def _eventually(check: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


@needs_sdk
def test_a_result_is_its_structured_content_else_its_text_and_hints_say_what_is_stated() -> None:
    import mcp_types as types

    text = types.TextContent(text='{"kept": "as text"}')
    image = types.ImageContent(data="aGk=", mime_type="image/png")
    embedded = types.EmbeddedResource(
        type="resource", resource=types.TextResourceContents(uri="file:///a.txt", text="A")
    )
    structured = types.CallToolResult(content=[text], structured_content={"n": 1})

    assert result_value(structured) == {"n": 1}
    assert result_value(types.CallToolResult(content=[text, image, embedded])) == (
        '{"kept": "as text"}\n[image image/png]\nA'
    )
    tool = types.Tool(
        name="mkdir",
        description="Make a directory.\n\n  Parents too.",
        input_schema={"type": "object"},
        annotations=types.ToolAnnotations(destructive_hint=False, idempotent_hint=True),
    )
    assert describe(tool) == "[not destructive, idempotent] Make a directory. Parents too."
    unstated = tool.model_copy(update={"annotations": None})
    assert describe(unstated) == "Make a directory. Parents too."


#: A time server that will not start while the flag file ``sys.argv[1]`` exists.
GUARDED = f"""\
import os, sys
if os.path.exists(sys.argv[1]):
    sys.exit(print("token expired: log in again", file=sys.stderr) or 4)
os.execv({TIME_SERVER!r}, [{TIME_SERVER!r}, "--local-timezone", "Europe/Paris"])
"""


@needs_sdk
def test_an_upstream_that_cannot_start_again_says_why_and_a_later_call_starts_it(
    tmp_path: Path,
) -> None:
    flag = tmp_path / "expired"
    guarded = UpstreamConfig("clock", command=sys.executable, args=("-c", GUARDED, str(flag)))

    async def calls() -> list[str]:
        said = []
        async with Upstreams([guarded], startup_timeout=30) as upstreams:
            (clock,) = upstreams.upstreams
            for step in ("kill", "restart", "recover"):
                if step == "kill":
                    flag.touch()
                    os.kill(*child_processes("Europe/Paris"), signal.SIGKILL)
                if step == "recover":
                    flag.unlink()
                try:
                    said.append(str(await clock.call("get_current_time", {"timezone": "UTC"})))
                except UpstreamError as error:
                    said.append(str(error))
        return said

    died, refused, answered = asyncio.run(asyncio.wait_for(calls(), 60))

    assert died.startswith("upstream 'clock' stopped"), died
    assert refused.startswith("upstream 'clock' (") and "did not start" in refused, refused
    assert "token expired: log in again" in refused
    assert "'timezone': 'UTC'" in answered, answered
