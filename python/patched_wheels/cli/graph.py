"""``patched-wheels graph W...``: the shared-library graph of a wheel set and its load order.

Lists every ELF library with its SONAME, RPATH/RUNPATH and DT_NEEDED (resolved to
libraries of the set, or marked "system"), then a load order with every library
after its dependencies.  Libraries that need each other (a cycle: legal, the dynamic loader accepts
it) are listed together in the load order, marked ``(cycle N)``, and then under ``cycles``, members in
the order a preload loads them (the first one loads the rest; see patched_wheels.elf.graph).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from patched_wheels.cli import add_jobs_option, add_removed_cache_option, described, warn_removed_cache_option
from patched_wheels.elf.graph import read_graph
from patched_wheels.elf.graphtext import format_graph, graph_as_json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "graph",
        help="print the shared-library graph of wheels and a dependencies-first load order",
        description=described(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("wheels", type=Path, nargs="+", metavar="WHEEL")
    parser.add_argument("--json", action="store_true", help="print the graph as JSON")
    add_jobs_option(parser)
    add_removed_cache_option(parser)
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    warn_removed_cache_option(args)
    graph = read_graph(args.wheels, workers=args.jobs)
    print(json.dumps(graph_as_json(graph), indent=2) if args.json else format_graph(graph))
    return 0
