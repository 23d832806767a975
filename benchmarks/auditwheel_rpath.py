"""The RPATH example of docs/rpath.md against the real ``auditwheel repair``: an opt-in check, not CI.

Builds with gcc a wheel shaped like CyFES 2.7 -- ``CyFES-2.7.data/data/cyfes/libcufes.so`` (a
data-scheme library with ``$ORIGIN`` as DT_RUNPATH) needing ``libfakecudart.so.12`` from outside
the wheel and ``libgomp.so.1`` -- and repairs it with the ``auditwheel`` on ``PATH`` (or
``--auditwheel``), which grafts both into ``CyFES.libs/``.  Then it applies docs/rpath.md's fix three
ways (``--set-rpath``, ``--prepend-rpath``, ``--add-rpath``, with the two entries docs/rpath.md gives)
and prints for the repaired wheel and each patched one: the library's DT_RUNPATH, the policy
``auditwheel show`` reports, and whether the library loads where pip puts it (``<prefix>/cyfes/``,
``CyFES.libs/`` in site-packages) and where rules_python's ``whl_library`` does (``data/cyfes/``
beside ``site-packages/``).  Exit 1 when a fix that keeps auditwheel's entries loses the repaired
wheel's policy or fails to load in either layout.

    pip install auditwheel==6.8.2   # any 6.x; in a separate environment is fine
    .venv/bin/python -m benchmarks.auditwheel_rpath [--auditwheel PATH] [--keep DIR]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from tests.support.fakecuda import compile_shared  # the test fixtures' gcc helper
from tests.support.wheelbuilder import build_wheel

REPO = Path(__file__).resolve().parents[1]

MEMBER = "cyfes/libcufes.so"
"""The library's path below the data scheme (``CyFES-<version>.data/data/``)."""
ANSWER = 42
# docs/rpath.md's two entries: pip's prefix layout, then rules_python's repository layout.
FIX_ENTRIES = "$ORIGIN/../lib/python3.11/site-packages/CyFES.libs:$ORIGIN/../../site-packages/CyFES.libs"
FLAGS = {
    "--set-rpath": f"$ORIGIN:{FIX_ENTRIES}",  # docs/rpath.md's example, word for word
    "--prepend-rpath": FIX_ENTRIES,
    "--add-rpath": FIX_ENTRIES,
}
_LOAD = "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).cufes_answer())"


def build_cyfes(directory: Path) -> tuple[Path, Path]:
    """The unrepaired wheel and the directory holding the "system" libcudart it needs."""
    system = directory / "system"
    system.mkdir(parents=True)
    compile_shared(
        system, "libfakecudart.so.12", "int cudart_value(void) { return 41; }\n", "-Wl,-soname,libfakecudart.so.12"
    )
    source = (
        "#include <omp.h>\nint cudart_value(void);\n"
        "int cufes_answer(void) { return cudart_value() + (omp_get_max_threads() > 0); }\n"
    )
    library = compile_shared(
        system,
        "libcufes.so",
        source,
        "-fopenmp",
        "-l:libfakecudart.so.12",
        "-Wl,-rpath,$ORIGIN",
        "-Wl,--enable-new-dtags",
    )
    files = {
        "cyfes/__init__.py": b"",
        f"CyFES-2.7.data/data/{MEMBER}": library.read_bytes(),
    }
    modes = {f"CyFES-2.7.data/data/{MEMBER}": 0o755}
    wheel = build_wheel(
        directory, "cyfes", "2.7", files, tag="cp311-cp311-linux_x86_64", distribution="CyFES", modes=modes
    )
    return wheel, system


def data_member(wheel: Path) -> str:
    """The library's archive path in ``wheel`` (the ``.data`` directory is renamed with the version)."""
    with zipfile.ZipFile(wheel) as archive:
        return next(name for name in archive.namelist() if name.endswith(f".data/data/{MEMBER}"))


def runpath(wheel: Path) -> str:
    """The library's DT_RUNPATH / DT_RPATH in ``wheel``."""
    with zipfile.ZipFile(wheel) as archive:
        elf = ELFFile(io.BytesIO(archive.read(data_member(wheel))))
    dynamic = next(section for section in elf.iter_sections() if isinstance(section, DynamicSection))
    found = [
        f"{tag.entry.d_tag}={getattr(tag, 'runpath', None) or tag.rpath}"
        for tag in dynamic.iter_tags()
        if tag.entry.d_tag in ("DT_RUNPATH", "DT_RPATH")
    ]
    return " ".join(found) or "(none)"


