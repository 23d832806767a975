"""What a package loads in one site-packages: the observation ``preload = "auto"`` adds to the ELF graph.

The ELF graph cannot see a library a package opens itself at run time (JAX's plugin, TensorFlow's
``dlopen("libcudart.so.12")``).  The layout every upstream tests can: the wheels are installed into one
site-packages (:mod:`patched_wheels.loading.probe`), a probe (default ``import PKG``) runs there, and the set's
libraries its process maps are the observation.  Two facts are read from the mapped files' dynamic
symbol tables, so that a preload never makes an import crash that works in one site-packages:

* **extension modules** (a library defining ``PyInit_*``) are never preloaded: importing them is
  Python's business, and loading one early runs nothing but its hazards;
* **needs RTLD_GLOBAL**: a mapped library whose symbols another mapped library uses *without linking
  to it* -- an undefined symbol of that library which neither its own DT_NEEDED closure, its system
  libraries nor the interpreter defines, and which only this one library of the set defines (the
  package loaded it with RTLD_GLOBAL for a module that is underlinked).  Every other preloaded
  library is loaded RTLD_LOCAL: a later DT_NEEDED or ``dlopen`` by SONAME still finds it, and its
  symbols cannot take the place of another library's in what later libraries bind to.

The observation is cached persistently (kind ``observed``; key: the wheels' sha256s, the probe and
the interpreter's cache tag and platform), and is only made where every wheel's tags match this
interpreter: elsewhere the preload falls back to the static graph, with one warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import sysconfig
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Collection, Iterable, Mapping, Sequence

from packaging.tags import sys_tags

from patched_wheels.base.cache import OFF, CacheContext, is_int
from patched_wheels.base.fsutil import hash_file
from patched_wheels.base.timings import phase
from patched_wheels.elf.graph import LibraryGraph, WheelRef
from patched_wheels.elf.read import SHT_DYNSYM, SHT_NOBITS, ElfLibrary, FileReader, read_sections
from patched_wheels.elf.syslibs import ld_so_cache
from patched_wheels.errors import ElfError, warn
from patched_wheels.loading.layout import FLAT
from patched_wheels.wheelfile import WheelFilename

if TYPE_CHECKING:
    from patched_wheels.loading.probe import Installation

KIND = "observed"
"""The cache kind of observations (one of :data:`patched_wheels.base.cache.RECORDED_KINDS`)."""
_SCHEMA = 2  # 2: one site-packages is a virtual environment (observations of the PYTHONPATH run missed libraries)
# Elf_Sym fields: binding (st_info >> 4) and the section index of an undefined symbol.
_STB_GLOBAL, _STB_WEAK, _SHN_UNDEF = 1, 2, 0
_MAX_ENTRY = 16 << 20
# A run keeps an error line of at most 8 KiB (see probe.py); a longer cached one is not a row this module wrote.
_MAX_ERROR = 8 << 10
Key = tuple[str, str]
"""(wheel file name, install path): one library of the set."""


@dataclass(frozen=True)
class Observation:
    """What a probe mapped in one site-packages, and what the dynamic symbol tables say about it."""

    probe: str
    mapped: frozenset[Key]
    extensions: frozenset[Key] = frozenset()
    """Mapped Python extension modules (they define ``PyInit_*``): never preloaded."""
    needs_global: frozenset[Key] = frozenset()
    """Mapped libraries another mapped library uses without linking to them: preloaded RTLD_GLOBAL."""
    returncode: int = 0
    error_line: str | None = None

    def has(self, library: ElfLibrary, of: Collection[Key]) -> bool:
        return (library.wheel, library.path) in of


def tag_mismatch(wheels: Iterable[str]) -> str | None:
    """The first of ``wheels`` (file names) this interpreter cannot install, or None when all match."""
    supported = set(sys_tags())
    for wheel in wheels:
        if not set(WheelFilename.parse(wheel).tags) & supported:
            return wheel
    return None


def observe(
    wheels: Sequence[Path | WheelRef],
    probe: str,
    graph: LibraryGraph,
    *,
    caches: CacheContext = OFF,
    installation: Installation | None = None,
) -> Observation | None:
    """Run ``probe`` with ``wheels`` in one site-packages (or take the observation ``caches`` hold, if it names
    only libraries of ``graph``); None, with one warning, where that cannot be done here (tags of another
    interpreter, a wheel that was not fetched).  ``installation``: the wheels already installed with a flat
    layout (``doctor --run``), used instead of a new one."""
    refs = [WheelRef.of(wheel) for wheel in wheels]
    mismatch = tag_mismatch(ref.filename for ref in refs)
    if mismatch is not None:
        warn(
            f"{mismatch}: its tags do not match this interpreter, so the probe cannot run here; the preload "
            "comes from the ELF graph only (libraries the package opens itself at run time are not in it)"
        )
        return None
    digests = (
        {ref.filename: ref.sha256 or (hash_file(ref.path) if ref.path else "") for ref in refs} if caches.root else {}
    )
    entry = None
    if caches.root is not None and all(digests.values()):
        entry = f"{_key(sorted(digests.values()), probe)}.json"
        cached = caches.read(KIND, entry, max_bytes=_MAX_ENTRY)
        if cached is not None:
            observation = _from_json(cached, probe, digests, graph)
            if observation is not None:
                return _warn_if_failed(observation)
            warn(f"{caches.where(KIND, entry)}: not an observation of this wheel set; running the probe again")
            caches.refuse(KIND, entry)
    unfetched = [ref.filename for ref in refs if ref.path is None]
    if unfetched:
        warn(f"{unfetched[0]}: not fetched, so the probe cannot run; the preload comes from the ELF graph only")
        return None
    observation = _run(refs, probe, graph, installation)
    if observation is None:
        return None
    if entry is not None:
        caches.write(KIND, entry, _to_json(observation, digests))
    return _warn_if_failed(observation)


def is_observed(digests: Sequence[str], probe: str, caches: CacheContext) -> bool:
    """Whether ``caches`` hold a readable observation of ``probe`` on the wheel set of these sha256s.

    For the hub, before the set is installed for a probe: an observation found need not be made.  Its rows
    are still checked against the graph when :func:`observe` reads them.
    """
    if caches.root is None or not digests:
        return False
    return caches.read(KIND, f"{_key(sorted(digests), probe)}.json", max_bytes=_MAX_ENTRY) is not None


def _warn_if_failed(observation: Observation) -> Observation:
    """A probe that fails in one site-packages still shows what it mapped up to there; say it failed."""
    if observation.returncode != 0:
        warn(
            f"probe {observation.probe!r} exits with status {observation.returncode} in one site-packages "
            f"({observation.error_line or 'no error line'}); the preload includes what it mapped until then"
        )
    return observation


def _key(digests: Sequence[str], probe: str) -> str:
    interpreter = [sys.implementation.cache_tag, sysconfig.get_platform()]
    return hashlib.sha256(json.dumps([_SCHEMA, list(digests), probe, interpreter]).encode()).hexdigest()


def _run(
    refs: Sequence[WheelRef], probe: str, graph: LibraryGraph, installation: Installation | None
) -> Observation | None:
    """The observation of one run of ``probe``; None, with one warning, when the run ended without recording
    what it mapped (a crash: what an earlier run recorded is never taken for it)."""
    if installation is None:
        from patched_wheels.loading.probe import installed  # imported here: installing is what observing costs

        with ExitStack() as stack:
            with phase("probe: install"):
                installation = stack.enter_context(
                    installed([ref.path for ref in refs if ref.path is not None], (FLAT,))
                )
            observation = _run(refs, probe, graph, installation)
            with phase("probe: remove"):
                stack.close()
            return observation
    with phase("probe: run"):
        result = installation.run(FLAT, probe, graph)
    if result.mapped is None:
        warn(
            f"probe {probe!r} ended with status {result.returncode} in one site-packages without running its exit "
            f"hooks ({result.error_line or 'no error line'}): what it mapped cannot be known, so the preload comes "
            "from the ELF graph only"
        )
        return None
    mapped = result.mapped
    with phase("probe: symbols"):
        symbols = {library: read_symbols(installation.file(FLAT, library)) for library in mapped}
        system = _SystemSymbols()
        extensions = {
            library for library, (defined, _) in symbols.items() if any(name.startswith("PyInit_") for name in defined)
        }
        needs_global = libraries_needing_global(graph, symbols, system.defined_by, system.interpreter())
    return Observation(
        probe,
        frozenset((library.wheel, library.path) for library in mapped),
        frozenset((library.wheel, library.path) for library in extensions),
        frozenset((library.wheel, library.path) for library in needs_global),
        result.returncode,
        result.error_line,
    )


def libraries_needing_global(
    graph: LibraryGraph,
    symbols: Mapping[ElfLibrary, tuple[frozenset[str], frozenset[str]]],
    system_defined: Callable[[str], frozenset[str]],
    interpreter: frozenset[str],
) -> set[ElfLibrary]:
    """The libraries of ``symbols`` (defined, undefined names of each mapped library) that another one uses
    without linking to them: see the module docstring.  ``system_defined``: the names a system library
    (by DT_NEEDED name) defines; ``interpreter``: the names the interpreter exports."""
    providers: dict[str, list[ElfLibrary]] = {}
    for library, (defined, _) in symbols.items():
        for name in defined:
            providers.setdefault(name, []).append(library)
    needed: set[ElfLibrary] = set()
    for library, (_, undefined) in symbols.items():
        closure = graph.closure([library])
        reachable: set[str] = set(interpreter)
        for member in closure:
            reachable |= symbols.get(member, (frozenset(), frozenset()))[0]
            for name in graph.system[member]:
                reachable |= system_defined(name)
        for name in undefined - reachable:
            candidates = [provider for provider in providers.get(name, ()) if provider != library]
            if len(candidates) == 1:
                needed.add(candidates[0])
    return needed


def read_symbols(path: Path | str) -> tuple[frozenset[str], frozenset[str]]:
    """The names ``path``'s dynamic symbol table defines and those it needs (undefined, not weak); empty for
    a file the ELF reader cannot follow (the observation then only misses a reason to load it globally).

    :func:`patched_wheels.elf.read.read_sections` finds ``.dynsym`` and its string table, read where they
    lie; the entries are unpacked with :mod:`struct` (a library such as libLLVM has 46,000 symbols).
    """
    defined: set[str] = set()
    undefined: set[str] = set()
    try:
        with open(path, "rb") as file:
            reader = FileReader(file.fileno(), str(path))
            elf, sections = read_sections(reader, str(path))
            entry = struct.Struct(elf.order + ("IBBHQQ" if elf.wide else "IIIBBH"))
            for section in sections:
                if section["type"] != SHT_DYNSYM:
                    continue
                strings = _section_data(reader, sections[section["link"]])
                table = _section_data(reader, section)
                for fields in entry.iter_unpack(table[: len(table) - len(table) % entry.size]):
                    name_at, info, shndx = (
                        (fields[0], fields[1], fields[3]) if elf.wide else (fields[0], fields[3], fields[5])
                    )
                    bind = info >> 4
                    if not name_at or bind not in (_STB_GLOBAL, _STB_WEAK):
                        continue
                    name = strings[name_at : strings.find(b"\0", name_at)].decode("utf-8", "replace")
                    if shndx != _SHN_UNDEF:
                        defined.add(name)
                    elif bind == _STB_GLOBAL:
                        undefined.add(name)
    except (OSError, ElfError, ValueError, IndexError, struct.error):
        return frozenset(), frozenset()
    return frozenset(defined), frozenset(undefined)


def _section_data(reader: FileReader, section: dict[str, int]) -> bytes:
    """A section's bytes as far as the file holds them; none for SHT_NOBITS (it has none in the file)."""
    return (
        b""
        if section["type"] == SHT_NOBITS
        else reader.read(section["offset"], section["size"], "a section", exact=False)
    )


