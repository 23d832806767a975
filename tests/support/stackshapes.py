"""Miniatures of the CUDA stacks of issue 17, built from real ELF files (gcc), for tests.

Each builder returns a :class:`Stack`: its wheels, the package and the code whose output tells
whether the stack really works (``code``, printing :attr:`Stack.expected` when it does).  Every
stack works in one site-packages; what happens with one directory per wheel is the point:

* :func:`build_plugin_stack` (JAX's CUDA plugin): ``fakeplugins/xla_fake`` lives in a namespace
  package without ``__init__.py``; at import it finds the ``sys.path`` entry holding ``fakeplugins``
  and dlopens ``fake_cu/lib/libcu.so.1`` from that same entry (falling back to the SONAME), which
  needs ``libcudep.so.1`` from a third wheel.  Per wheel it only *logs* ``Unable to load CUDA``
  and runs on the "cpu": exit status 0, nothing of the set mapped.
* :func:`build_symbol_stack` (what RTLD_GLOBAL breaks, and what needs it): ``fakedup`` ships
  ``libuser.so``, linked to ``libdupb.so.1`` (``shared_value() = 2``); its Python code also opens
  ``libdupa.so.1`` (another wheel, defining ``shared_value() = 1`` too) by a path it computes from
  ``sys.path``, locally.  Loading ``libdupa`` with RTLD_GLOBAL before ``libuser`` changes what
  ``libuser`` binds to (the answer becomes wrong).  And ``fakedup/_glue.so`` uses ``glue_value``
  without linking to its provider ``libglue.so.1`` (another wheel), which the package loads with
  RTLD_GLOBAL when it finds it: a preload must load ``libglue`` globally, or ``_glue.so`` fails.
* :func:`build_provider_stack` (onnxruntime's providers): ``fakeort`` loads its CUDA provider
  (needs ``libcublasx.so.1`` of another wheel) and then an optional TensorRT provider needing
  ``libfakenvinfer.so.10``, which no wheel ships: that one fails in every layout, and is logged.
* :func:`build_framework_stack` (TensorFlow): ``faketf`` ships its own ``libfaketf_fw.so.2`` (which
  dlopens ``libcudartx.so.12`` of another wheel through its RUNPATH) and imports ``fakegrpc``, a
  real Python extension module of an unrelated wheel.  Both define ``helper_value``: the package's
  own library or the extension loaded with RTLD_GLOBAL first makes the extension answer wrong.
* :func:`build_split_plugin_stack` (JAX 0.7): the plugin module ``jaxlike_plugins/xla_fake`` is shipped by
  ``jaxlike-cuda-pjrt`` (an ``entry_points.txt`` entry), not by ``jaxlike-cuda-plugin``, the project users
  name, whose ``jaxlike_cuda_plugin/`` is a namespace of libraries without ``__init__.py``.  Importing the
  plugin loads nothing: its host ``jaxlike.devices()`` initialises it, which maps its own library and opens
  ``libcudartz.so.12`` of a third wheel (found beside the namespace, else by SONAME): per wheel, silently "cpu".
* The self-preloading package (torch >= 2.5) is ``fakecuda.build_fake_cuda_wheels(broken_order=False)``,
  the data-scheme library (CyFES) ``rpathfixture.build_rpath_wheel``.
"""

from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from .fakecuda import build_wheel, compile_shared

VERSION = "1.0"


@dataclass(frozen=True)
class Stack:
    """The wheels of one stack, the package to patch, and the check that it works."""

    wheels: tuple[Path, ...]
    package: str
    """As a user writes it (dotted for a subpackage)."""
    package_wheel: Path
    code: str
    expected: str
    libraries: Mapping[str, str]
    """Short name -> install path of each library of the set."""


# A helper for package code: the file at ``relative`` under the sys.path entry that also holds ``anchor``.
_FIND = """
def _beside(anchor, relative):
    for entry in sys.path:
        if os.path.isdir(os.path.join(entry or os.curdir, anchor)):
            candidate = os.path.join(entry or os.curdir, *relative.split("/"))
            return candidate if os.path.isfile(candidate) else None
    return None
"""


def _shared(build: Path, name: str, source: str, *flags: str, soname: bool = True) -> bytes:
    options = [f"-Wl,-soname,{name}"] if soname else []
    return compile_shared(build, name, source, *options, *flags).read_bytes()


def _runpath(*entries: str) -> tuple[str, str]:
    return (f"-Wl,-rpath,{':'.join(entries)}", "-Wl,--enable-new-dtags")


