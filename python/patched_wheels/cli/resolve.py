"""``patched-wheels resolve``: pick each pin's wheel file and URL (used by the Bazel rules).

Two calls: ``--list-projects`` prints (JSON) which project pages to download, each a URL and the file
name ``--pages`` reads it as; then, given the downloaded pages, it prints the JSON list of wheels (project,
filename, urls, sha256) to fetch.
A uv.lock or pylock.toml names its wheels itself, so its projects need no page. A page named by
``--unfetched`` (the rule could not download it) is answered by what an earlier run recorded of it in the helper's
cache (:mod:`patched_wheels.lock.resolve`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from packaging.utils import NormalizedName

from patched_wheels.base.cache import CacheContext
from patched_wheels.base.fsutil import SHA256_HEX
from patched_wheels.base.names import canonicalize_name
from patched_wheels.cli import add_lock_input, lock_input, read_json_input
from patched_wheels.errors import UsageError
from patched_wheels.lock.formats.registry import served_pins
from patched_wheels.lock.resolve import IndexPages, page_file, page_url, projects_to_resolve, resolve


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("resolve", help="choose the wheel (URL, sha256) of every pin of a lock")
    add_lock_input(parser)
    parser.add_argument(
        "--explicit", type=Path, help='JSON {"project": {"urls": [...], "sha256": "..."}} given by the user'
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--list-projects", action="store_true", help="print the index pages needed: their URLs and file names"
    )
    mode.add_argument("--pages", type=Path, help="directory of downloaded pages, <project>.html")
    parser.add_argument("--index-url", help="the index the pages come from (their URLs, their relative links)")
    parser.add_argument(
        "--unfetched",
        action="append",
        default=[],
        metavar="FILE",
        help="with --pages: a page (its file name there) that could not be downloaded; answered by the helper "
        "cache's record of an earlier download of it (repeatable)",
    )
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    explicit = read_json_input(args.explicit, _explicit_wheels, "wheels given by --explicit") if args.explicit else {}
    path, lock_format = lock_input(args)
    if not args.index_url:
        raise UsageError(f"resolve {'--list-projects' if args.list_projects else '--pages'} needs --index-url")
    if args.list_projects:
        projects = projects_to_resolve(served_pins(path, lock_format), explicit)
        print(
            json.dumps([{"url": page_url(args.index_url, project), "file": page_file(project)} for project in projects])
        )
        return 0
    wheels = resolve(
        path,
        IndexPages(args.pages, args.index_url, frozenset(args.unfetched)),
        explicit=explicit,
        lock_format=lock_format,
        caches=CacheContext.from_environment(),
    )
    print(json.dumps([wheel.as_json() for wheel in wheels], indent=1))
    return 0


def _explicit_wheels(raw: object) -> dict[NormalizedName, tuple[list[str], str]]:
    """The ``--explicit`` JSON, ``{"project": {"urls": [URL, ...], "sha256": HEX}}``, every value checked: each
    URL becomes a download and the file name of the first one a path in the hub."""
    if not isinstance(raw, dict):
        raise ValueError(f"expected an object of projects, not {type(raw).__name__}")
    explicit = {}
    for name, entry in raw.items():
        if not (
            isinstance(entry, dict)
            and set(entry) == {"urls", "sha256"}
            and isinstance(entry["urls"], list)
            and entry["urls"]
            and all(isinstance(url, str) and url for url in entry["urls"])
            and isinstance(entry["sha256"], str)
            and SHA256_HEX.fullmatch(entry["sha256"])
        ):
            raise ValueError(
                f'{name!r}: expected {{"urls": [URL, ...], "sha256": "<64 hex digits>"}}, not {json.dumps(entry)[:80]}'
            )
        explicit[canonicalize_name(name)] = (entry["urls"], entry["sha256"])
    return explicit
