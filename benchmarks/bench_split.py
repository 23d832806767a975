"""Benchmark ``patched-wheels split`` and ``patch`` against ``cp`` of the same wheel, in the same rounds.

    python -m benchmarks.bench_split [--rounds N] [--wheel W | --synthetic BYTES] [--graph-wheels W...]
                                     [--baseline-tree DIR] [--json FILE]

The wheel is the real torch 2.1.0 cp311 wheel (670 MB, downloaded once by ``torch_wheels.py`` into
``${XDG_CACHE_HOME:-~/.cache}/rules_patched_wheels/torch-2.1.0/``), ``--wheel W``, or with ``--synthetic
BYTES`` a torch-shaped wheel of about that size built here from gcc-built libraries
(``synthetic_wheel.py``; no download, kept in ``--cache-dir``), whose big library needs the synthetic
deps wheel, the graph's other wheel.  In alternating rounds on the same files (page cache warmed once),
each step a fresh process:

* ``cp`` of the wheel: the floor, since a split writes as many bytes as the wheel holds;
* ``patch --suffix bench.1 --remove-requires triton``: the rewrite every patched wheel gets;
* ``split --max-size 300000000 --into <name>-cuda-libs``: given the wheel's file alone, the command reads
  every library for its graph and keeps no ELF cache (cached rows would be checked against the members
  all the same), so every run is as the first on a machine;
* ``the hub's split``: the same split through the hub's own function (``hub.build.patch_into_index``, a
  ``patched_wheel`` with ``split_into`` and ``split_max_size``, no preload of its own, suffix ``bench.1``), its
  graph as the hub's build step starts it: the wheels' sha256 (from the lock) key the ELF cache (filled by an
  untimed run), whose rows are checked against the wheels' libraries, read again (issue 41); with the
  ``--graph-wheels`` (synthetic: the deps wheel) in it, as the hub reads the whole set, so the preload written
  for the sibling also loads what the moved libraries need from them.  This tree's hub writes while the graph
  is read (issue 50); a baseline tree whose ``start_graph`` does not take the hub's arguments reads it first;
* ``inflate floor``: every library of the wheel and the ``--graph-wheels`` inflated once on one thread,
  output discarded (``inflate_floor.py``): what reading their dynamic sections costs at the least, which
  both splits pay before they write a byte.

Per step: wall time, CPU time and peak RSS of the process *and the children it reaped* (``os.wait4``
returns the kernel's RUSAGE_BOTH of the child: a baseline tree's patchelf counts), median and range over
the rounds, and the ratio to ``cp``'s median; then the JSON line of ``harness.print_json``.
``--baseline-tree DIR`` runs the ``patch``/``split`` steps a second time with ``DIR/python`` first on
``PYTHONPATH`` (e.g. ``git worktree add --detach /tmp/split-base main``), alternating with this tree's,
so a change is measured against the code before it in the same run.

``--steps patch`` (or ``split``, ``hub``, several allowed) times only those steps of each tree beside ``cp``, its
control and the start-up (the floor only with a split): more rounds of ``patch`` fit where the splits take seconds
each; the targets judged are those of the steps run.

Two more steps in every round: ``cp (control)``, the same ``cp`` again (its ratio to ``cp`` is the noise
between two runs of the same work), and ``start-up: patch --help``, the interpreter's start-up and the patch
command's imports (what every command of the helper pays before reading a byte); with ``patch``, a third:
``start-up + the input's checks``, those imports and the checks of a wheel the helper accepts (``WheelReader``),
what a patch pays before it knows where its first byte goes: with ``cp``'s time after it, patch's floor, each
tree's patch printed as a multiple of it.

Targets (issue 50, restated against the floor): split and the hub's split wall <= 1.5x (the inflate floor's
wall / cores + ``cp``'s wall), the floor being one thread's and a split reading on every core; patch <= 2x
``cp`` in wall time and in CPU (``cp``'s CPU is its kernel copy alone); both splits <= 200 MiB peak RSS.  Exit 1
when this tree misses one.  With ``--baseline-tree``, each step of this tree is also given as a ratio to the
baseline's same step (medians of the same rounds).  The load average (1, 5, 15 min) is recorded before and
after: on a shared machine it says how much the figures are worth.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Sequence

from benchmarks.harness import Run, Step, add_json_option, alternate, measure, print_json, step_summary
from benchmarks.inflate_floor import cpu_features, floor_step
from benchmarks.synthetic_wheel import build_synthetic_set
from benchmarks.torch_wheels import TORCH, ensure_wheels
from patched_wheels.base.fsutil import hash_file

REPO = Path(__file__).resolve().parent.parent
MAX_SIZE = 300_000_000
TARGETS = {"patch": 2.0}
"""Each step's most, in ``cp``'s wall and CPU time."""
FLOOR_TARGET = 1.5
"""Each split's most, in wall time, over the floor's wall on every core plus ``cp``'s."""
RSS_TARGET = 200 << 20
CONTROL = "cp (control)"
STARTUP = "start-up: patch --help"
CHECKS = "start-up + the input's checks"
_OPEN_THE_WHEEL = (
    "import sys, patched_wheels.cli.patch\n"
    "from patched_wheels.wheelfile import WheelReader\n"
    "WheelReader(sys.argv[1]).close()\n"
)
"""The patch command's imports and the checks of a wheel it accepts (WheelReader: the central directory, every
member's path and record, RECORD against the members, METADATA and WHEEL): what ``patch`` pays before it can decide
where its first byte goes, so with ``cp`` after it, the floor of a patch that keeps those checks."""
FLOOR = "inflate floor"
MIB = 1 << 20


