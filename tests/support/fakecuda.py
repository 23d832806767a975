"""A miniature torch + nvidia-*-cu12 wheel set built from real ELF files, for tests.

It reproduces the failure this project exists for, at the size of a unit test:

* ``fake-nvidia-{jit,sparse,solver,blas}`` wheels ship ``fake_nvidia/<x>/lib/lib<x>.so.12``
  (compiled with gcc). ``libsparse`` needs ``libjit`` and ``libsolver`` needs
  ``libsparse``; like the real cusparse/cusolver they find their siblings
  through RUNPATH entries such as ``$ORIGIN/../../jit/lib``, which only exist
  when every wheel is unpacked into one site-packages.
* ``faketorch`` ships ``faketorch/lib/libfaketorch.so`` (needs solver and blas, with a
  torch-style DT_RPATH into ``../../fake_nvidia/*/lib``) and ``faketorch/_core.so``
  (needs ``libfaketorch.so`` through ``$ORIGIN/lib``, like ``torch/_C``).  Its
  ``__init__`` preloads the fake nvidia libraries with ctypes in the order torch
  2.1.0 uses, sparse before jit, then loads ``_core.so``; ``faketorch.answer()``
  calls through the whole chain and returns :data:`EXPECTED_ANSWER`.

So ``import faketorch`` works in a flat site-packages, and fails with
``libjit.so.12: cannot open shared object file`` when each wheel has its own
directory on ``sys.path`` (as under Bazel) -- unless a correct preload runs first.

A second set reproduces a package that loads libraries at run time, as JAX's CUDA
plugin loads the ``nvidia-*`` ones (no DT_NEEDED edge shows it):

* ``fakejax`` (pure Python) locates the ``fakert_foo`` package with importlib at
  import and opens ``fakert_foo/lib/libfoo.so.1`` with ctypes by that full path;
  ``fakejax.answer()`` returns :data:`RUNTIME_ANSWER`.  It requires both ``fakert-*``
  wheels (one under an extra, like the plugin's ``with-cuda``).
* ``fakert-foo`` ships ``libfoo.so.1``, which needs ``libbar.so.1`` through the
  RUNPATH ``$ORIGIN/../../fakert_bar/lib`` (only right in one site-packages).
* ``fakert-bar`` ships ``libbar.so.1`` and ``libbar_pmix.so.1``, a plugin for a
  system library no machine has (``libfakepmix.so.1``), like nvshmem's pmix bootstrap.

API (kept small and stable, the Bazel integration tests reuse it)::

    wheels = build_fake_cuda_wheels(tmp / "wheels")           # -> FakeCudaWheels
    paths = per_wheel_layout(wheels.all, tmp / "per-wheel")   # one dir per wheel
    paths = flat_layout(wheels.all, tmp / "flat")             # one site-packages
    compile_shared(dir, "libx.so", "int x(void) { return 1; }", "-Wl,-soname,libx.so")
    blob_library(dir, "libbig.so", 3 << 20)                   # a library of a chosen size
    result = run_import(paths)                                # subprocess, PYTHONPATH=paths
    hostile = with_escaping_library(wheels, tmp)              # the set, jit's wheel with a ../ member
    assert result.returncode == 0 and result.stdout.strip() == str(EXPECTED_ANSWER)
    runtime = build_runtime_loaded_wheels(tmp / "wheels")     # -> RuntimeLoadedWheels
    run_import(paths, RUNTIME_CODE)                           # prints RUNTIME_ANSWER when it works
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from . import wheelbuilder

NVIDIA_VERSION = "12.1.0"
TORCH_VERSION = "2.1.0"
WHEEL_TAG = "py3-none-linux_x86_64"
# jit_value() = 7, sparse = 3 * jit, solver = sparse + 1, blas = 100, faketorch = solver + blas.
EXPECTED_ANSWER = 122

# Install paths (relative to site-packages) of every fake library, by short name.
LIBRARY_PATHS = {
    "jit": "fake_nvidia/jit/lib/libjit.so.12",
    "sparse": "fake_nvidia/sparse/lib/libsparse.so.12",
    "solver": "fake_nvidia/solver/lib/libsolver.so.12",
    "blas": "fake_nvidia/blas/lib/libblas.so.12",
    "faketorch": "faketorch/lib/libfaketorch.so",
    "core": "faketorch/_core.so",
}

_SOURCES = {
    "jit": '#include <stdlib.h>\nint jit_value(void) { return atoi("7"); }\n',  # needs libc: a system dependency
    "sparse": "int jit_value(void);\nint sparse_value(void) { return 3 * jit_value(); }\n",
    "solver": "int sparse_value(void);\nint solver_value(void) { return sparse_value() + 1; }\n",
    "blas": "int blas_value(void) { return 100; }\n",
    "faketorch": "int solver_value(void);\nint blas_value(void);\n"
    "int faketorch_answer(void) { return solver_value() + blas_value(); }\n",
    "core": "int faketorch_answer(void);\nint core_answer(void) { return faketorch_answer(); }\n",
}

# (DT_NEEDED short names, search path, use DT_RPATH instead of DT_RUNPATH)
_LINKS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...], bool]] = {
    "jit": ((), (), False),
    "sparse": (("jit",), ("$ORIGIN", "$ORIGIN/../../jit/lib"), False),
    "solver": (("sparse", "jit"), ("$ORIGIN", "$ORIGIN/../../sparse/lib", "$ORIGIN/../../jit/lib"), False),
    "blas": ((), ("$ORIGIN",), False),
    "faketorch": (
        ("solver", "blas"),
        tuple(f"$ORIGIN/../../fake_nvidia/{name}/lib" for name in ("jit", "sparse", "solver", "blas")) + ("$ORIGIN",),
        True,
    ),
    "core": (("faketorch",), ("$ORIGIN/lib",), True),
}

# libbar.so.1's bar_value() = 20, libfoo.so.1's foo_value() = 2 * bar_value() + 1.
RUNTIME_ANSWER = 41
RUNTIME_VERSION = "1.0"
RUNTIME_PACKAGE = "fakejax"
RUNTIME_GLOB = "fakert-*"
RUNTIME_CODE = "import fakejax; print(fakejax.answer())"
RUNTIME_LIBRARY_PATHS = {
    "foo": "fakert_foo/lib/libfoo.so.1",
    "bar": "fakert_bar/lib/libbar.so.1",
    "pmix": "fakert_bar/lib/libbar_pmix.so.1",
}
# The system library libbar_pmix.so.1 needs: built to link against, shipped nowhere.
MISSING_SYSTEM_LIBRARY = "libfakepmix.so.1"

_RUNTIME_INIT = '''"""fakejax: opens libfoo.so.1 at import by its path in fakert_foo, as JAX's CUDA plugin opens nvidia-* libraries."""
import ctypes
import importlib.util
import os

