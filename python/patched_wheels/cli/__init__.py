"""Command line: ``patched-wheels <command> ...``.

Every module in this package (other than this one) defines one subcommand through
``register(subparsers)``, which adds its parser and sets ``run=<callable(args) -> int>``.
Discovering them keeps each command next to nothing but its own argument handling.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from typing import Sequence

from patched_wheels.errors import PatchedWheelsError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="patched-wheels",
        description="Patch, split, analyse and index Python wheels.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except PatchedWheelsError as error:
        print(f"patched-wheels: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