def _wheel(dest: Path, name: str, files: Mapping[str, bytes], *, requires: Sequence[str] = ()) -> Path:
    libraries = [path for path in files if ".so" in path]
    return build_wheel(dest, name, VERSION, files, requires=requires, executable=libraries)


PLUGIN_LIBRARIES = {"cu": "fake_cu/lib/libcu.so.1", "cudep": "fake_cudep/lib/libcudep.so.1"}
PLUGIN_ANSWER = 12  # xla_fake.answer() when libcu.so.1 loaded, 0 on the "cpu"
_PLUGIN_INIT = (
    '''"""xla_fake: a CUDA plugin that finds its libraries the way JAX's does, else runs on the CPU."""
import ctypes
import logging
import os
import sys
'''
    + _FIND
    + """

def _load():
    path = _beside("fakeplugins", "fake_cu/lib/libcu.so.1")
    return ctypes.CDLL(path or "libcu.so.1")


try:
    _cu = _load()
except OSError as error:
    logging.getLogger("fakeplugins").error("Unable to load CUDA. Is it installed? (OSError: %s)", error)
    _cu = None


def answer():
    return _cu.cu_value() if _cu is not None else 0


def backend():
    return "gpu:%d" % answer() if _cu is not None else "cpu"
"""
)


def build_plugin_stack(dest: Path) -> Stack:
    """JAX's shape: a plugin in a namespace package that loads other wheels' libraries by a computed path."""
    build = dest / "build-plugin"
    build.mkdir(parents=True, exist_ok=True)
    cudep = _shared(build, "libcudep.so.1", "int cudep_value(void) { return 6; }\n")
    cu = _shared(
        build,
        "libcu.so.1",
        "int cudep_value(void);\nint cu_value(void) { return cudep_value() * 2; }\n",
        "-l:libcudep.so.1",
        *_runpath("$ORIGIN/../../fake_cudep/lib"),
    )
    wheels = (
        _wheel(dest, "fake-cudep", {"fake_cudep/__init__.py": b"", PLUGIN_LIBRARIES["cudep"]: cudep}),
        _wheel(dest, "fake-cu", {"fake_cu/__init__.py": b"", PLUGIN_LIBRARIES["cu"]: cu}),
        plugin := _wheel(
            dest,
            "fakeplug-cuda",
            {"fakeplugins/xla_fake/__init__.py": _PLUGIN_INIT.encode()},
            requires=["fake-cu", "fake-cudep"],
        ),
    )
    code = "import fakeplugins.xla_fake as plugin; print(plugin.backend())"
    return Stack(wheels, "fakeplugins.xla_fake", plugin, code, "gpu:12", PLUGIN_LIBRARIES)


SYMBOL_LIBRARIES = {
    "dupa": "fake_dupa/lib/libdupa.so.1",
    "dupb": "fake_dupb/lib/libdupb.so.1",
    "glue": "fake_glue/lib/libglue.so.1",
    "user": "fakedup/libuser.so",
    "glue_ext": "fakedup/_glue.so",
}
_SYMBOL_INIT = (
    '''"""fakedup: one library it links, one it opens locally, one it opens globally for an underlinked module."""
import ctypes
import os
import sys
'''
    + _FIND
    + """
_HERE = os.path.dirname(os.path.abspath(__file__))
_dupa = ctypes.CDLL(_beside("fakedup", "fake_dupa/lib/libdupa.so.1") or "libdupa.so.1")
_glue_provider = _beside("fakedup", "fake_glue/lib/libglue.so.1")
if _glue_provider:
    ctypes.CDLL(_glue_provider, mode=ctypes.RTLD_GLOBAL)
_user = ctypes.CDLL(os.path.join(_HERE, "libuser.so"))
_glue = ctypes.CDLL(os.path.join(_HERE, "_glue.so"))


def answer():
    return _user.user_value() * 100 + _dupa.dupa_value() * 10 + _glue.glue_answer()
"""
)


