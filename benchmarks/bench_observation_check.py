"""What checking a kept observation costs: ``doctor --probe`` on torch 2.1.0's set, its observation cached.

    python -m benchmarks.bench_observation_check --baseline-tree DIR [--rounds 3] [--json FILE]

The set: torch 2.1.0 cp311, its 12 nvidia cu12 wheels and the pure-Python wheels ``import torch`` imports (21
wheels, :data:`PINS`, downloaded by ``torch_wheels.ensure_wheels`` when missing: about 2.6 GB).  Each tree (this
one, and ``--baseline-tree``'s ``python/``, e.g. ``git archive REV python | tar -x -C DIR``) has a helper cache
of its own (``RULES_PATCHED_WHEELS_CACHE``), filled by one untimed run that installs the set and runs the probe.
Then, in alternating rounds, each a fresh process, the same command, whose observation is read from that cache
and checked against the wheels before it is believed (the ELF rows too):

    python -m patched_wheels doctor <21 wheels> --package torch --probe "import torch"

Printed: wall and CPU (user + system) and peak RSS, medians and ranges, this tree / the baseline; the check's own
phase (``probe: check the kept observation``, from ``RULES_PATCHED_WHEELS_TIMINGS``); the JSON line.
The command's verdict must be the same for both trees (its output is compared).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from benchmarks.harness import Run, Step, add_json_option, alternate, print_json, run_child, step_summary
from benchmarks.torch_wheels import NVIDIA, TORCH, ensure_wheels

PINS = (
    TORCH,
    *NVIDIA,
    "filelock==3.13.1",
    "typing-extensions==4.8.0",
    "sympy==1.12",
    "networkx==3.2.1",
    "jinja2==3.1.2",
    "fsspec==2023.10.0",
    "mpmath==1.3.0",
    "markupsafe==2.1.3",
)
"""torch 2.1.0's set as ``import torch`` needs it on this machine (no triton: the import does not load it)."""
PROBE = "import torch"
_VERDICTS = (0, 1)
"""doctor's exit statuses with a verdict: 1 says a library fails to load as the wheels are (torch 2.1.0's do)."""
CHECK_PHASE = "probe: check the kept observation"


def _command(wheels: Sequence[Path]) -> list[str]:
    return [sys.executable, "-m", "patched_wheels", "doctor", *map(str, wheels), "--package", "torch", "--probe", PROBE]


def _environment(tree: Path, cache: Path, timings: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env.update(
        PYTHONPATH=str(tree / "python"),
        RULES_PATCHED_WHEELS_CACHE=str(cache),
        RULES_PATCHED_WHEELS_TIMINGS=str(timings),
    )
    return env


def _phases(timings: Path) -> list[dict[str, dict[str, float]]]:
    """Each run's phases (name -> wall, user, system, ...) from a timings file (patched_wheels.base.timings)."""
    if not timings.exists():
        return []
    return [json.loads(line).get("phases", {}) for line in timings.read_text(encoding="utf-8").splitlines() if line]


def _phase_cpu(phases: list[dict[str, dict[str, float]]], name: str) -> dict[str, float] | None:
    """Median wall and CPU (user + system) of one phase over the runs that went through it."""
    found = [run[name] for run in phases if name in run]
    if not found:
        return None
    return {
        "wall": statistics.median(figures["wall"] for figures in found),
        "cpu": statistics.median(figures["user"] + figures["system"] for figures in found),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-tree", type=Path, required=True, help="a checkout whose python/ is compared")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are reported")
    parser.add_argument("--work-dir", type=Path, help="scratch directory (default: a new temp dir, removed)")
    add_json_option(parser)
    args = parser.parse_args(argv)
    wheels = ensure_wheels(PINS)
    this_tree = Path(__file__).resolve().parent.parent
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench-observation-"))
    trees = {"this tree": this_tree, "baseline": args.baseline_tree.resolve()}
    steps, verdicts, timings = [], {}, {}
    try:
        for label, tree in trees.items():
            cache, timings[label] = work / f"cache-{len(steps)}", work / f"timings-{len(steps)}.jsonl"
            env = _environment(tree, cache, work / "warming.jsonl")
            warm = subprocess.run(_command(wheels), env=env, capture_output=True, text=True)  # installs, probes
            if warm.returncode not in _VERDICTS or not (cache / "observed").is_dir():
                raise SystemExit(
                    f"{label}: the untimed run (exit {warm.returncode}) left no observation:\n{warm.stderr}"
                )
            verdicts[label] = warm.returncode, warm.stdout
            env = _environment(tree, cache, timings[label])
            steps.append(Step(label, _command(wheels), env, work / f"out-{len(steps)}"))
        if verdicts["this tree"] != verdicts["baseline"]:
            raise SystemExit("the two trees' doctor verdicts differ: not the same work")
        runs = alternate(steps, args.rounds, lambda step: _checked_run(step, verdicts[step.label][0]))
        phases = {label: _phase_cpu(_phases(timings[label]), CHECK_PHASE) for label in trees}  # before they go
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    results: dict[str, Any] = {label: step_summary(runs[label]) for label in trees}
    results["this tree"]["x baseline"] = {
        field: results["this tree"][field]["median"] / results["baseline"][field]["median"] for field in ("wall", "cpu")
    }
    print(f"{len(wheels)} wheels, doctor --probe {PROBE!r}, the observation cached; medians of {args.rounds} rounds")
    print(f"{'tree':<12}{'wall':>10}{'CPU':>10}{'peak RSS':>12}{'check: wall':>14}{'check: CPU':>12}")
    for label in trees:
        summary = results[label]
        summary[CHECK_PHASE] = check = phases[label]
        print(
            f"{label:<12}{summary['wall']['median']:>9.1f}s{summary['cpu']['median']:>9.1f}s"
            f"{summary['peak_rss'] / (1 << 20):>8.0f} MiB"
            f"{check['wall'] if check else 0:>13.1f}s{check['cpu'] if check else 0:>11.1f}s"
        )
    ratio = results["this tree"]["x baseline"]
    print(f"this tree / baseline: wall {ratio['wall']:.2f}x, CPU {ratio['cpu']:.2f}x")
    print_json(
        "bench_observation_check",
        {"wheels": [wheel.name for wheel in wheels], "rounds": args.rounds, "load": list(os.getloadavg())},
        results,
        args.json,
    )
    return 0


def _checked_run(step: Step, expected: int) -> Run:
    """One timed run of ``step``, which must end as its untimed run did; its output directory unused."""
    code, run = run_child(step.command, step.env, quiet=True)
    if code != expected:
        raise SystemExit(f"{step.label}: doctor exited {code}, its untimed run {expected}")
    return run


if __name__ == "__main__":
    raise SystemExit(main())