# The hub's split, through the hub's own function (hub.build.patch_into_index) as hub.build._build calls it: the
# set's graph by sha256, the ELF cache under XDG_CACHE_HOME checked against the wheels, lenient; started and
# handed over unread where the tree's start_graph takes the hub's arguments (issue 50), else read first (the
# hub of a baseline tree before it, which read its graph before any spec).
_AS_THE_HUB = """
import inspect, os, sys
from contextlib import ExitStack
from pathlib import Path
from patched_wheels.base.cache import CacheContext
from patched_wheels.elf import graph as elfgraph
from patched_wheels.hub.build import patch_into_index
from patched_wheels.hub.spec import PatchedWheelSpec
sibling, max_size, dest, wheel, *others = sys.argv[1:]
caches = CacheContext(Path(os.environ["XDG_CACHE_HOME"]) / "rules_patched_wheels")
refs = [elfgraph.WheelRef(Path(path).name, sha256, Path(path)) for path, sha256 in (item.rsplit("=", 1) for item in [wheel, *others])]
spec = PatchedWheelSpec(name=refs[0].filename.split("-", 1)[0], suffix="bench.1", wheel=refs[0].path, split_into=sibling, split_max_size=int(max_size))
with ExitStack() as stack:
    if "lenient" in inspect.signature(getattr(elfgraph, "start_graph", lambda: None)).parameters:
        graph = stack.enter_context(elfgraph.start_graph(refs, caches=caches, lenient=True))
    else:
        graph = elfgraph.read_graph(refs, caches=caches, lenient=True)
    patch_into_index(spec, refs, Path(dest), graph=graph, caches=caches)
"""
HUB = "the hub's split"


def sibling_of(wheel: Path) -> str:
    """The split's ``--into``: ``<project>-cuda-libs``."""
    return f"{wheel.name.split('-', 1)[0]}-cuda-libs"


def check_split(output: Path, wheel: Path) -> str:
    """Not timed: both wheels are there, the main one fits, the sibling holds the biggest library."""
    project, sibling = wheel.name.split("-", 1)[0], sibling_of(wheel).replace("-", "_")
    wheels = sorted(output.glob("*.whl"))
    main = [path for path in wheels if path.name.startswith(f"{project}-")]
    moved_wheel = [path for path in wheels if path.name.startswith(f"{sibling}-")]
    if len(main) != 1 or len(moved_wheel) != 1:
        raise SystemExit(f"split wrote {[path.name for path in wheels]}, expected a {project} and a {sibling} wheel")
    if main[0].stat().st_size > MAX_SIZE:
        raise SystemExit(f"{main[0].name}: {main[0].stat().st_size} bytes, over --max-size {MAX_SIZE}")
    with zipfile.ZipFile(wheel) as archive:
        biggest = max(
            (info for info in archive.infolist() if ".so" in info.filename), key=lambda info: info.compress_size
        )
    with zipfile.ZipFile(moved_wheel[0]) as archive:
        moved = [name for name in archive.namelist() if ".so" in name]
    if f"{sibling}/{biggest.filename.split('/', 1)[1]}" not in moved:
        raise SystemExit(f"{moved_wheel[0].name}: {biggest.filename} not moved ({moved})")
    return f"main {main[0].stat().st_size / MIB:.0f} MiB, sibling {moved_wheel[0].stat().st_size / MIB:.0f} MiB ({len(moved)} libraries)"


