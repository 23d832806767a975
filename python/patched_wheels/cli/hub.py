"""``patched-wheels hub --config FILE``: the Bazel hub repository's build step.

``--list-cached`` first tells the rule which wheels it need not fetch: those only the ELF graph reads
and whose rows the config's ``elf_cache`` already holds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from patched_wheels.hub import HubConfig, build_hub, cached_wheels


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "hub",
        help="patch a lock's wheels into a local index and write the lock for pip (used by the Bazel rules)",
    )
    parser.add_argument("--config", required=True, type=Path, help="JSON written by the hub repository rule")
    parser.add_argument(
        "--list-cached",
        action="store_true",
        help="build nothing: print, as a JSON list, the sha256 of the config's wheels whose ELF rows are cached",
    )
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    config = HubConfig.load(args.config)
    if args.list_cached:
        print(json.dumps(cached_wheels(config)))
        return 0
    for pin in build_hub(config):
        print(pin)
    return 0