def show(auditwheel: str, wheel: Path) -> str:
    """``auditwheel show``'s policy sentence (its first paragraph)."""
    completed = subprocess.run([auditwheel, "show", str(wheel)], capture_output=True, text=True, check=False)
    text = " ".join((completed.stdout + completed.stderr).split())
    return text.split(". ")[0][:240] if completed.returncode == 0 else f"exit {completed.returncode}: {text[:240]}"


def loads(wheel: Path, work: Path) -> dict[str, str]:
    """Install ``wheel`` (into a new ``work``) as pip does into a prefix and as rules_python does; load the library."""
    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    site = "lib/python3.11/site-packages"
    layouts = {
        "pip prefix": (
            {"purelib": site, "platlib": site, "headers": "include", "scripts": "bin", "data": "."},
            "cyfes",
        ),
        "rules_python": (
            {
                "purelib": "site-packages",
                "platlib": "site-packages",
                "headers": "include",
                "scripts": "bin",
                "data": "data",
            },
            "data/cyfes",
        ),
    }
    results = {}
    for name, (schemes, library_dir) in layouts.items():
        root = work / name.replace(" ", "-")
        destination = SchemeDictionaryDestination(
            {key: str(root / value) for key, value in schemes.items()}, interpreter=sys.executable, script_kind="posix"
        )
        with WheelFile.open(wheel) as source:
            install(source, destination, additional_metadata={})
        environment = {key: value for key, value in os.environ.items() if key not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
        completed = subprocess.run(
            [sys.executable, "-S", "-c", _LOAD, str(root / library_dir / "libcufes.so")],
            env=environment,
            capture_output=True,
            text=True,
            check=False,
        )
        ok = completed.returncode == 0 and completed.stdout.strip() == str(ANSWER)
        results[name] = "loads" if ok else (completed.stderr.strip().splitlines() or ["?"])[-1][:160]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--auditwheel", default=shutil.which("auditwheel"), help="the auditwheel executable")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = parser.parse_args(argv)
    if not args.auditwheel:
        parser.error("no auditwheel on PATH: pip install auditwheel, or pass --auditwheel")
    work = args.keep or Path(tempfile.mkdtemp(prefix="rpw-auditwheel-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        original, system = build_cyfes(work / "built")
        version = subprocess.run([args.auditwheel, "--version"], capture_output=True, text=True, check=True).stdout
        print(" ".join(version.split()[:2]))
        environment = os.environ | {"LD_LIBRARY_PATH": str(system)}
        repair = [args.auditwheel, "repair", "--wheel-dir", str(work / "repaired"), str(original)]
        subprocess.run(repair, env=environment, check=True, capture_output=True)
        (repaired,) = (work / "repaired").glob("*.whl")
        wheels = {"repaired": repaired}
        for flag, entries in FLAGS.items():
            dest = work / flag.strip("-")
            command = [
                sys.executable,
                "-m",
                "patched_wheels",
                "patch",
                "--wheel",
                str(repaired),
                "--dest-dir",
                str(dest),
            ]
            command += ["--suffix", "rpath.1", flag, f"{data_member(repaired)}={entries}"]
            completed = subprocess.run(
                command,
                capture_output=True,
                text=True,
                check=False,
                env=os.environ | {"PYTHONPATH": str(REPO / "python")},
            )
            if completed.returncode != 0:
                print(f"{flag}: {completed.stderr.strip()}")
                return 1
            wheels[flag] = Path(completed.stdout.splitlines()[0])
        policies = {}
        failed = False
        for label, wheel in wheels.items():
            policies[label] = show(args.auditwheel, wheel)
            loaded = loads(wheel, work / "installed" / label.strip("-"))
            print(f"{label}: {wheel.name}\n  RUNPATH {runpath(wheel)}\n  auditwheel show: {policies[label]}")
            print("".join(f"\n  {layout}: {outcome}" for layout, outcome in loaded.items()).lstrip("\n"))
            if label in ("--prepend-rpath", "--add-rpath"):
                failed |= any(outcome != "loads" for outcome in loaded.values())
        for flag in FLAGS:
            same = policies[flag].replace(wheels[flag].name, "") == policies["repaired"].replace(repaired.name, "")
            print(f"{flag}: auditwheel's policy {'kept' if same else 'LOST'}")
            failed |= flag != "--set-rpath" and not same
        return 1 if failed else 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