STEPS = {"patch": "patch", "split": "split", "hub": HUB}
"""``--steps`` choices: the step of each tree they name."""


def steps_for(
    tree: str,
    python_dir: Path | None,
    wheels: list[tuple[Path, str]],
    work: Path,
    env: dict[str, str],
    chosen: Sequence[str] = tuple(STEPS),
) -> list[Step]:
    """The patch and split steps of one source tree (``python_dir`` first on PYTHONPATH; None: the installed
    one) among those ``chosen`` (keys of :data:`STEPS`); ``wheels``: the wheel and the graph's other wheels,
    each with its sha256."""
    if python_dir is not None:
        env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(python_dir), env.get("PYTHONPATH", "")]))}
    wheel = wheels[0][0]
    helper = [sys.executable, "-m", "patched_wheels"]
    split = [
        *helper,
        "split",
        "--wheel",
        str(wheel),
        "--max-size",
        str(MAX_SIZE),
        "--into",
        sibling_of(wheel),
        "--dest-dir",
    ]
    out = work / tree
    as_the_hub = [
        sys.executable,
        "-c",
        _AS_THE_HUB,
        sibling_of(wheel),
        str(MAX_SIZE),
        str(out / "split-hub"),
        *(f"{path}={sha256}" for path, sha256 in wheels),
    ]
    steps = [
        Step(
            f"{tree}: patch",
            [
                *helper,
                "patch",
                "--wheel",
                str(wheel),
                "--suffix",
                "bench.1",
                "--remove-requires",
                "triton",
                "--dest-dir",
                str(out / "patch"),
            ],
            env,
            out / "patch",
        ),
        Step(f"{tree}: split", [*split, str(out / "split")], env, out / "split"),
        Step(f"{tree}: {HUB}", as_the_hub, env, out / "split-hub"),
    ]
    labels = {f"{tree}: {STEPS[name]}" for name in chosen}
    return [step for step in steps if step.label in labels]


def floor_ratios(results: dict[str, Any], cores: int) -> dict[str, dict[str, float]]:
    """Each split beside the inflate floor measured in the same rounds (printed, and returned for the JSON): a
    split reads every library before it writes the members that need them, so its CPU is compared with the
    inflate's, its wall with the floor's on ``cores`` threads and ``cp``'s together (issue 50's target), and
    with the floor's on one thread and ``cp``'s (issue 43's figure)."""
    if FLOOR not in results:  # no split run (--steps)
        return {}
    floor, cp = results[FLOOR], results["cp"]
    over_floor = {
        label: {
            "cpu": summary["cpu"]["median"] / floor["cpu"]["median"],
            "wall over floor + cp": summary["wall"]["median"] / (floor["wall"]["median"] + cp["wall"]["median"]),
            "wall over floor / cores + cp": summary["wall"]["median"]
            / (floor["wall"]["median"] / cores + cp["wall"]["median"]),
        }
        for label, summary in results.items()
        if label.endswith(("split", HUB))
    }
    for label, ratios in over_floor.items():
        print(
            f"{label}: wall {ratios['wall over floor / cores + cp']:.2f}x the floor's / {cores} cores + cp's "
            f"(target <= {FLOOR_TARGET}x); {ratios['wall over floor + cp']:.2f}x the floor's and cp's together; "
            f"CPU {ratios['cpu']:.2f}x the inflate floor's"
        )
    return over_floor


