"""What a ``layout_test`` costs: the test's own run against running its probe once, as a py_test with its deps.

    RPW_BAZEL_MODULES=../shared/bazel-modules python -m benchmarks.bench_layout_test [--rounds N] [--workspace DIR --target //pkg:name]

Without ``--workspace``, a workspace of the fake plugin stack (tests/bazel's fixtures, rules_python 0.22.1)
is generated in a temporary directory with two layout_tests of the patched plugin: ``plugin_layout_test``
(the probe imports the plugin: a few milliseconds, so the test's fixed costs show) and
``slow_layout_test`` (the same probe, then about a second of Python work: a probe as long as
``import torch``), and removed afterwards (``clean --expunge``).  The target is built once; then, in
alternating rounds, each a fresh process run outside ``bazel test`` (no Bazel overhead counted):

* **probe once**: the probe program in the test's runfiles (a py_binary with the test's deps, launched
  by rules_python as a py_test is) running the probe code once;
* **test**: ``bazel-bin/PKG/NAME``, the test itself (its sys.path run, the links, the virtual
  environment, and both runs of the probe, which it starts at once).

Per step the median wall time and CPU time (user + system of the process and the children it reaped,
``os.wait4``) and the ratio test / probe once.  Target (issue 31): the test's wall time within 2x of the
probe's.
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

from benchmarks.harness import print_json, run_child

REPO = Path(__file__).resolve().parent.parent
TARGET = 2.0
_SLOW_PROBE = "; ".join(
    ["import fakeplugins.xla_fake as plugin", "plugin.backend()", "sum(i * i for i in range(12_000_000))"]
)


def generated_workspace(directory: Path) -> tuple[Path, list[str]]:
    from tests.support.bazelworkspace import make_bzlmod_workspace

    setup = make_bzlmod_workspace(directory)
    with (setup.workspace.root / "BUILD.bazel").open("a", encoding="utf-8") as build:
        build.write(
            f'\nlayout_test(name = "slow_layout_test", deps = [plugin_requirement("fakeplug-cuda")], probe = {json.dumps(_SLOW_PROBE)})\n'
        )
    return setup.workspace.root, ["//:plugin_layout_test", "//:slow_layout_test"]


def measure(workspace: Path, target: str, rounds: int) -> tuple[bool, dict[str, object]]:
    package, name = target.removeprefix("//").split(":")
    bazel = str(REPO / "tools" / "bazel")
    subprocess.run([bazel, "build", target], cwd=workspace, check=True, capture_output=True)
    bin_dir = workspace / "bazel-bin" / package
    probe = json.loads((bin_dir / f"{name}_layout_test.json").read_text(encoding="utf-8"))["probe"]
    runfiles = bin_dir / f"{name}.runfiles"
    (program,) = runfiles.glob(f"*/{package}/{name}_layout_probe".replace("//", "/"))  # as the test runs it
    steps = {"probe once": [str(program), probe], "test": [str(bin_dir / name)]}
    with tempfile.TemporaryDirectory(prefix="bench-layout-test-") as temp:
        environment = {key: value for key, value in os.environ.items() if not key.startswith(("RUNFILES", "PYTHON"))}
        environment.update(TEST_TMPDIR=temp, TMPDIR=temp, RUNFILES_DIR=str(runfiles))
        results: dict[str, list[tuple[float, float]]] = {step: [] for step in steps}
        for index in range(rounds + 1):  # the first round warms the page cache and is not counted
            for step in steps if index % 2 == 0 else reversed(list(steps)):
                status, run = run_child(steps[step], environment, quiet=True)
                if status != 0:
                    sys.exit(f"{target}: {step} exited {status}")
                if index:
                    results[step].append((run.wall, run.cpu))
    medians = {
        step: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
        for step, runs in results.items()
    }
    print(f"{target} ({rounds} rounds, medians)")
    for step, (wall, cpu) in medians.items():
        print(f"  {step:<11} wall {wall:7.3f} s   cpu {cpu:7.3f} s")
    ratio_wall = medians["test"][0] / medians["probe once"][0]
    ratio_cpu = medians["test"][1] / medians["probe once"][1]
    met = ratio_wall <= TARGET
    print(
        f"  ratio test / probe once: wall {ratio_wall:.2f}x, cpu {ratio_cpu:.2f}x (target: wall <= {TARGET}x: {'met' if met else 'MISSED'})"
    )
    figures = {step: {"wall": wall, "cpu": cpu} for step, (wall, cpu) in medians.items()}
    return met, {"medians": figures, "ratio": {"wall": ratio_wall, "cpu": ratio_cpu}, "target_met": met}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workspace", type=Path, help="a workspace with a layout_test (default: a generated one)")
    parser.add_argument("--target", action="append", help="the layout_test, e.g. //calculator:torch_layout_test")
    args = parser.parse_args()
    if args.workspace:
        if not args.target:
            parser.error("--workspace needs --target")
        results = {target: measure(args.workspace, target, args.rounds) for target in args.target}
        print_json(
            "bench_layout_test",
            {"rounds": args.rounds, "workspace": str(args.workspace)},
            {t: figures for t, (_, figures) in results.items()},
        )
        return 0 if all(met for met, _ in results.values()) else 1
    directory = Path(tempfile.mkdtemp(prefix="bench-layout-test-ws-"))
    try:
        workspace, targets = generated_workspace(directory)
        results = {target: measure(workspace, target, args.rounds) for target in targets}
        print_json(
            "bench_layout_test",
            {"rounds": args.rounds, "workspace": "generated"},
            {t: figures for t, (_, figures) in results.items()},
        )
    finally:
        subprocess.run(
            [str(REPO / "tools" / "bazel"), "clean", "--expunge"], cwd=directory, capture_output=True, check=False
        )
        shutil.rmtree(directory, ignore_errors=True)
    return 0 if results[targets[-1]][0] else 1


if __name__ == "__main__":
    sys.exit(main())