_foo = ctypes.CDLL(os.path.join(os.path.dirname(importlib.util.find_spec("fakert_foo").origin), "lib", "libfoo.so.1"))


def answer():
    return _foo.foo_value()
'''

_INIT_TEMPLATE = '''"""faketorch: preloads its CUDA-like dependencies the way torch 2.1.0 does."""
import ctypes
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_PRELOAD_ORDER = {order!r}


def _preload(folder, name):
    for entry in sys.path:
        candidate = os.path.join(entry, "fake_nvidia", folder, "lib", name)
        if os.path.isfile(candidate):
            ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
            return


for _folder in _PRELOAD_ORDER:
    _preload(_folder, "lib%s.so.12" % _folder)

_core = ctypes.CDLL(os.path.join(_HERE, "_core.so"))


def answer():
    return _core.core_answer()
'''


@dataclass(frozen=True)
class FakeCudaWheels:
    """The built wheels: ``nvidia`` maps a short name (jit, sparse, solver, blas) to its wheel."""

    nvidia: Mapping[str, Path]
    torch: Path

    @property
    def all(self) -> list[Path]:
        return [*self.nvidia.values(), self.torch]


def soname(short_name: str) -> str | None:
    """The DT_SONAME a fake library is built with (``_core.so`` has none, like an extension module)."""
    return None if short_name == "core" else os.path.basename(LIBRARY_PATHS[short_name])


def compile_shared(directory: Path, name: str, source: str, *flags: str) -> Path:
    """``gcc -shared`` one C source into ``directory/name`` (``-L directory`` so earlier outputs can be linked)."""
    (directory / f"{name}.c").write_text(source)
    output = directory / name
    command = [
        "gcc",
        "-shared",
        "-fPIC",
        "-O1",
        "-o",
        str(output),
        str(directory / f"{name}.c"),
        f"-L{directory}",
        *flags,
    ]
    subprocess.run(command, check=True, capture_output=True)
    return output


def blob_library(directory: Path, name: str, size: int, *flags: str) -> Path:
    """A shared library carrying ``size`` incompressible bytes (so its wheel member is about that big)."""
    blob = directory / f"{name}.bin"
    blob.write_bytes(random.Random(name).randbytes(size))
    source = f'__asm__(".section .rodata\\n.globl blob_{size}\\nblob_{size}:\\n.incbin \\"{blob}\\"\\n.text");\n'
    return compile_shared(directory, name, source + "int answer(void) { return 42; }\n", f"-Wl,-soname,{name}", *flags)


def _compile(short_name: str, build_dir: Path) -> Path:
    needed, search_path, use_rpath = _LINKS[short_name]
    flags = [f"-Wl,-soname,{soname(short_name)}"] if soname(short_name) else []
    flags += [f"-l:{os.path.basename(LIBRARY_PATHS[name])}" for name in needed]
    if search_path:
        flags += [
            f"-Wl,-rpath,{':'.join(search_path)}",
            "-Wl,--disable-new-dtags" if use_rpath else "-Wl,--enable-new-dtags",
        ]
    return compile_shared(build_dir, os.path.basename(LIBRARY_PATHS[short_name]), _SOURCES[short_name], *flags)


def build_wheel(
    dest_dir: Path,
    name: str,
    version: str,
    files: Mapping[str, bytes],
    *,
    requires: Sequence[str] = (),
    tag: str = WHEEL_TAG,
    executable: Sequence[str] = (),
) -> Path:
    """:func:`wheelbuilder.build_wheel` with this module's platform tag; ``executable`` members get mode 0755."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    modes = dict.fromkeys(executable, 0o755)
    return wheelbuilder.build_wheel(dest_dir, name, version, files, requires=requires, tag=tag, modes=modes)


def build_fake_cuda_wheels(dest: Path, *, broken_order: bool = True) -> FakeCudaWheels:
    """Compile the fake libraries and package them as four nvidia-style wheels and ``faketorch``.

    ``broken_order=True`` makes ``faketorch/__init__.py`` preload sparse before jit
    (torch 2.1.0's bug); ``False`` preloads jit first, which works in any layout.
    """
    build_dir = dest / "build"
    build_dir.mkdir(parents=True, exist_ok=True)
    binaries = {
        name: _compile(name, build_dir).read_bytes()
        for name in ("jit", "sparse", "solver", "blas", "faketorch", "core")
    }
    nvidia = {}
    for name in ("jit", "sparse", "solver", "blas"):
        path = LIBRARY_PATHS[name]
        nvidia[name] = build_wheel(
            dest,
            f"fake-nvidia-{name}",
            NVIDIA_VERSION,
            {"fake_nvidia/__init__.py": b"", path: binaries[name]},
            executable=[path],
        )
    order = ("sparse", "solver", "jit", "blas") if broken_order else ("jit", "sparse", "solver", "blas")
    torch_files = {
        "faketorch/__init__.py": _INIT_TEMPLATE.format(order=order).encode(),
        LIBRARY_PATHS["faketorch"]: binaries["faketorch"],
        LIBRARY_PATHS["core"]: binaries["core"],
    }
    torch = build_wheel(
        dest,
        "faketorch",
        TORCH_VERSION,
        torch_files,
        requires=[f"fake-nvidia-{name}=={NVIDIA_VERSION}" for name in nvidia],
        executable=[LIBRARY_PATHS["faketorch"], LIBRARY_PATHS["core"]],
    )
    return FakeCudaWheels(nvidia, torch)


@dataclass(frozen=True)
class RuntimeLoadedWheels:
    """``fakejax`` and the two wheels whose libraries it loads at run time."""

    package: Path
    foo: Path
    bar: Path

    @property
    def all(self) -> list[Path]:
        return [self.foo, self.bar, self.package]


def build_runtime_loaded_wheels(dest: Path) -> RuntimeLoadedWheels:
    """Compile ``libbar``, ``libbar_pmix`` and ``libfoo`` and package them with ``fakejax`` (see the module docstring)."""
    build_dir = dest / "build-runtime"
    build_dir.mkdir(parents=True, exist_ok=True)
    compile_shared(
        build_dir,
        MISSING_SYSTEM_LIBRARY,
        "int pmix_value(void) { return 1; }\n",
        f"-Wl,-soname,{MISSING_SYSTEM_LIBRARY}",
    )
    pmix = compile_shared(
        build_dir,
        "libbar_pmix.so.1",
        "int pmix_value(void);\nint bar_pmix_value(void) { return pmix_value(); }\n",
        "-Wl,-soname,libbar_pmix.so.1",
        f"-l:{MISSING_SYSTEM_LIBRARY}",
    )
    bar = compile_shared(build_dir, "libbar.so.1", "int bar_value(void) { return 20; }\n", "-Wl,-soname,libbar.so.1")
    foo = compile_shared(
        build_dir,
        "libfoo.so.1",
        "int bar_value(void);\nint foo_value(void) { return 2 * bar_value() + 1; }\n",
        "-Wl,-soname,libfoo.so.1",
        "-l:libbar.so.1",
        "-Wl,-rpath,$ORIGIN/../../fakert_bar/lib",
        "-Wl,--enable-new-dtags",
    )
    foo_wheel = build_wheel(
        dest,
        "fakert-foo",
        RUNTIME_VERSION,
        {"fakert_foo/__init__.py": b"", RUNTIME_LIBRARY_PATHS["foo"]: foo.read_bytes()},
        executable=[RUNTIME_LIBRARY_PATHS["foo"]],
    )
    bar_files = {"fakert_bar/__init__.py": b"", RUNTIME_LIBRARY_PATHS["bar"]: bar.read_bytes()}
    bar_files[RUNTIME_LIBRARY_PATHS["pmix"]] = pmix.read_bytes()
    bar_wheel = build_wheel(dest, "fakert-bar", RUNTIME_VERSION, bar_files)
    package = build_wheel(
        dest,
        RUNTIME_PACKAGE,
        RUNTIME_VERSION,
        {"fakejax/__init__.py": _RUNTIME_INIT.encode()},
        requires=[f"fakert-foo=={RUNTIME_VERSION}", f'fakert-bar=={RUNTIME_VERSION}; extra == "with-rt"'],
    )
    return RuntimeLoadedWheels(package, foo_wheel, bar_wheel)


def with_escaping_library(wheels: FakeCudaWheels, directory: Path) -> list[Path]:
    """The wheel set with jit's wheel replaced by a copy that also ships ``../../../../tmp/x/libjit.so.12``.

    That name sorts before the real library's, so a graph that accepted it would preload it.
    """
    evil = directory / wheels.nvidia["jit"].name
    with zipfile.ZipFile(wheels.nvidia["jit"]) as source, zipfile.ZipFile(evil, "w") as target:
        for info in source.infolist():
            target.writestr(info, source.read(info))
        target.writestr("../../../../tmp/x/libjit.so.12", source.read(LIBRARY_PATHS["jit"]))
    return [*(wheel for wheel in wheels.all if wheel != wheels.nvidia["jit"]), evil]


def unpack_wheel(wheel: Path, site_packages: Path) -> None:
    """Install a wheel's files the minimal way: purelib/platlib ``.data`` into the root, modes kept."""
    site_packages.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            parts = info.filename.split("/")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            target = site_packages.joinpath(*parts)
            if info.is_dir():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(info))
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                target.chmod(mode)


def flat_layout(wheels: Sequence[Path], root: Path) -> list[Path]:
    """Every wheel in one site-packages (what pip does); returns the ``sys.path`` entries."""
    site_packages = root / "site-packages"
    for wheel in wheels:
        unpack_wheel(wheel, site_packages)
    return [site_packages]


def per_wheel_layout(wheels: Sequence[Path], root: Path) -> list[Path]:
    """Each wheel in its own directory (what Bazel's rules_python does); returns the ``sys.path`` entries."""
    entries = []
    for wheel in wheels:
        directory = root / wheel.name[: -len(".whl")]
        unpack_wheel(wheel, directory)
        entries.append(directory)
    return entries


def run_import(
    sys_path: Sequence[Path], code: str = "import faketorch; print(faketorch.answer())"
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter whose only extra ``sys.path`` entries are ``sys_path``."""
    env = {
        key: value for key, value in os.environ.items() if key not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONHOME")
    }
    env["PYTHONPATH"] = os.pathsep.join(str(entry) for entry in sys_path)
    return subprocess.run(
        [sys.executable, "-s", "-c", code], env=env, capture_output=True, text=True, cwd=str(sys_path[0]), check=False
    )
