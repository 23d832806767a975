"""Dynamic symbol tables: the names a library defines and those it needs, read by the one ELF reader.

An observation (:mod:`patched_wheels.loading.observe`) derives two facts from the mapped libraries' tables (which
are extension modules, which need ``RTLD_GLOBAL``), and a kept observation is checked by deriving them again from
the wheels.  A table is found through the section headers, at the file's end, and lies near its start
(``.dynsym``, ``.dynstr``): read alone from a member, that is a pass over the whole member and a second one up to
the table.  The library graph reads every member whole already, for its dynamic section (:mod:`~patched_wheels.elf.read`,
at 97 % of the file), so :func:`read_library_and_symbols` takes the section headers in that pass and reads only the
second: the graph of a set whose kept observation is checked holds the tables
(:attr:`~patched_wheels.elf.graph.LibraryGraph.symbols`), and the check inflates nothing again.
"""

from __future__ import annotations

import struct
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
    SectionTable,
    library_of,
    member_reader,
    read_sections,
)
from patched_wheels.errors import PatchedWheelsError
from patched_wheels.wheelfile import ZipMember

__all__ = ["NO_SYMBOLS", "SymbolTable", "read_library_and_symbols", "read_member_symbols", "read_symbols"]

# Elf_Sym fields: binding (st_info >> 4) and the section index of an undefined symbol.
_STB_GLOBAL, _STB_WEAK, _SHN_UNDEF = 1, 2, 0
# What reading a symbol table can raise on a file that is no library the reader follows (or a member that does
# not inflate): the library then has no symbols (see read_symbols).
_UNREADABLE = (OSError, PatchedWheelsError, ValueError, IndexError, struct.error)


class SymbolTable(NamedTuple):
    """A library's dynamic symbol table, as names."""

    defined: frozenset[str]
    undefined: frozenset[str]
    """Needed from elsewhere: undefined and not weak."""


NO_SYMBOLS = SymbolTable(frozenset(), frozenset())
"""The table of a file the reader cannot follow: an observation then only misses a reason to load it globally."""


def read_symbols(path: Path | str) -> SymbolTable:
    """The dynamic symbol table of the file ``path``; :data:`NO_SYMBOLS` for a file the ELF reader cannot follow.

    :func:`patched_wheels.elf.read.read_sections` finds ``.dynsym`` and its string table, read where they
    lie; the entries are unpacked with :mod:`struct` (a library such as libLLVM has 46,000 symbols).
    """
    try:
        with open(path, "rb") as file:
            reader = FileReader(file.fileno(), str(path))
            return _symbols(reader, *read_sections(reader, str(path)))
    except _UNREADABLE:
        return NO_SYMBOLS


def read_member_symbols(wheel: Path, info: ZipMember, path: str) -> SymbolTable:
    """:func:`read_symbols` of the member ``info`` of ``wheel``, installed at ``path``, streamed: inflated once to
    its section headers, at its end, then again as far as its symbol table."""
    reader = member_reader(wheel, info, path)
    try:
        return _symbols(reader, *read_sections(reader, f"{wheel.name}: {path}"))
    except _UNREADABLE:
        return NO_SYMBOLS


def read_library_and_symbols(
    wheel: Path, info: ZipMember, path: str, *, installed: Path | None = None
) -> tuple[ElfLibrary | None, SymbolTable | None]:
    """:func:`~patched_wheels.elf.read.read_library` (or, from its ``installed`` copy,
    :func:`~patched_wheels.elf.read.read_installed_library`) and the library's symbol table, its section headers
    read in the pass that reads the dynamic section: one pass over the member, then one up to the table.  The table
    is None where that cannot be done (see :func:`~patched_wheels.elf.read.library_of`): whoever needs it then
    reads it alone, with :func:`read_member_symbols`.  What the library is does not depend on it."""
    if installed is None:
        return _with_symbols(member_reader(wheel, info, path), wheel.name, path)
    with open(installed, "rb") as opened:
        return _with_symbols(FileReader(opened.fileno(), f"{wheel.name}: {path}"), wheel.name, path)


def _with_symbols(
    reader: ForwardReader | FileReader, wheel: str, path: str
) -> tuple[ElfLibrary | None, SymbolTable | None]:
    library, sections = library_of(reader, wheel=wheel, path=path, sections=True)
    return library, _table_or_none(reader, sections)


def _table_or_none(reader: ByteSource, sections: SectionTable | None) -> SymbolTable | None:
    if sections is None:
        return None
    try:
        return _symbols(reader, *sections)
    except _UNREADABLE:  # read again alone, by what needs it, to decide what such a file holds
        return None


def _symbols(reader: ByteSource, elf: ElfFormat, sections: list[dict[str, int]]) -> SymbolTable:
    defined: set[str] = set()
    undefined: set[str] = set()
    entry = struct.Struct(elf.order + ("IBBHQQ" if elf.wide else "IIIBBH"))
    for section in sections:
        if section["type"] != SHT_DYNSYM:
            continue
        strings_section = sections[section["link"]]
        # In file order (a plain linker puts .dynsym first): a stream reads each once, in one pass.
        if strings_section["offset"] < section["offset"]:
            strings = _section_data(reader, strings_section)
            table = _section_data(reader, section)
        else:
            table = _section_data(reader, section)
            strings = _section_data(reader, strings_section)
        for fields in entry.iter_unpack(table[: len(table) - len(table) % entry.size]):
            name_at, info, shndx = (fields[0], fields[1], fields[3]) if elf.wide else (fields[0], fields[3], fields[5])
            bind = info >> 4
            if not name_at or bind not in (_STB_GLOBAL, _STB_WEAK):
                continue
            name = strings[name_at : strings.find(b"\0", name_at)].decode("utf-8", "replace")
            if shndx != _SHN_UNDEF:
                defined.add(name)
            elif bind == _STB_GLOBAL:
                undefined.add(name)
    return SymbolTable(frozenset(defined), frozenset(undefined))


def _section_data(reader: ByteSource, section: dict[str, int]) -> bytes:
    """A section's bytes as far as the file holds them; none for SHT_NOBITS (it has none in the file)."""
    return (
        b""
        if section["type"] == SHT_NOBITS
        else reader.read(section["offset"], section["size"], "a section", exact=False)
    )
