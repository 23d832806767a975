"""The CUDA stacks the compatibility check measures (compat_stacks.py) and whose one stanza its Bazel stage
(compat_bazel.py) and bench_e2e.py's JAX workspaces write: a module of its own, so each of those imports the
definitions without importing the others."""

from __future__ import annotations

from dataclasses import dataclass

# An ONNX model of one Identity node (float input "x" -> output "y"), opset 13, as protobuf bytes:
# onnxruntime ships no model builder and the `onnx` package is not part of its wheel set.
_ONNX_IDENTITY = (
    "def _f(n, b): return bytes([n << 3 | 2, len(b)]) + b\n"
    "_t = _f(2, _f(1, bytes([8, 1])))\n"  # TypeProto.tensor_type { elem_type: FLOAT }
    "_g = _f(1, _f(1, b'x') + _f(2, b'y') + _f(4, b'Identity')) + _f(2, b'g')"
    " + _f(11, _f(1, b'x') + _t) + _f(12, _f(1, b'y') + _t)\n"
    "_model = bytes([8, 8]) + _f(7, _g) + _f(8, bytes([16, 13]))\n"  # ir_version 8, graph, opset 13
)


@dataclass(frozen=True)
class Stack:
    name: str
    requirements: tuple[str, ...]
    package: str
    """The package as a user names it (``--preload-for``, ``doctor --package``)."""
    project: str
    """The project whose wheel gets the preload."""
    probe: str
    """Code that makes the stack load its CUDA libraries (they fail later, at the missing driver)."""
    companions: tuple[str, ...] = ()
    """A real lock's other wheels (``--stacks NAME-lock``): requirements resolved with the stack where they can be."""
    companion_probe: str = ""
    """Code that loads the companions' own libraries: measured in every layout, never given to ``patch``."""
    python: str = "3.11"
    """The CPython the stack is resolved for and run by (``--lock`` only: a release that needs a newer one, such as
    jax 0.11 and later, which need 3.12; its interpreter is pyenv's, compat_bazel.interpreter)."""

    @property
    def measured_probe(self) -> str:
        """What the layouts are compared on: the stack's probe, then its companions' (the patch gets only the first)."""
        return self.probe + ("\n" + self.companion_probe if self.companion_probe else "")


STACKS = {
    stack.name: stack
    for stack in (
        Stack("torch-2.1.0", ("torch==2.1.0",), "torch", "torch", "import torch"),
        Stack("torch-2.5.1", ("torch==2.5.1",), "torch", "torch", "import torch; torch.cuda.is_available()"),
        Stack(
            "jax-0.6.2",
            ("jax[cuda12]==0.6.2",),
            "jax_plugins.xla_cuda12",
            "jax-cuda12-pjrt",
            "import jax; print(jax.devices())",
        ),
        Stack(
            "tensorflow-2.19.1",
            ("tensorflow[and-cuda]==2.19.1",),
            "tensorflow",
            "tensorflow",
            "import tensorflow as tf; print(tf.config.list_physical_devices())",
        ),
        Stack(
            "cupy-14.2.0",
            ("cupy-cuda12x[ctk]==14.2.0",),
            "cupy",
            "cupy-cuda12x",
            # cupy.cuda's attributes (not `import cupy.cuda.cufft`) first load the library with cuda-pathfinder.
            "import cupy\nfor name in ('cufft', 'curand', 'cublas', 'cusolver', 'cusparse'): getattr(cupy.cuda, name)",
        ),
        Stack(
            "onnxruntime-1.31.1",
            ("onnxruntime-gpu[cuda,cudnn]==1.31.1",),
            "onnxruntime",
            "onnxruntime-gpu",
            # preload_dlls() first, as onnxruntime's install docs give for the nvidia wheels: the CUDA provider has
            # no RUNPATH to them and needs libcuda.so.1 (the driver), so without a GPU its dlopen fails and unmaps
            # all it loaded: the session alone maps no nvidia library even in one venv (issue 48: 7 of the set's
            # libraries against preload_dlls()'s 14).
            _ONNX_IDENTITY + "import onnxruntime as ort\nort.preload_dlls()\n"
            "ort.InferenceSession(_model, providers=['CUDAExecutionProvider', 'CPUExecutionProvider'])\n",
        ),
    )
}

# Common companions of a real lock (issue 30): pillow 13 bundles libfreetype and libharfbuzz, which need
# each other (a library cycle); opencv, scipy and pyarrow bring their own bundled libraries.
COMPANIONS = ("pillow>=13", "opencv-python-headless", "scipy", "pyarrow")
# Loads each companion's compiled libraries: pillow's freetype module maps the cycle's two libraries.
COMPANION_PROBE = "from PIL import _imagingft\nimport cv2, scipy.linalg, pyarrow"
_LOCKS = (
    Stack(
        "torch-2.8.0-lock",
        ("torch==2.8.0",),
        "torch",
        "torch",
        "import torch; torch.cuda.is_available()",
        ("torchvision==0.23.0", *COMPANIONS),
        "import torchvision, torchvision.io\n" + COMPANION_PROBE,
    ),
    Stack(
        "tensorflow-2.20.0-lock",
        ("tensorflow[and-cuda]==2.20.0",),
        "tensorflow",
        "tensorflow",
        "import tensorflow as tf; tf.config.list_physical_devices()",
        COMPANIONS,
        COMPANION_PROBE,
    ),
    Stack(
        "jax-0.7.2-lock",
        ("jax[cuda12]==0.7.2",),
        "jax_plugins.xla_cuda12",
        "jax-cuda12-pjrt",
        "import jax; jax.devices()",
        COMPANIONS,
        COMPANION_PROBE,
    ),
)
# The newest releases (issue 40), as a new user locks them: torch reaches its CUDA libraries through
# cuda-toolkit[...] extras, JAX through jax-cuda13-plugin[with-cuda], TensorFlow through its and-cuda extra.
_NEWEST = (
    Stack(
        "torch-2.15.0-lock",
        ("torch==2.15.0",),
        "torch",
        "torch",
        "import torch; torch.cuda.is_available()",
        ("torchvision==0.29.2", "pillow>=13"),
        "import torchvision, torchvision.io\nfrom PIL import _imagingft",
    ),
    Stack(
        "jax-0.10.2-cuda13",
        ("jax[cuda13]==0.10.2",),
        "jax_plugins.xla_cuda13",
        "jax-cuda13-pjrt",
        "import jax; jax.devices()",
    ),
    Stack(
        "tensorflow-2.21.0",
        ("tensorflow[and-cuda]==2.21.0",),
        "tensorflow",
        "tensorflow",
        "import tensorflow as tf; tf.config.list_physical_devices()",
    ),
    # jax 0.11 and later publish wheels for CPython 3.12 and later only (issue 48's newest releases).
    Stack(
        "jax-0.12.0.1-cuda13",
        ("jax[cuda13]==0.12.0.1",),
        "jax_plugins.xla_cuda13",
        "jax-cuda13-pjrt",
        "import jax; jax.devices()",
        python="3.12",
    ),
    Stack(
        "jax-0.12.0.1-cuda12",
        ("jax[cuda12]==0.12.0.1",),
        "jax_plugins.xla_cuda12",
        "jax-cuda12-pjrt",
        "import jax; jax.devices()",
        python="3.12",
    ),
)
STACKS.update((stack.name, stack) for stack in (*_LOCKS, *_NEWEST))
