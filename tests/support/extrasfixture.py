"""A wheel set whose library only an extra on a dependency edge brings, as torch 2.15 reaches its CUDA libraries
through ``cuda-toolkit[cudart,…]`` and JAX through ``jax-cuda13-plugin[with-cuda]``.

* ``tk-rt`` ships ``tk_rt/lib/libtk.so`` (gcc-built, SONAME ``libtk.so``);
* ``toolkit`` (pure Python) provides the extra ``rt``: ``Requires-Dist: tk-rt==1.0; extra == "rt"``;
* ``app`` requires ``toolkit[rt]==1.0`` and ships ``app/lib/libapp.so``, which needs ``libtk.so`` (DT_NEEDED).
  ``import app`` imports ``tk_rt``, loads its ``libtk.so`` by full path, then ``libapp.so``;
  ``app.answer()`` calls through both and returns :data:`ANSWER`.

pip installs all three for ``app``; rules_python, which drops the extras of an edge, wires ``app`` and
``toolkit`` only, so ``import app`` fails with ``No module named 'tk_rt'`` in every layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import fakecuda, wheelbuilder

ANSWER = 4242
MISSING_ERROR = "No module named 'tk_rt'"

_APP_INIT = b"""\
import ctypes
import os

import tk_rt

ctypes.CDLL(os.path.join(os.path.dirname(tk_rt.__file__), "lib", "libtk.so"), mode=ctypes.RTLD_GLOBAL)
_app = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libapp.so"))


def answer():
    return _app.app_answer()
"""


@dataclass(frozen=True)
class ExtrasWheels:
    app: Path
    toolkit: Path
    tk_rt: Path

    @property
    def all(self) -> list[Path]:
        return [self.app, self.toolkit, self.tk_rt]


def build_extras_wheels(dest: Path) -> ExtrasWheels:
    """The three wheels in ``dest`` (their libraries compiled in ``dest/build-extras``)."""
    build = dest / "build-extras"
    build.mkdir(parents=True, exist_ok=True)
    libtk = fakecuda.compile_shared(build, "libtk.so", "int tk_value(void) { return 4200; }\n", "-Wl,-soname,libtk.so")
    libapp = fakecuda.compile_shared(
        build,
        "libapp.so",
        "int tk_value(void);\nint app_answer(void) { return tk_value() + 42; }\n",
        "-Wl,-soname,libapp.so",
        "-l:libtk.so",
    )
    tk_rt = fakecuda.build_wheel(
        dest, "tk-rt", "1.0", {"tk_rt/__init__.py": b"", "tk_rt/lib/libtk.so": libtk.read_bytes()}
    )
    toolkit = wheelbuilder.build_wheel(
        dest,
        "toolkit",
        "1.0",
        {"toolkit/__init__.py": b""},
        requires=['tk-rt==1.0; extra == "rt"'],
        metadata_extra="Provides-Extra: rt\n",
    )
    app = fakecuda.build_wheel(
        dest,
        "app",
        "1.0",
        {"app/__init__.py": _APP_INIT, "app/lib/libapp.so": libapp.read_bytes()},
        requires=["toolkit[rt]==1.0"],
    )
    return ExtrasWheels(app, toolkit, tk_rt)
