"""The hub alone on a CI runner: an empty helper cache, a warm Bazel repository cache; per phase.

    python -m benchmarks.bench_hub_cold [--rounds 3] [--hubs flat split] [--baseline-tree DIR] [--keep]

Issue 34: most CI runners restore Bazel's repository cache but not the helper's cache root
(``~/.cache/rules_patched_wheels``: ELF rows, probe observations, digests, bytecode). Per hub of the root
torch 2.1.0 example (``flat``: ``patched_pypi``, ``split``: ``patched_pypi_split``; each in a copy of the
example reduced to that hub, as in bench_e2e.py) and per checkout (this one, and with ``--baseline-tree``
another, e.g. ``git worktree add --detach /tmp/hub-base main``), in its own output base, each run is
``clean --expunge`` + ``shutdown``, then a timed cold ``bazel query`` of the hub repository's root package
(which fetches the hub and nothing else), ``info`` and ``shutdown``:

* cold: the helper's cache root (``RULES_PATCHED_WHEELS_CACHE``, one per checkout) emptied first;
* warm: right after, the cache root the cold run filled;
* empty: ``//:all`` of an empty root package: the server's start and module resolution, subtracted.

The repository cache (Bazel's default, shared with every other workspace here) already holds the 22
wheels. The first run of each workspace also evaluates the ``patched`` extension (it resolves the lock
from PyPI's pages: the ``resolve`` rows); ``MODULE.bazel.lock`` keeps that, as a CI checkout that commits
it would, so later runs do not (``--warmup``: a cold run of each workspace first, not counted). The
rounds alternate the checkouts' order; the table is printed after each round.

Measured per run: wall time; CPU of the client, of the JVM and of the children it reaped (the helper,
the probe); and, from ``RULES_PATCHED_WHEELS_TIMINGS`` (patched_wheels/base/timings.py), each helper
command's and each phase's wall, user, system and children's CPU. "bazel" is the run's CPU minus the
empty query's and the helper's: the rule's downloads (copies out of the repository cache) and Starlark.
Printed: every run, then medians per checkout and kind with ratios to the baseline measured in the
same rounds. Exit 1 when a Bazel command fails. Offline: RPW_BAZEL_MODULES (default ../shared/bazel-modules).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.bench_e2e import HELPER_ROWS, RULES_PYTHON, BazelFailed, drop_statements, helper_rows
from benchmarks.example_workspace import REPO, Timed, make_workspace, remove_workspaces, run, use_offline_modules
from benchmarks.harness import add_json_option, print_json, process_cpu

HUBS = {"flat": "patched_pypi", "split": "patched_pypi_split"}
PIP_HUBS = {"patched_pypi": "pypi", "patched_pypi_split": "pypi_split"}
KINDS = ("empty", "cold", "warm")


@dataclass(frozen=True)
class Workspace:
    tree: str  # "new" (this checkout) or "old" (--baseline-tree)
    hub: str
    root: Path
    output_base: Path
    cache: Path  # the helper's cache root
    timings: Path

    def bazel(self, *args: str) -> Timed:
        """``tools/bazel ARGS`` with this workspace's output base, helper cache and timings file."""
        result = run(
            self.root,
            f"--output_base={self.output_base}",
            *args,
            environment={
                "RULES_PATCHED_WHEELS_CACHE": str(self.cache),
                "RULES_PATCHED_WHEELS_TIMINGS": str(self.timings),
            },
        )
        if result.code != 0:
            tail = "\n".join(result.output.splitlines()[-40:])
            raise BazelFailed(
                f"{self.tree} {self.hub}: `bazel {' '.join(args)}` in {self.root} exited {result.code}:\n{tail}"
            )
        return result


@dataclass
class Run:
    wall: float
    cpu: float  # client + JVM + reaped children
    kernel: float  # the JVM's and its children's system time
    rows: dict[str, tuple[float, float, float]] = field(
        default_factory=dict
    )  # name -> (wall, user, system incl. children)


def make_workspaces(work: Path, hubs: list[str], trees: dict[str, Path]) -> list[Workspace]:
    output_bases = Path.home() / ".cache" / "bazel" / work.name  # bound into the offline launcher's root
    workspaces = []
    for tree, module in trees.items():
        for hub in hubs:
            root = work / f"{tree}-{hub}"
            root.mkdir()
            make_workspace(root, RULES_PYTHON, module)
            others = {name for other in HUBS.values() if other != HUBS[hub] for name in (other, PIP_HUBS[other])}
            for path in (root / "MODULE.bazel", root / "calculator" / "BUILD.bazel"):
                path.write_text(drop_statements(path.read_text(encoding="utf-8"), others), encoding="utf-8")
            (root / "BUILD.bazel").write_text('filegroup(name = "nothing")\n', encoding="utf-8")
            base = output_bases / f"{tree}-{hub}"
            workspaces.append(
                Workspace(
                    tree,
                    hub,
                    root,
                    base,
                    output_bases / f"cache-{tree}-{hub}",
                    output_bases / f"timings-{tree}-{hub}.jsonl",
                )
            )
    output_bases.mkdir(parents=True, exist_ok=True)
    return workspaces


def measure(workspace: Workspace, kind: str) -> Run:
    if kind == "cold":
        shutil.rmtree(workspace.cache, ignore_errors=True)
    workspace.timings.unlink(missing_ok=True)
    workspace.bazel("clean", "--expunge")
    workspace.bazel("shutdown")
    target = "//:all" if kind == "empty" else f"@@rules_patched_wheels~~patched~{HUBS[workspace.hub]}//:all"
    query = workspace.bazel("query", target)
    info = dict(
        line.split(": ", 1)
        for line in workspace.bazel("info", "server_pid", "output_base").output.splitlines()
        if ": " in line
    )
    jvm, children, kernel = process_cpu(int(info["server_pid"]))
    workspace.bazel("shutdown")
    return Run(query.wall, query.cpu + jvm + children, kernel, helper_rows(workspace.timings))


