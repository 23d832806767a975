"""Editing a library's dynamic section on its stream (RPATH/RUNPATH, a split's SONAME), never holding it.

:func:`patched_wheels.elf.read.read_dynamic` reads what an edit needs from the member's stream:
the ELF and program headers, the dynamic section and its strings (a few kilobytes, one or two
passes).  Then either

* the new string fits in the old one (:func:`overwrite_in_place`) and no other name points into
  it (:func:`names_inside`): it is written over it, the rest with ``X`` and a NUL, as patchelf
  does, so the member is streamed with a few bytes replaced; or
* the dynamic string table grows (:mod:`patched_wheels.elf.grow`): a longer search path, a first
  one, a SONAME to add.

:func:`names_inside` reads the section headers and ``.dynsym`` with the same
:class:`~patched_wheels.elf.read.ForwardReader`, so memory stays bounded whatever the library's size;
a file it cannot follow is one :class:`~patched_wheels.errors.ElfError` naming the wheel and member.
"""

from __future__ import annotations

import struct

from patched_wheels.elf.read import (
    MAX_TABLE,
    SHT_DYNAMIC,
    SHT_DYNSYM,
    SHT_NOBITS,
    SHT_STRTAB,
    STRING_TAGS,
    DynamicLayout,
    ForwardReader,
    OpenChunks,
    section_headers,
)

# Every tag whose value is an offset in the dynamic string table (DT_AUXILIARY, DT_FILTER, DT_CONFIG,
# DT_DEPAUDIT, DT_AUDIT after DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH).
_NAME_TAGS = frozenset((*STRING_TAGS, 0x7FFFFFFD, 0x7FFFFFFF, 0x6FFFFEFA, 0x6FFFFEFB, 0x6FFFFEFC))
_SHT_VERDEF, _SHT_VERNEED = 0x6FFFFFFD, 0x6FFFFFFE
_SYMBOLS_SLICE = 1 << 20  # .dynsym is read this much at a time: C++ libraries have hundreds of thousands of symbols


def overwrite_in_place(layout: DynamicLayout, tags: tuple[int, ...], new: bytes) -> tuple[int, bytes] | None:
    """The (file offset, bytes) that set every ``tags`` entry to ``new`` in place, as patchelf would; None
    when it does not fit (or an entry is missing, or they do not share one string): the table must grow."""
    offsets = {value for tag in tags for value in layout.values(tag)}
    if len(offsets) != 1 or any(not layout.values(tag) for tag in tags):
        return None
    index = offsets.pop()
    old = layout.strings[index]
    if len(new) > len(old):
        return None
    return layout.strtab_offset + index, new + b"\0" + b"X" * max(0, len(old) - len(new) - 1)


def names_inside(open_chunks: OpenChunks, layout: DynamicLayout, tags: tuple[int, ...], where: str) -> bool:
    """Whether any name but the ``tags`` entries points into their one string (GNU ld stores a name that is
    the tail of another once, so the symbol ``lib`` may be the end of ``$ORIGIN/../lib``): writing over it
    would rename that too (patchelf does, NixOS/patchelf#162).  True also when that cannot be known: no
    section headers, no ``.dynstr`` section, another kind of table naming strings from it.

    Names come from the dynamic entries, ``.dynsym`` and the version tables; the symbol table is read in
    slices, so memory stays bounded whatever its size.
    """
    (start,) = {value for tag in tags for value in layout.values(tag)}
    end = start + len(layout.strings[start])  # the NUL stays where it is: a name pointing at it stays ""
    inside = lambda offset: start <= offset < end
    if any(inside(value) for tag, value in layout.entries if tag in _NAME_TAGS and tag not in tags):
        return True
    if not layout.shnum:
        return True
    elf, reader = layout.format, ForwardReader(open_chunks, where)
    sections = section_headers(reader, elf, layout.shoff, layout.shnum, layout.shentsize)
    strings = [
        index
        for index, section in enumerate(sections)
        if section["type"] == SHT_STRTAB and section["addr"] == layout.strtab
    ]
    if len(strings) != 1:
        return True
    linked = sorted(
        (section for section in sections if section["link"] == strings[0] and section["type"] != SHT_NOBITS),
        key=lambda section: section["offset"],
    )
    for section in linked:
        if section["type"] == SHT_DYNAMIC:
            continue  # its entries are layout.entries
        if section["type"] == SHT_DYNSYM and section["entsize"] >= (24 if elf.wide else 16):
            name = struct.Struct(elf.order + "I")
            step = max(1, _SYMBOLS_SLICE // section["entsize"]) * section["entsize"]
            for first in range(0, section["size"] - section["size"] % section["entsize"], step):
                chunk = reader.read(
                    section["offset"] + first, min(step, section["size"] - first), "the dynamic symbols"
                )
                if any(inside(name.unpack_from(chunk, at)[0]) for at in range(0, len(chunk) - 3, section["entsize"])):
                    return True
        elif section["type"] in (_SHT_VERDEF, _SHT_VERNEED) and section["size"] <= MAX_TABLE:
            data = reader.read(section["offset"], section["size"], "a version table")
            names = _version_names(data, elf.order, section["type"] == _SHT_VERDEF, section["info"])
            if names is None or any(inside(offset) for offset in names):
                return True
        else:
            return True
    return False


def _version_names(data: bytes, order: str, definitions: bool, count: int) -> list[int] | None:
    """The string offsets a GNU version definition (``definitions``) or requirement table names:
    ``count`` entries (sh_info), each with its chain of auxiliary entries; None when a chain leaves
    ``data`` (the caller then cannot rule a name out)."""
    entry = struct.Struct(order + ("HHHHIII" if definitions else "HHIII"))
    aux = struct.Struct(order + ("II" if definitions else "IHHII"))
    names: list[int] = []
    position = 0
    for number in range(count):
        if position + entry.size > len(data) or len(names) > len(data) // aux.size:
            return None
        fields = entry.unpack_from(data, position)
        if definitions:
            aux_count, at, next_offset = fields[3], position + fields[5], fields[6]
        else:
            aux_count, at, next_offset = fields[1], position + fields[3], fields[4]
            names.append(fields[2])  # vn_file
        for _ in range(aux_count):
            # Each name has an entry of its own: more names than entries fit means the chains loop.
            if at + aux.size > len(data) or len(names) > len(data) // aux.size:
                return None
            item = aux.unpack_from(data, at)
            names.append(item[0] if definitions else item[3])
            at += item[1] if definitions else item[4]
        if number + 1 < count and not next_offset:
            return None
        position += next_offset
    return names
