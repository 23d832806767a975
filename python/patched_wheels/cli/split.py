"""``patched-wheels split``: move shared libraries of a wheel into a sibling wheel it requires.

``--move GLOB...`` names the libraries (fnmatch on archive paths); ``--max-size BYTES``
moves the largest ones until the main wheel fits.  The sibling ``--into NAME`` gets
the same version and tags and the moved libraries, bytes unchanged, at the same depth;
the main wheel gains ``Requires-Dist: NAME==VERSION`` and preloads the moved libraries
after everything they need, in graph order.
``--graph-wheels`` adds the other wheels of the environment (e.g. nvidia-*) so the
preload also loads what the moved libraries need from them.  Prints both output
paths, then both requirements, one per line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from patched_wheels.cli import (
    add_jobs_option,
    add_removed_cache_option,
    check_directory,
    described,
    warn_removed_cache_option,
    whole_number,
)
from patched_wheels.patch.surgery import split_wheel


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "split",
        help="move shared libraries of a wheel into a sibling wheel that the main one requires and preloads",
        description=described(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--wheel", type=Path, required=True, help="the wheel to split")
    selection = parser.add_mutually_exclusive_group(required=True)
    selection.add_argument("--move", nargs="+", metavar="GLOB", help="move the shared libraries matching these globs")
    selection.add_argument(
        "--max-size",
        type=whole_number(1, "a size in bytes (at least 1)"),
        metavar="BYTES",
        help="move the largest libraries until the wheel fits",
    )
    parser.add_argument("--into", required=True, metavar="NAME", help="project name of the sibling wheel")
    parser.add_argument("--dest-dir", type=Path, required=True, help="directory for both output wheels")
    parser.add_argument(
        "--graph-wheels", type=Path, nargs="+", default=[], metavar="WHEEL", help="other wheels the libraries may need"
    )
    add_jobs_option(parser)
    add_removed_cache_option(parser)
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    check_directory("--dest-dir", args.dest_dir)
    warn_removed_cache_option(args)
    result = split_wheel(
        args.wheel,
        args.dest_dir,
        into=args.into,
        move=args.move or (),
        max_size=args.max_size,
        graph_wheels=args.graph_wheels,
        workers=args.jobs,
    )
    print(result.path)
    print(result.sibling)
    print(result.requirement)
    print(result.sibling_requirement)
    return 0
