"""Editing a library's dynamic section on its stream (RPATH/RUNPATH, a split's SONAME), never holding it.

:func:`read_dynamic` reads what an edit needs from the member's stream: the ELF and program
headers, the dynamic section and its search-path and SONAME strings (a few kilobytes, two
passes at most).  Then either

* the new string fits in the old one (:func:`overwrite_in_place`) and no other name points into
  it (:func:`names_inside`): it is written over it, the rest with ``X`` and a NUL, as patchelf
  does, so the member is streamed with a few bytes replaced; or
* the dynamic string table grows (:mod:`patched_wheels.elfgrow`): a longer search path, a first
  one, a SONAME to add.

:class:`_ForwardReader` keeps one chunk and what was asked for, so memory stays a constant
whatever the library's size; a file this reader cannot follow is one :class:`ElfError` naming
the wheel and member.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

from patched_wheels.errors import ElfError

ELF_MAGIC = b"\x7fELF"
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29
_STRING_TAGS = (DT_SONAME, DT_RPATH, DT_RUNPATH)
# Every tag whose value is an offset in the dynamic string table (DT_AUXILIARY, DT_FILTER, DT_CONFIG,
# DT_DEPAUDIT, DT_AUDIT after the three above and DT_NEEDED).
_NAME_TAGS = frozenset((DT_NEEDED, *_STRING_TAGS, 0x7FFFFFFD, 0x7FFFFFFF, 0x6FFFFEFA, 0x6FFFFEFB, 0x6FFFFEFC))
SHT_PROGBITS, SHT_STRTAB, SHT_DYNAMIC, SHT_NOBITS, SHT_DYNSYM = 1, 3, 6, 8, 11
_SHT_VERDEF, _SHT_VERNEED = 0x6FFFFFFD, 0x6FFFFFFE
SHF_ALLOC, SHF_TLS = 0x2, 0x400
SECTION_FIELDS = ("name", "type", "flags", "addr", "offset", "size", "link", "info", "addralign", "entsize")
"""The fields of :attr:`ElfFormat.section`, in order."""
_SYMBOLS_SLICE = 1 << 20  # .dynsym is read this much at a time: C++ libraries have hundreds of thousands of symbols
_MAX_TABLE = 1 << 20  # program headers, dynamic section: a few kilobytes in any real library
_MAX_SECTION_TABLE = 8 << 20  # 65535 section headers of 64 bytes, and room
_MAX_STRING = 1 << 16  # a search path or SONAME longer than this is not one a linker wrote
_MAX_PASSES = 4  # headers, PT_DYNAMIC, strings: in file order that is two passes; hostile layouts get no more

OpenChunks = Callable[[], Iterator[bytes]]
"""Starts a new pass over a member's bytes, from its first byte, in chunks."""


@dataclass(frozen=True)
class ElfFormat:
    """The class (32/64-bit) and byte order of one ELF file: the layout of each header it has."""

    wide: bool
    order: str
    """``<`` or ``>``, for :mod:`struct`."""

    @property
    def word(self) -> int:
        """The alignment of an address-sized field (and of a dynamic entry)."""
        return 8 if self.wide else 4

    @property
    def program(self) -> struct.Struct:
        """A program header, fields in :attr:`program_fields` order."""
        return struct.Struct(self.order + ("IIQQQQQQ" if self.wide else "IIIIIIII"))

    @property
    def program_fields(self) -> tuple[str, ...]:
        if self.wide:
            return ("type", "flags", "offset", "vaddr", "paddr", "filesz", "memsz", "align")
        return ("type", "offset", "vaddr", "paddr", "filesz", "memsz", "flags", "align")

    @property
    def section(self) -> struct.Struct:
        """A section header, fields in :data:`SECTION_FIELDS` order."""
        return struct.Struct(self.order + ("IIQQQQIIQQ" if self.wide else "IIIIIIIIII"))

    @property
    def dynamic(self) -> struct.Struct:
        """A dynamic entry: (d_tag, d_val)."""
        return struct.Struct(self.order + ("qQ" if self.wide else "iI"))

    @property
    def header_tables(self) -> struct.Struct:
        """From the ELF header: e_phoff, e_shoff, then e_phentsize, e_phnum, e_shentsize, e_shnum."""
        return struct.Struct(self.order + ("32xQQ6xHHHH" if self.wide else "28xII6xHHHH"))

    @property
    def shoff_field(self) -> tuple[int, struct.Struct]:
        """Where e_shoff lies in the ELF header, and its format."""
        return (40, struct.Struct(self.order + "Q")) if self.wide else (32, struct.Struct(self.order + "I"))


