"""``patched-wheels lock``: point a requirements lock at the patched wheels of a local index."""

from __future__ import annotations

import argparse
from pathlib import Path

from patched_wheels.base.fsutil import resolved_path
from patched_wheels.cli import add_lock_input, lock_input
from patched_wheels.errors import UsageError, warn
from patched_wheels.index.simple import build_index, owned_by_index
from patched_wheels.lock.apply import (
    DEFAULT_INDEX_OPTION,
    INDEX_OPTIONS,
    LockOptions,
    check_outputs,
    read_lock_document,
    write_lock,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "lock",
        help="rewrite a requirements lock to install the patched wheels of an index",
        description=(
            "Copy IN (a requirements lock, or the pins a uv.lock or pylock.toml installs here) to OUT, "
            "pointing patched projects at the wheels of the index DIR (direct "
            "references, or the patched versions and hashes plus one --option=file://... line) and "
            "adding pins for projects only the index has (split siblings). Everything else is kept "
            "byte for byte. DIR is (re)indexed first, incrementally."
        ),
    )
    add_lock_input(parser)
    parser.add_argument(
        "--index", required=True, type=Path, metavar="DIR", help="directory of the index (wheels + simple/)"
    )
    parser.add_argument("--out", required=True, type=Path, metavar="OUT", help="lock file to write (may equal IN)")
    parser.add_argument(
        "--index-option",
        choices=INDEX_OPTIONS,
        default=DEFAULT_INDEX_OPTION,
        help=(
            f"how the lock names the patched wheels (default: {DEFAULT_INDEX_OPTION}: direct file:// "
            "references, read by pip and every rules_python release; the others add one option line "
            "pointing pip at the index: pip-based rules_python < 2 only)"
        ),
    )
    parser.add_argument(
        "--upstream-index-url",
        metavar="URL",
        help="with --index-option direct: written as --index-url=URL when the lock names no index of its own",
    )
    parser.add_argument(
        "--out-uv-lock",
        type=Path,
        metavar="PATH",
        help="with --uv-lock: also write that uv.lock, each patched package pointing at its wheel in DIR",
    )
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    if args.upstream_index_url is not None and args.index_option != "direct":
        raise UsageError(
            f"--upstream-index-url needs --index-option direct (--index-option {args.index_option} keeps the "
            "lock's own index lines and adds the index's)"
        )
    path, lock_format = lock_input(args)
    check_outputs(lock_format, args.out, args.out_uv_lock)  # first: a command line refused leaves DIR as it was
    document = read_lock_document(path, lock_format)
    for flag, output in (("--out", args.out), ("--out-uv-lock", args.out_uv_lock)):
        if output is not None and owned_by_index(args.index, output):
            raise UsageError(
                f"{flag} {output}: a file of the index {args.index}, which pip is sent to; write the lock elsewhere"
            )
    index = build_index(args.index)  # the hashes the lock pins are then those the pages serve
    options = LockOptions(resolved_path(index.directory), args.index_option, args.upstream_index_url)
    result = write_lock(document, index, args.out, options, lock_format=lock_format, out_uv_lock=args.out_uv_lock)
    for warning in result.warnings:
        warn(warning)
    for change in result.changes:
        print(change)
    print(f"wrote {result.out}")
    return 0
