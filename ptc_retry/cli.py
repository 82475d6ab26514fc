"""The ``ptc-retry`` command: the demo, the prompt section, the kernelspec, the evaluation,
the MCP server (``mcp``), and reading and cleaning sessions (``history``, ``show``,
``stats``, ``gc``).

``history``, ``show`` and ``stats`` only read: they never create, change or delete a file, so
they are safe to run while a kernel writes to the session. ``gc`` deletes whole session
directories and nothing else.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .core.errors import BackendError, CheckpointError, StoreError
from .core.fs import default_root
from .core.history_table import format_history, format_tool_calls
from .core.layout import line_text, sanitize
from .core.notice import prompt_section
from .core.session_files import session_in_use
from .core.status import HistoryStatus, status_table
from .sessions import (
    SessionReader,
    check_root,
    format_stats,
    list_sessions,
    session_problem,
    session_stats,
    tree_stats,
)

EXIT_OK, EXIT_NOT_FOUND, EXIT_USAGE = 0, 1, 2


class CommandFailed(Exception):
    """Ends a command with ``message`` on stderr and exit code ``code``."""

    def __init__(self, message: str, code: int = EXIT_NOT_FOUND) -> None:
        super().__init__(message)
        self.code = code


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
    parser = argparse.ArgumentParser(
        prog="ptc-retry",
        description="Keep every program a Jupyter kernel runs; replay a failed one with a fix.",
    )
    parser.add_argument("--version", action="version", version=f"ptc-retry {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    demo = commands.add_parser(
        "demo", help="run a scripted agent on a real kernel: a failure, the notice, the replay"
    )
    demo.add_argument(
        "--save",
        metavar="PATH.ipynb",
        help="also write the session as a notebook you can open in JupyterLab",
    )
    demo.set_defaults(run=run_demo)

    prompt = commands.add_parser("prompt", help="print the system-prompt section for a session")
    prompt.add_argument(
        "--mode",
        default="code",
        choices=["code", "native"],
        help="code: run_code programs and ptc_retry.replay; "
        "native: direct tool calls and editPreviousToolCalling",
    )
    prompt.add_argument(
        "--session-dir",
        help="the session directory the kernel saves programs in (default: the pattern)",
    )
    prompt.set_defaults(run=run_prompt)

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
        default="eval-report",
        help="where to write the report (default: eval-report/)",
    )
    evaluate.add_argument(
        "--quick",
        action="store_true",
        help="a few scenarios and two cut-off calls: each size, and each case of references "
        "(for tests)",
    )
    evaluate.set_defaults(run=run_eval)
    _add_mcp_command(commands)
    _add_session_commands(commands)
    for name, subparser in commands.choices.items():
        subparser.set_defaults(command=name)
    return parser


def run_prompt(args: argparse.Namespace) -> int:
    print(prompt_section(args.mode, session_dir=args.session_dir), end="")
    return 0


def run_install_kernel(args: argparse.Namespace) -> int:
    from .kernelspec import install

    prefix = sys.prefix if args.sys_prefix else args.prefix
    try:
        path = install(
            user=args.user, prefix=prefix, name=args.name, display_name=args.display_name
        )
    except PermissionError as exc:
        print(
            f"ptc-retry: cannot write the kernelspec ({exc}); "
            "use --user, --sys-prefix or --prefix P",
            file=sys.stderr,
        )
        return 1
    print(f"Installed kernelspec {args.name} in {path}")
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from .demo import run

    return run(root=default_root(), save=args.save)


def run_eval(args: argparse.Namespace) -> int:
    from .eval.runner import main

    return main(out=args.out, quick=args.quick)


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
    from .mcp.upstream import add_upstream_arguments

    add_upstream_arguments(mcp)
    mcp.set_defaults(run=run_mcp)


def run_mcp(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import os

    from .mcp import sdk_missing, serve

    missing = sdk_missing()
    if missing is not None:
        raise CommandFailed(missing)
    from .mcp.http import HttpOptions
    from .mcp.server import ServerOptions
    from .mcp.upstream import UpstreamConfigError, upstream_configs

    try:
        upstreams = tuple(upstream_configs(args))  # before anything starts
    except UpstreamConfigError as exc:
        raise CommandFailed(str(exc), EXIT_USAGE) from None

    # stderr only: on stdio, stdout is the protocol's.
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="ptc-retry mcp: %(message)s"
    )
    logging.getLogger("ptc_retry").setLevel(logging.INFO)
    options = ServerOptions(
        kernel_name=args.kernel_name,
        gateway_url=args.gateway_url,
        token=args.token or os.environ.get("PTC_RETRY_GATEWAY_TOKEN") or None,
        root=args.root,
        timeout=args.timeout,
        progress_every=args.progress_every,
        upstreams=upstreams,
    )
    try:
        options.check()
    except ValueError as exc:
        raise CommandFailed(str(exc), EXIT_USAGE) from None
    http = None
    if args.http is not None:
        host, port = args.http
        http = HttpOptions(host, port, args.idle_timeout, args.max_sessions)
    try:
        asyncio.run(serve(options, http))
    except KeyboardInterrupt:
        pass
    except (BackendError, OSError) as exc:  # the kernel did not start; the port is taken
        raise CommandFailed(str(exc)) from None
    except UpstreamConfigError as exc:  # on stdio: two upstream tools would get one name
        raise CommandFailed(str(exc), EXIT_USAGE) from None
    return EXIT_OK


# -- reading and cleaning sessions -------------------------------------------------------------

_AGE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhdw])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
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
    return float(match.group(1)) * _SECONDS[match.group(2)]


def _count(text: str) -> int:
    if not re.fullmatch(r"[0-9]+", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return int(text)


def _add_session_commands(commands: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--root",
        metavar="DIR",
        type=Path,
        help="where the sessions are (default: $PTC_RETRY_ROOT if set, else "
        f"<tempdir>/ptc-retry-<uid>; here {default_root()})",
    )
    pick = argparse.ArgumentParser(add_help=False)
    pick.add_argument(
        "--session",
        metavar="S",
        help=_SESSION_HELP,
    )

    history = commands.add_parser(
        "history",
        parents=[common, pick],
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

    show = commands.add_parser(
        "show",
        parents=[common, pick],
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

    stats = commands.add_parser(
        "stats",
        parents=[common],
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

    gc = commands.add_parser(
        "gc",
        parents=[common],
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


def _root(args: argparse.Namespace) -> tuple[Path, bool]:
    """The root to use and whether it exists; CommandFailed (exit 2) when it is unsafe."""
    root = (args.root.expanduser() if args.root is not None else default_root()).absolute()
    try:
        return root, check_root(root)
    except StoreError as exc:
        raise CommandFailed(f"{exc} (or pass --root DIR)", EXIT_USAGE) from None
    except OSError as exc:
        raise CommandFailed(f"cannot read {root} ({exc.strerror}).", EXIT_USAGE) from None


def _sessions(args: argparse.Namespace) -> tuple[Path, list[Path]]:
    """The root and its sessions, newest first; CommandFailed when there is none."""
    root, exists = _root(args)
    sessions = list_sessions(root) if exists else []
    if not sessions:
        raise CommandFailed(
            f"no sessions under {root}. A kernel with ptc-retry loaded saves its programs "
            "there; if yours are elsewhere, pass --root DIR or set PTC_RETRY_ROOT."
        )
    return root, sessions


def _pick_session(args: argparse.Namespace) -> SessionReader:
    """The session named by --session, else the most recently modified one (and say so)."""
    root, sessions = _sessions(args)
    names = ", ".join(path.name for path in sessions[:8]) + (", ..." if len(sessions) > 8 else "")
    if args.session is None:
        if len(sessions) > 1:
            print(
                f"showing session {sessions[0].name}, the most recently modified of "
                f"{len(sessions)} (newest first: {names}); pick another with --session NAME",
                file=sys.stderr,
            )
        return SessionReader(sessions[0])
    path = root / sanitize(args.session)  # sanitized as the store names it: stays in root
    problem = session_problem(path) if path.exists() or path.is_symlink() else "does not exist"
    if problem is not None:
        raise CommandFailed(
            f"session {args.session!r} in {root}: {problem}. Sessions there, newest first: {names}."
        )
    return SessionReader(path)


def run_history(args: argparse.Namespace) -> int:
    reader = _pick_session(args)
    lines = reader.history()
    shown = lines[-args.last :] if args.last else lines
    if args.json:
        for line in shown:
            print(line_text(line))
        return EXIT_OK
    print(format_history(shown, session_dir=reader.path))
    if len(shown) < len(lines):
        print(f"(the last {len(shown)} of {len(lines)} calls; --last 0 shows all)")
    if any(line.get("status") == "unfinished" for line in shown):
        print(
            "unfinished: saved but never finished (still running, or its kernel died); "
            f"`ptc-retry show '#N' --session {reader.name}` prints its program."
        )
    return EXIT_OK


def run_show(args: argparse.Namespace) -> int:
    reader = _pick_session(args)
    target: str | int = int(args.target) if re.fullmatch(r"[0-9]+", args.target) else args.target
    try:
        call_id, path, data = reader.read(target)
    except CheckpointError as exc:
        raise CommandFailed(str(exc)) from None
    ref = reader.reference_of(call_id)
    print(f"# {call_id}{f' ({ref})' if ref else ''}: {path}", file=sys.stderr)
    text = data.decode("utf-8", "replace")
    try:
        decoded = json.loads(text)
    except (ValueError, RecursionError):
        decoded = None
    if isinstance(decoded, dict) and isinstance(decoded.get("code"), str):
        text = decoded["code"]
    elif isinstance(decoded, (dict, list)):
        text = json.dumps(decoded, indent=2, ensure_ascii=False)
    else:
        print(f"# {path.name} is not a JSON object; shown as saved", file=sys.stderr)
    print(text, end="" if text.endswith("\n") else "\n")
    records = reader.tool_calls(call_id)
    if records:  # on stderr, like the header: stdout stays the program, ready to pipe
        print(format_tool_calls(records, call_id), file=sys.stderr)
    return EXIT_OK


def run_stats(args: argparse.Namespace) -> int:
    if args.all:
        _, sessions = _sessions(args)
        readers = [SessionReader(path) for path in sessions]
    else:
        readers = [_pick_session(args)]
    rows = [session_stats(reader) for reader in readers]
    print(format_stats(rows, total=len(rows) > 1))
    return EXIT_OK


def run_gc(args: argparse.Namespace) -> int:
    root, exists = _root(args)
    if not exists:
        print(f"nothing to remove: {root} does not exist")
        return EXIT_OK
    now = time.time()
    verb = "would remove" if args.dry_run else "removed"
    removed = kept = freed = 0
    failed = False
    for name in sorted(p.name for p in root.iterdir()):
        path = root / name
        problem = session_problem(path)
        if problem is not None:
            print(f"skipped {name}: {problem}")
            continue
        if session_in_use(path):
            print(f"skipped {name}: in use by a live kernel")
            continue
        newest, size = tree_stats(path)
        if now - newest <= args.older_than:
            kept += 1
            continue
        if not args.dry_run:
            try:
                shutil.rmtree(path)  # removes symlinks inside, never what they point to
            except OSError as exc:
                print(f"ptc-retry gc: could not remove {path} ({exc})", file=sys.stderr)
                failed = True
                continue
        removed += 1
        freed += size
        print(f"{verb} {name}: {size} bytes, last written {_age(now - newest)} ago")
    print(
        f"{verb} {removed} session(s) under {root}, "
        f"{'would free' if args.dry_run else 'freed'} {freed} bytes; "
        f"kept {kept} written to in the last {_age(args.older_than)}"
    )
    return EXIT_NOT_FOUND if failed else EXIT_OK


def _age(seconds: float) -> str:
    for unit in ("d", "h", "m"):  # days, not weeks: --older-than 7d reads back as 7d
        if seconds >= _SECONDS[unit]:
            return f"{seconds / _SECONDS[unit]:.3g}{unit}"
    return f"{seconds:.0f}s"
