"""What each ``ptc-retry`` command does once :mod:`ptc_retry.cli` has parsed its arguments:
one ``run_<command>(args)`` each, returning the exit code, or raising :class:`CommandFailed`
to end with a message on stderr.

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
from pathlib import Path

from .core.errors import BackendError, CheckpointError, StoreError
from .core.history_table import format_history, format_tool_calls
from .core.layout import line_text, sanitize
from .core.notice import prompt_section
from .core.root import default_root
from .core.session_files import session_in_use
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

#: Seconds in each unit of an age: what ``--older-than`` reads and ``gc`` writes back.
AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class CommandFailed(Exception):
    """Ends a command with ``message`` on stderr and exit code ``code``."""

    def __init__(self, message: str, code: int = EXIT_NOT_FOUND) -> None:
        super().__init__(message)
        self.code = code


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


#: The APIs ``ptc-retry eval --live`` talks to (``ptc_retry.eval.live.APIS``).
LIVE_APIS = ("openai", "anthropic")


def run_eval(args: argparse.Namespace) -> int:
    if args.live:
        from .eval import live

        return live.main(
            args.api, args.model, args.base_url, args.out or "eval-live-report", args.quick
        )
    given = [f"--{name.replace('_', '-')}" for name in ("model", "base_url") if getattr(args, name)]
    if given:
        raise CommandFailed(
            f"{' and '.join(given)} need --live: add it to ask a real model", EXIT_USAGE
        )
    from .eval.runner import main

    return main(out=args.out or "eval-report", quick=args.quick)


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
        approve_destructive=args.approve_destructive,
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
    print(format_history(lines, session_dir=reader.path, last=args.last or None))
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
        if seconds >= AGE_UNITS[unit]:
            return f"{seconds / AGE_UNITS[unit]:.3g}{unit}"
    return f"{seconds:.0f}s"
