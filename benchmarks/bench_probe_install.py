"""The preload probe's install of a wheel set in one site-packages: this tree against a baseline tree.

    python -m benchmarks.bench_probe_install --wheels DIR --baseline-tree DIR [--rounds 3] [--python PYTHON]

What a cold hub with ``preload = "auto"`` spends most of its CPU on (issue 34): every wheel of the set
inflated and written once, in one site-packages, before the probe runs. Each run is a fresh
``python -S`` process (no site-packages: zlib, unless ``--python`` has python-isal on its own path; the
hub fetches python-isal where it can, so this measures the install's other costs) that installs every ``*.whl``
of ``--wheels`` into a temporary directory on the
same disk and removes it, timed from outside (wall, and user + system CPU from ``wait4``).

Configurations, alternating in every round (the order reversed every other round):

* ``baseline``: ``--baseline-tree`` (e.g. ``git archive main python | tar -x -C /tmp/base``), its
  ``installed(wheels, (FLAT,))`` as the hub of that tree calls it;
* ``checked``: this tree, RECORD checked (what ``doctor --run`` and ``patch --probe`` do);
* ``pinned``: this tree as the hub calls it, RECORD not checked (Bazel checked each wheel's sha256).

Printed: each run, then medians and the ratio of each to the baseline's median, CPU beside wall (the
machine is shared: CPU is the figure to read). ``--python``: the interpreter (default: this one; the
Bazel tests' hub runs the host's python3 with packaging extracted beside the helper).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import add_json_option, print_json, spread, timed

REPO = Path(__file__).resolve().parent.parent

RUN = """\
import sys
from pathlib import Path
from patched_wheels.loading.layout import FLAT
from patched_wheels.loading.probe import installed
wheels = sorted(Path(sys.argv[1]).glob("*.whl"))
options = {} if sys.argv[2] == "baseline" else {"check_record": sys.argv[2] == "checked"}
with installed(wheels, (FLAT,), **options) as installation:
    pass
"""


def packaging_only(temp: Path) -> str:
    """A directory holding a copy of ``packaging`` (the helper's one pure dependency) and nothing else, for
    ``python -S``: this interpreter's site-packages may hold python-isal, which the hub's has not."""
    import packaging

    shutil.copytree(Path(packaging.__file__).parent, temp / "deps" / "packaging")
    return str(temp / "deps")


def run(python: str, tree: Path, deps: str, wheels: Path, configuration: str, temp: Path) -> tuple[float, float]:
    """(wall, user + system CPU) seconds of one install in a fresh process."""
    environment = dict(os.environ, PYTHONPATH=f"{tree}:{deps}", TMPDIR=str(temp), PYTHONDONTWRITEBYTECODE="1")
    measured = timed([python, "-S", "-c", RUN, str(wheels), configuration], environment)
    return measured.wall, measured.cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, required=True)
    parser.add_argument("--baseline-tree", type=Path, required=True, help="a python/ directory holding patched_wheels")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    add_json_option(parser)
    args = parser.parse_args()
    trees = {"baseline": args.baseline_tree.resolve(), "checked": REPO / "python", "pinned": REPO / "python"}
    for tree in trees.values():
        if not (tree / "patched_wheels" / "loading" / "probe.py").is_file():
            print(f"bench_probe_install: {tree}: no patched_wheels/loading/probe.py", file=sys.stderr)
            return 2
    wheels = sorted(args.wheels.glob("*.whl"))
    if not wheels:
        print(f"bench_probe_install: {args.wheels}: no *.whl there", file=sys.stderr)
        return 2
    size = sum(wheel.stat().st_size for wheel in wheels)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="bench-probe-install-", dir=args.wheels.parent) as temp:
        deps = packaging_only(Path(temp))
        inflater = subprocess.run(
            [
                args.python,
                "-S",
                "-c",
                "from patched_wheels.wheelfile.zipcontainer import INFLATER_NAME; print(INFLATER_NAME)",
            ],
            env=dict(os.environ, PYTHONPATH=f"{REPO / 'python'}:{deps}"),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        print(f"{len(wheels)} wheels, {size / 1e9:.2f} GB; {args.python} (inflater: {inflater}); {os.cpu_count()} CPUs")
        for number in range(args.rounds):
            order = list(trees) if number % 2 == 0 else list(reversed(trees))
            for name in order:
                wall, cpu = run(args.python, trees[name], deps, args.wheels, name, Path(temp))
                results[name].append((wall, cpu))
                print(f"  round {number + 1} {name:8}: {wall:6.1f} s wall, {cpu:6.1f} s CPU", flush=True)
    base_wall = statistics.median(wall for wall, _ in results["baseline"])
    base_cpu = statistics.median(cpu for _, cpu in results["baseline"])
    for name, runs in results.items():
        wall, cpu = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
        print(
            f"median of {len(runs)} {name:8}: {wall:6.1f} s wall ({wall / base_wall:.2f}x), {cpu:6.1f} s CPU ({cpu / base_cpu:.2f}x)"
        )
    summaries = {
        name: {
            "wall": spread([w for w, _ in runs]),
            "cpu": spread([c for _, c in runs]),
            "ratio": {
                "wall": statistics.median(w for w, _ in runs) / base_wall,
                "cpu": statistics.median(c for _, c in runs) / base_cpu,
            },
        }
        for name, runs in results.items()
    }
    inputs = {
        "wheels": len(wheels),
        "bytes": size,
        "inflater": inflater,
        "rounds": args.rounds,
        "baseline_tree": str(args.baseline_tree),
    }
    print_json("bench_probe_install", inputs, {"configurations": summaries}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
