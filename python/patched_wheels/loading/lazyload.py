"""Libraries a package loads lazily, which importing it never shows: what a preload must not load early
(Python extension modules), and what a probe that only imports the package never reached.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Collection

from patched_wheels.base.names import is_tagged_extension_module
from patched_wheels.elf.graph import LibraryGraph
from patched_wheels.elf.read import ElfLibrary
from patched_wheels.loading.packages import package_libraries
from patched_wheels.phrasing import Phrasing
from patched_wheels.wheelfile import WheelFilename
from patched_wheels.wheelfile.schemes import data_scheme

if TYPE_CHECKING:
    from patched_wheels.loading.observe import Observation

#: The probe that makes a JAX plugin load its native code (``import`` alone does not): what the warning suggests.
JAX_PROBE = "import jax; jax.devices()"


def is_extension_module(library: ElfLibrary, observed: Observation | None) -> bool:
    """A Python extension module: tagged so (``.cpython-311-x86_64-linux-gnu.so``, ``.abi3.so``), or found
    defining ``PyInit_*`` by an observation."""
    return is_tagged_extension_module(library.filename) or (
        observed is not None and observed.has(library, observed.extensions)
    )


@dataclass(frozen=True)
class Unprobed:
    """What a probe left unseen: the package's own libraries it never mapped, and the libraries of other
    wheels it never mapped that no preload loads (what the package may open once its libraries load)."""

    own: tuple[ElfLibrary, ...]
    others: tuple[ElfLibrary, ...]


def unprobed_libraries(
    graph: LibraryGraph, package: str, package_wheel: str, planned: Collection[ElfLibrary], observed: Observation
) -> Unprobed | None:
    """What the probe never reached, when it never mapped any library ``package`` ships while other wheels'
    libraries stay neither mapped nor preloaded; None otherwise (or when the probe failed: that is said already).

    Why this signal: a plugin that loads its native code lazily (JAX 0.7's CUDA plugin maps its
    ``xla_cuda_plugin.so`` and dlopens the ``nvidia-*`` libraries in ``initialize()``, which ``jax.devices()``
    calls, not ``import``) shows nothing of it to a probe that only imports it, and then runs on the CPU with
    one directory per wheel.  A package whose own libraries the probe mapped at all was exercised: what its
    lazily loaded parts need through DT_NEEDED is preloaded anyway, so it is not warned about.
    """
    own = package_libraries(graph, package, package_wheel)
    if not own or observed.returncode != 0 or any(observed.has(library, observed.mapped) for library in own):
        return None
    preloaded = set(planned)
    others = tuple(
        library
        for library in graph.libraries
        if library.wheel != package_wheel
        and library not in preloaded
        and not observed.has(library, observed.mapped)
        and not is_extension_module(library, observed)
        and not data_scheme(library.path)
    )
    return Unprobed(tuple(own), others) if others else None


def lazy_warning(
    wheel: str, package: str, probe: str, unprobed: Unprobed, phrasing: Phrasing, *, recorded_in: str = ""
) -> str:
    """The one warning line for :func:`unprobed_libraries`, naming the front end's probe option (``probe``
    attribute, ``--probe`` flag) with an example; ``recorded_in``: where a kept observation says so
    (:attr:`~patched_wheels.loading.observe.Observation.recorded_in`)."""
    projects = sorted({WheelFilename.parse(library.wheel).name for library in unprobed.others})
    if probe.split() == JAX_PROBE.split():
        # Asking for the probe it already has helps nobody: here the plugin loaded nothing (no GPU driver).
        advice = (
            f"this probe is the one that initialises a JAX plugin, and here {package} loaded none of its code (a machine "
            "without a GPU driver, where the plugin gives up): the preload holds what the ELF graph shows; run layout_test "
            "on a GPU machine to see what maps there"
        )
    else:
        advice = (
            f"if {package} loads lazily (a plugin its host initialises later), give a probe that makes it load, e.g. "
            f"{phrasing.probe(JAX_PROBE)} for a JAX plugin"
        )
    listed = ", ".join(projects[:3]) + (f" and {len(projects) - 3} more" if len(projects) > 3 else "")
    return (
        f"{wheel}: the probe {probe!r}{recorded_in} never maps {package}'s own {unprobed.own[0].path}"
        + (f" (nor its {len(unprobed.own) - 1} other libraries)" if len(unprobed.own) > 1 else "")
        + f", so what it opens once loaded is not seen: {len(unprobed.others)} "
        + ("library" if len(unprobed.others) == 1 else "libraries")
        + f" of {listed} stay neither mapped nor preloaded; {advice}"
    )
