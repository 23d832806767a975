"""Reading shared libraries straight out of wheels: the dynamic section of an ELF file, streamed.

Every ``*.so`` / ``*.so.N`` member that installs into site-packages is read with
pyelftools for its SONAME, DT_NEEDED, DT_RPATH and DT_RUNPATH (:class:`ElfLibrary`), through
:mod:`patched_wheels.elfdynamic`, imported only once a library is read.

Why the members are inflated in full: ``.dynamic`` sits at ~97 % of these files
and deflate has no random access, so the whole member has to be inflated
anyway.  This module therefore streams each member through
:func:`patched_wheels.wheelfile.inflated_chunks` (python-isal's faster inflater
when it is installed; each step releases the GIL, so a thread per core really
runs in parallel), and keeps only windows around the byte ranges pyelftools reads
(so memory stays bounded whatever the member's size and layout).  The graph
(:mod:`patched_wheels.elfgraph`) opens wheels as :class:`~patched_wheels.wheelfile.WheelReader`
first: only a wheel we accept is analysed.
"""

from __future__ import annotations

import io
import itertools
import os
import posixpath
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Sequence

from patched_wheels.elfedit import DT_NEEDED, DT_NULL, DT_RPATH, DT_RUNPATH, DT_SONAME, DT_STRSZ, DT_STRTAB, ELF_MAGIC
from patched_wheels.errors import ElfError
from patched_wheels.wheelfile import ZipMember, inflated_chunks

# libfoo.so, libfoo.so.12, libfoo.so.12.1.105, _C.cpython-311-x86_64-linux-gnu.so
_SHARED_LIBRARY_NAME = re.compile(r"\.so(\.\d+)*$")
# Members under <dist>.data/data|scripts|headers/ install outside site-packages (pip: the prefix; rules_python:
# the wheel's repository), so their install path keeps the prefix.
_OTHER_SCHEME = re.compile(r"^(?P<dist>[^/]+)\.data/(?P<scheme>data|scripts|headers)/(?P<rest>.+)$")
# Enough for the ELF and program headers, and for the dynamic string table of an unpatched library.
_HEAD_SIZE = 1 << 20
# Kept around PT_DYNAMIC, and after a missed read (the rest of a string table).
_WINDOW = 1 << 20
_MAX_TABLE = 4 << 20  # 65535 section headers of 64 bytes
_TAIL = 32 << 20  # kept from before PT_DYNAMIC to the end when the end is this near
_STRING_WINDOW = 4096  # kept at each string PT_DYNAMIC names: a longer one costs a pass
# Bounds per member, whatever it claims: passes over the member, and bytes kept from it.
_MAX_PASSES = 4
_MAX_KEPT = 64 << 20
# Elf_Dyn tags: the end of the table, the string table and its size, and the entries naming strings.
_DT_STRING_TAGS = frozenset({DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH})  # what ElfLibrary holds


@dataclass(frozen=True)
class ElfLibrary:
    """One shared library of a wheel, as the dynamic loader sees it."""

    wheel: str
    """File name of the wheel that ships it."""
    path: str
    """Path relative to site-packages once installed, e.g. ``nvidia/cusparse/lib/libcusparse.so.12``; for a
    data-scheme library its archive path, ``<dist>.data/data/...`` (see :func:`patched_wheels.elfgraph.install_path`)."""
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]

    @property
    def filename(self) -> str:
        return posixpath.basename(self.path)

    @property
    def search_path(self) -> tuple[str, ...]:
        """Directories the loader searches for this library's own DT_NEEDED: DT_RUNPATH wins over DT_RPATH."""
        return self.runpath or self.rpath

    def __str__(self) -> str:
        return f"{self.path} ({self.wheel})"


def data_scheme(path: str) -> tuple[str, str, str] | None:
    """``(dist, scheme, rest)`` of an install path outside site-packages (``CyFES-2.7.data/data/cyfes/x.so`` ->
    ``("CyFES-2.7", "data", "cyfes/x.so")``); None for a site-packages path."""
    match = _OTHER_SCHEME.match(path)
    return (match["dist"], match["scheme"], match["rest"]) if match else None


def is_shared_library_name(path: str) -> bool:
    return bool(_SHARED_LIBRARY_NAME.search(path))  # the pattern holds no "/": it matches in the file name


def starts_as_elf(wheel: Path, info: ZipMember) -> bool:
    """Whether a member begins with the ELF magic, inflating only its first piece (not the member)."""
    pieces = inflated_chunks(wheel, info)
    head = b""
    try:
        for piece in pieces:
            head += piece
            if len(head) >= len(ELF_MAGIC):
                break
    finally:
        pieces.close()
    return head.startswith(ELF_MAGIC)


