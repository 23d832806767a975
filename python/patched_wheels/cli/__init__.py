"""Command line: ``patched-wheels <command> ...``.

Each command in :data:`COMMANDS` is a module of this package, named like the command, defining
``register(subparsers)``, which adds its parser and sets ``run=<callable(args) -> int>``. The list
is explicit: a helper module put in this folder does not become a command by being there. Only the
module of the command being run is imported (the others pull in concurrent executors, the lock
readers and more): start-up is most of a warm ``index`` run.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Sequence

from patched_wheels.errors import PatchedWheelsError, UsageError


COMMANDS = ("doctor", "graph", "hub", "index", "lock", "mirror", "patch", "resolve", "split")
"""The subcommands, in ``--help`` order; each is the module of this package of that name, imported only when run."""


def add_elf_cache_option(parser: argparse.ArgumentParser) -> None:
    """``--no-cache`` for the commands that read the ELF graph (graph, doctor, split, patch --preload-for)."""
    parser.add_argument("--no-cache", action="store_true", help="do not read or write the per-wheel ELF result cache (nor the memo of wheel digests that keys it)")


def add_lock_input(parser: argparse.ArgumentParser) -> None:
    """``--requirements`` / ``--uv-lock`` / ``--pylock``: exactly one lock to read (``lock`` and ``resolve``)."""
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--requirements", type=Path, metavar="IN", help="a pip requirements lock")
    group.add_argument("--uv-lock", type=Path, metavar="IN", help="a uv.lock, read for this interpreter")
    group.add_argument("--pylock", type=Path, metavar="IN", help="a PEP 751 pylock.toml, read for this interpreter")


def lock_input(args: argparse.Namespace) -> tuple[Path, str]:
    """The lock given and its format (one of ``pins.FORMATS``)."""
    for flag, lock_format in (("requirements", "requirements"), ("uv_lock", "uv-lock"), ("pylock", "pylock")):
        if getattr(args, flag) is not None:
            return getattr(args, flag), lock_format
    raise UsageError("give one of --requirements, --uv-lock, --pylock")


def elf_cache_dir(args: argparse.Namespace) -> Path | None:
    """The ELF cache the command reads and fills (see :mod:`patched_wheels.cache`), or None with ``--no-cache``."""
    from patched_wheels.cache import cache_dir

    return None if args.no_cache else cache_dir("elfgraph")


def digest_memo_dir(args: argparse.Namespace) -> Path | None:
    """Where the wheels' digests (the ELF cache's keys) are remembered by file status; None with ``--no-cache``."""
    from patched_wheels.cache import cache_dir

    return None if args.no_cache else cache_dir("digests")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every subcommand, or only ``only`` (when it names one)."""
    parser = argparse.ArgumentParser(
        prog="patched-wheels",
        description="Patch, split, analyse and index Python wheels.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in [only] if only in COMMANDS else COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    return parser


# An error line quotes its input (a lock line, a patch header, a member name), which may be megabytes long.
_MAX_ERROR_LINE = 2000


def _one_line(message: str) -> str:
    """``message`` as one line of bounded length, whatever it quotes (a third-party reason, a name with a
    newline, a 200 MB logical line): its start names what is at fault and its end says why, so the middle goes."""
    line = " ".join(message.splitlines())
    if len(line) <= _MAX_ERROR_LINE:
        return line
    head, tail = _MAX_ERROR_LINE * 2 // 3, _MAX_ERROR_LINE // 3
    return f"{line[:head]} [... {len(line) - head - tail} characters left out ...] {line[-tail:]}"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    args = build_parser(only=command).parse_args(argv)
    try:
        return args.run(args)
    except PatchedWheelsError as error:
        print(f"patched-wheels: error: {_one_line(str(error))}", file=sys.stderr)
        return 1
    except OSError as error:  # a destination that cannot be written, a file that vanished, ...
        where = f"{error.filename}: " if error.filename else ""
        print(f"patched-wheels: error: {where}{error.strerror or error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
