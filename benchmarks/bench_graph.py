"""Benchmark: ELF graph + load order of torch 2.1.0 (cp311) and its 12 nvidia-*-cu12 wheels.

Downloads the wheels (pinned in ``torch_wheels.py``, ~2.6 GB) into
``${XDG_CACHE_HOME:-~/.cache}/rules_patched_wheels/torch-2.1.0/`` when absent, then in
one run measures:

* ``graph``: :func:`patched_wheels.elf.graph.scan_wheels` + ``build_graph`` with no
  result cache (every ELF member inflated), on all cores -- target <= 10 s on 2 cores;
* ``floor``: inflating the very same members with zlib on one core, output discarded
  (what the naive approach costs before any ELF parsing);
* ``cached``: the same graph again with a warm per-wheel result cache (each wheel keyed by its sha256,
  hashed untimed, as the hub has it from the lock);

and prints the bytes inflated, the ratios against the floor, and checks the
order the issue is about: libnvJitLink before libcusparse and libcusolver.

Run: ``.venv/bin/python -m benchmarks.bench_graph``

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
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from pathlib import Path

from benchmarks.harness import Run, Step, add_json_option, alternate, own_cpu, print_json, step_summary
from benchmarks.synthetic_wheel import build_synthetic_set
from benchmarks.torch_wheels import NVIDIA, TORCH, ensure_wheels
from patched_wheels.base.cache import OFF, CacheContext
from patched_wheels.base.fsutil import hash_file
from patched_wheels.elf.graph import WheelRef, build_graph, scan_wheels
from patched_wheels.elf.read import is_shared_library_name
from patched_wheels.hub.facts import read_facts, write_facts
from patched_wheels.wheelfile import INFLATER_NAME
from patched_wheels.wheelfile.schemes import install_path

REPO = Path(__file__).resolve().parent.parent


def elf_members(wheels: list[Path]) -> list[tuple[Path, zipfile.ZipInfo]]:
    members = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                path = install_path(info.filename)
                if path is not None and is_shared_library_name(path):
                    members.append((wheel, info))
    return members


def zlib_floor(members: list[tuple[Path, zipfile.ZipInfo]]) -> tuple[float, float]:
    """Single-core zlib inflate of every member, output discarded: (wall, CPU) seconds of merely decompressing."""
    cpu = own_cpu()
    start = time.perf_counter()
    for wheel, info in members:
        with zipfile.ZipFile(wheel) as archive, archive.open(info) as stream:
            while stream.read(1 << 20):
                pass
    return time.perf_counter() - start, own_cpu() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--facts-check", type=int, metavar="BYTES", help="measure the facts check on a synthetic set of about BYTES"
    )
    parser.add_argument("--trusted-tree", type=Path, help="a checkout of the code before the check (its python/)")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "rpw-bench-synthetic",
        help="where --facts-check keeps its wheels between runs (default: %(default)s)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of --facts-check (default 5)")
    parser.add_argument("--scan", nargs="+", metavar=("FACTS|-", "WHEEL=SHA256"), help=argparse.SUPPRESS)  # a step
    add_json_option(parser)
    args = parser.parse_args()
    if args.scan:
        given = [argument.rpartition("=") for argument in args.scan[1:]]
        return scan_step(args.scan[0], [WheelRef(Path(path).name, sha256, Path(path)) for path, _, sha256 in given])
    if args.facts_check:
        return facts_check(args)
    return torch_graph()


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
    members = elf_members(wheels)
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
    print(f"{'step':<18}{'wall':>8}{'range':>15}{'x cold':>8}{'CPU':>8}{'range':>15}{'x cold':>8}{'peak RSS':>11}")
    for label, summary in results.items():
        wall, cpu, ratio = summary["wall"], summary["cpu"], summary.get("ratio", {"wall": 1.0, "cpu": 1.0})
        print(
            f"{label:<18}{wall['median']:7.2f}s [{wall['min']:.2f}-{wall['max']:.2f}]{ratio['wall']:7.2f}x"
            f"{cpu['median']:7.2f}s [{cpu['min']:.2f}-{cpu['max']:.2f}]{ratio['cpu']:7.2f}x"
            f"{summary['peak_rss'] / 2**20:7.0f} MiB"
        )
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


def _in_output(step: Step) -> Step:
    """``step`` run in its output directory (emptied before each run): its cache starts empty every time."""
    return Step(
        step.label, ["sh", "-c", 'cd "$0" && exec "$@"', str(step.output), *step.command], step.env, step.output
    )


def torch_graph() -> int:
    wheels = ensure_wheels([TORCH, *NVIDIA])
    members = elf_members(wheels)
    total = sum(info.file_size for _, info in members)
    compressed = sum(info.compress_size for _, info in members)
    print(
        f"{len(wheels)} wheels, {len(members)} ELF members: {total / 2**30:.2f} GiB inflated, {compressed / 2**30:.2f} GiB deflated"
    )
    print(
        f"cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}, inflater: {INFLATER_NAME}, zlib {zlib.ZLIB_RUNTIME_VERSION}"
    )

    start = time.perf_counter()
    for wheel in wheels:  # same starting point for every measurement: wheels in the page cache
        with open(wheel, "rb") as handle:
            while handle.read(1 << 24):
                pass
    print(f"warm-up read of the wheels: {time.perf_counter() - start:.2f} s")

    cpu = own_cpu()
    start = time.perf_counter()
    scan = scan_wheels(wheels)
    graph = build_graph(scan.libraries)
    graph_seconds = time.perf_counter() - start
    cpu_seconds = own_cpu() - cpu
    floor_seconds, floor_cpu_seconds = zlib_floor(members)

    refs = [WheelRef(wheel.name, hash_file(wheel), wheel) for wheel in wheels]  # the cache's keys, as the hub has them
    with tempfile.TemporaryDirectory() as results:
        scan_wheels(refs, caches=CacheContext(Path(results)))
        start = time.perf_counter()
        cached = build_graph(scan_wheels(refs, caches=CacheContext(Path(results))).libraries)
        cached_seconds = time.perf_counter() - start
    assert cached.load_order == graph.load_order

    order = [library.filename for library in graph.load_order]
    ok = order.index("libnvJitLink.so.12") < order.index("libcusparse.so.12") < order.index("libcusolver.so.11")
    print(
        f"graph + order, no cache:       {graph_seconds:6.2f} s wall ({cpu_seconds:.2f} s CPU), "
        f"{scan.inflated_bytes / 2**30:.2f} GiB inflated, {len(graph.libraries)} libraries"
        f"  [target <= 10 s: {'met' if graph_seconds <= 10 else 'MISSED'}]"
    )
    print(
        f"floor, zlib inflate on 1 core: {floor_seconds:6.2f} s wall ({floor_cpu_seconds:.2f} s CPU, "
        f"{total / floor_seconds / 1e6:.0f} MB/s)"
    )
    print(f"graph + order, warm cache:     {cached_seconds:6.2f} s")
    print(
        f"ratios: graph/floor = {graph_seconds / floor_seconds:.2f} wall, {cpu_seconds / floor_cpu_seconds:.2f} CPU; "
        f"cached/floor = {cached_seconds / floor_seconds:.4f}"
    )
    print(f"libnvJitLink before libcusparse before libcusolver: {'yes' if ok else 'NO'}")
    inputs = {
        "wheels": [wheel.name for wheel in wheels],
        "elf_members": len(members),
        "inflated": total,
        "deflated": compressed,
        "inflater": INFLATER_NAME,
        "zlib": zlib.ZLIB_RUNTIME_VERSION,
    }
    results = {
        "graph": {
            "wall": graph_seconds,
            "cpu": cpu_seconds,
            "inflated": scan.inflated_bytes,
            "libraries": len(graph.libraries),
        },
        "floor": {"wall": floor_seconds, "cpu": floor_cpu_seconds},
        "cached": {"wall": cached_seconds},
        "targets": {"graph <= 10 s wall": graph_seconds <= 10, "load order": ok},
    }
    print_json("bench_graph", inputs, results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
