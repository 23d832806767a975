"""How each front end names what its user wrote, beside the errors (:mod:`patched_wheels.errors`) whose messages
it phrases: one placement check (:func:`patched_wheels.loading.packages.locate_package`) serves the hub, which
names ``patched_wheel`` attributes, and ``patched-wheels patch``, which names its flags, each error saying what to
write instead in the words its user wrote."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Phrasing:
    """How one front end names what its user wrote, so that a placement error says what to write instead:
    the hub names ``patched_wheel`` attributes, ``patch`` its flags (see :func:`~patched_wheels.loading.packages.locate_package`)."""

    option: str
    """The option naming the package, as written: ``preload_package = "jax_plugins.xla_cuda12"``, ``--preload-for X``."""
    wheel: Callable[[str], str]
    """A wheel (by file name) as the user names it: its project (Bazel), the file (CLI)."""
    write: Callable[[str, str], str]
    """What to write instead: the wheel (by file name) to patch, and the package to give it."""
    probe: Callable[[str], str]
    """The probe option with this code: ``probe = "CODE"`` (Bazel), ``--probe 'CODE'`` (CLI)."""

    @classmethod
    def plain(cls, package: str) -> Phrasing:
        """For a caller with no options of its own (a script calling the library): arguments by their names."""
        return cls(
            option=f"package {package!r}",
            wheel=lambda filename: filename,
            write=lambda filename, module: f"package = {module!r} with {filename} as the wheel to patch",
            probe=lambda code: f"probe = {code!r}",
        )
