"""Dynamic symbol tables: the names a library defines and those it needs, read by the one ELF reader.

An observation (:mod:`patched_wheels.loading.observe`) derives two facts from the mapped libraries' tables (which
are extension modules, which need ``RTLD_GLOBAL``), and a kept observation is checked by deriving them again from
the wheels.  A table is found through the section headers, near the file's end, and ``.dynsym`` lies near its
start (``.dynstr`` too, or after ``.dynamic`` where patchelf moved it, as in torch's libraries): read alone from a
member, that is a pass over the whole member and a second one up to the table.  The library graph streams every
member whole already, for its dynamic section (:mod:`~patched_wheels.elf.read`), so :func:`read_library_and_symbols`
keeps the section headers (and the dynamic string table) as that pass goes by them, and the second pass goes only as
far as the table: the graph of a set whose kept observation is checked holds the tables
(:attr:`~patched_wheels.elf.graph.LibraryGraph.symbols`), and the check inflates nothing again.
"""

from __future__ import annotations

import struct
import threading
from pathlib import Path
from typing import NamedTuple

from patched_wheels.elf.read import (
    SHT_DYNSYM,
    SHT_NOBITS,
    ByteSource,
    ElfFormat,
    ElfLibrary,
    FileReader,
    ForwardReader,
    library_of,
    member_reader,
    read_sections,
)
from patched_wheels.errors import PatchedWheelsError
from patched_wheels.wheelfile import ZipMember

__all__ = ["NO_SYMBOLS", "NameBudget", "SymbolTable", "read_library_and_symbols", "read_member_symbols", "read_symbols"]

# Elf_Sym fields: binding (st_info >> 4) and the section index of an undefined symbol.
_STB_GLOBAL, _STB_WEAK, _SHN_UNDEF = 1, 2, 0
# What reading a symbol table can raise on a file that is no library the reader follows (or a member that does
# not inflate): the library then has no symbols (see read_symbols).
_UNREADABLE = (OSError, PatchedWheelsError, ValueError, IndexError, OverflowError, struct.error)
# The largest symbol table read: bigger ones are read as none (a section header can claim any size, and the graph
# holds every library's table).  libtorch_cpu.so has 90,000 symbols and torch's largest string table is 10 MB.
_MAX_SYMBOLS = 1 << 20
_MAX_SYMBOL_NAMES = 64 << 20
"""Bytes of its string table, and of the names taken from it (a name is where its NUL ends it: many offsets into
one long name would otherwise hold that name's tail once each)."""
_MAX_SET_SYMBOL_NAMES = 256 << 20
"""Bytes of names the tables of one wheel set may hold in all (:class:`NameBudget`): torch 2.1.0's 43 libraries hold
25 MB; each library within the bounds above, a lock of many would otherwise add up to any size."""


class NameBudget:
    """The bytes of symbol names the tables read for one wheel set may hold in all, shared by the threads reading
    them.  Once a table does not fit, :attr:`spent` is true and no later one is taken: whoever holds the tables then
    drops them all, so which table came first (the threads' order) decides nothing."""

    def __init__(self) -> None:
        self._left = _MAX_SET_SYMBOL_NAMES
        self._lock = threading.Lock()
        self.spent = False

    def take(self, size: int) -> bool:
        """Whether a table holding ``size`` bytes of names fits what is left (then it is taken from it)."""
        with self._lock:
            if self.spent or size > self._left:
                self.spent = True
                return False
            self._left -= size
            return True


class SymbolTable(NamedTuple):
    """A library's dynamic symbol table, as names."""

    defined: frozenset[str]
    undefined: frozenset[str]
    """Needed from elsewhere: undefined and not weak."""


NO_SYMBOLS = SymbolTable(frozenset(), frozenset())
"""The table of a file the reader cannot follow: an observation then only misses a reason to load it globally."""


def read_symbols(path: Path | str, budget: NameBudget | None = None) -> SymbolTable:
    """The dynamic symbol table of the file ``path``; :data:`NO_SYMBOLS` for a file the ELF reader cannot follow, or
    one ``budget`` has no room for.

    :func:`patched_wheels.elf.read.read_sections` finds ``.dynsym`` and its string table, read where they
    lie; the entries are unpacked with :mod:`struct` (a library such as libLLVM has 46,000 symbols).
    """
    try:
        with open(path, "rb") as file:
            reader = FileReader(file.fileno(), str(path))
            return _symbols(reader, *read_sections(reader, str(path)), budget)
    except _UNREADABLE:
        return NO_SYMBOLS


