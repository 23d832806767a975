"""``patched-wheels hub --config FILE``: the Bazel hub repository's single build step."""

from __future__ import annotations

import argparse
from pathlib import Path

from patched_wheels.hub import HubConfig, build_hub


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "hub",
        help="patch a lock's wheels into a local index and write the lock for pip (used by the Bazel rules)",
    )
    parser.add_argument("--config", required=True, type=Path, help="JSON written by the hub repository rule")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    for pin in build_hub(HubConfig.load(args.config)):
        print(pin)
    return 0