@dataclass(frozen=True)
class DynamicLayout:
    """What a dynamic-section edit needs to know of a library, read from its stream."""

    format: ElfFormat
    phoff: int
    phentsize: int
    programs: tuple[dict[str, int], ...]
    """Program headers, as field name -> value (:attr:`ElfFormat.program_fields`)."""
    shoff: int
    shentsize: int
    shnum: int
    dynamic_index: int
    """Which program header is PT_DYNAMIC."""
    entries: tuple[tuple[int, int], ...]
    """The dynamic entries before the first DT_NULL."""
    nulls: int
    """How many DT_NULL entries follow the live ones in a row (1, or more where a tool left spare slots)."""
    strtab: int
    """DT_STRTAB, an address."""
    strtab_offset: int
    """Its file offset."""
    strsz: int
    strings: Mapping[int, bytes]
    """The string of each DT_SONAME/DT_RPATH/DT_RUNPATH entry, by its offset in the table."""

    @property
    def dynamic(self) -> dict[str, int]:
        return self.programs[self.dynamic_index]

    def values(self, tag: int) -> list[int]:
        return [value for entry_tag, value in self.entries if entry_tag == tag]

    def string(self, tag: int) -> bytes | None:
        """The string of the first ``tag`` entry, if any."""
        offsets = self.values(tag)
        return self.strings[offsets[0]] if offsets else None

    def search_path_tags(self) -> tuple[int, ...]:
        """The tags a new search path is written to: those the library has (its kind is kept: DT_RPATH is
        also searched for what the libraries it loads need, and a library may rely on that), else DT_RUNPATH."""
        return tuple(tag for tag in (DT_RPATH, DT_RUNPATH) if self.values(tag)) or (DT_RUNPATH,)

    def search_path(self) -> str:
        """The search path the loader uses for this library's own DT_NEEDED (DT_RUNPATH wins), ``""`` if none."""
        found = self.string(DT_RUNPATH) or self.string(DT_RPATH) or b""
        return found.decode("utf-8", "surrogateescape")


class _ForwardReader:
    """Reads byte ranges of a member that can only be streamed from its start: a range behind the
    stream's position starts another pass.  Holds one chunk and what was asked for, nothing more."""

    def __init__(self, open_chunks: OpenChunks, where: str) -> None:
        self._open = open_chunks
        self._where = where
        self._chunks: Iterator[bytes] = iter(())
        self._start = 0  # file offset of self._chunk
        self._chunk = b""
        self._passes = 0

    def read(self, offset: int, size: int, what: str) -> bytes:
        """``size`` bytes at ``offset``; an ElfError naming ``what`` when the file ends first."""
        if offset < self._start or self._passes == 0:
            if self._passes == _MAX_PASSES:
                raise ElfError(f"{self._where}: {what} is out of file order too often to be read as a stream")
            self._passes += 1
            self._chunks, self._start, self._chunk = self._open(), 0, b""
        out = bytearray()
        while len(out) < size:
            end = self._start + len(self._chunk)
            if offset + len(out) < end:
                begin = offset + len(out) - self._start
                out += self._chunk[begin : begin + size - len(out)]
                continue
            self._start, self._chunk = end, next(self._chunks, b"")
            if not self._chunk:
                raise ElfError(f"{self._where}: truncated ELF file ({what} at offset {offset} runs past its end)")
        return bytes(out)