def helper_cpu(measured: Run) -> float:
    return sum(user + system for name, (_, user, system) in measured.rows.items() if ":" not in name)


def describe(workspace: Workspace, kind: str, measured: Run) -> str:
    text = f"  {workspace.tree} {workspace.hub} {kind}: {measured.wall:.1f} s wall, {measured.cpu:.1f} s CPU (kernel {measured.kernel:.1f} s)"
    if measured.rows:
        text += ", helper " + ", ".join(
            f"{name} {wall:.1f}/{user:.1f}/{system:.1f}" for name, (wall, user, system) in measured.rows.items()
        )
    return text


def table(runs: dict[tuple[str, str, str], list[Run]], hubs: list[str], trees: list[str]) -> str:
    """Medians per hub, kind and checkout: wall / user / system seconds per row, and new/old ratios."""
    lines = []
    for hub in hubs:
        for kind in ("cold", "warm"):
            header = " | ".join(f"{tree} wall / user / sys" for tree in trees)
            lines += [
                "",
                f"{hub}, {kind} helper cache (medians of {len(runs[trees[0], hub, kind])} runs; seconds)",
                "",
                f"| row | {header} |" + (" new/old CPU | new/old wall |" if len(trees) == 2 else ""),
                "| --- |" + " --- |" * (len(trees) + (2 if len(trees) == 2 else 0)),
            ]

            def medians(tree: str, row: str) -> tuple[float, float, float]:
                empty = runs[tree, hub, "empty"]
                measured = runs[tree, hub, kind]
                if row == "hub repository, total":
                    return (
                        statistics.median(r.wall for r in measured) - statistics.median(r.wall for r in empty),
                        statistics.median(r.cpu - r.kernel for r in measured)
                        - statistics.median(r.cpu - r.kernel for r in empty),
                        statistics.median(r.kernel for r in measured) - statistics.median(r.kernel for r in empty),
                    )
                if row == "bazel (downloads, Starlark)":
                    return (
                        0.0,
                        statistics.median(r.cpu - helper_cpu(r) for r in measured)
                        - statistics.median(r.cpu for r in empty),
                        0.0,
                    )
                values = [r.rows.get(row, (0.0, 0.0, 0.0)) for r in measured]
                return tuple(statistics.median(v[index] for v in values) for index in range(3))  # type: ignore[return-value]

            names = sorted(
                {
                    name
                    for tree in trees
                    for r in runs[tree, hub, kind]
                    for name in r.rows
                    if ":" not in name and name != "hub build"
                }
            )
            phases = [row for row in HELPER_ROWS if row.startswith("hub build: ")]
            for row in ["hub repository, total", "bazel (downloads, Starlark)", *names, "hub build", *phases]:
                figures = {tree: medians(tree, row) for tree in trees}
                cells = " | ".join(f"{w:.1f} / {u:.1f} / {s:.1f}" for w, u, s in figures.values())
                ratio = ""
                if len(trees) == 2:
                    old, new = figures["old"], figures["new"]
                    cpu = (new[1] + new[2]) / (old[1] + old[2]) if old[1] + old[2] > 0.05 else float("nan")
                    wall = new[0] / old[0] if old[0] > 0.05 else float("nan")
                    ratio = f" {cpu:.2f} | {wall:.2f} |"
                lines.append(f"| {row} | {cells} |{ratio}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hubs", nargs="+", choices=sorted(HUBS), default=["flat"])
    parser.add_argument(
        "--baseline-tree", type=Path, help="another checkout of rules_patched_wheels, measured in the same rounds"
    )
    parser.add_argument(
        "--warmup",
        action="store_true",
        help="a cold run of each workspace first, not counted (else the first round's includes the resolution)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the workspaces, output bases and caches")
    add_json_option(parser)
    args = parser.parse_args()
    use_offline_modules()
    trees = {"new": REPO} | ({"old": args.baseline_tree.resolve()} if args.baseline_tree else {})
    work = Path(tempfile.mkdtemp(prefix="rpw-bench-hub-cold-"))
    workspaces = make_workspaces(work, args.hubs, trees)
    runs: dict[tuple[str, str, str], list[Run]] = {(w.tree, w.hub, kind): [] for w in workspaces for kind in KINDS}
    print(
        f"workspaces under {work}, output bases and helper caches under {workspaces[0].output_base.parent}", flush=True
    )
    try:
        for workspace in workspaces[: len(workspaces) if args.warmup else 0]:  # the extension's resolution; not counted
            print(f"  warm-up {describe(workspace, 'cold', measure(workspace, 'cold'))}", flush=True)
        for number in range(args.rounds):
            print(f"round {number + 1}/{args.rounds}", flush=True)
            order = workspaces if number % 2 == 0 else list(reversed(workspaces))
            for workspace in order:
                for kind in KINDS:
                    measured = measure(workspace, kind)
                    runs[workspace.tree, workspace.hub, kind].append(measured)
                    print(describe(workspace, kind, measured), flush=True)
            print(table(runs, args.hubs, list(trees)), flush=True)  # after every round: a run cut short still reports
    except BazelFailed as failure:
        print(f"error: {failure}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            remove_workspaces(workspaces, work)
    inputs = {
        "rounds": args.rounds,
        "hubs": args.hubs,
        "baseline_tree": str(args.baseline_tree or ""),
        "warmup": args.warmup,
    }
    measured = {"/".join(key): [asdict(run) for run in key_runs] for key, key_runs in runs.items()}
    print_json("bench_hub_cold", inputs, {"runs": measured, "table": table(runs, args.hubs, list(trees))}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
