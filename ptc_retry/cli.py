"""The ``ptc-retry`` command line: the demo, the prompt section, the kernelspec, the
evaluation, the MCP server (``mcp``), and reading and cleaning sessions (``history``, ``show``,
``stats``, ``gc``). Here: what each command accepts, and its help; what each does (and which
only read) is :mod:`ptc_retry.commands`'.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .commands import (
    AGE_UNITS,
    LIVE_APIS,
    CommandFailed,
    run_demo,
    run_eval,
    run_gc,
    run_history,
    run_install_kernel,
    run_mcp,
    run_prompt,
    run_show,
    run_stats,
)
from .core.root import default_root
from .core.status import HistoryStatus, Mode, status_table


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code.

    0: done. 1: nothing to show or not done (no session yet, an unknown session or call id,
    a session directory ``gc`` could not remove). 2: a usage error (unknown option,
    malformed value), or a root refused as unsafe (``demo``: also one it cannot write).
    ``history``, ``show``, ``stats`` and ``gc`` take ``--root DIR``; the default is the
    store's (``$PTC_RETRY_ROOT`` when set, else ``<tempdir>/ptc-retry-<uid>``), and a root
    that is a symlink, belongs to another user or is a shared sticky directory is refused,
    by the store's own rules.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except CommandFailed as exc:
        print(f"ptc-retry {args.command}: {exc}", file=sys.stderr)
        return exc.code


def build_parser() -> argparse.ArgumentParser:
    """Every command's arguments and help; a parsed command's ``run(args)`` runs it."""
    parser = argparse.ArgumentParser(
        prog="ptc-retry",
        description="Keep every program a Jupyter kernel runs; replay a failed one with a fix.",
    )
    parser.add_argument("--version", action="version", version=f"ptc-retry {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_demo_command(commands)
    _add_prompt_command(commands)
    _add_install_kernel_command(commands)
    _add_eval_command(commands)
    _add_mcp_command(commands)
    _add_session_commands(commands)
    for name, subparser in commands.choices.items():
        subparser.set_defaults(command=name)
    return parser


def _add_demo_command(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser(
        "demo", help="run a scripted agent on a real kernel: a failure, the notice, the replay"
    )
    demo.add_argument(
        "--save",
        metavar="PATH.ipynb",
        help="also write the session as a notebook you can open in JupyterLab",
    )
    demo.set_defaults(run=run_demo)


def _add_prompt_command(commands: argparse._SubParsersAction) -> None:
    prompt = commands.add_parser("prompt", help="print the system-prompt section for a session")
    prompt.add_argument(
        "--mode",
        default=Mode.CODE.value,
        choices=[mode.value for mode in Mode],
        help="; ".join(f"{mode}: {mode.meaning}" for mode in Mode),
    )
    prompt.add_argument(
        "--session-dir",
        help="the session directory the kernel saves programs in (default: the pattern)",
    )
    prompt.set_defaults(run=run_prompt)


def _add_install_kernel_command(commands: argparse._SubParsersAction) -> None:
    install = commands.add_parser("install-kernel", help="install the ptc-retry kernelspec")
    where = install.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="into your own Jupyter data directory")
    where.add_argument(
        "--sys-prefix", action="store_true", help="into this Python environment (sys.prefix)"
    )
    where.add_argument("--prefix", metavar="P", help="into P/share/jupyter/kernels")
    install.add_argument("--name", default="ptc-retry", help="kernelspec name (default ptc-retry)")
    install.add_argument(
        "--display-name", default="Python 3 (ptc-retry)", help="name shown in Jupyter"
    )
    install.set_defaults(run=run_install_kernel)


def _add_eval_command(commands: argparse._SubParsersAction) -> None:
    evaluate = commands.add_parser(
        "eval",
        help="measure what replay saves: a scripted A/B run on real kernels, with a report",
        description="Play a corpus of failed agent programs on the stock python3 kernel "
        "(the model re-sends the program) and on the ptc-retry kernel (it sends the replay "
        "the notice teaches), check both reach the same result, and write report.md, "
        "report.json and savings.png. Exit status 1 when an arm did not reach it.",
    )
    evaluate.add_argument(
        "--out",
        metavar="DIR",
        help="where to write the report (default: eval-report/, with --live eval-live-report/)",
    )
    evaluate.add_argument(
        "--quick",
        action="store_true",
        help="a few scenarios and two cut-off calls: each size, and each case of references "
        "(for tests)",
    )
    live = evaluate.add_argument_group(
        "live", 'a real model fixes the failed programs (docs/eval.md, "Live")'
    )
    live.add_argument(
        "--live",
        action="store_true",
        help="ask a model for each fix, through its API, and measure adoption, right results "
        "and the API's token counts in both arms (needs the key: OPENAI_API_KEY or "
        "ANTHROPIC_API_KEY)",
    )
    live.add_argument(
        "--api",
        choices=LIVE_APIS,
        default="openai",
        help="openai: Chat Completions (any compatible endpoint); anthropic: Messages",
    )
    live.add_argument("--model", help="the model to ask (default: gpt-4.1-mini, claude-sonnet-4-5)")
    live.add_argument("--base-url", metavar="URL", help="the endpoint (default: the API's own)")
    evaluate.set_defaults(run=run_eval)


# -- the MCP server ----------------------------------------------------------------------------


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0, such as 30")
    return value


def _at_least_one(text: str) -> int:
    count = _count(text)
    if count < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return count


def _host_port(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not host or not re.fullmatch(r"[0-9]{1,5}", port) or int(port) > 65535:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not HOST:PORT; write e.g. 127.0.0.1:8000 (port 0: any free port)"
        )
    return host.strip("[]"), int(port)


def _add_mcp_command(commands: argparse._SubParsersAction) -> None:
    mcp = commands.add_parser(
        "mcp",
        help="serve run_code to MCP hosts (Claude Code, Claude Desktop, Cursor, VS Code)",
        description="Serve MCP: a run_code tool on a persistent ptc-retry kernel, the prompt "
        "section as the server's instructions. stdio by default (one kernel for the host's "
        "session; stdout carries only the protocol, logs go to stderr); --http HOST:PORT "
        "serves Streamable HTTP at /mcp with one kernel per MCP session. Programs stay saved "
        "after the server ends: `ptc-retry history` lists them. Needs the mcp extra: "
        "pip install 'ptc-retry[mcp]'. Manual: docs/mcp.md.",
    )
    _add_http_options(mcp)
    _add_kernel_options(mcp)
    _add_program_options(mcp)
    from .mcp.upstream import add_upstream_arguments

    add_upstream_arguments(mcp)
    mcp.set_defaults(run=run_mcp)


def _add_http_options(mcp: argparse.ArgumentParser) -> None:
    """``--http`` and the limits of the sessions it serves."""
    mcp.add_argument(
        "--http",
        metavar="HOST:PORT",
        type=_host_port,
        help="serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio",
    )
    mcp.add_argument(
        "--idle-timeout",
        metavar="SECONDS",
        type=_seconds,
        default=1800.0,
        help="HTTP: end a session (and shut its kernel down) after this long without a "
        "request in flight (default 1800)",
    )
    mcp.add_argument(
        "--max-sessions",
        metavar="N",
        type=_at_least_one,
        default=16,
        help="HTTP: sessions (kernels) open at once; a new one beyond is refused with "
        "HTTP 503 (default 16)",
    )


def _add_kernel_options(mcp: argparse.ArgumentParser) -> None:
    """Which kernel each session starts, where, and where its programs are saved."""
    mcp.add_argument(
        "--gateway-url",
        metavar="URL",
        help="start the kernels behind this Kernel Gateway or Enterprise Gateway",
    )
    mcp.add_argument(
        "--token",
        metavar="TOKEN",
        help="the gateway's auth token (default: $PTC_RETRY_GATEWAY_TOKEN)",
    )
    mcp.add_argument(
        "--kernel-name", metavar="NAME", help="the kernelspec to start (default ptc-retry)"
    )
    mcp.add_argument(
        "--root",
        metavar="DIR",
        type=Path,
        help="where programs are saved (default: $PTC_RETRY_ROOT, else <tempdir>/ptc-retry-<uid>)",
    )


def _add_program_options(mcp: argparse.ArgumentParser) -> None:
    """How long a program may run, and how often the host hears of one that runs."""
    mcp.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=_seconds,
        help="stop a program after this long, keeping what it printed (default: no limit)",
    )
    mcp.add_argument(
        "--progress-every",
        metavar="SECONDS",
        type=_seconds,
        default=5.0,
        help="while a program runs, send the host a progress notification with the end of "
        "what it printed this often, when the host asked for progress (default 5)",
    )


# -- reading and cleaning sessions -------------------------------------------------------------

_AGE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhdw])")
_SESSION_HELP = "the session directory's name (default: the most recently modified session)"
_HISTORY_EPILOG = f"""\
columns:
  ref        #n, the program's number in the session: ptc-retry show '#n' prints it and
             ptc_retry.replay("#n", ...) replays it (blank on lines of older versions)
  id         the call id
  status     how the call ended:
{status_table(HistoryStatus, indent=13)}
  turn       the user turn the backend gave (shown when some call has one other than 0)
  step       the model message the call belonged to; "-": a step of its own
  ordinal    the call's position in its step: previous/<ordinal>.json once the next step
             starts (step and ordinal are shown only when a backend sent steps)
  bytes      the program's size in UTF-8 bytes (older lines and unfinished calls: the size of
             the saved JSON arguments)
  ename      the exception a failed call raised
  replay_of  the call this one replayed
  when       when the call started, local time
