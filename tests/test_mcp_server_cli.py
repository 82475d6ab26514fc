"""``ptc-retry mcp`` on the command line, without a kernel: what it says when the MCP SDK
is missing, and the options it refuses."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ptc_retry.cli import main
from ptc_retry.mcp import MISSING_SDK

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
