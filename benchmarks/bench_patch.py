"""Benchmark ``patched-wheels patch`` on the real torch 2.1.0 cp311 wheel (670 MB).

Compares, in one run on the same machine and files:

* ``cp`` of the wheel (the floor: the output is as big as the input),
* ``patched-wheels patch`` (one small diff to ``torch/__init__.py``, a local-version
  suffix and ``--remove-requires triton``), in default mode and with ``--verify``,
* the hand-made baseline it replaces: ``wheel unpack``, apply the same diff, rename
  ``.dist-info``, edit ``Version:``, ``wheel pack`` (all members recompressed).

Peak RSS is that of the ``patched-wheels`` process alone (``os.wait4``).  Targets
(default mode): >= 30x faster than the baseline, <= 5x ``cp``, peak RSS <= 150 MB.

Usage: ``python -m benchmarks.bench_patch [--wheel W] [--work-dir D] [--repeat N] [--skip-baseline] [--json FILE]``.
The wheel is downloaded once (``pip download``, see ``torch_wheels.py``) into
``${XDG_CACHE_HOME:-~/.cache}/rules_patched_wheels/torch-2.1.0/``.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from benchmarks.harness import Step, add_json_option, measure, print_json
from benchmarks.torch_wheels import TORCH, ensure_wheels

SUFFIX = "bench.1"
MARKER = "# patched by bench_patch.py"
RSS_TARGET_MB = 150
CP_TARGET, BASELINE_TARGET = 5.0, 30.0


def make_patch(wheel: Path, path: Path) -> None:
    """A small real diff: one comment line added after the module docstring of torch/__init__.py."""
    with zipfile.ZipFile(wheel) as archive:
        before = archive.read("torch/__init__.py").decode().splitlines(keepends=True)
    after = before[:10] + [MARKER + "\n"] + before[10:]
    diff = difflib.unified_diff(before, after, "a/torch/__init__.py", "b/torch/__init__.py")
    path.write_text("".join(diff))


def best_of(repeat: int, command: list[str], output: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of the fastest of ``repeat`` runs, each into an empty ``output``."""
    fastest = min(
        (measure(Step(command[0], command, os.environ, output)) for _ in range(repeat)), key=lambda run: run.wall
    )
    return fastest.wall, fastest.peak_rss


