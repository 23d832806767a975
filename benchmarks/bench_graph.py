"""Benchmark: ELF graph + load order of torch 2.1.0 (cp311) and its 12 nvidia-*-cu12 wheels, cold.

Downloads the wheels (pinned in ``torch_wheels.py``, ~2.6 GB) into
``${XDG_CACHE_HOME:-~/.cache}/rules_patched_wheels/torch-2.1.0/`` when absent, then measures in
alternating rounds (issue 43), each step a fresh process of ``--python`` (default: this interpreter; give
the one of a venv made by a plain ``pip install .`` to measure what a user gets):

* ``graph``: ``python -m patched_wheels graph W...`` over an empty helper cache, each wheel given by its
  file (read, neither hashed nor cached) -- target <= 12 s CPU;
* ``inflate floor``: inflating the very same library members once, one thread, with the inflater the
  helper picks in that interpreter (python-isal when installed, else zlib), output discarded, no parsing
  and no CRC: what any reader of the dynamic sections pays, since ``.dynamic`` sits near each file's end
  and deflate has no random access;

and prints the bytes inflated, wall and CPU with their ratio to the floor, peak RSS, the CPU's model and
its AVX2/BMI2 flags (the inflaters' fast paths), the cache files ``graph`` left (none), and checks the
order an untimed run printed: libnvJitLink before libcusparse and libcusolver.

Run: ``.venv/bin/python -m benchmarks.bench_graph [--python /tmp/venv/bin/python] [--rounds 3]``

``--synthetic BYTES`` runs the same two steps on the torch-shaped synthetic set of about BYTES instead
(``synthetic_wheel.py``: gcc-built libraries, no download, kept in ``--cache-dir``), whose order is checked as
the deps wheel's libsynthdep before libsynth_cuda, which needs it.  Targets: the torch set's <= 12 s CPU (issue 43), and for
either set ``graph``'s CPU <= 1.15x the floor's (issue 50).

``--facts-check BYTES`` (issue 41) measures instead what checking a ``wheel_facts`` file against the wheels
costs, on the torch-shaped synthetic set of about BYTES (``synthetic_wheel.py``: gcc-built libraries, no
download, kept in ``--cache-dir``).  In alternating rounds, each step a fresh process over an empty helper
cache (page cache warmed once):

* ``cold``: the scan with no cache and no facts (every library inflated up to its dynamic section and
  checked to its end); every step is given each wheel's sha256, as the hub has it from the lock;
* ``facts, checked``: the scan given the set's facts, each row compared with its member's dynamic section;
* ``facts, trusted``: the same with ``--trusted-tree DIR``'s ``python/`` first on ``PYTHONPATH``, a checkout
  of the code before the check (e.g. ``git worktree add --detach /tmp/facts-base <commit>``), which
  believed a row once its path was in the zip directory and its member started with the ELF magic.

Per step: wall and CPU (user + system of the process) and peak RSS, median and range, the ratio to
``cold``; then the JSON line of ``harness.print_json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.harness import Run, Step, add_json_option, alternate, print_json, step_summary
from benchmarks.inflate_floor import cpu_features, floor_step, library_members
from benchmarks.synthetic_wheel import build_synthetic_set
from benchmarks.torch_wheels import NVIDIA, TORCH, ensure_wheels
from patched_wheels.base.cache import OFF, CacheContext
from patched_wheels.base.fsutil import hash_file
from patched_wheels.elf.graph import WheelRef, scan_wheels
from patched_wheels.hub.facts import read_facts, write_facts
from patched_wheels.wheelfile import INFLATER_NAME

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--facts-check", type=int, metavar="BYTES", help="measure the facts check on a synthetic set of about BYTES"
    )
    parser.add_argument(
        "--synthetic", type=int, metavar="BYTES", help="the cold graph of a synthetic torch-shaped set of about BYTES"
    )
    parser.add_argument("--trusted-tree", type=Path, help="a checkout of the code before the check (its python/)")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "rpw-bench-synthetic",
        help="where --facts-check and --synthetic keep their wheels between runs (default: %(default)s)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument(
        "--python",
        type=Path,
        default=Path(sys.executable),
        help="the interpreter whose installed patched_wheels runs graph and the floor (default: this one), e.g. "
        "a venv made by a plain `pip install .`",
    )
    parser.add_argument("--scan", nargs="+", metavar=("FACTS|-", "WHEEL=SHA256"), help=argparse.SUPPRESS)  # a step
    add_json_option(parser)
    args = parser.parse_args()
    if args.scan:
        given = [argument.rpartition("=") for argument in args.scan[1:]]
        return scan_step(args.scan[0], [WheelRef(Path(path).name, sha256, Path(path)) for path, _, sha256 in given])
    if args.facts_check:
        return facts_check(args)
    return torch_graph(args)


def scan_step(facts: str, wheels: list[WheelRef]) -> int:
    """One timed step of ``--facts-check``: the scan, given ``facts`` (``-``: none, no cache) over an empty
    cache in the working directory; each wheel with its sha256, as the hub has it from the lock (not hashed)."""
    caches = OFF
    if facts != "-":
        caches = CacheContext(Path.cwd()).recording(read_facts(Path(facts), "bench_graph"), facts)
    scan = scan_wheels(wheels, caches=caches)
    print(f"{len(scan.libraries)} libraries, {scan.cached_wheels} wheels answered by the facts")
    return 0


def facts_check(args: argparse.Namespace) -> int:
    """``--facts-check``: cold scan, facts checked, facts trusted (the code before the check), alternating."""
    synthetic = build_synthetic_set(args.cache_dir, args.facts_check)
    wheels = [synthetic.main, synthetic.deps]
    members = library_members(wheels)
    work = Path(tempfile.mkdtemp(prefix="bench_graph."))
    try:
        facts = work / "wheel_facts.json"
        # Hashed in steps: a child's peak RSS counts what its parent held when it forked.  Each wheel comes with
        # its sha256, as the hub's do (a wheel given by its file alone is neither cached nor checked against facts).
        refs = [WheelRef(wheel.name, hash_file(wheel), wheel) for wheel in wheels]
        recording = CacheContext(work / "record").recording({}, "")
        scan_wheels(refs, caches=recording)
        assert recording.recorded is not None
        write_facts(facts, recording.recorded)
        checked = CacheContext(work / "check").recording(read_facts(facts, "bench_graph"), str(facts))
        assert scan_wheels(refs, caches=checked).cached_wheels == len(refs), "the facts describe the wheels"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))}
        env.pop("RULES_PATCHED_WHEELS_CACHE", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        script = [sys.executable, "-m", "benchmarks.bench_graph", "--scan"]
        names = [f"{ref.path}={ref.sha256}" for ref in refs]
        steps = [
            Step("cold", [*script, "-", *names], env, work / "cold"),
            Step("facts, checked", [*script, str(facts), *names], env, work / "checked"),
        ]
        if args.trusted_tree is not None:
            old = str(args.trusted_tree.resolve() / "python")
            trusted = {**env, "PYTHONPATH": os.pathsep.join([old, env["PYTHONPATH"]])}
            steps.append(Step("facts, trusted", [*script, str(facts), *names], trusted, work / "trusted"))
        for wheel in wheels:  # the same warm page cache for all
            subprocess.run(["cat", str(wheel)], check=True, stdout=subprocess.DEVNULL)
        runs: dict[str, list[Run]] = alternate([_in_output(step) for step in steps], args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results = {
        label: step_summary(step_runs, None if label == "cold" else runs["cold"]) for label, step_runs in runs.items()
    }
    inflated = sum(info.file_size for _, info in members)
    print(
        f"input: {', '.join(f'{wheel.name} ({wheel.stat().st_size >> 20} MiB)' for wheel in wheels)}; {len(members)} "
        f"libraries, {inflated >> 20} MiB inflated; inflater {INFLATER_NAME}; medians of {args.rounds} alternating "
        "rounds, [min-max], x cold: the medians' ratio"
    )
    print_steps(results, "cold")
    inputs = {
        "wheels": [wheel.name for wheel in wheels],
        "wheel_bytes": [wheel.stat().st_size for wheel in wheels],
        "libraries": len(members),
        "inflated": inflated,
        "inflater": INFLATER_NAME,
        "trusted_tree": str(args.trusted_tree) if args.trusted_tree else None,
    }
    print_json("bench_graph --facts-check", inputs, results, args.json)
    return 0


def print_steps(summaries: dict[str, dict[str, Any]], baseline: str) -> None:
    """One line per step: wall and CPU medians with their range and their ratio to ``baseline``'s, peak RSS."""
    print(
        f"{'step':<18}{'wall':>8}{'range':>15}{'x ' + baseline:>9}{'CPU':>8}{'range':>15}{'x ' + baseline:>9}{'peak RSS':>11}"
    )
    for label, summary in summaries.items():
        wall, cpu, ratio = summary["wall"], summary["cpu"], summary.get("ratio", {"wall": 1.0, "cpu": 1.0})
        print(
            f"{label:<18}{wall['median']:7.2f}s [{wall['min']:.2f}-{wall['max']:.2f}]{ratio['wall']:8.2f}x"
            f"{cpu['median']:7.2f}s [{cpu['min']:.2f}-{cpu['max']:.2f}]{ratio['cpu']:8.2f}x"
            f"{summary['peak_rss'] / 2**20:7.0f} MiB"
        )