class _SystemSymbols:
    """Defined names of system libraries (found as the loader would, through ld.so.cache) and of this interpreter."""

    def __init__(self) -> None:
        self._paths: dict[str, str] | None = None
        self._defined: dict[str, frozenset[str]] = {}

    def _cache_paths(self) -> dict[str, str]:
        if self._paths is None:
            self._paths = {name: path for name, path in ld_so_cache().items() if os.path.exists(path)}
        return self._paths

    def defined_by(self, name: str) -> frozenset[str]:
        if name not in self._defined:
            path = self._cache_paths().get(name)
            self._defined[name] = read_symbols(path)[0] if path else frozenset()
        return self._defined[name]

    def interpreter(self) -> frozenset[str]:
        """What the interpreter exports to every extension module (its executable, and libpython if shared)."""
        names = set(read_symbols(sys.executable)[0])
        library = sysconfig.get_config_var("LDLIBRARY") or ""
        directory = sysconfig.get_config_var("LIBDIR") or ""
        if (
            sysconfig.get_config_var("Py_ENABLE_SHARED")
            and library
            and os.path.exists(os.path.join(directory, library))
        ):
            names |= read_symbols(os.path.join(directory, library))[0]
        return frozenset(names)


def _to_json(observation: Observation, digests: Mapping[str, str]) -> dict[str, object]:
    """Rows name wheels by sha256, so a renamed copy of the set hits."""

    def rows(keys: Iterable[Key]) -> list[list[str]]:
        return sorted([digests[wheel], path] for wheel, path in keys)

    return {
        "schema": _SCHEMA,
        "probe": observation.probe,
        "mapped": rows(observation.mapped),
        "extensions": rows(observation.extensions),
        "global": rows(observation.needs_global),
        "returncode": observation.returncode,
        "error": observation.error_line,
    }