def baseline(wheel: Path, patch: Path, work: Path) -> float:
    """The extract + patch + repack approach, as people do it by hand today."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.sync()
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "wheel", "unpack", "-d", str(work), str(wheel)], check=True, stdout=subprocess.DEVNULL
    )
    tree = work / "torch-2.1.0"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from patched_wheels.patch.unidiff import read_patch, apply_file_patch;"
            "[Path(sys.argv[2], p.path).write_bytes(apply_file_patch(p, Path(sys.argv[2], p.path).read_bytes())) for p in read_patch(Path(sys.argv[1]))]",
            str(patch),
            str(tree),
        ],
        check=True,
    )
    new_version = f"2.1.0+{SUFFIX}"
    dist_info = tree / f"torch-{new_version}.dist-info"
    (tree / "torch-2.1.0.dist-info").rename(dist_info)
    data_dir = tree / "torch-2.1.0.data"
    if data_dir.exists():
        data_dir.rename(tree / f"torch-{new_version}.data")
    metadata = dist_info / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 2.1.0\n", f"Version: {new_version}\n", 1))
    out = work / "out"
    out.mkdir()
    subprocess.run(
        [sys.executable, "-m", "wheel", "pack", "-d", str(out), str(tree)], check=True, stdout=subprocess.DEVNULL
    )
    elapsed = time.perf_counter() - start
    shutil.rmtree(work)
    return elapsed


def check_output(directory: Path) -> None:
    """Not timed: the output must really be the patched wheel."""
    from patched_wheels.wheelfile import WheelReader

    [output] = directory.iterdir()
    with WheelReader(output) as reader:
        assert MARKER.encode() in reader.read("torch/__init__.py"), "patch missing from output"
        assert b"triton" not in reader.metadata().split(b"\n\n", 1)[0], "triton requirement still present"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--wheel", type=Path, help=f"default: the {TORCH} cp311 wheel from the cache (downloaded if missing)"
    )
    parser.add_argument("--work-dir", type=Path, help="scratch directory (default: a new temp dir)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of cp and patched-wheels; the best is reported")
    parser.add_argument("--skip-baseline", action="store_true", help="skip the slow wheel unpack/pack baseline")
    add_json_option(parser)
    args = parser.parse_args()

    wheel = args.wheel or ensure_wheels([TORCH])[0]
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench_patch."))
    work.mkdir(parents=True, exist_ok=True)
    patch = work / "0001-torch-init.patch"
    make_patch(wheel, patch)
    with zipfile.ZipFile(wheel) as archive:
        members = len(archive.infolist())
        inflated = sum(info.file_size for info in archive.infolist())
    subprocess.run(["cat", str(wheel)], check=True, stdout=subprocess.DEVNULL)  # same warm page cache for all

    ours = [
        sys.executable,
        "-m",
        "patched_wheels",
        "patch",
        "--wheel",
        str(wheel),
        "--suffix",
        SUFFIX,
        "--patch",
        str(patch),
        "--remove-requires",
        "triton",
        "--dest-dir",
    ]
    cp_time, _ = best_of(args.repeat, ["cp", str(wheel), str(work / "cp")], work / "cp")
    our_time, our_rss = best_of(args.repeat, [*ours, str(work / "ours")], work / "ours")
    check_output(work / "ours")
    verify_time, verify_rss = best_of(args.repeat, [*ours, str(work / "ours"), "--verify"], work / "ours")
    base_time = None if args.skip_baseline else baseline(wheel, patch, work / "baseline")
    shutil.rmtree(work)

    mb = 1 << 20
    print(
        f"input: {wheel.name}: {wheel.stat().st_size / mb:.0f} MiB, {members} members, {inflated / mb:.0f} MiB inflated"
    )
    print(f"{'cp':<42}{cp_time:8.2f} s")
    for label, seconds, rss in (
        ("patched-wheels patch", our_time, our_rss),
        ("patched-wheels patch --verify", verify_time, verify_rss),
    ):
        versus_baseline = f"{base_time / seconds:6.1f}x faster than extract+repack" if base_time else ""
        print(
            f"{label:<42}{seconds:8.2f} s {seconds / cp_time:6.1f}x cp {versus_baseline}  peak RSS {rss / mb:.0f} MiB"
        )
    if base_time is not None:
        print(f"{'wheel unpack + patch + wheel pack':<42}{base_time:8.2f} s {base_time / cp_time:6.1f}x cp")
    verdicts = [
        (f"<= {CP_TARGET:g}x cp", our_time / cp_time <= CP_TARGET),
        (f"peak RSS <= {RSS_TARGET_MB} MB", our_rss <= RSS_TARGET_MB * 1_000_000),
    ]
    if base_time is not None:
        verdicts.insert(
            0, (f">= {BASELINE_TARGET:g}x faster than extract+repack", base_time / our_time >= BASELINE_TARGET)
        )
    print("targets (default mode): " + ", ".join(f"{name}: {'PASS' if ok else 'FAIL'}" for name, ok in verdicts))
    results = {
        "cp": {"wall_best": cp_time},
        "patch": {"wall_best": our_time, "peak_rss": our_rss, "ratio_cp": our_time / cp_time},
        "patch --verify": {"wall_best": verify_time, "peak_rss": verify_rss, "ratio_cp": verify_time / cp_time},
        "unpack + patch + pack": {"wall": base_time},
        "targets": dict(verdicts),
    }
    inputs = {"wheel": wheel.name, "members": members, "inflated": inflated, "repeat": args.repeat}
    print_json("bench_patch", inputs, results, args.json)
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
