"""The ``ptc-retry`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__
from .notice import prompt_section
from .store import default_root


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    return int(args.run(args) or 0)


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
    demo.set_defaults(run=run_demo)

    prompt = commands.add_parser("prompt", help="print the system-prompt section for a session")
    prompt.add_argument("--mode", default="code", choices=["code"], help="agent mode")
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
    return parser


def run_prompt(args: argparse.Namespace) -> int:
    print(prompt_section(args.mode, session_dir=args.session_dir), end="")
    return 0


def run_install_kernel(args: argparse.Namespace) -> int:
    from kernel_ext.kernelspec import install

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

    return run(root=default_root())