def parse_elf(data: bytes | BinaryIO, *, wheel: str, path: str) -> ElfLibrary:
    """Read the dynamic section of one ELF file (bytes or a seekable stream) with pyelftools."""
    where = f"{wheel}: {path}"
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    stream.seek(0)
    magic = stream.read(4)
    if magic != ELF_MAGIC:
        raise ElfError(f"{where}: not an ELF file (starts with {magic!r})")
    stream.seek(0, os.SEEK_END)
    size = stream.tell()
    from patched_wheels.elfdynamic import read_dynamic  # pyelftools: only once a library is read

    try:
        entries = read_dynamic(stream, size, where=where)
    except ElfError:
        raise
    except Exception as error:  # on hostile input pyelftools raises ELFError, struct.error, OverflowError, AssertionError, ...
        missed = getattr(stream, "missed", None)
        if missed is not None:  # pyelftools wraps what the stream raises in its own errors
            raise missed from None
        raise ElfError(f"{where}: truncated or corrupt ELF file ({type(error).__name__}: {error})") from error
    return ElfLibrary(wheel, path, *entries)


class _NotRetained(Exception):
    """pyelftools asked for bytes the streaming pass did not keep; the member is streamed again keeping them."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__(start, end)
        self.start, self.end = start, end


class _SparseFile(io.RawIOBase):
    """A read-only view of an inflated member of which only some byte ranges were kept.

    Reads must fall entirely inside one kept run (or be cut short by the end of
    the file); anything else raises :class:`_NotRetained` rather than returning
    short or invented bytes, so a parse that succeeds on this view is exact.
    """

    def __init__(self, size: int, runs: Sequence[tuple[int, bytes]], wanted: Sequence[tuple[int, int]]) -> None:
        super().__init__()
        self._size = size
        self._runs = runs
        self._position = 0
        self.wanted = wanted
        """The ranges the pass meant to keep: some are learnt only after streaming past them."""
        self.missed: _NotRetained | None = None
        """The first read that fell outside the kept runs."""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._size}[whence]
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        start = self._position
        end = self._size if size is None or size < 0 else min(self._size, start + size)
        if end <= start:
            return b""
        for run_start, data in self._runs:
            if run_start <= start and end <= run_start + len(data):
                self._position = end
                return data[start - run_start : end - run_start]
        self.missed = self.missed or _NotRetained(start, end)
        raise self.missed


def _merged(ranges: Iterable[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """``ranges`` clipped to ``[0, size)``, sorted, overlapping and touching ones joined."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted((max(0, start), min(end, size)) for start, end in ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        elif start < end:
            merged.append((start, end))
    return merged


@dataclass(frozen=True)
class _Plan:
    """Where pyelftools will read in one member, as far as its head tells."""

    ranges: list[tuple[int, int]]
    """Byte ranges to keep from the start."""
    dynamic: tuple[int, int] | None = None
    """PT_DYNAMIC's file range: once streamed, it names the strings read (see :meth:`string_windows`)."""
    loads: tuple[tuple[int, int, int], ...] = ()
    """(p_offset, p_vaddr, p_filesz) of each PT_LOAD, to map DT_STRTAB to a file offset."""
    entry: struct.Struct | None = None
    """One Elf_Dyn entry (d_tag, d_val) in the file's class and byte order."""

    def string_windows(self, dynamic: bytes) -> list[tuple[int, int]]:
        """Windows at the strings of DT_NEEDED, DT_SONAME, DT_RPATH and DT_RUNPATH.

        patchelf and auditwheel move the dynamic string table after PT_DYNAMIC, and its
        strings can be anywhere in megabytes of symbol names: keeping a window at each one
        costs kilobytes.
        """
        if self.entry is None:
            return []
        values: list[int] = []
        table = size = None
        for tag, value in self.entry.iter_unpack(dynamic[: len(dynamic) - len(dynamic) % self.entry.size]):
            if tag == DT_NULL:
                break
            if tag in _DT_STRING_TAGS:
                values.append(value)
            elif tag == DT_STRTAB:
                table = value
            elif tag == DT_STRSZ:
                size = value
        if table is None or size is None:
            return []
        offset = next((start + table - vaddr for start, vaddr, length in self.loads if vaddr <= table < vaddr + length), None)
        if offset is None:
            return []
        # Not cut at the table's end: pyelftools reads strings in 64-byte steps, past a last short one.
        return [(offset + value, offset + value + _STRING_WINDOW) for value in values if value < size]


