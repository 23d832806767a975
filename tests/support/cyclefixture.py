"""Shared libraries that need each other (a cycle), built with gcc and packaged as wheels, for tests.

The dynamic loader accepts a cycle; a preload must load it by a member whose search path finds the
others.  Both fixtures give that ``$ORIGIN`` to the member that sorts *second* by path (as auditwheel's
``pkg.libs`` may give it to some members only), so a preload in path order fails in one directory per
wheel with ``cannot open shared object file``:

* :func:`build_pillow_shape` (pillow 13): ``fakepil`` bundles ``fakepil.libs/libfreetype-f1e2.so.6``
  and ``fakepil.libs/libharfbuzz-a1b2.so.0``, which need each other; its extension module needs both.
  It sits in a lock beside a patched package that needs neither.
* :func:`build_own_cycle` (a cycle the patched package needs): ``fakecyc/_core.so`` needs
  ``libcyca.so.1`` of the ``fake-cyc-libs`` wheel (through an RPATH into that wheel, right only in one
  site-packages); ``libcyca`` and ``libcycb`` need each other, and only ``libcycb`` has ``$ORIGIN``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .fakecuda import build_wheel, compile_shared

VERSION = "1.0"
PIL_LIBRARIES = {
    "freetype": "fakepil.libs/libfreetype-f1e2.so.6",
    "harfbuzz": "fakepil.libs/libharfbuzz-a1b2.so.0",
    "imaging": "fakepil/_imaging.so",
}
PIL_ANSWER = 23  # fakepil.answer(): freetype's 3 + harfbuzz's 20
PIL_CODE = "import fakepil; print(fakepil.answer())"
CYC_LIBRARIES = {"a": "fake_cyc/lib/libcyca.so.1", "b": "fake_cyc/lib/libcycb.so.1", "core": "fakecyc/_core.so"}
CYC_ANSWER = 57  # fakecyc.answer(): libcyca's 7 + libcycb's 50
CYC_PACKAGE = "fakecyc"
CYC_CODE = "import fakecyc; print(fakecyc.answer())"

_LOADER = '''"""{package}: loads its extension module, as an extension import would."""
import ctypes
import os

_ext = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "{module}"))


def answer():
    return _ext.{function}()
'''


@dataclass(frozen=True)
class CycleWheels:
    """The wheels of a cycle fixture; ``package_wheel`` is the one to patch (or, for pillow, the bystander)."""

    package_wheel: Path
    libraries_wheel: Path | None = None

    @property
    def all(self) -> list[Path]:
        return [wheel for wheel in (self.libraries_wheel, self.package_wheel) if wheel is not None]


def _pair(
    build: Path, first: str, first_value: int, second: str, second_value: int, *, origin: bool = True
) -> tuple[bytes, bytes]:
    """``first`` and ``second`` needing each other; only ``second`` has the RUNPATH ``$ORIGIN`` (none without ``origin``).

    ``first`` defines ``<first>_value() = first_value`` and ``<first>_sum()`` (calls the other),
    ``second`` defines ``<second>_value()`` and calls ``<first>_value()``.
    """
    f, s = _stem(first), _stem(second)
    first_source = f"int {s}_value(void);\nint {f}_value(void) {{ return {first_value}; }}\nint {f}_sum(void) {{ return {f}_value() + {s}_value(); }}\n"
    second_source = f"int {f}_value(void);\nint {s}_value(void) {{ return {second_value} + 0 * {f}_value(); }}\n"
    # Linked once without its partner to make the partner linkable, then again with it.
    compile_shared(build, first, f"int {f}_value(void) {{ return {first_value}; }}\n", f"-Wl,-soname,{first}")
    search = ["-Wl,-rpath,$ORIGIN", "-Wl,--enable-new-dtags"] if origin else []
    second_bytes = compile_shared(
        build, second, second_source, f"-Wl,-soname,{second}", f"-l:{first}", *search
    ).read_bytes()
    first_bytes = compile_shared(build, first, first_source, f"-Wl,-soname,{first}", f"-l:{second}").read_bytes()
    return first_bytes, second_bytes


def _stem(name: str) -> str:
    return name.removeprefix("lib").split(".")[0].split("-")[0]


def build_pillow_shape(dest: Path) -> CycleWheels:
    """``fakepil``: two bundled libraries that need each other, and an extension module needing both."""
    build = dest / "build-pil"
    build.mkdir(parents=True, exist_ok=True)
    freetype, harfbuzz = (PIL_LIBRARIES[name].rsplit("/", 1)[1] for name in ("freetype", "harfbuzz"))
    freetype_bytes, harfbuzz_bytes = _pair(build, freetype, 3, harfbuzz, 20)
    imaging = compile_shared(
        build,
        "_imaging.so",
        "int freetype_value(void);\nint harfbuzz_value(void);\n"
        "int imaging_answer(void) { return freetype_value() + harfbuzz_value(); }\n",
        f"-l:{freetype}",
        f"-l:{harfbuzz}",
        "-Wl,-rpath,$ORIGIN/../fakepil.libs",
        "-Wl,--enable-new-dtags",
    ).read_bytes()
    files = {
        "fakepil/__init__.py": _LOADER.format(
            package="fakepil", module="_imaging.so", function="imaging_answer"
        ).encode(),
        PIL_LIBRARIES["imaging"]: imaging,
        PIL_LIBRARIES["freetype"]: freetype_bytes,
        PIL_LIBRARIES["harfbuzz"]: harfbuzz_bytes,
    }
    executable = [PIL_LIBRARIES[name] for name in ("imaging", "freetype", "harfbuzz")]
    return CycleWheels(build_wheel(dest, "fakepil", VERSION, files, executable=executable))


def build_own_cycle(dest: Path, *, origin: bool = True) -> CycleWheels:
    """``fakecyc`` (to patch) needing a cycle of the ``fake-cyc-libs`` wheel; without ``origin``, neither
    member of the cycle finds the other by itself (only ``_core.so``'s DT_RPATH does, in one site-packages)."""
    build = dest / "build-cyc"
    build.mkdir(parents=True, exist_ok=True)
    a_bytes, b_bytes = _pair(build, "libcyca.so.1", 7, "libcycb.so.1", 50, origin=origin)
    core = compile_shared(
        build,
        "_core.so",
        "int cyca_sum(void);\nint core_answer(void) { return cyca_sum(); }\n",
        # A DT_RPATH (torch's kind): the loader also searches it for libcyca's own needs, so one site-packages works.
        "-l:libcyca.so.1",
        "-Wl,-rpath,$ORIGIN/../fake_cyc/lib",
        "-Wl,--disable-new-dtags",
    ).read_bytes()
    libraries = build_wheel(
        dest,
        "fake-cyc-libs",
        VERSION,
        {"fake_cyc/__init__.py": b"", CYC_LIBRARIES["a"]: a_bytes, CYC_LIBRARIES["b"]: b_bytes},
        executable=[CYC_LIBRARIES["a"], CYC_LIBRARIES["b"]],
    )
    package = build_wheel(
        dest,
        "fakecyc",
        VERSION,
        {
            "fakecyc/__init__.py": _LOADER.format(
                package="fakecyc", module="_core.so", function="core_answer"
            ).encode(),
            CYC_LIBRARIES["core"]: core,
        },
        requires=[f"fake-cyc-libs=={VERSION}"],
        executable=[CYC_LIBRARIES["core"]],
    )
    return CycleWheels(package, libraries)
