"""What the benchmarks share: a timed child process, CPU clocks, alternating rounds, medians with their spread,
and the JSON line every benchmark prints beside its prose, so the next run can be compared with it mechanically.

Every benchmark times through this module, so wall and CPU mean the same in every script: wall from
``time.perf_counter``, CPU as user + system seconds, a child's counted with the children it reaped
(``os.wait4``, :func:`run_child`) or, for a child whose output is read, as the difference of two readings of
:func:`children_cpu`; work done in this process by :func:`own_cpu`.

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
import resource
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


def children_cpu() -> float:
    """User + system seconds of every child process this one has waited for so far: the difference of two
    readings is the CPU of the children reaped between them, with their own reaped children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_cpu() -> float:
    """User + system seconds of this process itself, for work timed in-process."""
    times = os.times()
    return times.user + times.system


def process_cpu(pid: int) -> tuple[float, float, float]:
    """(utime + stime of ``pid``, cutime + cstime of the children it has reaped, stime + cstime), in seconds:
    the CPU of a process this one did not start (a Bazel server, a daemon that outlives its client)."""
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(value) / os.sysconf("SC_CLK_TCK") for value in fields[11:15])
    return utime + stime, cutime + cstime, stime + cstime


def run_child(command: Sequence[str], env: Mapping[str, str] | None = None, *, quiet: bool = False) -> tuple[int, Run]:
    """One run of ``command`` (stdout discarded; stderr too when ``quiet``): its exit status and its
    :class:`Run`.  ``os.wait4`` returns the kernel's RUSAGE_BOTH of the child: its reaped children count."""
    start = time.perf_counter()
    process = subprocess.Popen(
        list(command),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL if quiet else None,
        env=None if env is None else dict(env),
    )
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    return process.returncode, Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024)  # Linux: KiB


def timed(command: Sequence[str], env: Mapping[str, str] | None = None) -> Run:
    """:func:`run_child` of a command that must succeed: a failure stops the benchmark, naming the command."""
    code, run = run_child(command, env)
    if code != 0:
        raise SystemExit(f"benchmark step failed (exit {code}): {' '.join(command)}")
    return run


def measure(step: Step) -> Run:
    """One run of ``step`` into an empty output directory, after writing back the previous run's files
    (``os.sync``: one step's dirty pages are not another's cost)."""
    shutil.rmtree(step.output, ignore_errors=True)
    step.output.mkdir(parents=True)
    os.sync()
    return timed(step.command, step.env)


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
