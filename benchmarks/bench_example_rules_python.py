"""The root torch 2.1.0 example under several rules_python releases: `clean --expunge`, then `bazel test`.

    python -m benchmarks.bench_example_rules_python [--releases 0.22.1 2.3.2] [--keep]

For each release a copy of the example (MODULE.bazel, calculator/, patches/, third_party/) is made in a
temporary directory, its MODULE.bazel adapted the way docs/rules-python.md shows for that release (1.x and 2.x:
`pip.parse(hub_name = ..., python_version = "3.11")` and the host's Python as a local toolchain), and
`tools/bazel clean --expunge` + `tools/bazel test //calculator/...` is timed (wall and the CPU time of the
Bazel client and its children; Bazel's server is counted in the wall time only). It fails when a test fails
or when rules_python logs a downloader fallback (`Could not find a whl or an sdist`). Offline, set
RPW_BAZEL_MODULES (default ../shared/bazel-modules). The wheels come from the repository cache after the
first run of any release: the timings after it compare like with like.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.example_workspace import make_workspace, run, use_offline_modules
from benchmarks.harness import print_json

FALLBACK = re.compile(r"Could not find a whl or an sdist", re.IGNORECASE)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", nargs="+", default=["0.22.1", "2.3.2"])
    parser.add_argument("--keep", action="store_true", help="keep the workspaces (and their output bases)")
    args = parser.parse_args()
    use_offline_modules()
    failed = False
    results: dict[str, dict[str, object]] = {}
    for release in args.releases:
        root = Path(tempfile.mkdtemp(prefix=f"rpw-example-{release}-"))
        make_workspace(root, release)
        run(root, "clean", "--expunge")
        code, output, wall, cpu = run(root, "test", "//calculator/...")
        fallbacks = [line for line in output.splitlines() if FALLBACK.search(line)]
        verdict = "PASS" if code == 0 and not fallbacks else "FAIL"
        failed |= verdict == "FAIL"
        print(
            f"rules_python {release}: bazel test //calculator/... after clean --expunge: {wall:.1f} s wall, "
            f"{cpu:.1f} s client CPU, exit {code}, {len(fallbacks)} downloader fallbacks: {verdict}"
        )
        results[release] = {
            "wall": wall,
            "client_cpu": cpu,
            "exit": code,
            "downloader_fallbacks": len(fallbacks),
            "pass": verdict == "PASS",
        }
        if verdict == "FAIL":
            print("\n".join(output.splitlines()[-40:]), file=sys.stderr)
        if not args.keep:
            run(root, "clean", "--expunge")
            shutil.rmtree(root, ignore_errors=True)
    print_json("bench_example_rules_python", {"releases": args.releases}, results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
