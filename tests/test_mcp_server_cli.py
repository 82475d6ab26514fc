"""``ptc-retry mcp`` on the command line, without a kernel: what it says when the MCP SDK
is missing, and the options it refuses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ptc_retry.cli import main
from ptc_retry.mcp import MISSING_SDK

from .mcp_servers import ptc_retry_command

#: Runs the CLI in a Python where ``import mcp`` fails, as without the ``mcp`` extra.
WITHOUT_SDK = (
    "import sys; sys.modules['mcp'] = None; "
    "from ptc_retry.cli import main; sys.exit(main(sys.argv[1:]))"
)


def without_sdk(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_SDK, *argv], capture_output=True, text=True, timeout=60
    )


def test_without_the_sdk_ptc_retry_mcp_says_what_to_install() -> None:
    done = without_sdk("mcp")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == f"ptc-retry mcp: {MISSING_SDK}\n"
    assert "pip install 'ptc-retry[mcp]'" in done.stderr


def test_without_the_sdk_the_other_commands_and_the_help_work() -> None:
    done = without_sdk("--help")
    assert done.returncode == 0
    assert "mcp" in done.stdout


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--http", "8000", "is not HOST:PORT"),
        ("--http", "localhost:99999", "is not HOST:PORT"),
        ("--idle-timeout", "0", "is not a number of seconds > 0"),
        ("--timeout", "nan", "is not a number of seconds > 0"),
        ("--max-sessions", "0", "is not a whole number >= 1"),
    ],
)
def test_malformed_options_are_usage_errors_that_say_what_to_write(
    capsys: pytest.CaptureFixture[str], option: str, value: str, said: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["mcp", option, value])
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(
    ("config", "upstream", "said"),
    [
        (
            '{"mcpServers": {\n  "time": {\n    "command": "uvx",\n    "args": "mcp-server-time"\n'
            "  }\n}}",
            [],
            ", line 4: mcpServers.time.args must be a list of strings",
        ),
        ('{"mcpServers": {"time": {"command": "uvx"}}}', ["time=other"], "named 'time'"),
        (None, ["uvx mcp-server-time"], "expected NAME=COMMAND ARGS..."),
    ],
)
def test_a_malformed_upstream_configuration_is_a_usage_error_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    config: str | None,
    upstream: list[str],
    said: str,
) -> None:
    pytest.importorskip("mcp")
    argv = ["mcp", "--kernel-name", "no-such-kernel"]  # a kernel it started would fail later
    if config is not None:
        (tmp_path / "mcp.json").write_text(config)
        argv += ["--config", str(tmp_path / "mcp.json")]
    for spec in upstream:
        argv += ["--upstream", spec]

    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("ptc-retry mcp: ") and said in err, err
    if config is not None and not upstream:
        assert err.startswith(f"ptc-retry mcp: {tmp_path / 'mcp.json'}, line 4: "), err


def test_a_kernel_that_does_not_start_ends_the_server_at_once_saying_why(
    jupyter_path: Path,
) -> None:
    pytest.importorskip("mcp")
    command = [*ptc_retry_command(), "mcp", "--kernel-name", "no-such-kernel"]
    # stdin stays open, as a host keeps it: the server must not wait for it to close.
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as server:
        stdout, stderr = _wait(server)
    assert server.returncode == 1
    assert stdout == b""
    assert b"ptc-retry mcp: no kernel named 'no-such-kernel'; the kernels here are:" in stderr


def _wait(server: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """The server's output once it exits by itself, within 30 s (stdin left open)."""
    assert server.stdout is not None and server.stderr is not None
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
        raise AssertionError("the server waited for stdin instead of exiting") from None
    return server.stdout.read(), server.stderr.read()
