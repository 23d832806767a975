#!/usr/bin/env python3
"""Benchmark reading big TOML locks: peak memory and time of ``resolve --list-projects`` and ``lock``.

A uv.lock (and a pylock.toml) of N packages with three wheels each is generated (``--megabytes``, default
50: the size issue 35 measured at 713 MiB and 40-80 s before the reader stopped holding the text a
second time as lines and parsing every block twice). Each command runs in a fresh interpreter whose
peak RSS (VmHWM) is read back; the input size is printed beside it, since the goal is a small multiple
of the input. ``tomllib.loads`` alone on the same text is measured too: the floor of any reader that
keeps the parsed document. ``--baseline DIR`` measures the ``python/`` directory of another checkout (the
code before a change) on the same inputs in the same run, before this one.

A requirements lock of one pin whose ``--hash`` value is ``--option-megabytes`` long (default 10: issue 52 found
no answer in 120 s, shlex splitting it a character at a time) is locked too.

    python -m benchmarks.bench_locks [--megabytes 50] [--pylock-megabytes 30] [--option-megabytes 10] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import children_cpu, print_json

_MEASURE = """
import sys, time
start = time.monotonic()
if sys.argv[1] == "tomllib":
    import tomllib
    tomllib.loads(open(sys.argv[2], encoding="utf-8").read())
    status = 0
else:
    from patched_wheels.cli import main
    status = main(sys.argv[1:])
with open("/proc/self/status", encoding="ascii") as status_file:
    peak = next(int(line.split()[1]) for line in status_file if line.startswith("VmHWM:"))
print(f"{peak * 1024} {time.monotonic() - start:.1f}", file=sys.stderr)
sys.exit(status)
"""
_HASH = "a" * 64
_MACHINES = ("x86_64", "aarch64", "ppc64le")


def uv_lock(packages: int) -> str:
    """A uv.lock of ``packages`` registry packages, three wheels each (about 630 bytes a package)."""
    out = ['version = 1\nrevision = 3\nrequires-python = ">=3.11"\n']
    for number in range(packages):
        wheels = "".join(
            f'    {{ url = "https://files.example/pkg{number}-1.0-cp311-cp311-manylinux_2_17_{m}.whl", hash = "sha256:{_HASH}" }},\n'
            for m in _MACHINES
        )
        out.append(
            f'\n[[package]]\nname = "pkg{number}"\nversion = "1.0"\nsource = {{ registry = "https://pypi.example/simple" }}\nwheels = [\n{wheels}]\n'
        )
    return "".join(out)


def pylock(packages: int) -> str:
    """The same packages as a pylock.toml."""
    out = ['lock-version = "1.0"\ncreated-by = "bench"\n']
    for number in range(packages):
        wheels = ", ".join(
            f'{{ url = "https://files.example/pkg{number}-1.0-cp311-cp311-manylinux_2_17_{m}.whl", hashes = {{ sha256 = "{_HASH}" }} }}'
            for m in _MACHINES
        )
        out.append(f'\n[[packages]]\nname = "pkg{number}"\nversion = "1.0"\nwheels = [{wheels}]\n')
    return "".join(out)


def measure(*args: str, code: Path | None = None) -> tuple[int, float, float]:
    """(peak RSS in bytes, seconds, CPU seconds) of one run in a fresh interpreter, of the package in ``code``
    (a ``python/`` directory; None: the one installed)."""
    before = children_cpu()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")])} if code else None
    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, *args], capture_output=True, text=True, check=False, env=env
    )
    cpu = children_cpu() - before
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{result.stderr}")
    peak, seconds = result.stderr.splitlines()[-1].split()
    return int(peak), float(seconds), cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=50)
    parser.add_argument("--pylock-megabytes", type=float, help="the pylock.toml's size (default: --megabytes)")
    parser.add_argument("--option-megabytes", type=float, default=10, help="the requirements lock's option value")
    parser.add_argument("--baseline", type=Path, help="a python/ directory measured first, as 'baseline'")
    args = parser.parse_args()
    packages = int(args.megabytes * 1e6 / 630)
    pylock_packages = int((args.pylock_megabytes or args.megabytes) * 1e6 / 630)
    codes = {**({"baseline": args.baseline.resolve()} if args.baseline else {}), "current": None}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "index").mkdir()
        files = {"uv-lock": root / "uv.lock", "pylock": root / "pylock.toml", "requirements": root / "options.txt"}
        files["uv-lock"].write_text(uv_lock(packages))
        files["pylock"].write_text(pylock(pylock_packages))
        files["requirements"].write_text(f"pkg==1.0 --hash=sha256:{'ab' * int(args.option_megabytes * 5e5)}\n")
        print(f"{packages} uv.lock and {pylock_packages} pylock.toml packages, three wheels each")
        results: dict[str, dict[str, object]] = {}
        for lock_format, path in files.items():
            size = path.stat().st_size
            runs = {
                "tomllib.loads": ("tomllib", str(path)),
                "resolve --list-projects": (
                    "resolve",
                    f"--{lock_format}",
                    str(path),
                    "--list-projects",
                    "--index-url",
                    "https://pypi.org/simple",
                ),
                "lock": (
                    "lock",
                    f"--{lock_format}",
                    str(path),
                    "--index",
                    str(root / "index"),
                    "--out",
                    str(root / "out.txt"),
                    *(("--out-uv-lock", str(root / "out.lock")) if lock_format == "uv-lock" else ()),
                ),
            }
            if lock_format == "requirements":  # not TOML, and resolve would look its pin up on an index
                runs = {"lock": runs["lock"]}
            for name, command in runs.items():
                for label, code in codes.items() if name != "tomllib.loads" else [("", None)]:
                    started = time.monotonic()
                    peak, seconds, cpu = measure(*command, code=code)
                    print(
                        f"{lock_format:8} {size / 2**20:6.1f} MiB  {name:24} {label:9} peak {peak / 2**20:6.0f} MiB "
                        f"({peak / size:4.1f}x the input)  {seconds:5.1f} s (wall {time.monotonic() - started:.1f} s, CPU {cpu:.1f} s)"
                    )
                    results[f"{lock_format}: {name}{f' ({label})' if label else ''}"] = {
                        "bytes": size,
                        "peak_rss": peak,
                        "ratio_input": peak / size,
                        "seconds": seconds,
                        "cpu": cpu,
                    }
    inputs = {"packages": packages, "pylock_packages": pylock_packages, "megabytes": args.megabytes}
    print_json("bench_locks", {**inputs, "baseline": str(args.baseline) if args.baseline else None}, results)


if __name__ == "__main__":
    main()