def build_symbol_stack(dest: Path) -> Stack:
    """Two libraries defining ``shared_value`` and an underlinked module: see the module docstring."""
    build = dest / "build-symbol"
    build.mkdir(parents=True, exist_ok=True)
    dupa = _shared(build, "libdupa.so.1", "int shared_value(void) { return 1; }\nint dupa_value(void) { return 5; }\n")
    dupb = _shared(build, "libdupb.so.1", "int shared_value(void) { return 2; }\n")
    glue = _shared(build, "libglue.so.1", "int glue_value(void) { return 3; }\n")
    user = _shared(
        build,
        "libuser.so",
        "int shared_value(void);\nint user_value(void) { return shared_value(); }\n",
        "-l:libdupb.so.1",
        *_runpath("$ORIGIN/../fake_dupb/lib"),
        soname=False,
    )
    glue_ext = _shared(
        build, "_glue.so", "int glue_value(void);\nint glue_answer(void) { return glue_value() + 1; }\n", soname=False
    )
    wheels = (
        _wheel(dest, "fake-dupa", {"fake_dupa/__init__.py": b"", SYMBOL_LIBRARIES["dupa"]: dupa}),
        _wheel(dest, "fake-dupb", {"fake_dupb/__init__.py": b"", SYMBOL_LIBRARIES["dupb"]: dupb}),
        _wheel(dest, "fake-glue", {"fake_glue/__init__.py": b"", SYMBOL_LIBRARIES["glue"]: glue}),
        package := _wheel(
            dest,
            "fakedup",
            {
                "fakedup/__init__.py": _SYMBOL_INIT.encode(),
                SYMBOL_LIBRARIES["user"]: user,
                SYMBOL_LIBRARIES["glue_ext"]: glue_ext,
            },
            requires=["fake-dupa", "fake-dupb", "fake-glue"],
        ),
    )
    return Stack(wheels, "fakedup", package, "import fakedup; print(fakedup.answer())", "254", SYMBOL_LIBRARIES)


PROVIDER_LIBRARIES = {
    "cublasx": "fake_cublasx/lib/libcublasx.so.1",
    "cuda": "fakeort/capi/libprov_cuda.so",
    "trt": "fakeort/capi/libprov_trt.so",
}
MISSING_PROVIDER_LIBRARY = "libfakenvinfer.so.10"
_PROVIDER_INIT = '''"""fakeort: loads its CUDA provider, then tries its TensorRT provider and logs why it fails."""
import ctypes
import os
import sys

_HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "capi")
_cuda = ctypes.CDLL(os.path.join(_HERE, "libprov_cuda.so"))
try:
    ctypes.CDLL(os.path.join(_HERE, "libprov_trt.so"))
except OSError as error:
    sys.stderr.write("EP Error: OSError: %s when using [TensorrtExecutionProvider]\\n" % error)


def answer():
    return _cuda.provider_value()
'''


def build_provider_stack(dest: Path) -> Stack:
    """onnxruntime's shape: an optional provider needs a library that no wheel ships (see the module docstring)."""
    build = dest / "build-provider"
    build.mkdir(parents=True, exist_ok=True)
    _shared(build, MISSING_PROVIDER_LIBRARY, "int nvinfer_value(void) { return 1; }\n")
    cublasx = _shared(build, "libcublasx.so.1", "int cublasx_value(void) { return 30; }\n")
    cuda = _shared(
        build,
        "libprov_cuda.so",
        "int cublasx_value(void);\nint provider_value(void) { return cublasx_value() + 1; }\n",
        "-l:libcublasx.so.1",
        *_runpath("$ORIGIN/../../fake_cublasx/lib"),
        soname=False,
    )
    trt = _shared(
        build,
        "libprov_trt.so",
        "int nvinfer_value(void);\nint trt_value(void) { return nvinfer_value(); }\n",
        f"-l:{MISSING_PROVIDER_LIBRARY}",
        soname=False,
    )
    wheels = (
        _wheel(dest, "fake-cublasx", {"fake_cublasx/__init__.py": b"", PROVIDER_LIBRARIES["cublasx"]: cublasx}),
        package := _wheel(
            dest,
            "fakeort",
            {
                "fakeort/__init__.py": _PROVIDER_INIT.encode(),
                PROVIDER_LIBRARIES["cuda"]: cuda,
                PROVIDER_LIBRARIES["trt"]: trt,
            },
            requires=["fake-cublasx"],
        ),
    )
    return Stack(wheels, "fakeort", package, "import fakeort; print(fakeort.answer())", "31", PROVIDER_LIBRARIES)


