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

from patched_wheels.base import timings
from patched_wheels.errors import PatchedWheelsError, UsageError, one_line


COMMANDS = ("doctor", "graph", "hub", "index", "lock", "mirror", "patch", "resolve", "split")
"""The subcommands, in ``--help`` order; each is the module of this package of that name, imported only when run."""


def add_elf_cache_option(parser: argparse.ArgumentParser) -> None:
    """``--no-cache`` for the commands that read the ELF graph (graph, doctor, split, patch --preload-for)."""
    parser.add_argument("--no-cache", action="store_true", help="do not read or write the per-wheel ELF result cache (nor the memo of wheel digests that keys it)")


def add_lock_input(parser: argparse.ArgumentParser) -> None:
    """``--requirements`` / ``--uv-lock`` / ``--pylock``: exactly one lock to read (``lock`` and ``resolve``)."""
    from patched_wheels.lock.formats.registry import LOCK_FORMATS

    group = parser.add_mutually_exclusive_group(required=True)
    for entry in LOCK_FORMATS:
        group.add_argument(entry.flag, type=Path, metavar="IN", help=entry.help)


def lock_input(args: argparse.Namespace) -> tuple[Path, str]:
    """The lock given and its format (one of ``lockformats.FORMATS``)."""
    from patched_wheels.lock.formats.registry import LOCK_FORMATS

    for entry in LOCK_FORMATS:
        if getattr(args, entry.name.replace("-", "_")) is not None:
            return getattr(args, entry.name.replace("-", "_")), entry.name
    raise UsageError(f"give one of {', '.join(entry.flag for entry in LOCK_FORMATS)}")


def elf_cache_dir(args: argparse.Namespace) -> Path | None:
    """The ELF cache the command reads and fills (see :mod:`patched_wheels.base.cache`), or None with ``--no-cache``."""
    from patched_wheels.base.cache import cache_dir

    return None if args.no_cache else cache_dir("elfgraph")


def digest_memo_dir(args: argparse.Namespace) -> Path | None:
    """Where the wheels' digests (the ELF cache's keys) are remembered by file status; None with ``--no-cache``."""
    from patched_wheels.base.cache import cache_dir

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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    args = build_parser(only=command).parse_args(argv)
    try:
        return args.run(args)
    except PatchedWheelsError as error:
        print(f"patched-wheels: error: {one_line(str(error))}", file=sys.stderr)
        return 1
    except OSError as error:  # a destination that cannot be written, a file that vanished, ...
        where = f"{error.filename}: " if error.filename else ""
        print(f"patched-wheels: error: {one_line(f'{where}{error.strerror or error}')}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        # The words before the first option (`hub build`, `resolve`): never a path.
        timings.record(argv[: next((i for i, arg in enumerate(argv) if arg.startswith("-")), len(argv))])
