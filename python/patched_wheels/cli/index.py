"""``patched-wheels index DIR``: write a PEP 503 simple index for the distributions in DIR."""

from __future__ import annotations

import argparse
from pathlib import Path

from patched_wheels.cli import index_summary
from patched_wheels.index.simple import build_index


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "index",
        help="write DIR/simple/ (PEP 503 pages, PEP 658 .metadata files) for the wheels in DIR",
        description=(
            "Index every wheel and sdist directly inside DIR: DIR/simple/index.html, "
            "DIR/simple/<project>/index.html and DIR/<wheel>.metadata. Incremental: files whose "
            "name, size, mtime and inode are unchanged are not read again."
        ),
    )
    parser.add_argument("directory", metavar="DIR", type=Path, help="directory holding the distributions")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    result = build_index(args.directory)
    print(index_summary(result))
    return 0