def _in_output(step: Step) -> Step:
    """``step`` run in its output directory (emptied before each run): its cache starts empty every time."""
    return Step(
        step.label, ["sh", "-c", 'cd "$0" && exec "$@"', str(step.output), *step.command], step.env, step.output
    )


ORDERS = {
    "torch": ("libnvJitLink.so.12", "libcusparse.so.12", "libcusolver.so.11"),
    "synthetic": ("libsynthdep.so.1", "libsynth_cuda.so"),
}
"""Per set, file names its load order must give in this order (each after the one before it)."""
FLOOR_TARGET = 1.15
"""``graph``'s CPU over the inflate floor's, at most (issue 50)."""


def torch_graph(args: argparse.Namespace) -> int:
    """Issue 43's cold ``graph`` (a fresh process, an empty helper cache: each wheel given by its file, as a
    user runs it) against the floor of inflating the same libraries once, in alternating rounds; of the
    synthetic set with ``--synthetic``."""
    load_before = list(os.getloadavg())
    if args.synthetic:
        wheels, expected = list(build_synthetic_set(args.cache_dir, args.synthetic)), ORDERS["synthetic"]
    else:
        wheels, expected = ensure_wheels([TORCH, *NVIDIA]), ORDERS["torch"]
    members = library_members(wheels)
    total = sum(info.file_size for _, info in members)
    compressed = sum(info.compress_size for _, info in members)
    python = str(args.python)
    inflater = subprocess.run(
        [python, "-c", "from patched_wheels.wheelfile import INFLATER_NAME; print(INFLATER_NAME)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="bench_graph."))
    try:
        env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
        graph_json = subprocess.run(  # untimed: warms the page cache and bytecode, and gives the order checked
            [python, "-m", "patched_wheels", "graph", "--json", *map(str, wheels)],
            check=True,
            capture_output=True,
            env={**env, "RULES_PATCHED_WHEELS_CACHE": str(work / "untimed-cache")},
        ).stdout
        steps = [
            Step(
                "graph",
                ["sh", "-c", 'RULES_PATCHED_WHEELS_CACHE="$0" exec "$@"', str(work / "graph"), python, "-m"]
                + ["patched_wheels", "graph", *map(str, wheels)],
                env,
                work / "graph",
            ),
            floor_step("inflate floor", python, wheels, work, env),
        ]
        runs = alternate(steps, args.rounds)
        left = sorted(path.name for path in (work / "graph").rglob("*") if path.is_file())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    order = [entry["path"].rpartition("/")[2] for entry in json.loads(graph_json)["load_order"]]
    positions = [order.index(name) for name in expected]
    ordered = positions == sorted(positions)
    summaries = {
        "graph": step_summary(runs["graph"], runs["inflate floor"]),
        "inflate floor": step_summary(runs["inflate floor"]),
    }
    graph_cpu = summaries["graph"]["cpu"]["median"]
    over_floor = graph_cpu / summaries["inflate floor"]["cpu"]["median"]
    print(
        f"{len(wheels)} wheels, {len(members)} ELF members: {total / 2**30:.2f} GiB inflated, "
        f"{compressed / 2**30:.2f} GiB deflated; {python} inflates with {inflater}; CPU {cpu_features()}; "
        f"medians of {args.rounds} alternating rounds [min-max]"
    )
    print_steps(summaries, "floor")
    if not args.synthetic:
        print(f"target: cold graph <= 12 s CPU: {'met' if graph_cpu <= 12 else 'MISSED'}")
    print(
        f"target: CPU <= {FLOOR_TARGET}x the floor's: {over_floor:.2f}x, {'met' if over_floor <= FLOOR_TARGET else 'MISSED'}"
    )
    print(f"cache files written: {len(left)}; {' before '.join(expected)}: {'yes' if ordered else 'NO'}")
    print(
        f"load average (1, 5, 15 min): {load_before} before, {list(os.getloadavg())} after, on {os.cpu_count()} cores"
    )
    inputs = {
        "wheels": [wheel.name for wheel in wheels],
        "elf_members": len(members),
        "inflated": total,
        "deflated": compressed,
        "python": python,
        "inflater": inflater,
        "cpu": cpu_features(),
        "rounds": args.rounds,
        "synthetic": bool(args.synthetic),
        "load before": load_before,
        "load after": list(os.getloadavg()),
    }
    targets = {f"graph CPU <= {FLOOR_TARGET}x floor (issue 50)": over_floor <= FLOOR_TARGET, "load order": ordered}
    if not args.synthetic:
        targets["graph <= 12 s CPU (issue 43)"] = graph_cpu <= 12
    results = {**summaries, "cache files written": left, "targets": targets}
    print_json("bench_graph", inputs, results, args.json)
    return 0 if ordered else 1


if __name__ == "__main__":
    sys.exit(main())