def read_member_symbols(wheel: Path, info: ZipMember, path: str, budget: NameBudget | None = None) -> SymbolTable:
    """:func:`read_symbols` of the member ``info`` of ``wheel``, installed at ``path``, streamed: inflated once to
    its section headers, at its end, then again as far as its symbol table."""
    reader = member_reader(wheel, info, path)
    try:
        return _symbols(reader, *read_sections(reader, f"{wheel.name}: {path}"), budget)
    except _UNREADABLE:
        return NO_SYMBOLS


def read_library_and_symbols(
    wheel: Path, info: ZipMember, path: str, *, installed: Path | None = None, budget: NameBudget | None = None
) -> tuple[ElfLibrary | None, SymbolTable | None]:
    """:func:`~patched_wheels.elf.read.read_library` (or, from its ``installed`` copy,
    :func:`~patched_wheels.elf.read.read_installed_library`) and the library's symbol table, its section headers
    read in the pass that reads the dynamic section: one pass over the member, then one up to the table.  The table
    is None where that cannot be done (see :func:`~patched_wheels.elf.read.library_of`): whoever needs it then
    reads it alone, with :func:`read_member_symbols`.  What the library is does not depend on it.  ``budget``: the
    set's (:class:`NameBudget`)."""
    if installed is None:
        return _with_symbols(member_reader(wheel, info, path), wheel.name, path, budget)
    with open(installed, "rb") as opened:
        return _with_symbols(FileReader(opened.fileno(), f"{wheel.name}: {path}"), wheel.name, path, budget)


def _with_symbols(
    reader: ForwardReader | FileReader, wheel: str, path: str, budget: NameBudget | None
) -> tuple[ElfLibrary | None, SymbolTable | None]:
    library, sections = library_of(reader, wheel=wheel, path=path, sections=True)
    if sections is None:
        return library, None
    try:
        return library, _symbols(reader, *sections, budget)
    except _UNREADABLE:  # read again alone, by what needs it, to decide what such a file holds
        return library, None


def _symbols(
    reader: ByteSource, elf: ElfFormat, sections: list[dict[str, int]], budget: NameBudget | None
) -> SymbolTable:
    """The table of the one SHT_DYNSYM section (the ELF format allows no second); :data:`NO_SYMBOLS` for a file with
    none, with more, or with a table past the bounds (:data:`_MAX_SYMBOLS`, :data:`_MAX_SYMBOL_NAMES`), or whose names
    a NUL does not end, or that ``budget`` has no room for."""
    found = [section for section in sections if section["type"] == SHT_DYNSYM]
    if len(found) != 1:
        return NO_SYMBOLS
    (section,) = found
    entry = struct.Struct(elf.order + ("IBBHQQ" if elf.wide else "IIIBBH"))
    strings_section = sections[section["link"]]
    if section["size"] > _MAX_SYMBOLS * entry.size or strings_section["size"] > _MAX_SYMBOL_NAMES:
        return NO_SYMBOLS
    # In file order (a plain linker puts .dynsym first): a stream reads each once, in one pass.
    if strings_section["offset"] < section["offset"]:
        strings = _section_data(reader, strings_section)
        table = _section_data(reader, section)
    else:
        table = _section_data(reader, section)
        strings = _section_data(reader, strings_section)
    defined: set[str] = set()
    undefined: set[str] = set()
    names: dict[int, str] = {}  # by offset: each name taken (and counted) once
    held = 0
    for fields in entry.iter_unpack(table[: len(table) - len(table) % entry.size]):
        name_at, info, shndx = (fields[0], fields[1], fields[3]) if elf.wide else (fields[0], fields[3], fields[5])
        bind = info >> 4
        if not name_at or bind not in (_STB_GLOBAL, _STB_WEAK):
            continue
        name = names.get(name_at)
        if name is None:
            end = strings.find(b"\0", name_at)
            held += end - name_at
            if end < 0 or held > _MAX_SYMBOL_NAMES:
                return NO_SYMBOLS
            name = names[name_at] = strings[name_at:end].decode("utf-8", "replace")
        if shndx != _SHN_UNDEF:
            defined.add(name)
        elif bind == _STB_GLOBAL:
            undefined.add(name)
    if budget is not None and not budget.take(held):
        return NO_SYMBOLS
    return SymbolTable(frozenset(defined), frozenset(undefined))


def _section_data(reader: ByteSource, section: dict[str, int]) -> bytes:
    """A section's bytes as far as the file holds them; none for SHT_NOBITS (it has none in the file)."""
    return (
        b""
        if section["type"] == SHT_NOBITS
        else reader.read(section["offset"], section["size"], "a section", exact=False)
    )
