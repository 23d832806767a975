"""The root torch 2.1.0 example under several rules_python releases: `clean --expunge`, then `bazel test`.

    python benchmarks/bench_example_rules_python.py [--releases 0.22.1 2.3.2] [--keep]

For each release a copy of the example (MODULE.bazel, calculator/, patches/, third_party/) is made in a
temporary directory, its MODULE.bazel adapted the way the README shows for that release (1.x and 2.x:
`pip.parse(hub_name = ..., python_version = "3.11")` and the host's Python as a local toolchain), and
`tools/bazel clean --expunge` + `tools/bazel test //calculator/...` is timed (wall and the CPU time of the
Bazel client and its children; Bazel's server is counted in the wall time only). It fails when a test fails
or when rules_python logs a downloader fallback (`Could not find a whl or an sdist`). Offline, set
RPW_BAZEL_MODULES (default ../shared/bazel-modules). The wheels come from the repository cache after the
first run of any release: the timings after it compare like with like.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BAZEL = REPO / "tools" / "bazel"
FALLBACK = re.compile(r"Could not find a whl or an sdist", re.IGNORECASE)
TOOLCHAIN = (REPO / "tests" / "bazel" / "templates" / "matrix" / "toolchain.tmpl").read_text(encoding="utf-8")


def adapt_module(text: str, release: str) -> str:
    """The example's MODULE.bazel for ``release`` (only what the README's table says differs)."""
    text = text.replace('bazel_dep(name = "rules_python", version = "0.22.1")', f'bazel_dep(name = "rules_python", version = "{release}")')
    text = text.replace('module(name = "rules_patched_wheels", version = "0.1.0")', 'module(name = "rpw_example")\n\nbazel_dep(name = "rules_patched_wheels", version = "0.1.0")\n'
                        f'local_path_override(module_name = "rules_patched_wheels", path = "{REPO}")')  # fmt: skip
    text = text.replace('use_extension("//python:extensions.bzl"', 'use_extension("@rules_patched_wheels//python:extensions.bzl"')
    if release.split(".")[0] == "0":
        return text
    text = text.replace("\npatched = use_extension", "\n" + TOOLCHAIN + "\npatched = use_extension", 1)
    for hub in ("pypi", "pypi_split"):
        text = text.replace(
            f'pip.parse(\n    name = "{hub}",',
            f'pip.parse(\n    hub_name = "{hub}",\n    python_version = "3.11",\n    python_interpreter = "python3",',
        )
    return text


def make_workspace(root: Path, release: str) -> None:
    for folder in ("calculator", "patches", "third_party"):
        shutil.copytree(REPO / folder, root / folder)
    (root / "MODULE.bazel").write_text(adapt_module((REPO / "MODULE.bazel").read_text(encoding="utf-8"), release), encoding="utf-8")
    (root / "BUILD.bazel").write_text("", encoding="utf-8")
    shutil.copyfile(REPO / ".bazelrc", root / ".bazelrc")


def run(root: Path, *args: str) -> tuple[int, str, float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    completed = subprocess.run([str(BAZEL), *args], cwd=root, capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return completed.returncode, completed.stdout + completed.stderr, wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", nargs="+", default=["0.22.1", "2.3.2"])
    parser.add_argument("--keep", action="store_true", help="keep the workspaces (and their output bases)")
    args = parser.parse_args()
    os.environ.setdefault("RPW_BAZEL_MODULES", str(REPO.parent / "shared" / "bazel-modules"))
    failed = False
    for release in args.releases:
        root = Path(tempfile.mkdtemp(prefix=f"rpw-example-{release}-"))
        make_workspace(root, release)
        run(root, "clean", "--expunge")
        code, output, wall, cpu = run(root, "test", "//calculator/...")
        fallbacks = [line for line in output.splitlines() if FALLBACK.search(line)]
        verdict = "PASS" if code == 0 and not fallbacks else "FAIL"
        failed |= verdict == "FAIL"
        print(f"rules_python {release}: bazel test //calculator/... after clean --expunge: {wall:.1f} s wall, "
              f"{cpu:.1f} s client CPU, exit {code}, {len(fallbacks)} downloader fallbacks: {verdict}")  # fmt: skip
        if verdict == "FAIL":
            print("\n".join(output.splitlines()[-40:]), file=sys.stderr)
        if not args.keep:
            run(root, "clean", "--expunge")
            shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
