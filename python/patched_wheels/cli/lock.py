"""``patched-wheels lock``: point a requirements lock at the patched wheels of a local index."""

from __future__ import annotations

import argparse
from pathlib import Path

from patched_wheels.lock import DEFAULT_INDEX_OPTION, INDEX_OPTIONS, lock


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "lock",
        help="rewrite a requirements lock to install the patched wheels of an index",
        description=(
            "Copy IN to OUT, pinning patched projects to the versions and hashes found in the "
            "index DIR, adding pins for projects only the index has (split siblings) and one "
            "--option=file://... line pointing pip at the index. Everything else is kept byte "
            "for byte. DIR is (re)indexed first, incrementally."
        ),
    )
    parser.add_argument("--requirements", required=True, type=Path, metavar="IN", help="input lock file")
    parser.add_argument("--index", required=True, type=Path, metavar="DIR", help="directory of the index (wheels + simple/)")
    parser.add_argument("--out", required=True, type=Path, metavar="OUT", help="lock file to write (may equal IN)")
    parser.add_argument(
        "--index-option",
        choices=INDEX_OPTIONS,
        default=DEFAULT_INDEX_OPTION,
        help=(
            f"how pip finds the index (default: {DEFAULT_INDEX_OPTION}, which works whether the "
            "index holds every locked wheel or only the patched ones; index-url makes it the only index)"
        ),
    )
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    result = lock(args.requirements, args.index, args.out, index_option=args.index_option)
    for change in result.changes:
        print(change)
    print(f"wrote {result.out}")
    return 0