EXTENSION_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
FRAMEWORK_LIBRARIES = {
    "cudartx": "fake_cudart/lib/libcudartx.so.12",
    "framework": "faketf/libfaketf_fw.so.2",
    "extension": f"fakegrpc/_cygrpc{EXTENSION_SUFFIX}",
}
_EXTENSION_SOURCE = """#include <Python.h>
int helper_value(void) { return 7; }
static PyObject *value(PyObject *self, PyObject *args) { return PyLong_FromLong(helper_value()); }
static PyMethodDef methods[] = {{"value", value, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cygrpc", NULL, -1, methods};
PyMODINIT_FUNC PyInit__cygrpc(void) { return PyModule_Create(&module); }
"""
_FRAMEWORK_SOURCE = """#include <dlfcn.h>
int helper_value(void) { return 99; }
int fw_cuda(void) {
    void *handle = dlopen("libcudartx.so.12", RTLD_NOW);
    if (!handle) return -1;
    int (*version)(void) = (int (*)(void))dlsym(handle, "cudart_version");
    return version ? version() : -1;
}
"""
_FRAMEWORK_INIT = '''"""faketf: its own framework library finds the CUDA runtime through its RUNPATH, else runs on the CPU."""
import ctypes
import os
import sys

import fakegrpc._cygrpc

_fw = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "libfaketf_fw.so.2"))
if _fw.fw_cuda() < 0:
    sys.stderr.write("W tensorflow: Could not find cuda drivers on your machine, GPU will not be used.\\n")


def answer():
    return "%d:%d" % (_fw.fw_cuda(), fakegrpc._cygrpc.value())
'''


def build_framework_stack(dest: Path) -> Stack:
    """TensorFlow's shape: its own library, an unrelated extension module and a runtime-opened library."""
    build = dest / "build-framework"
    build.mkdir(parents=True, exist_ok=True)
    cudartx = _shared(build, "libcudartx.so.12", "int cudart_version(void) { return 12; }\n")
    framework = _shared(build, "libfaketf_fw.so.2", _FRAMEWORK_SOURCE, "-ldl", *_runpath("$ORIGIN/../fake_cudart/lib"))
    extension = _shared(
        build, f"_cygrpc{EXTENSION_SUFFIX}", _EXTENSION_SOURCE, f"-I{sysconfig.get_paths()['include']}", soname=False
    )
    wheels = (
        _wheel(dest, "fake-cudart", {"fake_cudart/__init__.py": b"", FRAMEWORK_LIBRARIES["cudartx"]: cudartx}),
        _wheel(dest, "fakegrpc", {"fakegrpc/__init__.py": b"", FRAMEWORK_LIBRARIES["extension"]: extension}),
        package := _wheel(
            dest,
            "faketf",
            {"faketf/__init__.py": _FRAMEWORK_INIT.encode(), FRAMEWORK_LIBRARIES["framework"]: framework},
            requires=["fake-cudart", "fakegrpc"],
        ),
    )
    return Stack(wheels, "faketf", package, "import faketf; print(faketf.answer())", "12:7", FRAMEWORK_LIBRARIES)


PATHFINDER_LIBRARY = "fake_cufft/lib/libcufftx.so.1"
_PATHFINDER_INIT = '''"""fakecupy: finds its library as cuda-pathfinder does, under site.getsitepackages(), else by SONAME."""
import ctypes
import os
import site

_path = next(
    (os.path.join(d, "fake_cufft", "lib", "libcufftx.so.1") for d in site.getsitepackages()
     if os.path.isfile(os.path.join(d, "fake_cufft", "lib", "libcufftx.so.1"))),
    None,
)
try:
    _fft = ctypes.CDLL(_path or "libcufftx.so.1")  # by SONAME: found when a preload loaded it already
except OSError:
    _fft = None


def answer():
    return _fft.fft_value() if _fft is not None else 0
'''


def build_pathfinder_stack(dest: Path) -> Stack:
    """CuPy's shape: the package finds another wheel's library under ``site.getsitepackages()`` (which
    names a virtual environment's site-packages, never a ``PYTHONPATH`` entry), else by SONAME."""
    build = dest / "build-pathfinder"
    build.mkdir(parents=True, exist_ok=True)
    fft = _shared(build, "libcufftx.so.1", "int fft_value(void) { return 42; }\n")
    wheels = (
        _wheel(dest, "fake-cufft", {"fake_cufft/__init__.py": b"", PATHFINDER_LIBRARY: fft}),
        package := _wheel(
            dest, "fakecupy", {"fakecupy/__init__.py": _PATHFINDER_INIT.encode()}, requires=["fake-cufft"]
        ),
    )
    return Stack(
        wheels, "fakecupy", package, "import fakecupy; print(fakecupy.answer())", "42", {"fft": PATHFINDER_LIBRARY}
    )


