"""Growing a library's dynamic string table on its stream: a longer search path, a first one, a SONAME to add.

The new table is the old one with the new strings after it: DT_STRTAB also names every symbol,
DT_NEEDED and version, so their offsets must stay.  It has to be mapped, and there is no room
where it is, so it goes after the last PT_LOAD (the one with the highest address, the data
segment), which grows over it:

* the segment's ``.bss`` is written as zeros into the file (``p_filesz = p_memsz``, its NOBITS
  sections become PROGBITS), then the new table, then, when a tag is added and PT_DYNAMIC has
  no spare DT_NULL slot, the dynamic section moved there with one more entry (PT_DYNAMIC and
  the ``.dynamic`` section header follow it);
* what followed the segment in the file (non-allocated sections such as ``.symtab``, the section
  header table) moves back by a multiple of 4096, so every alignment up to a page is kept.

patchelf adds a new PT_LOAD instead, which needs one more program header and so moves the
sections after the program header table; extending the last segment needs neither.  Its cost
is the ``.bss`` written out: a few kilobytes in gcc's libraries, and nothing in torch 2.1.0's,
whose last PT_LOAD is already patchelf's (``p_filesz = p_memsz``).  A layout this does not
cover (another segment's bytes after the last one, an allocated section in what moves, a
``.bss`` over :data:`_MAX_BSS`) is one :class:`ElfError`; there is no other tool to fall back on.

Streamed both ways: one pass copies the member into the temp file with the new bytes inserted
(the old table is copied from the temp file itself, where it is already written), then the
headers are written over at their places (:func:`os.pwrite`), the section header table read
back from the temp file.  Same input, same bytes.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Mapping, Sequence

from patched_wheels.elf.read import (
    DT_NULL,
    DT_STRSZ,
    DT_STRTAB,
    PT_LOAD,
    SECTION_FIELDS,
    SHF_ALLOC,
    SHF_TLS,
    SHT_DYNAMIC,
    SHT_NOBITS,
    SHT_PROGBITS,
    SHT_STRTAB,
    DynamicLayout,
    OpenChunks,
)
from patched_wheels.errors import ElfError

_TAIL_ALIGN = 4096
"""What follows the grown segment moves by a multiple of this: every section alignment up to a page holds."""
_MAX_BSS = 64 << 20
"""A ``.bss`` written out as zeros beyond this is refused: the file would grow by it (real ones: kilobytes)."""
_ZEROS = bytes(1 << 16)
_COPY_CHUNK = 1 << 20


@dataclass(frozen=True)
class GrowPlan:
    """Where the new bytes go and which header bytes change (file offsets, the same in input and output
    before ``kept``; after it, the output's are ``shift`` further)."""

    kept: int
    """Bytes copied before the insertion: the end of the last PT_LOAD's file bytes."""
    segment: Mapping[str, int]
    """The last PT_LOAD as it was: its ``.bss`` becomes file bytes, then come the new ones."""
    table_offset: int
    """The new string table's file offset (the old table, copied, then ``added``)."""
    table_address: int
    strsz: int
    """The new table's size."""
    added: bytes
    """The new strings, NUL-terminated, appended to the old table."""
    dynamic_offset: int
    """Where the moved dynamic section goes (its bytes: ``dynamic_bytes``); unused when it stays."""
    dynamic_bytes: bytes
    """The moved dynamic section, or b"" when it is rewritten where it is (one of ``patches``)."""
    end: int
    """Where the inserted bytes end (then zeros up to ``kept + shift``)."""
    shift: int
    """How far what followed the last PT_LOAD moves."""
    patches: tuple[tuple[int, bytes], ...]
    """ELF header, program headers, the dynamic section where it stays."""


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def _pack(layout_struct: struct.Struct, values: Sequence[int], where: str) -> bytes:
    try:
        return layout_struct.pack(*values)
    except struct.error:
        raise ElfError(f"{where}: a grown header field does not fit its ELF class") from None


def plan_growth(layout: DynamicLayout, values: Mapping[int, bytes], where: str) -> GrowPlan:
    """Where ``values`` (the new string of each DT_RPATH/DT_RUNPATH/DT_SONAME) go: every entry of such a
    tag points at it, a missing tag is added; an ElfError naming ``where`` for a layout this does not cover."""
    elf = layout.format
    loads = [program for program in layout.programs if program["type"] == PT_LOAD]
    if not loads:
        raise ElfError(f"{where}: no PT_LOAD program header")
    last = max(loads, key=lambda program: program["vaddr"])
    kept = last["offset"] + last["filesz"]
    bss = last["memsz"] - last["filesz"]
    if not 0 <= bss <= _MAX_BSS:
        raise ElfError(
            f"{where}: the last PT_LOAD's .bss ({bss} bytes) cannot be written out to grow the segment "
            f"(at most {_MAX_BSS >> 20} MiB: the file would grow by it)"
        )
    for program in layout.programs:
        if program["filesz"] and program["offset"] + program["filesz"] > kept:
            raise ElfError(f"{where}: a segment's file bytes end after the last PT_LOAD's; cannot grow it")
        if program["type"] == PT_LOAD and program is not last and program["vaddr"] + program["memsz"] > last["vaddr"]:
            raise ElfError(f"{where}: PT_LOAD segments overlap in memory")
    if layout.phoff + len(layout.programs) * layout.phentsize > kept:
        raise ElfError(f"{where}: the program header table lies after the last PT_LOAD; cannot grow it")
    if layout.shoff < kept < layout.shoff + layout.shnum * layout.shentsize:
        raise ElfError(f"{where}: the section header table straddles the end of the last PT_LOAD")
    strings = sorted(set(values.values()))
    offsets, size = {}, layout.strsz
    for string in strings:
        offsets[string], size = size, size + len(string) + 1
    added = b"".join(string + b"\0" for string in strings)
    table_offset = _align(last["offset"] + last["memsz"], elf.word)
    table_address = last["vaddr"] + table_offset - last["offset"]
    replaced = {DT_STRTAB: table_address, DT_STRSZ: size, **{tag: offsets[value] for tag, value in values.items()}}
    present = {tag for tag, _ in layout.entries}
    entries = [(tag, replaced.get(tag, value)) for tag, value in layout.entries]
    entries += [(tag, offsets[values[tag]]) for tag in sorted(values) if tag not in present]
    entries.append((DT_NULL, 0))
    table = b"".join(_pack(elf.dynamic, entry, where) for entry in entries)
    programs = [dict(program) for program in layout.programs]
    patches: list[tuple[int, bytes]] = []
    if len(entries) <= len(layout.entries) + layout.nulls:  # the added tags fit in spare DT_NULL slots
        dynamic_offset, dynamic_bytes, end = layout.dynamic["offset"], b"", table_offset + size
        patches.append((dynamic_offset, table))
    else:
        dynamic_offset, dynamic_bytes = _align(table_offset + size, elf.word), table
        end = dynamic_offset + len(table)
        address = last["vaddr"] + dynamic_offset - last["offset"]
        programs[layout.dynamic_index].update(
            offset=dynamic_offset, vaddr=address, paddr=address, filesz=len(table), memsz=len(table)
        )
    programs[layout.programs.index(last)].update(filesz=end - last["offset"], memsz=end - last["offset"])
    for index, program in enumerate(programs):
        if program != layout.programs[index]:
            fields = [program[name] for name in elf.program_fields]
            patches.append((layout.phoff + index * layout.phentsize, _pack(elf.program, fields, where)))
    shift = _align(end - kept, _TAIL_ALIGN)
    if layout.shnum and layout.shoff >= kept:
        position, field = elf.shoff_field
        patches.append((position, _pack(field, [layout.shoff + shift], where)))
    return GrowPlan(
        kept,
        last,
        table_offset,
        table_address,
        size,
        added,
        dynamic_offset,
        dynamic_bytes,
        end,
        shift,
        tuple(sorted(patches)),
    )


def grown_sections(layout: DynamicLayout, plan: GrowPlan, table: bytes, where: str) -> bytes:
    """The section header table ``table`` once ``plan`` is written: what moved moves, ``.dynstr`` (and a moved
    ``.dynamic``) point at the new bytes, the grown segment's ``.bss`` is PROGBITS.  An ElfError for a section
    that lies across the insertion or an allocated one after it."""
    elf, segment = layout.format, plan.segment
    bss_start, bss_end = segment["vaddr"] + segment["filesz"], segment["vaddr"] + segment["memsz"]
    out = bytearray(table)
    for index in range(layout.shnum):
        section = dict(zip(SECTION_FIELDS, elf.section.unpack_from(table, index * layout.shentsize)))
        original = dict(section)
        nobits, start = section["type"] == SHT_NOBITS, section["offset"]
        if nobits and not section["flags"] & SHF_TLS and bss_start <= section["addr"] < bss_end:
            if section["addr"] + section["size"] > bss_end:
                raise ElfError(f"{where}: section {index} runs past the end of the last PT_LOAD")
            section.update(type=SHT_PROGBITS, offset=segment["offset"] + section["addr"] - segment["vaddr"])
        elif section["type"] == SHT_STRTAB and section["flags"] & SHF_ALLOC and section["addr"] == layout.strtab:
            section.update(addr=plan.table_address, offset=plan.table_offset, size=plan.strsz)
        elif section["type"] == SHT_DYNAMIC and plan.dynamic_bytes and section["addr"] == layout.dynamic["vaddr"]:
            address = plan.dynamic_offset - segment["offset"] + segment["vaddr"]
            section.update(addr=address, offset=plan.dynamic_offset, size=len(plan.dynamic_bytes))
        elif start >= plan.kept and section["flags"] & SHF_ALLOC:
            # Empty or NOBITS (gold ends the data segment with an empty .tm_clone_table): it stays where its address maps.
            if not nobits and section["size"]:
                raise ElfError(f"{where}: allocated section {index} lies after the last PT_LOAD's file bytes")
        elif start >= plan.kept:
            if section["addralign"] > 1 and plan.shift % section["addralign"]:
                raise ElfError(f"{where}: section {index} is aligned to {section['addralign']} bytes, beyond a page")
            section["offset"] = start + plan.shift
        elif not nobits and start + section["size"] > plan.kept:
            raise ElfError(f"{where}: section {index} lies across the end of the last PT_LOAD's file bytes")
        if section != original:
            fields = [section[name] for name in SECTION_FIELDS]
            out[index * layout.shentsize : index * layout.shentsize + elf.section.size] = _pack(
                elf.section, fields, where
            )
    return bytes(out)


def grow_dynamic(
    open_chunks: OpenChunks, layout: DynamicLayout, values: Mapping[int, bytes], path: Path, where: str
) -> None:
    """Write the library ``open_chunks()`` streams to ``path`` with ``values`` set (see :func:`plan_growth`),
    one pass over the input; an ElfError naming ``where`` when it cannot."""
    plan = plan_growth(layout, values, where)
    with open(path, "wb+") as out:
        position, inserted = 0, False
        for chunk in open_chunks():
            if not inserted and position + len(chunk) >= plan.kept:
                cut = plan.kept - position
                out.write(chunk[:cut])
                _insert(out, layout, plan, where)
                chunk, inserted = chunk[cut:], True
            out.write(chunk)
            position += len(chunk)
        if not inserted:
            raise ElfError(
                f"{where}: truncated ELF file (the last PT_LOAD ends at {plan.kept}, the file at {position})"
            )
        out.flush()
        for offset, data in plan.patches:
            os.pwrite(out.fileno(), data, offset)
        if layout.shnum:
            shoff = layout.shoff + (plan.shift if layout.shoff >= plan.kept else 0)
            size = layout.shnum * layout.shentsize
            table = os.pread(out.fileno(), size, shoff)
            if len(table) < size:
                raise ElfError(f"{where}: truncated ELF file (the section header table ends past its end)")
            os.pwrite(out.fileno(), grown_sections(layout, plan, table, where), shoff)


def _insert(out: BinaryIO, layout: DynamicLayout, plan: GrowPlan, where: str) -> None:
    """The inserted bytes, at ``plan.kept``: zeros (the ``.bss``), the old table copied from ``out`` (written
    already: it lies before ``kept``), the new strings, the moved dynamic section, zeros up to the shift."""
    _write_zeros(out, plan.table_offset - plan.kept)
    out.flush()
    copied = 0
    while copied < layout.strsz:
        piece = os.pread(out.fileno(), min(_COPY_CHUNK, layout.strsz - copied), layout.strtab_offset + copied)
        if not piece:  # it lies before plan.kept, which is written: only a file changed under us
            raise ElfError(f"{where}: the dynamic string table could not be copied")
        out.write(piece)
        copied += len(piece)
    out.write(plan.added)
    if plan.dynamic_bytes:
        _write_zeros(out, plan.dynamic_offset - plan.table_offset - plan.strsz)
        out.write(plan.dynamic_bytes)
    _write_zeros(out, plan.kept + plan.shift - plan.end)


def _write_zeros(out: BinaryIO, count: int) -> None:
    while count > 0:
        out.write(_ZEROS[:count])
        count -= len(_ZEROS)
