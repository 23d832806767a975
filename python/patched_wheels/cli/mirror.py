"""``patched-wheels mirror -r REQUIREMENTS DIR``: download pinned distributions and index them."""

from __future__ import annotations

import argparse
from pathlib import Path

from patched_wheels.cli import index_summary
from patched_wheels.index.mirror import mirror
from patched_wheels.lock.formats.requirements import read_requirements


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "mirror",
        help="pip download the pins of a requirements file into DIR and index DIR",
        description=(
            "Run `pip download --no-deps -r REQUIREMENTS` (with this Python's pip) into DIR, then "
            "write DIR/simple/. The lock is read first as `lock` reads it, and one it refuses (an included "
            "file: -r/-c) is refused before pip starts. Arguments after `--` go to pip, e.g. "
            "`-- --index-url=https://... --platform=manylinux2014_x86_64 --only-binary=:all:`."
        ),
    )
    parser.add_argument("-r", "--requirements", required=True, type=Path, help="requirements (lock) file")
    parser.add_argument("directory", metavar="DIR", type=Path, help="directory to download into and index")
    parser.add_argument("pip_args", nargs="*", metavar="PIP_ARG", help="extra pip download arguments (after --)")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    # pip would follow an included file (-r/-c) wherever it leads (a FIFO blocks it for ever, /dev/zero never ends)
    # and read a lock of any size: the lock is read as `lock` reads it, and refused as it refuses it, before DIR is
    # touched or pip starts.
    read_requirements(args.requirements)
    result = mirror(args.requirements, args.directory, pip_args=args.pip_args)
    for name in result.added:
        print(f"downloaded {name}")
    print(index_summary(result.index))
    return 0