def read_dynamic(open_chunks: OpenChunks, where: str) -> DynamicLayout:
    """The dynamic section of the ELF file ``open_chunks()`` streams; anything this reader cannot follow
    (a cut or lying header, no PT_DYNAMIC, no DT_NULL, tables of absurd size) is an ElfError naming ``where``."""
    reader = _ForwardReader(open_chunks, where)
    ident = reader.read(0, 16, "the ELF header")
    if not ident.startswith(ELF_MAGIC) or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        raise ElfError(f"{where}: not an ELF file of a known class and byte order")
    elf = ElfFormat(wide=ident[4] == 2, order="<" if ident[5] == 1 else ">")
    header = reader.read(0, 64 if elf.wide else 52, "the ELF header")
    phoff, shoff, phentsize, phnum, shentsize, shnum = elf.header_tables.unpack_from(header)
    if phentsize < elf.program.size or phnum * phentsize > _MAX_TABLE or phnum == 0xFFFF:
        raise ElfError(f"{where}: unsupported program header table ({phnum} entries of {phentsize} bytes)")
    if shnum and shentsize < elf.section.size or shnum == 0 and shoff or shnum * shentsize > _MAX_SECTION_TABLE:
        raise ElfError(f"{where}: unsupported section header table ({shnum} entries of {shentsize} bytes)")
    table = reader.read(phoff, phnum * phentsize, "the program headers")
    names = elf.program_fields
    programs = tuple(dict(zip(names, elf.program.unpack_from(table, index * phentsize))) for index in range(phnum))
    dynamic_indices = [index for index, program in enumerate(programs) if program["type"] == PT_DYNAMIC]
    if len(dynamic_indices) != 1:
        raise ElfError(f"{where}: expected one PT_DYNAMIC program header, found {len(dynamic_indices)}")
    dynamic = programs[dynamic_indices[0]]
    entry = elf.dynamic
    if dynamic["filesz"] > _MAX_TABLE or dynamic["filesz"] < entry.size:
        raise ElfError(f"{where}: PT_DYNAMIC of {dynamic['filesz']} bytes")
    if _file_offset(programs, dynamic["vaddr"], dynamic["filesz"]) != dynamic["offset"]:  # the loader reads p_vaddr
        raise ElfError(f"{where}: PT_DYNAMIC's file offset is not where a PT_LOAD maps its address")
    section = reader.read(dynamic["offset"], dynamic["filesz"], "the dynamic section")
    slots = len(section) // entry.size
    all_entries = [entry.unpack_from(section, index * entry.size) for index in range(slots)]
    end = next((index for index, (tag, _) in enumerate(all_entries) if tag == DT_NULL), None)
    if end is None:
        raise ElfError(f"{where}: the dynamic section has no DT_NULL entry")
    entries = tuple(all_entries[:end])
    nulls = next((index for index in range(end, slots) if all_entries[index][0] != DT_NULL), slots) - end
    found = {tag: [value for entry_tag, value in entries if entry_tag == tag] for tag in (DT_STRTAB, DT_STRSZ)}
    if len(found[DT_STRTAB]) != 1 or len(found[DT_STRSZ]) != 1:
        raise ElfError(f"{where}: expected one DT_STRTAB and one DT_STRSZ in the dynamic section")
    strtab, strsz = found[DT_STRTAB][0], found[DT_STRSZ][0]
    strtab_offset = _file_offset(programs, strtab, strsz)
    if strtab_offset is None:
        raise ElfError(f"{where}: the dynamic string table (DT_STRTAB, DT_STRSZ) lies outside every PT_LOAD's file bytes")
    strings: dict[int, bytes] = {}
    for offset in sorted({value for tag, value in entries if tag in _STRING_TAGS}):
        if offset >= strsz:
            raise ElfError(f"{where}: a dynamic string offset ({offset}) past the string table's end ({strsz})")
        text = reader.read(strtab_offset + offset, min(_MAX_STRING, strsz - offset), "a dynamic string")
        if b"\0" not in text:
            raise ElfError(f"{where}: a dynamic string at {offset} has no NUL within {len(text)} bytes")
        strings[offset] = text.split(b"\0", 1)[0]
    return DynamicLayout(
        elf, phoff, phentsize, programs, shoff, shentsize, shnum, dynamic_indices[0], entries, nulls, strtab, strtab_offset, strsz, strings
    )


def _file_offset(programs: tuple[dict[str, int], ...], address: int, size: int) -> int | None:
    """The file offset of ``size`` bytes at ``address``, if one PT_LOAD maps them all from the file."""
    for program in programs:
        if program["type"] == PT_LOAD and program["vaddr"] <= address and address + size <= program["vaddr"] + program["filesz"]:
            return program["offset"] + address - program["vaddr"]
    return None


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
    inside = lambda offset: start <= offset < end  # noqa: E731
    if any(inside(value) for tag, value in layout.entries if tag in _NAME_TAGS and tag not in tags):
        return True
    if not layout.shnum:
        return True
    elf, reader = layout.format, _ForwardReader(open_chunks, where)
    table = reader.read(layout.shoff, layout.shnum * layout.shentsize, "the section headers")
    sections = [dict(zip(SECTION_FIELDS, elf.section.unpack_from(table, index * layout.shentsize))) for index in range(layout.shnum)]
    strings = [index for index, section in enumerate(sections) if section["type"] == SHT_STRTAB and section["addr"] == layout.strtab]
    if len(strings) != 1:
        return True
    linked = sorted((section for section in sections if section["link"] == strings[0] and section["type"] != SHT_NOBITS), key=lambda section: section["offset"])
    for section in linked:
        if section["type"] == SHT_DYNAMIC:
            continue  # its entries are layout.entries
        if section["type"] == SHT_DYNSYM and section["entsize"] >= (24 if elf.wide else 16):
            name = struct.Struct(elf.order + "I")
            step = max(1, _SYMBOLS_SLICE // section["entsize"]) * section["entsize"]
            for first in range(0, section["size"] - section["size"] % section["entsize"], step):
                chunk = reader.read(section["offset"] + first, min(step, section["size"] - first), "the dynamic symbols")
                if any(inside(name.unpack_from(chunk, at)[0]) for at in range(0, len(chunk) - 3, section["entsize"])):
                    return True
        elif section["type"] in (_SHT_VERDEF, _SHT_VERNEED) and section["size"] <= _MAX_TABLE:
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
