"""Benchmark: ELF graph + load order of torch 2.1.0 (cp311) and its 12 nvidia-*-cu12 wheels.

Downloads the wheels (pinned in ``torch_wheels.py``, ~2.6 GB) into
``${XDG_CACHE_HOME:-~/.cache}/rules_patched_wheels/torch-2.1.0/`` when absent, then in
one run measures:

* ``graph``: :func:`patched_wheels.elf.graph.scan_wheels` + ``build_graph`` with no
  result cache (every ELF member inflated), on all cores -- target <= 10 s on 2 cores;
* ``floor``: inflating the very same members with zlib on one core, output discarded
  (what the naive approach costs before any ELF parsing);
* ``cached``: the same graph again with a warm per-wheel result cache;

and prints the bytes inflated, the ratios against the floor, and checks the
order the issue is about: libnvJitLink before libcusparse and libcusolver.

Run: ``.venv/bin/python -m benchmarks.bench_graph``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import zipfile
import zlib
from pathlib import Path

from benchmarks.harness import own_cpu, print_json
from benchmarks.torch_wheels import NVIDIA, TORCH, ensure_wheels
from patched_wheels.base.cache import CacheContext
from patched_wheels.elf.graph import build_graph, scan_wheels
from patched_wheels.elf.read import is_shared_library_name
from patched_wheels.wheelfile import INFLATER_NAME
from patched_wheels.wheelfile.schemes import install_path


def elf_members(wheels: list[Path]) -> list[tuple[Path, zipfile.ZipInfo]]:
    members = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                path = install_path(info.filename)
                if path is not None and is_shared_library_name(path):
                    members.append((wheel, info))
    return members


def zlib_floor(members: list[tuple[Path, zipfile.ZipInfo]]) -> tuple[float, float]:
    """Single-core zlib inflate of every member, output discarded: (wall, CPU) seconds of merely decompressing."""
    cpu = own_cpu()
    start = time.perf_counter()
    for wheel, info in members:
        with zipfile.ZipFile(wheel) as archive, archive.open(info) as stream:
            while stream.read(1 << 20):
                pass
    return time.perf_counter() - start, own_cpu() - cpu


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # no options: --help only
    wheels = ensure_wheels([TORCH, *NVIDIA])
    members = elf_members(wheels)
    total = sum(info.file_size for _, info in members)
    compressed = sum(info.compress_size for _, info in members)
    print(
        f"{len(wheels)} wheels, {len(members)} ELF members: {total / 2**30:.2f} GiB inflated, {compressed / 2**30:.2f} GiB deflated"
    )
    print(
        f"cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}, inflater: {INFLATER_NAME}, zlib {zlib.ZLIB_RUNTIME_VERSION}"
    )

    start = time.perf_counter()
    for wheel in wheels:  # same starting point for every measurement: wheels in the page cache
        with open(wheel, "rb") as handle:
            while handle.read(1 << 24):
                pass
    print(f"warm-up read of the wheels: {time.perf_counter() - start:.2f} s")

    cpu = own_cpu()
    start = time.perf_counter()
    scan = scan_wheels(wheels)
    graph = build_graph(scan.libraries)
    graph_seconds = time.perf_counter() - start
    cpu_seconds = own_cpu() - cpu
    floor_seconds, floor_cpu_seconds = zlib_floor(members)

    with tempfile.TemporaryDirectory() as results:
        scan_wheels(wheels, caches=CacheContext(Path(results)))
        start = time.perf_counter()
        cached = build_graph(scan_wheels(wheels, caches=CacheContext(Path(results))).libraries)
        cached_seconds = time.perf_counter() - start
    assert cached.load_order == graph.load_order

    order = [library.filename for library in graph.load_order]
    ok = order.index("libnvJitLink.so.12") < order.index("libcusparse.so.12") < order.index("libcusolver.so.11")
    print(
        f"graph + order, no cache:       {graph_seconds:6.2f} s wall ({cpu_seconds:.2f} s CPU), "
        f"{scan.inflated_bytes / 2**30:.2f} GiB inflated, {len(graph.libraries)} libraries"
        f"  [target <= 10 s: {'met' if graph_seconds <= 10 else 'MISSED'}]"
    )
    print(
        f"floor, zlib inflate on 1 core: {floor_seconds:6.2f} s wall ({floor_cpu_seconds:.2f} s CPU, "
        f"{total / floor_seconds / 1e6:.0f} MB/s)"
    )
    print(f"graph + order, warm cache:     {cached_seconds:6.2f} s")
    print(
        f"ratios: graph/floor = {graph_seconds / floor_seconds:.2f} wall, {cpu_seconds / floor_cpu_seconds:.2f} CPU; "
        f"cached/floor = {cached_seconds / floor_seconds:.4f}"
    )
    print(f"libnvJitLink before libcusparse before libcusolver: {'yes' if ok else 'NO'}")
    inputs = {
        "wheels": [wheel.name for wheel in wheels],
        "elf_members": len(members),
        "inflated": total,
        "deflated": compressed,
        "inflater": INFLATER_NAME,
        "zlib": zlib.ZLIB_RUNTIME_VERSION,
    }
    results = {
        "graph": {
            "wall": graph_seconds,
            "cpu": cpu_seconds,
            "inflated": scan.inflated_bytes,
            "libraries": len(graph.libraries),
        },
        "floor": {"wall": floor_seconds, "cpu": floor_cpu_seconds},
        "cached": {"wall": cached_seconds},
        "targets": {"graph <= 10 s wall": graph_seconds <= 10, "load order": ok},
    }
    print_json("bench_graph", inputs, results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
