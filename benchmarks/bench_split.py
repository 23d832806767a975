"""Benchmark ``patched-wheels split`` on the real torch 2.1.0 cp311 wheel (670 MB) against ``cp`` and ``patch``.

    python benchmarks/bench_split.py [--rounds N] [--wheel W] [--baseline-tree DIR]

In alternating rounds on the same files (page cache warmed once), each step a fresh process:

* ``cp`` of the wheel: the floor, since a split writes as many bytes as the wheel holds;
* ``patch --suffix bench.1 --remove-requires triton``: the rewrite every patched wheel gets;
* ``split --max-size 300000000 --into torch-cuda-libs`` with a warm ELF cache and digest memo (primed
  once, untimed: the repeat run, and the hub's case, whose graph is read once for the whole set);
* the same with ``--no-cache`` (the graph scan inflates every library: the first run on a machine).
* ``split (sha256 known)``: the same split through the library, as the Bazel hub runs it: the wheel's
  sha256 comes from the lock, so the ELF cache is read without hashing the 670 MB first.

Per step: wall time, CPU time and peak RSS of the process *and the children it reaped* (``os.wait4``
returns the kernel's RUSAGE_BOTH of the child: a baseline tree's patchelf counts), median over the rounds,
and the ratio to ``cp``'s median.  ``--baseline-tree DIR`` runs the ``patch``/``split`` steps a second
time with ``DIR/python`` first on ``PYTHONPATH`` (e.g. ``git worktree add --detach /tmp/split-base main``),
alternating with this tree's, so a change is measured against the code before it in the same run.

Targets (issue 19): split (warm ELF cache) <= 3x ``cp`` in CPU time and in wall time, <= 200 MiB peak RSS.
Exit 1 when this tree misses one.  The wheel is downloaded once (``torch_wheels.py``) into
``${XDG_CACHE_HOME:-~/.cache}/rules_patched_wheels/torch-2.1.0/``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from torch_wheels import TORCH, ensure_wheels

REPO = Path(__file__).resolve().parent.parent
MAX_SIZE = 300_000_000
SIBLING = "torch-cuda-libs"
CP_TARGET = 3.0
RSS_TARGET = 200 << 20
MIB = 1 << 20


# The hub's call (hub.patch_into_index): the graph read by sha256 from the ELF cache under XDG_CACHE_HOME.
_AS_THE_HUB = f"""
import os, sys
from pathlib import Path
from patched_wheels.base.cache import CacheContext
from patched_wheels.elf.graph import WheelRef, read_graph
from patched_wheels.patch.request import SplitRequest
from patched_wheels.patch.surgery import PatchOptions, patch_wheel
wheel, sha256, dest = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
caches = CacheContext(Path(os.environ["XDG_CACHE_HOME"]) / "rules_patched_wheels")
graph = read_graph([WheelRef(wheel.name, sha256, wheel)], caches=caches)
patch_wheel(wheel, dest, PatchOptions(split=SplitRequest("{SIBLING}", max_size={MAX_SIZE}), graph=graph))
"""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    """User + system seconds of the process and of the children it waited for."""
    peak_rss: int
    """Bytes: the largest of the process and its reaped children."""


@dataclass(frozen=True)
class Step:
    label: str
    command: list[str]
    env: dict[str, str]
    output: Path


def measure(step: Step) -> Run:
    """One run of ``step`` into an empty output directory, after writing back the previous run's files."""
    shutil.rmtree(step.output, ignore_errors=True)
    step.output.mkdir(parents=True)
    os.sync()
    start = time.perf_counter()
    process = subprocess.Popen(step.command, stdout=subprocess.DEVNULL, env=step.env)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"benchmark step failed: {' '.join(step.command)}")
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024)  # Linux reports KiB


def check_split(output: Path) -> str:
    """Not timed: both wheels are there, the main one fits, the sibling holds libtorch_cuda.so."""
    wheels = sorted(output.glob("*.whl"))
    main = [wheel for wheel in wheels if wheel.name.startswith("torch-")]
    sibling = [wheel for wheel in wheels if wheel.name.startswith("torch_cuda_libs-")]
    if len(main) != 1 or len(sibling) != 1:
        raise SystemExit(f"split wrote {[wheel.name for wheel in wheels]}, expected a torch and a torch_cuda_libs wheel")
    if main[0].stat().st_size > MAX_SIZE:
        raise SystemExit(f"{main[0].name}: {main[0].stat().st_size} bytes, over --max-size {MAX_SIZE}")
    with zipfile.ZipFile(sibling[0]) as archive:
        moved = [name for name in archive.namelist() if name.endswith(".so")]
    if "torch_cuda_libs/lib/libtorch_cuda.so" not in moved:
        raise SystemExit(f"{sibling[0].name}: libtorch_cuda.so not moved ({moved})")
    return f"main {main[0].stat().st_size / MIB:.0f} MiB, sibling {sibling[0].stat().st_size / MIB:.0f} MiB ({len(moved)} libraries)"