def _from_json(value: object, probe: str, digests: Mapping[str, str], graph: LibraryGraph) -> Observation | None:
    """A cached observation, if it has the shape :func:`_to_json` writes and names only libraries of this set."""
    by_digest = {digest: wheel for wheel, digest in digests.items()}
    known = {(library.wheel, library.path) for library in graph.libraries}
    if (
        not isinstance(value, dict)
        or not is_int(value.get("schema"))
        or value["schema"] != _SCHEMA
        or value.get("probe") != probe
    ):
        return None
    returncode, error = value.get("returncode"), value.get("error")
    if not is_int(returncode) or not (error is None or isinstance(error, str) and len(error) <= _MAX_ERROR):
        return None
    sets: dict[str, frozenset[Key]] = {}
    for field in ("mapped", "extensions", "global"):
        rows = value.get(field)
        if not isinstance(rows, list):
            return None
        keys = set()
        for row in rows:
            if not (isinstance(row, list) and len(row) == 2 and all(isinstance(item, str) for item in row)):
                return None
            if row[0] not in by_digest:
                return None
            key = (by_digest[row[0]], row[1])
            if key not in known:
                return None
            keys.add(key)
        sets[field] = frozenset(keys)
    if not (sets["extensions"] | sets["global"]) <= sets["mapped"]:
        return None
    return Observation(probe, sets["mapped"], sets["extensions"], sets["global"], returncode, error)