def patch_floor_ratios(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each tree's patch over its floor measured in the same rounds: the start-up and the input's checks, then
    ``cp`` (:data:`CHECKS`), in wall and CPU time; printed, and returned for the JSON."""
    if CHECKS not in results:
        return {}
    floor = {field: results[CHECKS][field]["median"] + results["cp"][field]["median"] for field in ("wall", "cpu")}
    ratios = {
        label: {field: summary[field]["median"] / floor[field] for field in ("wall", "cpu")}
        for label, summary in results.items()
        if label.endswith(": patch")
    }
    for label, ratio in ratios.items():
        print(
            f"{label}: wall {ratio['wall']:.2f}x, CPU {ratio['cpu']:.2f}x its floor ({CHECKS}, then cp: "
            f"{floor['wall']:.2f} s wall, {floor['cpu']:.2f} s CPU)"
        )
    return ratios


def baseline_ratios(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each step of this tree over the baseline's same step (medians), printed and returned for the JSON."""
    ratios = {}
    for label, summary in results.items():
        base = results.get(label.replace("this tree: ", "baseline: ", 1))
        if label.startswith("this tree: ") and base is not None:
            step = label.removeprefix("this tree: ")
            ratios[step] = {field: summary[field]["median"] / base[field]["median"] for field in ("wall", "cpu")}
            print(f"{step}: this tree / baseline: wall {ratios[step]['wall']:.2f}x, CPU {ratios[step]['cpu']:.2f}x")
    return ratios


def print_table(results: dict[str, Any]) -> None:
    """Each step's medians, ranges, ratios to ``cp`` and peak RSS, one line each."""
    print("x cp: the medians' ratio, then the fastest runs' (best-of)")
    print(f"{'step':<34}{'wall':>8}{'range':>14}{'x cp':>12}{'CPU':>8}{'range':>14}{'x cp':>12}{'peak RSS':>11}")
    for label, summary in results.items():
        wall, cpu = summary["wall"], summary["cpu"]
        ratio, best = (
            summary.get("ratio", {"wall": 1.0, "cpu": 1.0}),
            summary.get("best_ratio", {"wall": 1.0, "cpu": 1.0}),
        )
        print(
            f"{label:<34}{wall['median']:7.2f}s [{wall['min']:.2f}-{wall['max']:.2f}]{ratio['wall']:6.1f}x/{best['wall']:.1f}x"
            f"{cpu['median']:7.2f}s [{cpu['min']:.2f}-{cpu['max']:.2f}]{ratio['cpu']:6.1f}x/{best['cpu']:.1f}x{summary['peak_rss'] / MIB:7.0f} MiB"
        )


def judge(results: dict[str, Any], over_floor: dict[str, dict[str, float]], cores: int) -> dict[str, bool]:
    """This tree's steps against issue 50's targets (see the module docstring), those of the steps run."""
    verdicts = {
        f"{step} <= {most:g}x cp {field}": results[f"this tree: {step}"]["ratio"][field] <= most
        for step, most in TARGETS.items()
        if f"this tree: {step}" in results
        for field in ("wall", "cpu")
    }
    for step in (step for step in ("split", HUB) if f"this tree: {step}" in results):
        verdicts[f"{step} wall <= {FLOOR_TARGET:g}x (floor / {cores} cores + cp)"] = (
            over_floor[f"this tree: {step}"]["wall over floor / cores + cp"] <= FLOOR_TARGET
        )
        verdicts[f"{step} peak RSS <= {RSS_TARGET // MIB} MiB"] = (
            results[f"this tree: {step}"]["peak_rss"] <= RSS_TARGET
        )
    return verdicts


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--wheel", type=Path, help=f"default: the {TORCH} cp311 wheel from the cache (downloaded if missing)"
    )
    source.add_argument(
        "--synthetic",
        type=int,
        metavar="BYTES",
        help="a torch-shaped wheel of about BYTES built here (synthetic_wheel.py)",
    )
    parser.add_argument(
        "--graph-wheels", type=Path, nargs="*", default=[], help="the set's other wheels, in the hub's graph"
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "rpw-bench-synthetic",
        help="where --synthetic keeps its wheels between runs (default: %(default)s)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are reported (default 3)")
    parser.add_argument(
        "--baseline-tree", type=Path, help="a checkout of the code to compare with (its python/ is used)"
    )
    parser.add_argument("--work-dir", type=Path, help="scratch directory (default: a new temp dir, removed at the end)")
    parser.add_argument(
        "--steps",
        nargs="+",
        choices=STEPS,
        default=list(STEPS),
        help="the steps of each tree to time (default: all); the floor is timed with a split",
    )
    add_json_option(parser)
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    load_before = list(os.getloadavg())
    graph_wheels = [path.resolve() for path in args.graph_wheels]
    if args.synthetic:
        synthetic = build_synthetic_set(args.cache_dir, args.synthetic)
        wheel, graph_wheels = synthetic.main, graph_wheels or [synthetic.deps]
    else:
        wheel = (args.wheel or ensure_wheels([TORCH])[0]).resolve()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench_split."))
    work.mkdir(parents=True, exist_ok=True)
    # A private ELF cache: XDG_CACHE_HOME moves every per-user cache of the helper (elfgraph/ included).
    env = {**os.environ, "XDG_CACHE_HOME": str(work / "xdg")}
    env.pop("RULES_PATCHED_WHEELS_CACHE", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    steps = [
        Step("cp", ["cp", str(wheel), str(work / "cp")], env, work / "cp"),
        # The control: the same copy again, so the noise between two runs of the same work shows beside each ratio.
        Step(CONTROL, ["cp", str(wheel), str(work / "cp-control")], env, work / "cp-control"),
        # The floor of any command of the helper: the interpreter's start-up and the patch command's imports.
        Step(STARTUP, [sys.executable, "-m", "patched_wheels", "patch", "--help"], env, work / "startup"),
    ]
    if "patch" in args.steps:
        steps.append(Step(CHECKS, [sys.executable, "-c", _OPEN_THE_WHEEL, str(wheel)], env, work / "checks"))
    if {"split", "hub"} & set(args.steps):
        steps.append(floor_step(FLOOR, sys.executable, [wheel, *graph_wheels], work, env))
    wheels = [(path, hash_file(path)) for path in [wheel, *graph_wheels]]
    steps += steps_for("this tree", None, wheels, work, env, args.steps)
    if args.baseline_tree is not None:
        steps += steps_for("baseline", args.baseline_tree.resolve() / "python", wheels, work, env, args.steps)
    trees = [REPO / "python", *([args.baseline_tree.resolve() / "python"] if args.baseline_tree is not None else [])]
    for tree in trees:  # as installed: byte-compiled once (under PYTHONDONTWRITEBYTECODE every run compiles again)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], check=True, stdout=subprocess.DEVNULL)
    try:
        for path, _ in wheels:
            subprocess.run(
                ["cat", str(path)], check=True, stdout=subprocess.DEVNULL
            )  # the same warm page cache for all
        for step in steps:
            if step.label.endswith((": split", HUB)):
                measure(step)  # primes the hub's ELF cache (and a baseline's); untimed
                print(f"{step.label}: {check_split(step.output, wheel)}", flush=True)
        runs: dict[str, list[Run]] = alternate(steps, args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    cp = runs["cp"]
    results = {label: step_summary(step_runs, None if label == "cp" else cp) for label, step_runs in runs.items()}
    print(
        f"input: {wheel.name}, {wheel.stat().st_size / MIB:.0f} MiB (graph with {len(graph_wheels)} more wheels); "
        f"medians of {args.rounds} alternating rounds, [min-max]"
    )
    print_table(results)
    cores = os.cpu_count() or 1
    over_floor = floor_ratios(results, cores)
    over_floor.update(patch_floor_ratios(results))
    over_baseline = baseline_ratios(results)
    verdicts = judge(results, over_floor, cores)
    print("targets: " + ", ".join(f"{name}: {'PASS' if ok else 'FAIL'}" for name, ok in verdicts.items()))
    inputs = {
        "wheel": wheel.name,
        "bytes": wheel.stat().st_size,
        "graph_wheels": [path.name for path in graph_wheels],
        "rounds": args.rounds,
        "synthetic": bool(args.synthetic),
        "baseline_tree": str(args.baseline_tree or ""),
        "steps": args.steps,
        "cpu": cpu_features(),
        "load before": load_before,
        "load after": list(os.getloadavg()),
        "cores": cores,
    }
    print(f"load average (1, 5, 15 min): {load_before} before, {list(os.getloadavg())} after, on {cores} cores")
    print_json(
        "bench_split",
        inputs,
        {"steps": results, "x floor": over_floor, "x baseline": over_baseline, "targets": verdicts},
        args.json,
    )
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
