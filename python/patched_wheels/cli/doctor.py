"""``patched-wheels doctor W... [--package PKG]``: what fails when each wheel has its own directory.

Simulates the one-directory-per-wheel layout Bazel uses and lists each library
whose dependencies cannot be found through its own RPATH/RUNPATH there.  With
``--package``, says for each whether PKG's preload covers it (the preload already
in PKG's wheel, or else the one ``patch --preload-for PKG`` would generate).
Exits 1 when something would fail to load.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from patched_wheels.cli import add_elf_cache_option, elf_cache_dir
from patched_wheels.doctor import diagnose, format_diagnosis, system_library_names


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="predict which shared libraries fail to load with one directory per wheel",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("wheels", type=Path, nargs="+", metavar="WHEEL")
    parser.add_argument("--package", metavar="PKG", help="judge failures against PKG's preload (e.g. torch)")
    parser.add_argument(
        "--assume-system",
        action="append",
        default=[],
        metavar="NAME",
        help="a library file name the target system provides even if this machine lacks it (repeatable)",
    )
    add_elf_cache_option(parser)
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    diagnosis = diagnose(
        args.wheels,
        package=args.package,
        cache_dir=elf_cache_dir(args),
        system_names=system_library_names() | set(args.assume_system),
    )
    print(format_diagnosis(diagnosis))
    return 1 if diagnosis.fails else 0