SPLIT_PLUGIN_LIBRARIES = {
    "cudart": "fake_cudart/lib/libcudartz.so.12",
    "pjrt": "jaxlike_plugins/xla_fake/xla_fake_plugin.so",
    "kernels": "jaxlike_cuda_plugin/_kernels.so",
}
SPLIT_PLUGIN_PROBE = "import jaxlike; jaxlike.devices()"
_HOST_INIT = '''"""jaxlike: a host that finds its plugins by entry point (group jaxlike_plugins) and initialises them lazily."""
from importlib.metadata import entry_points


def devices():
    found = []
    points = entry_points()
    # Python 3.10 selects by keyword and counts a distribution once; 3.9 returns a dict of groups, with a
    # distribution found on two sys.path entries listed twice.
    points = points.select(group="jaxlike_plugins") if hasattr(points, "select") else points.get("jaxlike_plugins", ())
    for point in {point.name: point for point in points}.values():
        found.append(point.load().initialize())
    return found or ["cpu"]
'''
_PJRT_INIT = (
    '''"""xla_fake: JAX 0.7's PJRT plugin: importing it loads nothing; initialize() maps its own library and
dlopens the CUDA runtime of another wheel beside its namespace (by SONAME when it is not there), else "cpu"."""
import ctypes
import importlib
import logging
import os
import sys
'''
    + _FIND
    + """

def initialize():
    try:
        importlib.import_module("jaxlike_cuda_plugin")  # the kernels' namespace package, as JAX imports it
        ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "xla_fake_plugin.so"))
        cudart = ctypes.CDLL(_beside("jaxlike_plugins", "fake_cudart/lib/libcudartz.so.12") or "libcudartz.so.12")
    except OSError as error:
        logging.getLogger("jaxlike").error("Unable to load CUDA. Is it installed? (OSError: %s)", error)
        return "cpu"
    return "gpu:%d" % cudart.cudart_value()
"""
)


def build_split_plugin_stack(dest: Path) -> Stack:
    """JAX 0.7's shape: ``jaxlike-cuda-plugin`` (the project users name) ships only ``jaxlike_cuda_plugin/``, a
    namespace package of libraries without ``__init__.py``; the plugin module ``jaxlike_plugins/xla_fake``
    (inside the namespace package ``jaxlike_plugins``) comes from ``jaxlike-cuda-pjrt``, which declares it as
    the entry point ``jaxlike_plugins:xla_fake``.  The host ``jaxlike`` loads and initialises it in
    ``devices()``: only then are the plugin's own library and the CUDA runtime (another wheel) mapped."""
    build = dest / "build-split-plugin"
    build.mkdir(parents=True, exist_ok=True)
    entry_points = b"[jaxlike_plugins]\nxla_fake = jaxlike_plugins.xla_fake\n"
    wheels = (
        _wheel(dest, "jaxlike", {"jaxlike/__init__.py": _HOST_INIT.encode()}),
        _wheel(
            dest,
            "fake-cudart",
            {
                SPLIT_PLUGIN_LIBRARIES["cudart"]: _shared(
                    build, "libcudartz.so.12", "int cudart_value(void) { return 12; }\n"
                )
            },
        ),
        pjrt := _wheel(
            dest,
            "jaxlike-cuda-pjrt",
            {
                "jaxlike_plugins/xla_fake/__init__.py": _PJRT_INIT.encode(),
                SPLIT_PLUGIN_LIBRARIES["pjrt"]: _shared(
                    build, "xla_fake_plugin.so", "int plugin_value(void) { return 1; }\n", soname=False
                ),
                ".dist-info/entry_points.txt": entry_points,
            },
        ),
        _wheel(
            dest,
            "jaxlike-cuda-plugin",
            {
                SPLIT_PLUGIN_LIBRARIES["kernels"]: _shared(
                    build, "_kernels.so", "int kernels_value(void) { return 3; }\n", soname=False
                )
            },
            requires=["jaxlike-cuda-pjrt==1.0", 'fake-cudart; extra == "with-cuda"'],
        ),
    )
    code = f"{SPLIT_PLUGIN_PROBE.replace('jaxlike.devices()', 'print(jaxlike.devices())')}"
    return Stack(wheels, "jaxlike_plugins.xla_fake", pjrt, code, "['gpu:12']", SPLIT_PLUGIN_LIBRARIES)
