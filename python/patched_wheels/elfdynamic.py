"""The pyelftools side of :mod:`patched_wheels.elfread`: the ELF headers and the dynamic section.

Imported only when a library is actually read (a cache miss, ``--no-cache``): pyelftools costs a
command that reads none (a ``split`` or ``graph`` answered from the ELF cache, every ``patch``)
a fifth of its start-up.  Nothing here knows about wheels or streaming.
"""

from __future__ import annotations

import struct
from typing import BinaryIO, NamedTuple

from elftools.common.exceptions import ELFError
from elftools.common.utils import struct_parse
from elftools.construct.lib.container import Container
from elftools.elf.dynamic import DynamicSection, DynamicSegment
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import Section, StringTableSection
from elftools.elf.structs import ELFStructs

from patched_wheels.errors import ElfError

__all__ = ["DynamicEntries", "Headers", "read_dynamic", "read_headers"]


class Headers(NamedTuple):
    """What the ELF header and the program headers say about where the dynamic section's bytes lie."""

    section_table: tuple[int, int]
    """(offset, length) of the section header table."""
    segments: tuple[tuple[str, int, int, int], ...]
    """(p_type, p_offset, p_vaddr, p_filesz) of each program header read."""
    complete: bool
    """Whether every program header was read (False: the head ends, or one does not parse, before the last)."""


class DynamicEntries(NamedTuple):
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]


class _DynamicOnlyELFFile(ELFFile):
    """pyelftools' ELFFile building only the sections the dynamic segment reads (DYNAMIC and the
    string tables), unnamed.

    Its other section classes read their tables as they are built (``.gnu.hash``, every name
    from ``.shstrtab``): bytes a streamed member need not keep, each miss costing a pass.
    """

    def _make_section(self, section_header: Container) -> Section:  # pyelftools' one section factory
        if section_header["sh_type"] == "SHT_DYNAMIC":
            return DynamicSection(section_header, "", self)
        if section_header["sh_type"] == "SHT_STRTAB":
            return StringTableSection(section_header, "", self)
        return Section(section_header, "", self)


def read_dynamic(stream: BinaryIO, size: int, *, where: str) -> DynamicEntries:
    """SONAME, DT_NEEDED, DT_RPATH and DT_RUNPATH of the ELF file of ``size`` bytes in ``stream``.

    A section or program header table that ends past the file is an :class:`ElfError` naming
    ``where``; on other hostile input pyelftools raises what it raises (ELFError, struct.error,
    OverflowError, ...), for the caller to report.
    """
    soname: str | None = None
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    elf = _DynamicOnlyELFFile(stream)
    for kind in ("ph", "sh"):  # pyelftools reads only the entries it needs: a cut table would go unseen
        if elf[f"e_{kind}off"] + elf[f"e_{kind}num"] * elf[f"e_{kind}entsize"] > size:
            raise ElfError(f"{where}: truncated or corrupt ELF file (its {kind} table ends past its end)")
    for segment in elf.iter_segments():
        if not isinstance(segment, DynamicSegment):
            continue
        for tag in segment.iter_tags():
            if tag.entry.d_tag == "DT_SONAME":
                soname = tag.soname
            elif tag.entry.d_tag == "DT_NEEDED":
                needed.append(tag.needed)
            elif tag.entry.d_tag == "DT_RPATH":
                rpath.extend(entry for entry in tag.rpath.split(":") if entry)
            elif tag.entry.d_tag == "DT_RUNPATH":
                runpath.extend(entry for entry in tag.runpath.split(":") if entry)
    return DynamicEntries(soname, tuple(needed), tuple(rpath), tuple(runpath))


def read_headers(stream: BinaryIO, *, little: bool, wide: bool, max_table: int) -> Headers | None:
    """The ELF header's section table (its length at most ``max_table``) and the program headers
    ``stream`` (the head of a file) holds; None when the ELF header does not parse."""
    try:
        structs = ELFStructs(little_endian=little, elfclass=64 if wide else 32)
        structs.create_basic_structs()
        header = struct_parse(structs.Elf_Ehdr, stream, 0)
        structs.create_advanced_structs(header["e_type"], header["e_machine"], header["e_ident"]["EI_OSABI"])
    except (ELFError, struct.error, ValueError, IndexError):
        return None
    table = (header["e_shoff"], min(header["e_shnum"] * header["e_shentsize"], max_table))
    segments = []
    try:
        for index in range(header["e_phnum"]):
            segment = struct_parse(structs.Elf_Phdr, stream, header["e_phoff"] + index * header["e_phentsize"])
            segments.append((segment["p_type"], segment["p_offset"], segment["p_vaddr"], segment["p_filesz"]))
    except (ELFError, struct.error, ValueError, IndexError):
        return Headers(table, tuple(segments), complete=False)
    return Headers(table, tuple(segments), complete=True)