A line "-- kernel restarted ---" separates the calls of two kernel processes; it follows
the unfinished call during which a kernel died."""
_STATS_EPILOG = """\
columns:
  calls              distinct call ids in the session
  failures           calls that ended in an error or were interrupted
  replays            calls that replayed an earlier one (ptc_retry.replay)
  unfinished         calls saved but never finished: still running, or their kernel died
  program bytes      bytes of every saved program (by-id/*.json) on disk
  bytes not re-sent  for each replay, the saved size of the program it replayed: the bytes the
                     model would have sent again without ptc-retry. The replay call's own short
                     line is not recorded anywhere, so it is not subtracted."""


def parse_age(text: str) -> float:
    """``30m``, ``12h``, ``7d`` (also ``s`` and ``w``) as seconds."""
    match = _AGE.fullmatch(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age: write a number and a unit, e.g. 30m, 12h or 7d "
            "(units: s, m, h, d, w)"
        )
    return float(match.group(1)) * AGE_UNITS[match.group(2)]


def _count(text: str) -> int:
    if not re.fullmatch(r"[0-9]+", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return int(text)


def _add_session_commands(commands: argparse._SubParsersAction) -> None:
    """``history``, ``show``, ``stats`` and ``gc``: each takes ``--root``; ``history`` and
    ``show`` also ``--session``, which ``stats`` offers beside ``--all``."""
    root, pick = _root_option(), _session_option()
    _add_history_command(commands, root, pick)
    _add_show_command(commands, root, pick)
    _add_stats_command(commands, root)
    _add_gc_command(commands, root)


def _root_option() -> argparse.ArgumentParser:
    """A parent parser with ``--root DIR``; its help names the default root of this machine."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--root",
        metavar="DIR",
        type=Path,
        help="where the sessions are (default: $PTC_RETRY_ROOT if set, else "
        f"<tempdir>/ptc-retry-<uid>; here {default_root()})",
    )
    return common


def _session_option() -> argparse.ArgumentParser:
    """A parent parser with ``--session S``."""
    pick = argparse.ArgumentParser(add_help=False)
    pick.add_argument(
        "--session",
        metavar="S",
        help=_SESSION_HELP,
    )
    return pick


def _add_history_command(
    commands: argparse._SubParsersAction,
    root: argparse.ArgumentParser,
    pick: argparse.ArgumentParser,
) -> None:
    history = commands.add_parser(
        "history",
        parents=[root, pick],
        help="list the calls of a session: reference, id, status, sizes, replays, restarts",
        description="List the calls of one session, oldest first, from its history.jsonl.\n"
        "A program saved without a history line is shown as unfinished: it is still\n"
        "running, or its kernel died mid-call. Reads only; changes nothing.",
        epilog=_HISTORY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    history.add_argument(
        "--last", metavar="N", type=_count, help="only the last N calls (default: all)"
    )
    history.add_argument(
        "--json",
        action="store_true",
        help="print the history lines as JSON, one object a line, instead of a table",
    )
    history.set_defaults(run=run_history)


def _add_show_command(
    commands: argparse._SubParsersAction,
    root: argparse.ArgumentParser,
    pick: argparse.ArgumentParser,
) -> None:
    show = commands.add_parser(
        "show",
        parents=[root, pick],
        help="print the program a call saved",
        description='Print the program a call saved (the "code" of by-id/<ID>.json), ready '
        'to pipe into a file. A checkpoint without "code" (a tool call\'s arguments) is '
        "printed as indented JSON. The tool calls the program made (tool-calls/<ID>.jsonl) "
        "are listed after it on stderr. Reads only; changes nothing.",
    )
    show.add_argument(
        "target",
        metavar="'#N'|ID|N",
        help="'#7': program number 7 of the session, the reference the failure notice and the "
        "ref column of `ptc-retry history` give (quote it: a shell reads # as a comment); "
        "a call id such as c3 or call_7; or a bare number N for previous/N.json, the N-th "
        "call of the step before the latest one. A reference the session does not have, or "
        "that two calls carry, is refused, never guessed",
    )
    show.set_defaults(run=run_show)


def _add_stats_command(commands: argparse._SubParsersAction, root: argparse.ArgumentParser) -> None:
    stats = commands.add_parser(
        "stats",
        parents=[root],
        help="count calls, failures, replays and the bytes replays did not re-send",
        description="Count one session's calls, failures, replays and bytes, or every\n"
        "session's with --all. Reads only; changes nothing.",
        epilog=_STATS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = stats.add_mutually_exclusive_group()
    which.add_argument(
        "--session",
        metavar="S",
        help=_SESSION_HELP,
    )
    which.add_argument(
        "--all", action="store_true", help="every session, one row each, and a total line"
    )
    stats.set_defaults(run=run_stats)


def _add_gc_command(commands: argparse._SubParsersAction, root: argparse.ArgumentParser) -> None:
    gc = commands.add_parser(
        "gc",
        parents=[root],
        help="delete session directories nothing was written to for a while",
        description="Delete the session directories under the root whose newest file is "
        "older than AGE. A kernel that is still running but idle for that long loses its "
        "saved programs too (it goes on working). Entries that are not ptc-retry session "
        "directories (no history.jsonl and no by-id/), symlinks and other users' "
        "directories are skipped and named; nothing outside the root is touched.",
    )
    gc.add_argument(
        "--older-than",
        metavar="AGE",
        type=parse_age,
        default=parse_age("7d"),
        help="a number and a unit: 30m, 12h, 7d, 2w (default: 7d)",
    )
    gc.add_argument(
        "--dry-run", action="store_true", help="only say what would be deleted and freed"
    )
    gc.set_defaults(run=run_gc)
