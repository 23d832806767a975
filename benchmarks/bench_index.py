#!/usr/bin/env python3
"""Benchmark ``patched-wheels index`` on torch 2.1.0 + its 12 nvidia-*-cu12 wheels + triton.

Hashing 2.6 GB is the floor of a cold run, so the baseline is ``sha256sum`` over the same
files, measured in the same run with the files in the page cache for both. Targets (issue 5):
cold run within 1.3x of sha256sum, warm re-run (nothing changed) at most 0.2 s. Both runs are
the full command line (interpreter start-up included), like sha256sum.

Missing wheels are downloaded once with ``pip download --no-deps`` into
``${XDG_CACHE_HOME:-~/.cache}/rules_patched_wheels/torch-2.1.0/``; the index is built in a
scratch directory of hard links next to that cache, so the cache itself is never written to.

    python benchmarks/bench_index.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

PINS = (
    "torch==2.1.0",
    "triton==2.1.0",
    "nvidia-cublas-cu12==12.1.3.1",
    "nvidia-cuda-cupti-cu12==12.1.105",
    "nvidia-cuda-nvrtc-cu12==12.1.105",
    "nvidia-cuda-runtime-cu12==12.1.105",
    "nvidia-cudnn-cu12==8.9.2.26",
    "nvidia-cufft-cu12==11.0.2.54",
    "nvidia-curand-cu12==10.3.2.106",
    "nvidia-cusolver-cu12==11.4.5.107",
    "nvidia-cusparse-cu12==12.1.0.106",
    "nvidia-nccl-cu12==2.18.1",
    "nvidia-nvjitlink-cu12==12.9.86",
    "nvidia-nvtx-cu12==12.1.105",
)
# The wheels torch 2.1.0 is used with under Bazel: CPython 3.11 on x86-64 Linux, whatever the host.
PLATFORM_ARGS = (
    "--only-binary=:all:", "--platform=manylinux2014_x86_64", "--python-version=3.11",
    "--implementation=cp", "--abi=cp311",
)  # fmt: skip


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "rules_patched_wheels" / "torch-2.1.0"


def ensure_wheels(cache: Path) -> list[Path]:
    """The cached wheel of every pin, downloading the missing ones."""
    cache.mkdir(parents=True, exist_ok=True)
    wheels = []
    for pin in PINS:
        name, version = pin.split("==")
        found = _find(cache, canonicalize_name(name), Version(version))
        if found is None:
            print(f"downloading {pin} ...", flush=True)
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", *PLATFORM_ARGS, "-d", str(cache), pin],
                check=True,
            )
            found = _find(cache, canonicalize_name(name), Version(version))
            if found is None:
                sys.exit(f"pip download {pin} left no matching wheel in {cache}")
        wheels.append(found)
    return wheels


def _find(cache: Path, name: str, version: Version) -> Path | None:
    for path in sorted(cache.glob("*.whl")):
        parsed_name, parsed_version, _build, _tags = parse_wheel_filename(path.name)
        if parsed_name == name and parsed_version == version:
            return path
    return None


def timed(command: list[str], *, repeat: int, before=lambda: None) -> list[float]:
    """Wall times of ``repeat`` runs of ``command`` (output discarded), ``before`` untimed."""
    times = []
    for _ in range(repeat):
        before()
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (best is reported)")
    args = parser.parse_args()

    wheels = ensure_wheels(cache_dir())
    total = sum(w.stat().st_size for w in wheels)
    work = Path(tempfile.mkdtemp(dir=cache_dir().parent, prefix="bench-index-"))
    try:
        for wheel in wheels:
            os.link(wheel, work / wheel.name)
        files = sorted(str(work / w.name) for w in wheels)
        index = [sys.executable, "-m", "patched_wheels", "index", str(work)]

        def clear_index() -> None:
            shutil.rmtree(work / "simple", ignore_errors=True)
            for metadata in work.glob("*.metadata"):
                metadata.unlink()

        subprocess.run(["cat", *files], check=True, stdout=subprocess.DEVNULL)  # page cache, for both
        baseline = timed(["sha256sum", *files], repeat=args.repeat)
        # coreutils' sha256sum may lack SHA-NI; OpenSSL's is the stricter floor, shown beside it.
        openssl = timed(["openssl", "dgst", "-sha256", *files], repeat=args.repeat) if shutil.which("openssl") else []
        cold = timed(index, repeat=args.repeat, before=clear_index)
        warm = timed(index, repeat=max(args.repeat, 5))
        # What a warm run costs beyond starting Python and importing the CLI (all subcommands).
        startup = timed([sys.executable, "-c", "import patched_wheels.cli as c; c.build_parser()"], repeat=5)
        from patched_wheels.index import build_index

        start = time.perf_counter()
        build_index(work)
        warm_library = time.perf_counter() - start

        # The index must agree with sha256sum, or the speed means nothing.
        sums = subprocess.run(["sha256sum", *files], check=True, capture_output=True, text=True).stdout
        pages = "".join(p.read_text() for p in (work / "simple").glob("*/index.html"))
        missing = [line.split()[1] for line in sums.splitlines() if f"#sha256={line.split()[0]}" not in pages]
        if missing:
            sys.exit(f"index hashes disagree with sha256sum for: {missing}")

        best_baseline, best_cold, best_warm = min(baseline), min(cold), min(warm)
        print(f"{len(wheels)} wheels, {total / 1e9:.2f} GB, {os.cpu_count()} cores (files in page cache)")
        print(f"sha256sum          : {best_baseline:7.3f} s  ({total / best_baseline / 1e6:.0f} MB/s)")
        if openssl:
            print(
                f"openssl dgst       : {min(openssl):7.3f} s  ({total / min(openssl) / 1e6:.0f} MB/s)  "
                f"-> index cold = {best_cold / min(openssl):.2f}x openssl"
            )
        print(
            f"index, cold        : {best_cold:7.3f} s  ({total / best_cold / 1e6:.0f} MB/s)  "
            f"= {best_cold / best_baseline:.2f}x sha256sum  (target <= 1.3x)"
        )
        print(
            f"index, warm re-run : {best_warm:7.3f} s  (median {statistics.median(warm):.3f} s; target <= 0.2 s)"
        )
        print(
            f"  of which: python + CLI imports {min(startup):.3f} s, build_index() itself {warm_library:.3f} s"
        )
        ok = best_cold <= 1.3 * best_baseline and best_warm <= 0.2
        print("targets met" if ok else "TARGETS MISSED")
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
