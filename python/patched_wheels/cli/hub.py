"""``patched-wheels hub plan|build``: the Bazel hub repository's two helper steps.

``plan --request R`` checks what the user declared and says how to resolve the lock; with
``--resolved W`` it also says what to download where (and writes the build step's ``_hub.json``);
``build --config C`` patches, indexes and writes the locks. The decisions are
:mod:`patched_wheels.hub.plan`'s; this module reads the files, the environment and the ELF cache.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from patched_wheels.cli import read_json_input
from patched_wheels.errors import UsageError, warn


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("hub", help="the Bazel hub repository's steps: plan, then build (used by the rules)")
    steps = parser.add_subparsers(dest="step", required=True, metavar="STEP")
    plan = steps.add_parser("plan", help="check the request; print how to resolve it, or with --resolved what to fetch")
    plan.add_argument("--request", required=True, type=Path, help="JSON written by the hub rule or the extension")
    plan.add_argument("--resolved", type=Path, help="the wheels `patched-wheels resolve` chose (JSON)")
    plan.add_argument("--config-out", type=Path, help="with --resolved: where to write the build step's configuration")
    plan.set_defaults(run=_plan)
    build = steps.add_parser("build", help="patch the wheels into the hub's index and write its locks")
    build.add_argument("--config", required=True, type=Path, help="the configuration `hub plan` wrote")
    build.set_defaults(run=_build)


def _plan(args: argparse.Namespace) -> int:
    from patched_wheels.hub.documents import HubRequest, resolved_wheels
    from patched_wheels.hub.plan import checked_request, plan_hub, resolution

    request = read_json_input(args.request, HubRequest.from_json, "hub request")
    if args.resolved is None:
        print(json.dumps(resolution(request)))
        return 0
    from patched_wheels.base.cache import CacheContext
    from patched_wheels.hub.facts import read_facts

    if args.config_out is None:
        raise UsageError("hub plan --resolved needs --config-out")
    wheels = read_json_input(args.resolved, resolved_wheels, "resolved wheels", content_errors=True)
    if request.attributes.wheel_facts is not None:  # no facts file fails here, before any download (and in the build)
        read_facts(request.attributes.wheel_facts, request.index_call)
    # RULES_PATCHED_WHEELS_CACHE, XDG_CACHE_HOME and HOME come from Bazel's client environment (helper.bzl).
    # Asked only where some spec reads the wheels, the verified stacks' included (applied once, here).
    checked = checked_request(request, wheels)
    plan = plan_hub(checked, cache_root=CacheContext.from_environment(enabled=checked.request.needs_graph).root)
    args.config_out.write_text(json.dumps(plan.config.to_json(), indent=1), encoding="utf-8")
    for note in plan.notes:
        warn(note)
    print(json.dumps(plan.to_json(), indent=1))
    return 0


def _build(args: argparse.Namespace) -> int:
    from patched_wheels.hub.build import build_hub
    from patched_wheels.hub.documents import HubConfig

    for pin in build_hub(read_json_input(args.config, HubConfig.from_json, "hub configuration")):
        print(pin)
    return 0