def steps_for(tree: str, python_dir: Path | None, wheel: Path, sha256: str, work: Path, env: dict[str, str]) -> list[Step]:
    """The patch and split steps of one source tree (``python_dir`` first on PYTHONPATH; None: the installed one)."""
    if python_dir is not None:
        env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(python_dir), env.get("PYTHONPATH", "")]))}
    helper = [sys.executable, "-m", "patched_wheels"]
    split = [*helper, "split", "--wheel", str(wheel), "--max-size", str(MAX_SIZE), "--into", SIBLING, "--dest-dir"]
    out = work / tree
    as_the_hub = [sys.executable, "-c", _AS_THE_HUB, str(wheel), sha256, str(out / "split-hub")]
    return [
        Step(f"{tree}: patch", [*helper, "patch", "--wheel", str(wheel), "--suffix", "bench.1", "--remove-requires",
                                "triton", "--dest-dir", str(out / "patch")], env, out / "patch"),  # fmt: skip
        Step(f"{tree}: split", [*split, str(out / "split")], env, out / "split"),
        Step(f"{tree}: split --no-cache", [*split, str(out / "split-nc"), "--no-cache"], env, out / "split-nc"),
        Step(f"{tree}: split (sha256 known)", as_the_hub, env, out / "split-hub"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, help=f"default: the {TORCH} cp311 wheel from the cache (downloaded if missing)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are reported (default 3)")
    parser.add_argument("--baseline-tree", type=Path, help="a checkout of the code to compare with (its python/ is used)")
    parser.add_argument("--work-dir", type=Path, help="scratch directory (default: a new temp dir, removed at the end)")
    args = parser.parse_args()

    wheel = (args.wheel or ensure_wheels([TORCH])[0]).resolve()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench_split."))
    work.mkdir(parents=True, exist_ok=True)
    # A private ELF cache: XDG_CACHE_HOME moves every per-user cache of the helper (elfgraph/ included).
    env = {**os.environ, "XDG_CACHE_HOME": str(work / "xdg")}
    env.pop("RULES_PATCHED_WHEELS_CACHE", None)
    steps = [Step("cp", ["cp", str(wheel), str(work / "cp")], env, work / "cp")]
    sha256 = _sha256(wheel)
    steps += steps_for("this tree", None, wheel, sha256, work, env)
    if args.baseline_tree is not None:
        steps += steps_for("baseline", args.baseline_tree.resolve() / "python", wheel, sha256, work, env)
    trees = [REPO / "python", *([args.baseline_tree.resolve() / "python"] if args.baseline_tree is not None else [])]
    for tree in trees:  # as installed: byte-compiled once (under PYTHONDONTWRITEBYTECODE every run compiles again)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], check=True, stdout=subprocess.DEVNULL)
    try:
        subprocess.run(["cat", str(wheel)], check=True, stdout=subprocess.DEVNULL)  # the same warm page cache for all
        for step in steps:
            if step.label.endswith((": split", "(sha256 known)")):
                measure(step)  # primes the ELF cache; untimed
                print(f"{step.label}: {check_split(step.output)}", flush=True)
        runs: dict[str, list[Run]] = {step.label: [] for step in steps}
        for number in range(args.rounds):
            order = steps if number % 2 == 0 else steps[::-1]  # alternate, so drift in machine load spreads evenly
            for step in order:
                runs[step.label].append(measure(step))
            print(f"round {number + 1}/{args.rounds} done", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def median(label: str, field: str) -> float:
        return statistics.median(getattr(run, field) for run in runs[label])

    print(f"input: {wheel.name}, {wheel.stat().st_size / MIB:.0f} MiB; medians of {args.rounds} alternating rounds")
    cp_wall, cp_cpu = median("cp", "wall"), median("cp", "cpu")
    print(f"{'step':<38}{'wall':>9}{'x cp':>7}{'CPU':>9}{'x cp':>7}{'peak RSS':>12}")
    for label in runs:
        wall, cpu, rss = median(label, "wall"), median(label, "cpu"), max(run.peak_rss for run in runs[label])
        print(f"{label:<38}{wall:8.2f}s{wall / cp_wall:6.1f}x{cpu:8.2f}s{cpu / max(cp_cpu, 0.01):6.1f}x{rss / MIB:8.0f} MiB")
    split = "this tree: split"
    verdicts = [
        (f"split <= {CP_TARGET:g}x cp CPU", median(split, "cpu") / max(cp_cpu, 0.01) <= CP_TARGET),
        (f"split <= {CP_TARGET:g}x cp wall", median(split, "wall") / cp_wall <= CP_TARGET),
        (f"split peak RSS <= {RSS_TARGET // MIB} MiB", max(run.peak_rss for run in runs[split]) <= RSS_TARGET),
    ]
    print("targets: " + ", ".join(f"{name}: {'PASS' if ok else 'FAIL'}" for name, ok in verdicts))
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
