"""What the benchmarks share: a timed child process, alternating rounds, medians with their spread, and the
JSON line every benchmark prints beside its prose, so the next run can be compared with it mechanically.

A benchmark ends with :func:`print_json`: one line ``BENCH-JSON {...}`` on stdout (``grep '^BENCH-JSON '``
finds it among the prose), also written to the file ``--json FILE`` names (:func:`add_json_option`).  Its
keys: ``script``, ``machine`` (cores, load average when it ended), ``inputs`` and ``results``, which are the
script's own (by convention each step's ``median``, ``min``, ``max`` of ``wall`` and ``cpu`` in seconds,
``peak_rss`` in bytes, ``ratio`` (of the medians) and ``best_ratio`` (of the fastest runs: on a shared
machine, the closest to a quiet one) to the baseline measured in the same run, and ``targets`` met or not).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

JSON_PREFIX = "BENCH-JSON "


@dataclass(frozen=True)
class Run:
    """One timed run of a child process."""

    wall: float
    cpu: float
    """User + system seconds of the process and of the children it waited for."""
    peak_rss: int
    """Bytes: the largest of the process and its reaped children."""


@dataclass(frozen=True)
class Step:
    """A command measured in every round, into its own output directory (emptied before each run)."""

    label: str
    command: list[str]
    env: Mapping[str, str]
    output: Path


def measure(step: Step) -> Run:
    """One run of ``step`` into an empty output directory, after writing back the previous run's files
    (``os.sync``: one step's dirty pages are not another's cost).  ``os.wait4`` returns the kernel's
    RUSAGE_BOTH of the child: its reaped children count."""
    shutil.rmtree(step.output, ignore_errors=True)
    step.output.mkdir(parents=True)
    os.sync()
    start = time.perf_counter()
    process = subprocess.Popen(step.command, stdout=subprocess.DEVNULL, env=dict(step.env))
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"benchmark step failed: {' '.join(step.command)}")
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024)  # Linux reports KiB


def alternate(steps: Sequence[Step], rounds: int, run: Callable[[Step], Run] = measure) -> dict[str, list[Run]]:
    """``rounds`` rounds of every step, odd rounds in reverse order, so drift in the machine's load (a
    shared machine) spreads evenly over the steps; each step's runs, by label."""
    runs: dict[str, list[Run]] = {step.label: [] for step in steps}
    for number in range(rounds):
        for step in steps if number % 2 == 0 else steps[::-1]:
            runs[step.label].append(run(step))
        print(f"round {number + 1}/{rounds} done", flush=True)
    return runs


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, smallest and largest of ``values``."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def step_summary(runs: Sequence[Run], baseline: Sequence[Run] | None = None) -> dict[str, Any]:
    """A step's figures for the JSON line: wall and CPU spread, peak RSS, the medians' ratios to ``baseline``'s."""
    summary: dict[str, Any] = {
        "wall": spread([run.wall for run in runs]),
        "cpu": spread([run.cpu for run in runs]),
        "peak_rss": max(run.peak_rss for run in runs),
        "rounds": len(runs),
    }
    if baseline:
        base = step_summary(baseline)
        for key, statistic in (("ratio", "median"), ("best_ratio", "min")):
            summary[key] = {
                field: summary[field][statistic] / max(base[field][statistic], 0.01) for field in ("wall", "cpu")
            }
    return summary


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """``--json FILE``: where :func:`print_json` also writes its line."""
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON to FILE")


def print_json(script: str, inputs: Mapping[str, Any], results: Mapping[str, Any], path: Path | None = None) -> None:
    """Print the run's one JSON line (``BENCH-JSON {...}``) and write it to ``path`` when given."""
    payload = {
        "script": script,
        "machine": {"cores": os.cpu_count(), "load": list(os.getloadavg()), "python": sys.version.split()[0]},
        "inputs": dict(inputs),
        "results": dict(results),
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    print(JSON_PREFIX + text, flush=True)
    if path is not None:
        path.write_text(text + "\n", encoding="utf-8")
