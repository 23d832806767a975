"""Command line: ``patched-wheels <command> ...``.

Every module in this package (other than this one) defines one subcommand, named like the
module, through ``register(subparsers)``, which adds its parser and sets
``run=<callable(args) -> int>``. Discovering them keeps each command next to nothing but its own
argument handling. Only the module of the command being run is imported (the others pull in
pyelftools, concurrent executors and more): start-up is most of a warm ``index`` run.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path
from typing import Sequence

from patched_wheels.errors import PatchedWheelsError


def command_names() -> list[str]:
    return sorted(module.name for module in pkgutil.iter_modules(__path__))


def add_elf_cache_option(parser: argparse.ArgumentParser) -> None:
    """``--no-cache`` for the commands that read the ELF graph (graph, doctor, split, patch --preload-for)."""
    parser.add_argument("--no-cache", action="store_true", help="do not read or write the per-wheel ELF result cache")


def elf_cache_dir(args: argparse.Namespace) -> Path | None:
    from patched_wheels.elfgraph import default_cache_dir

    return None if args.no_cache else default_cache_dir()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every subcommand, or only ``only`` (when it names one)."""
    parser = argparse.ArgumentParser(
        prog="patched-wheels",
        description="Patch, split, analyse and index Python wheels.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    names = command_names()
    for name in [only] if only in names else names:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    args = build_parser(only=command).parse_args(argv)
    try:
        return args.run(args)
    except PatchedWheelsError as error:
        # One line whatever a message quotes (a third-party reason, a name with a newline).
        print(f"patched-wheels: error: {' '.join(str(error).splitlines())}", file=sys.stderr)
        return 1
    except OSError as error:  # a destination that cannot be written, a file that vanished, ...
        where = f"{error.filename}: " if error.filename else ""
        print(f"patched-wheels: error: {where}{error.strerror or error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
