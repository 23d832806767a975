"""The root example (torch 2.1.0, flat and split) under remote execution, against local execution (issue 53).

    .venv/bin/python -m benchmarks.bench_remote [--json FILE] [--keep] [--work DIR]   # as root; tools/remote/provision

Opt-in and slow (about 2.5 GB of wheels, 16 GB of output base, the engine's stores holding GBs more): run by
hand, never by CI. One workspace, a copy of the repository root's own example with both hubs
(example_workspace.make_workspace, rules_python 0.22.1) plus the build's Python registered as its toolchain
(tests/support/buildpython.py, as tests/bazel/test_remote_execution.py does: the worker then runs the build's
interpreter, not its own python3), tests ``//calculator:calc_test`` (flat), ``//calculator:calc_split_test``
(split) and ``//build_python:interpreter_test`` (fails under any other interpreter). In order:

1. fetch: ``bazel build --nobuild`` of the targets (the hubs, rules_python's pip installs; Bazel's repository
   cache as the machine has it). Not a figure of the comparison: it is the same for both executions.
2. local: ``bazel test`` with every external repository fetched and nothing built (test actions cold).
3. ``bazel clean`` (the output tree and action cache go, the external repositories stay), the engine started
   (tools/remote/engine.py: BuildGrid, buildbox-casd, buildbox-worker with bubblewrap, on 127.0.0.1, its CAS
   empty), then remote-first: ``bazel test`` with ``--remote_executor`` and ``--noremote_accept_cached``: every
   input uploaded once (by digest), every test action run on the worker.
4. ``bazel clean`` again, remote-second: the same on the same engine, its CAS warm: Bazel asks which inputs are
   missing and uploads those; the actions still run (``--noremote_accept_cached``).

Every test runs with ``--nocache_test_results`` and ``--test_timeout=900`` (the example's tests are ``small``:
60 s, less than staging GBs on a 2-core worker may take; the same for all runs). Per run: wall; CPU as the Bazel
client's (the launcher and client, reaped), the server's (utime + stime and its reaped children: local test
processes) and the engine's (its four processes and their reaped children: BuildGrid, casd, the worker and
each action's runner and sandbox), each from /proc before and after; Bazel's process summary (``N remote``) and
each test's status; the load average before and after. Bytes uploaded: what the engine's CAS (BuildGrid's disk
storage) holds after a run minus before it, files and bytes: Bazel's uploads plus the few blobs the worker
writes back (test logs, test.xml, action results); and the worker's casd cache, what it downloaded.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from tests.support.bazelworkspace import process_summary, summary_statuses
from tests.support.buildpython import INTERPRETER_TEST, register_build_python, relocatable_python
from tools.remote import engine as remote_engine

from benchmarks.example_workspace import REPO, make_workspace, run, use_offline_modules
from benchmarks.harness import add_json_option, print_json, process_cpu

TARGETS = ("//calculator:calc_test", "//calculator:calc_split_test", INTERPRETER_TEST)
TEST_FLAGS = ("--nocache_test_results", "--test_timeout=900", "--keep_going")


@dataclass(frozen=True)
class Store:
    """A content-addressed store on disk: how many files, how many bytes (hard links once)."""

    files: int
    bytes: int


@dataclass(frozen=True)
class Measured:
    """One ``bazel`` command of the benchmark."""

    label: str
    code: int
    wall: float
    client_cpu: float
    server_cpu: float
    engine_cpu: float
    processes: dict[str, int]
    statuses: dict[str, str]
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    cas: Store | None
    """The engine's CAS after the run (remote runs)."""
    casd: Store | None
    """The worker's casd cache after the run (remote runs)."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="benchmarks/bench_remote.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the workspace and its output base (the external repositories) for inspection; the engine stops",
    )
    parser.add_argument("--work", type=Path, help="an empty or new folder for the workspace (default: a new one)")
    add_json_option(parser)
    args = parser.parse_args(argv)
    if args.work is not None and args.work.exists() and any(args.work.iterdir()):
        parser.error(f"--work {args.work}: not empty")
    return args


def run_summary(output: str) -> tuple[dict[str, int], dict[str, str]]:
    """Bazel's process summary (``INFO: 7 processes: 1 internal, 6 remote.``) as kind -> count, and each test's
    status; an empty summary when Bazel printed none (it stopped before executing: the output says why)."""
    # `INFO: 0 processes.` (nothing executed: a build with --nobuild) has no kinds.
    processes = process_summary(output) if re.search(r"^INFO: \d+ process(?:es)?: ", output, re.MULTILINE) else {}
    return processes, summary_statuses(output)


def store_size(path: Path) -> Store:
    """Files and bytes under ``path`` (hard links counted once; nothing when it does not exist). A file that
    goes while it is walked is left out: casd removes an action's staging folder after the action ends, which
    can be as Bazel returns."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                stat = os.lstat(os.path.join(folder, name))
            except FileNotFoundError:
                continue
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_size
    return Store(len(seen), total)


def total_cpu(pids: Sequence[int]) -> float:
    """CPU seconds of ``pids`` and the children they reaped (0 for a pid that is gone)."""
    cpu = 0.0
    for pid in pids:
        try:
            own, children, _ = process_cpu(pid)
        except OSError:
            continue
        cpu += own + children
    return cpu