def _plan(head: bytes, size: int) -> _Plan:
    """The byte ranges pyelftools reads for the dynamic section, as far as the head tells.

    The ELF and program headers, the section header table, and everything from
    shortly before PT_DYNAMIC to the end when that is at most ``_TAIL`` bytes (the
    usual layout: a plain linker's dynamic string table is near the start, patchelf
    and auditwheel append what they move near the end), else windows around
    PT_DYNAMIC; the strings PT_DYNAMIC names are added once it has streamed past.  Every range is bounded, whatever the headers
    claim; a guess that misses costs another pass (see :func:`read_library`), never a
    wrong answer.
    """
    keep = [(0, len(head))]
    little, wide = head[5:6] == b"\x01", head[4:5] == b"\x02"
    from patched_wheels.elfdynamic import read_headers  # pyelftools: only once a library is read

    headers = read_headers(io.BytesIO(head), little=little, wide=wide, max_table=_MAX_TABLE)
    if headers is None:
        return _Plan(_merged(keep, size))  # not parseable from the head alone: parsing the kept head reports the real problem
    table_offset, table_length = headers.section_table
    keep.append((table_offset, table_offset + table_length))
    dynamic = None
    loads = []
    for kind, start, address, length in headers.segments:
        if kind == "PT_LOAD":
            loads.append((start, address, length))
        elif kind == "PT_DYNAMIC":
            dynamic = (start, min(start + length, start + _WINDOW, size))
            tail = dynamic[0] - _WINDOW
            keep.append((tail, size) if size - tail <= _TAIL else (tail, dynamic[1] + _WINDOW))
    if not headers.complete:
        return _Plan(_merged(keep, size))
    entry = struct.Struct(("<" if little else ">") + ("qQ" if wide else "iI"))
    return _Plan(_merged(keep, size), dynamic, tuple(loads), entry)


def _inflate_kept_ranges(
    wheel: Path, info: ZipMember, ranges: Sequence[tuple[int, int]] | None = None
) -> _SparseFile | bytes:
    """Inflate a member in 1 MiB steps, keeping only ``ranges`` (default: what :func:`_plan` names).

    Streaming through small, reused buffers avoids faulting in gigabytes of fresh
    pages (the single-call inflate spends more time in the kernel than inflating);
    each step still releases the GIL, so threads inflate in parallel.
    A member that is not an ELF file is returned as its first bytes only.
    """
    pieces = inflated_chunks(wheel, info)
    head = bytearray()
    for piece in pieces:
        head += piece
        if len(head) >= _HEAD_SIZE:
            break
    if head[:4] != ELF_MAGIC:
        pieces.close()
        return bytes(head[:_HEAD_SIZE])
    plan = _plan(bytes(head[:_HEAD_SIZE]), info.file_size) if ranges is None else _Plan(list(ranges))
    keep, dynamic = plan.ranges, plan.dynamic
    runs: list[tuple[int, bytearray]] = []
    produced = 0
    for piece in itertools.chain([bytes(head)], pieces):
        for start, end in keep:
            low, high = max(start, produced), min(end, produced + len(piece))
            if low < high:
                if runs and runs[-1][0] + len(runs[-1][1]) == low:
                    runs[-1][1].extend(piece[low - produced : high - produced])
                else:
                    runs.append((low, bytearray(piece[low - produced : high - produced])))
        produced += len(piece)
        if dynamic is not None and produced >= dynamic[1]:
            run = next((run for run in runs if run[0] <= dynamic[0] and dynamic[1] <= run[0] + len(run[1])), None)
            if run is not None:
                entries = bytes(run[1][dynamic[0] - run[0] : dynamic[1] - run[0]])
                extended = _merged([*keep, *plan.string_windows(entries)], info.file_size)
                if sum(end - start for start, end in extended) <= _MAX_KEPT:
                    keep = extended
            dynamic = None
    return _SparseFile(info.file_size, [(start, bytes(data)) for start, data in runs], keep)


def read_library(wheel: Path, info: ZipMember, path: str) -> ElfLibrary | None:
    """The dynamic section of one archive member, streamed, in bounded memory; None for a data-scheme
    member that is not an ELF file (a ``.so``-named file outside site-packages need not be a library).

    A read outside the kept ranges adds a window around it and streams the member
    again, at most ``_MAX_PASSES`` times and ``_MAX_KEPT`` bytes: a library whose
    dynamic section points all over the file is refused rather than held whole.
    A corrupt file fails on the kept ranges already (they are exact), so it is not inflated twice.
    """
    ranges = None
    for _ in range(_MAX_PASSES):
        kept = _inflate_kept_ranges(wheel, info, ranges)
        if isinstance(kept, bytes) and not kept.startswith(ELF_MAGIC) and data_scheme(path):
            return None
        try:
            return parse_elf(kept, wheel=wheel.name, path=path)
        except _NotRetained as missed:
            assert isinstance(kept, _SparseFile)  # bytes never raise it
            ranges = _merged([*kept.wanted, (missed.start - _WINDOW // 16, missed.end + _WINDOW)], info.file_size)
            if sum(end - start for start, end in ranges) > _MAX_KEPT:
                break
    raise ElfError(
        f"{wheel.name}: {path}: its dynamic section refers to data spread over more than "
        f"{_MAX_KEPT >> 20} MiB or {_MAX_PASSES} places; not read"
    )
