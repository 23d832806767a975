"""The real torch 2.1.0 wheel set the benchmarks measure, downloaded once per machine.

The pins are those of ``third_party/requirements_lock.txt`` (the set the issue is about:
torch 2.1.0 fails to import under Bazel because libnvJitLink from nvidia-nvjitlink-cu12
12.9.86 must be loaded before libcusparse).  They are fetched for CPython 3.11 on
manylinux x86-64 whatever the host, since that is what the Bazel hub consumes, into
``${XDG_CACHE_HOME:-~/.cache}/rules_patched_wheels/torch-2.1.0/``; files already there
are reused, so a benchmark re-run (or one after ``pip download torch==2.1.0``) costs nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from packaging import tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

TORCH = "torch==2.1.0"
TRITON = "triton==2.1.0"
NVIDIA = (
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

# manylinux2014 (glibc 2.17) and everything older, listed in full: the pinned wheels are spread
# over manylinux1, 2010 and 2014, pip widens only the legacy names of an explicit --platform
# (not PEP 600's manylinux_2_X), and the same list decides which cached file matches a pin.
PLATFORMS = (
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_12_x86_64",
    "manylinux2010_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)
_PYTHON = (3, 11)
_ABI = "cp311"
_TARGET_TAGS = frozenset(tags.cpython_tags(_PYTHON, [_ABI], PLATFORMS)) | frozenset(
    tags.compatible_tags(_PYTHON, _ABI, PLATFORMS)
)


def cache_dir() -> Path:
    """Where the wheels live; read at call time so ``XDG_CACHE_HOME`` set by a caller counts."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rules_patched_wheels" / "torch-2.1.0"


def ensure_wheels(pins: Iterable[str]) -> list[Path]:
    """The cached wheel of every ``name==version`` pin, in the order given.

    Missing ones are fetched in one ``pip download --no-deps`` call for the target platform,
    so a new machine (of any OS or Python) gets exactly the files the benchmarks expect.
    """
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    pins = list(pins)
    missing = [pin for pin in pins if _find(directory, pin) is None]
    if missing:
        print(f"downloading {' '.join(missing)} into {directory} ...", flush=True)
        platforms = [f"--platform={platform}" for platform in PLATFORMS]
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--implementation=cp",
                f"--python-version={_PYTHON[0]}.{_PYTHON[1]}",
                f"--abi={_ABI}",
                *platforms,
                "-d",
                str(directory),
                *missing,
            ],
            check=True,
        )
    wheels = []
    for pin in pins:
        wheel = _find(directory, pin)
        if wheel is None:
            raise SystemExit(f"{directory}: pip download {pin} left no cp311 manylinux x86_64 wheel there")
        wheels.append(wheel)
    return wheels


def _find(directory: Path, pin: str) -> Path | None:
    """The wheel in ``directory`` for ``pin`` that installs on the target platform, if any."""
    name, _, version = pin.partition("==")
    wanted_name, wanted_version = canonicalize_name(name), Version(version)
    for path in sorted(directory.glob("*.whl")):
        parsed_name, parsed_version, _build, wheel_tags = parse_wheel_filename(path.name)
        if parsed_name == wanted_name and parsed_version == wanted_version and wheel_tags & _TARGET_TAGS:
            return path
    return None