class Bench:
    """The workspace, its output base, and the engine's processes when one runs."""

    def __init__(self, root: Path, output_base: Path) -> None:
        self.root = root
        self.output_base = output_base
        self.engine_work: Path | None = None

    def bazel(self, *args: str) -> tuple[int, str, float, float]:
        timed = run(self.root, f"--output_base={self.output_base}", *args)
        return timed.code, timed.output, timed.wall, timed.cpu

    def server_pid(self) -> int:
        code, output, _, _ = self.bazel("info", "server_pid")
        found = re.search(r"^(\d+)$", output, re.MULTILINE)  # stdout's line, among stderr's
        if code != 0 or found is None:
            raise SystemExit(f"bazel info server_pid failed:\n{output[-3000:]}")
        return int(found.group(1))

    def engine_pids(self) -> list[int]:
        if self.engine_work is None:
            return []
        lines = (self.engine_work / "pids").read_text(encoding="utf-8").splitlines()
        return [int(line.split()[0]) for line in lines]

    def measure(self, label: str, *args: str) -> Measured:
        """One timed ``bazel ARGS``, its CPU and summary; the output kept in the work folder."""
        server = self.server_pid()  # starts the server before the clock, as each run's earlier command did
        server_before, engine_before = total_cpu([server]), total_cpu(self.engine_pids())
        load_before = os.getloadavg()
        print(f"{label}: bazel {' '.join(args)}", flush=True)
        code, output, wall, client_cpu = self.bazel(*args)
        load_after = os.getloadavg()
        server_cpu, engine_cpu = total_cpu([server]) - server_before, total_cpu(self.engine_pids()) - engine_before
        (self.root.parent / f"{label}.log").write_text(output, encoding="utf-8")
        processes, statuses = run_summary(output)
        remote = self.engine_work is not None
        measured = Measured(
            label, code, wall, client_cpu, server_cpu, engine_cpu, processes, statuses, load_before, load_after,
            store_size(self.engine_work / "buildgrid-cas") if remote and self.engine_work else None,
            store_size(self.engine_work / "casd-cache") if remote and self.engine_work else None,
        )  # fmt: skip
        print(f"  {describe(measured)}", flush=True)
        return measured


def describe(m: Measured) -> str:
    """One line of prose for a run."""
    cpu = m.client_cpu + m.server_cpu + m.engine_cpu
    text = (
        f"exit {m.code}, wall {m.wall:.1f} s, CPU {cpu:.1f} s (client {m.client_cpu:.1f}, server {m.server_cpu:.1f},"
        f" engine {m.engine_cpu:.1f}); processes {m.processes}; {m.statuses};"
        f" load {m.load_before[0]:.2f} -> {m.load_after[0]:.2f}"
    )
    if m.cas is not None and m.casd is not None:
        text += f"; CAS {m.cas.files} files {m.cas.bytes / 1e9:.3f} GB, casd {m.casd.files} files {m.casd.bytes / 1e9:.3f} GB"
    return text


def prepare_workspace(work: Path) -> Path:
    """The example's copy with both hubs at ``work/example``, the build's Python (``work/python``) registered
    as its toolchain; its root."""
    root = work / "example"
    make_workspace(root, "0.22.1")
    register_build_python(root, relocatable_python(work / "python"))
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reason = remote_engine.available()
    if reason is not None:
        print(f"benchmarks/bench_remote.py: error: {reason}", file=sys.stderr)
        return 1
    use_offline_modules()
    work = (args.work or Path(tempfile.mkdtemp(prefix="rpw-bench-remote-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    # The launcher binds the workspace only: the build's Python and the engine's folder lie beside it.
    os.environ["RPW_BIND_DIRS"] = " ".join(filter(None, [os.environ.get("RPW_BIND_DIRS"), str(work)]))
    root = prepare_workspace(work)
    bench = Bench(root, Path.home() / ".cache" / "bazel" / work.name / "example")
    print(f"workspace {root}, output base {bench.output_base}, checkout {REPO}", flush=True)
    runs: list[Measured] = []
    try:
        runs.append(bench.measure("fetch", "build", "--nobuild", *TARGETS))
        runs.append(bench.measure("local", "test", *TEST_FLAGS, *TARGETS))
        bench.bazel("clean")
        with remote_engine.serve(work / "engine") as engine:
            bench.engine_work = engine.work
            flags = (*engine.bazel_flags(), *TEST_FLAGS)
            empty = store_size(engine.work / "buildgrid-cas")
            runs.append(bench.measure("remote-first", "test", *flags, *TARGETS))
            bench.bazel("clean")
            runs.append(bench.measure("remote-second", "test", *flags, *TARGETS))
            bench.engine_work = None
            cas_disk = store_size(engine.work)
        results: dict[str, Any] = {m.label: asdict(m) for m in runs}
        results["cas_empty"] = asdict(empty)
        results["engine_work_disk"] = asdict(cas_disk)
        results["output_base_disk"] = asdict(store_size(bench.output_base))
        print_json("bench_remote", {"targets": list(TARGETS), "flags": list(TEST_FLAGS)}, results, args.json)
    finally:
        if not args.keep:
            bench.bazel("clean", "--expunge")
            bench.bazel("shutdown")
            shutil.rmtree(bench.output_base.parent, ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)
        else:
            shutil.rmtree(work / "engine", ignore_errors=True)
    return 0 if all(m.code == 0 for m in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
