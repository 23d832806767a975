"""The shared-library graph of a set of wheels, read straight from the archives.

Every ``*.so`` / ``*.so.N`` member that installs into site-packages is read with
pyelftools for its SONAME, DT_NEEDED, DT_RPATH and DT_RUNPATH.  Each DT_NEEDED
name is resolved to a library of the set (by SONAME first, then by file name);
names no wheel provides are "system" dependencies: reported, never followed.

Why the members are inflated in full: ``.dynamic`` sits at ~97 % of these files
and deflate has no random access, so the whole member has to be inflated
anyway.  This module therefore streams each member through
:func:`patched_wheels.wheelfile.inflated_chunks` (python-isal's faster inflater
when it is installed; each step releases the GIL, so a thread per core really
runs in parallel), and keeps only windows around the byte ranges pyelftools reads
(so memory stays bounded whatever the member's size and layout).  Wheels are opened
as :class:`~patched_wheels.wheelfile.WheelReader` first: only a wheel we accept is
analysed.

Results are cached per wheel *content*: keyed by the wheel's sha256 (and the cache
schema), holding no file name, so a renamed copy hits and a wheel whose sha256 is
known (the hub's, pinned by the lock and verified by Bazel) needs no file at all when
its rows are cached -- the hub then need not even fetch it.  Inflating is what costs:
hashing a wheel that comes without a digest is far cheaper.
"""

from __future__ import annotations

import heapq
import io
import itertools
import json
import os
import posixpath
import re
import struct
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Mapping, Sequence

from elftools.common.exceptions import ELFError
from elftools.common.utils import struct_parse
from elftools.construct.lib.container import Container
from elftools.elf.dynamic import DynamicSection, DynamicSegment
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import Section, StringTableSection
from elftools.elf.structs import ELFStructs

from patched_wheels.errors import ElfError, UsageError
from patched_wheels.fsutil import hash_file, write_atomic
from patched_wheels.wheelfile import INFLATER_NAME as INFLATER_NAME  # re-exported: benchmarks report it
from patched_wheels.wheelfile import WheelReader, inflated_chunks

# libfoo.so, libfoo.so.12, libfoo.so.12.1.105, _C.cpython-311-x86_64-linux-gnu.so
_SHARED_LIBRARY_NAME = re.compile(r"\.so(\.\d+)*$")
# Wheel members under <dist>.data/purelib|platlib/ install into site-packages.
_DATA_TO_SITE_PACKAGES = re.compile(r"^[^/]+\.data/(?:purelib|platlib)/")
# Members under <dist>.data/data|scripts|headers/ install outside site-packages (pip: the prefix; rules_python:
# the wheel's repository), so their install path keeps the prefix.
_OTHER_SCHEME = re.compile(r"^(?P<dist>[^/]+)\.data/(?P<scheme>data|scripts|headers)/(?P<rest>.+)$")
# $ORIGIN as ld.so reads it in DT_RPATH/DT_RUNPATH: "${ORIGIN}", or "$ORIGIN" not followed by a name character.
ORIGIN_TOKEN = re.compile(r"\$(?:ORIGIN(?![A-Za-z0-9_])|\{ORIGIN\})")
# In every cache file name: rows of another layout are never read (2: keyed by sha256, rows without the file name;
# 3: data-scheme libraries included).
_CACHE_SCHEMA = 3
_SHA256 = re.compile(r"[0-9a-f]{64}")
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
_DT_NULL, _DT_STRTAB, _DT_STRSZ = 0, 5, 10
_DT_STRING_TAGS = frozenset({1, 14, 15, 29})  # DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH


@dataclass(frozen=True)
class ElfLibrary:
    """One shared library of a wheel, as the dynamic loader sees it."""

    wheel: str
    """File name of the wheel that ships it."""
    path: str
    """Path relative to site-packages once installed, e.g. ``nvidia/cusparse/lib/libcusparse.so.12``; for a
    data-scheme library its archive path, ``<dist>.data/data/...`` (see :func:`install_path`)."""
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


@dataclass(frozen=True)
class WheelRef:
    """One wheel of a set: the file name the graph reports it under, its sha256 and its file, each when known.

    The sha256 keys the ELF cache, so a wheel whose rows are cached needs no file (the hub does not fetch
    it); without one, the file is hashed.  A wheel with neither a file nor cached rows cannot be read.
    """

    filename: str
    sha256: str = ""
    """Hex digest of the file; empty: hash ``path`` when a cache is used."""
    path: Path | None = None

    def __post_init__(self) -> None:
        if self.sha256 and not _SHA256.fullmatch(self.sha256):
            raise UsageError(f"{self.filename}: sha256 {self.sha256!r} is not 64 lowercase hex digits")
        if self.path is not None and self.path.name != self.filename:
            raise UsageError(f"{self.path}: named {self.filename} in the wheel set; the file must have that name")

    @classmethod
    def of(cls, wheel: Path | str | WheelRef) -> WheelRef:
        """``wheel`` itself, or a file named by its path (its digest computed when needed)."""
        if isinstance(wheel, WheelRef):
            return wheel
        path = Path(wheel)
        return cls(path.name, path=path)


@dataclass(frozen=True)
class WheelScan:
    """The libraries of a set of wheels plus what it cost to find them."""

    libraries: tuple[ElfLibrary, ...]
    inflated_bytes: int
    """Bytes inflated in this run (0 for wheels answered from the cache)."""
    cached_wheels: int


@dataclass(frozen=True)
class LibraryGraph:
    """Libraries, their resolved dependency edges and a deps-first load order."""

    libraries: tuple[ElfLibrary, ...]
    dependencies: Mapping[ElfLibrary, tuple[ElfLibrary, ...]]
    """Resolved DT_NEEDED of each library, in DT_NEEDED order."""
    system: Mapping[ElfLibrary, tuple[str, ...]]
    """DT_NEEDED names no library of the set provides (libc, libcuda, ...)."""
    providers: Mapping[ElfLibrary, Mapping[str, ElfLibrary]]
    """For each library, the library of the set each resolved DT_NEEDED name stands for."""
    load_order: tuple[ElfLibrary, ...]
    """Every library after all of its dependencies; ties broken by (path, wheel)."""

    def closure(self, roots: Iterable[ElfLibrary]) -> set[ElfLibrary]:
        """``roots`` plus everything they need, transitively."""
        seen: set[ElfLibrary] = set()
        stack = list(roots)
        while stack:
            library = stack.pop()
            if library not in seen:
                seen.add(library)
                stack.extend(self.dependencies[library])
        return seen

    def ordered(self, libraries: Iterable[ElfLibrary]) -> list[ElfLibrary]:
        """``libraries`` in load order."""
        wanted = set(libraries)
        return [library for library in self.load_order if library in wanted]


def install_path(member: str) -> str | None:
    """Where an archive member lands: relative to site-packages, or, for the ``data``, ``scripts`` and
    ``headers`` schemes, the member's own path (its ``<dist>.data/<scheme>/`` prefix says where an
    installer puts it: see :func:`data_scheme`); None for a scheme no installer knows."""
    if _DATA_TO_SITE_PACKAGES.match(member):
        return _DATA_TO_SITE_PACKAGES.sub("", member, count=1)
    if member.split("/", 1)[0].endswith(".data"):
        return member if data_scheme(member) else None
    return member


def data_scheme(path: str) -> tuple[str, str, str] | None:
    """``(dist, scheme, rest)`` of an install path outside site-packages (``CyFES-2.7.data/data/cyfes/x.so`` ->
    ``("CyFES-2.7", "data", "cyfes/x.so")``); None for a site-packages path."""
    match = _OTHER_SCHEME.match(path)
    return (match["dist"], match["scheme"], match["rest"]) if match else None


def is_shared_library_name(path: str) -> bool:
    return bool(_SHARED_LIBRARY_NAME.search(posixpath.basename(path)))


def expand_origin(entry: str, directory: str) -> str:
    """A DT_RPATH/DT_RUNPATH entry with every ``$ORIGIN`` replaced by ``directory`` (the library's own), normalised."""
    return posixpath.normpath(ORIGIN_TOKEN.sub(lambda _: directory or ".", entry))


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


def parse_elf(data: bytes | BinaryIO, *, wheel: str, path: str) -> ElfLibrary:
    """Read the dynamic section of one ELF file (bytes or a seekable stream) with pyelftools."""
    where = f"{wheel}: {path}"
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    stream.seek(0)
    magic = stream.read(4)
    if magic != b"\x7fELF":
        raise ElfError(f"{where}: not an ELF file (starts with {magic!r})")
    soname: str | None = None
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    stream.seek(0, os.SEEK_END)
    size = stream.tell()
    try:
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
    except ElfError:
        raise
    except Exception as error:  # on hostile input pyelftools raises ELFError, struct.error, OverflowError, AssertionError, ...
        missed = getattr(stream, "missed", None)
        if missed is not None:  # pyelftools wraps what the stream raises in its own errors
            raise missed from None
        raise ElfError(f"{where}: truncated or corrupt ELF file ({type(error).__name__}: {error})") from error
    return ElfLibrary(wheel, path, soname, tuple(needed), tuple(rpath), tuple(runpath))


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
            if tag == _DT_NULL:
                break
            if tag in _DT_STRING_TAGS:
                values.append(value)
            elif tag == _DT_STRTAB:
                table = value
            elif tag == _DT_STRSZ:
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
    try:
        stream = io.BytesIO(head)
        little, wide = head[5] == 1, head[4] == 2
        structs = ELFStructs(little_endian=little, elfclass=64 if wide else 32)
        structs.create_basic_structs()
        header = struct_parse(structs.Elf_Ehdr, stream, 0)
        structs.create_advanced_structs(header["e_type"], header["e_machine"], header["e_ident"]["EI_OSABI"])
        table = min(header["e_shnum"] * header["e_shentsize"], _MAX_TABLE)
        keep.append((header["e_shoff"], header["e_shoff"] + table))
        dynamic = None
        loads = []
        for index in range(header["e_phnum"]):
            segment = struct_parse(structs.Elf_Phdr, stream, header["e_phoff"] + index * header["e_phentsize"])
            if segment["p_type"] == "PT_LOAD":
                loads.append((segment["p_offset"], segment["p_vaddr"], segment["p_filesz"]))
            elif segment["p_type"] == "PT_DYNAMIC":
                start = segment["p_offset"]
                dynamic = (start, min(start + segment["p_filesz"], start + _WINDOW, size))
                tail = dynamic[0] - _WINDOW
                keep.append((tail, size) if size - tail <= _TAIL else (tail, dynamic[1] + _WINDOW))
    except (ELFError, struct.error, ValueError, IndexError):
        return _Plan(_merged(keep, size))  # not parseable from the head alone: parsing the kept head reports the real problem
    entry = struct.Struct(("<" if little else ">") + ("qQ" if wide else "iI"))
    return _Plan(_merged(keep, size), dynamic, tuple(loads), entry)


def _inflate_kept_ranges(
    wheel: Path, info: zipfile.ZipInfo, ranges: Sequence[tuple[int, int]] | None = None
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
    if head[:4] != b"\x7fELF":
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


def read_library(wheel: Path, info: zipfile.ZipInfo, path: str) -> ElfLibrary | None:
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
        if isinstance(kept, bytes) and not kept.startswith(b"\x7fELF") and data_scheme(path):
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


def _library_members(wheel: Path) -> list[tuple[zipfile.ZipInfo, str]]:
    """The shared libraries of ``wheel`` with their install paths, once the wheel passed the checks
    of a wheel we accept (safe member paths, RECORD, names and versions)."""
    with WheelReader(wheel) as reader:
        members = []
        for name in reader.members():
            path = install_path(name)
            if path is not None and not name.endswith("/") and is_shared_library_name(path):
                members.append((reader.info(name), path))
    return members


class _Cache:
    """Per-wheel ELF rows on disk, one file per wheel content: ``<sha256>.v<schema>.json``.

    The rows hold no wheel file name (it is filled in on load), so a renamed copy of a wheel hits.
    Best effort both ways: an unreadable, corrupt or foreign entry is a miss (read again and
    rewritten), and an unwritable directory only costs the next run a read: neither fails the command.
    """

    _FIELDS = frozenset(field for field in ElfLibrary.__dataclass_fields__ if field != "wheel")

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _file(self, sha256: str) -> Path:
        return self.directory / f"{sha256}.v{_CACHE_SCHEMA}.json"

    def load(self, sha256: str, wheel: str) -> list[ElfLibrary] | None:
        """The libraries of the wheel with this digest, reported as shipped by ``wheel``; None on a miss."""
        try:
            rows = json.loads(self._file(sha256).read_bytes())
            if not isinstance(rows, list):
                raise TypeError("cached rows are not a list")
            return [_library_from_row(row, wheel) for row in rows]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def store(self, sha256: str, libraries: Sequence[ElfLibrary]) -> None:
        rows = [{key: value for key, value in asdict(library).items() if key != "wheel"} for library in libraries]
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_atomic(self._file(sha256), json.dumps(rows).encode("utf-8"))
        except OSError:
            pass


def _library_from_row(row: Mapping[str, object], wheel: str) -> ElfLibrary:
    """One cached row as a library of ``wheel``; ValueError or TypeError when it is not one this schema wrote."""
    if set(row) != _Cache._FIELDS:
        raise ValueError(f"cached row with keys {sorted(row)}")
    strings = {key: row[key] for key in ("needed", "rpath", "runpath")}
    if not isinstance(row["path"], str) or not isinstance(row["soname"], (str, type(None))):
        raise TypeError("cached path or soname is not a string")
    if not all(isinstance(value, list) and all(isinstance(item, str) for item in value) for value in strings.values()):
        raise TypeError("cached needed, rpath or runpath is not a list of strings")
    return ElfLibrary(wheel, row["path"], row["soname"], *(tuple(value) for value in strings.values()))


def default_cache_dir() -> Path:
    """The user's ELF cache, shared by the commands and (unless overridden) the Bazel hub."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rules_patched_wheels" / "elfgraph"


def cached_digests(digests: Iterable[str], cache_dir: Path) -> list[str]:
    """Those of ``digests`` whose rows ``cache_dir`` holds, readable: such wheels need no file to be scanned."""
    cache = _Cache(cache_dir)
    return [digest for digest in dict.fromkeys(digests) if _SHA256.fullmatch(digest) and cache.load(digest, "") is not None]


def _digest(wheel: WheelRef) -> str:
    if wheel.sha256 or wheel.path is None:
        return wheel.sha256
    return hash_file(wheel.path)


def scan_wheels(
    wheels: Sequence[Path | str | WheelRef], *, cache_dir: Path | None = None, workers: int | None = None
) -> WheelScan:
    """Read the dynamic section of every shared library in ``wheels``.

    With ``cache_dir``, a wheel whose rows are cached (by sha256) is not opened at all; the others are
    read and their rows stored.  Members are inflated largest first on ``workers`` threads (default: one
    per core), so the biggest library never starts last and leaves a core idle.
    """
    refs = list({(ref.path.resolve() if ref.path else ref.filename): ref for ref in map(WheelRef.of, wheels)}.values())
    names = [ref.filename for ref in refs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise UsageError(f"{duplicates[0]}: two different files with this name are given")
    for ref in refs:
        if ref.path is not None and not ref.path.is_file():
            raise UsageError(f"{ref.path}: no such wheel")
    cache = None if cache_dir is None else _Cache(cache_dir)
    found: dict[str, list[ElfLibrary]] = {}
    jobs: list[tuple[Path, zipfile.ZipInfo, str]] = []
    scanned: list[tuple[WheelRef, str]] = []
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        digests = list(pool.map(_digest, refs)) if cache is not None else [ref.sha256 for ref in refs]
        for ref, digest in zip(refs, digests):
            cached = None if cache is None or not digest else cache.load(digest, ref.filename)
            if cached is not None:
                found[ref.filename] = cached
                continue
            if ref.path is None:
                raise UsageError(f"{ref.filename}: no file given, and no ELF rows are cached for its sha256 {digest or '(none)'}")
            found[ref.filename] = []
            scanned.append((ref, digest))
            jobs.extend((ref.path, info, install) for info, install in _library_members(ref.path))
        jobs.sort(key=lambda job: (-job[1].file_size, job[0].name, job[1].filename))
        for library in pool.map(lambda job: read_library(*job), jobs):
            if library is not None:
                found[library.wheel].append(library)
    for ref, digest in scanned:
        found[ref.filename].sort(key=lambda library: library.path)
        if cache is not None:
            cache.store(digest, found[ref.filename])
    libraries = tuple(library for ref in refs for library in found[ref.filename])
    return WheelScan(libraries, sum(job[1].file_size for job in jobs), len(refs) - len(scanned))


def _pick(library: ElfLibrary, candidates: Sequence[ElfLibrary]) -> ElfLibrary | None:
    """The provider of one DT_NEEDED name: one from the same wheel if any, else the first by (path, wheel)."""
    others = [candidate for candidate in candidates if candidate != library]
    if not others:
        return None
    same_wheel = [candidate for candidate in others if candidate.wheel == library.wheel]
    return min(same_wheel or others, key=_order_key)


def _order_key(library: ElfLibrary) -> tuple[str, str]:
    return (library.path, library.wheel)


def build_graph(libraries: Sequence[ElfLibrary]) -> LibraryGraph:
    """Resolve DT_NEEDED edges and order the libraries deps first; a cycle is an error naming it."""
    by_soname: dict[str, list[ElfLibrary]] = {}
    by_filename: dict[str, list[ElfLibrary]] = {}
    for library in libraries:
        if library.soname:
            by_soname.setdefault(library.soname, []).append(library)
        by_filename.setdefault(library.filename, []).append(library)
    providers: dict[ElfLibrary, dict[str, ElfLibrary]] = {}
    system: dict[ElfLibrary, tuple[str, ...]] = {}
    for library in libraries:
        resolved: dict[str, ElfLibrary] = {}
        for name in library.needed:
            provider = _pick(library, by_soname.get(name, ())) or _pick(library, by_filename.get(name, ()))
            if provider is not None:
                resolved[name] = provider
        providers[library] = resolved
        system[library] = tuple(name for name in library.needed if name not in resolved)
    dependencies = {library: tuple(dict.fromkeys(providers[library].values())) for library in libraries}
    ordered = tuple(sorted(libraries, key=_order_key))
    return LibraryGraph(ordered, dependencies, system, providers, _topological_order(ordered, dependencies))


def _topological_order(
    libraries: Sequence[ElfLibrary], dependencies: Mapping[ElfLibrary, tuple[ElfLibrary, ...]]
) -> tuple[ElfLibrary, ...]:
    """Kahn's algorithm with a heap, so equal-rank libraries come out in (path, wheel) order."""
    waiting_on = {library: len(dependencies[library]) for library in libraries}
    dependents: dict[ElfLibrary, list[ElfLibrary]] = {library: [] for library in libraries}
    for library in libraries:
        for dependency in dependencies[library]:
            dependents[dependency].append(library)
    ready = [(_order_key(library), library) for library, count in waiting_on.items() if count == 0]
    heapq.heapify(ready)
    order: list[ElfLibrary] = []
    while ready:
        _, library = heapq.heappop(ready)
        order.append(library)
        for dependent in dependents[library]:
            waiting_on[dependent] -= 1
            if waiting_on[dependent] == 0:
                heapq.heappush(ready, (_order_key(dependent), dependent))
    if len(order) != len(libraries):
        stuck = {library for library, count in waiting_on.items() if count > 0}
        cycle = _find_cycle(dependencies, stuck)
        raise ElfError("dependency cycle between shared libraries: " + " -> ".join(map(str, cycle)))
    return tuple(order)


def _find_cycle(
    dependencies: Mapping[ElfLibrary, tuple[ElfLibrary, ...]], stuck: set[ElfLibrary]
) -> list[ElfLibrary]:
    """Walk from the first stuck library along stuck dependencies until a library repeats.

    Every stuck library has at least one stuck dependency (that is why it is
    stuck), so the walk cannot end before it closes a cycle.
    """
    walk = [min(stuck, key=_order_key)]
    position = {walk[0]: 0}
    while True:
        following = min((d for d in dependencies[walk[-1]] if d in stuck), key=_order_key)
        if following in position:
            return walk[position[following] :] + [following]
        position[following] = len(walk)
        walk.append(following)


def read_graph(
    wheels: Sequence[Path | str | WheelRef], *, cache_dir: Path | None = None, workers: int | None = None
) -> LibraryGraph:
    """Scan ``wheels`` and build their library graph."""
    return build_graph(scan_wheels(wheels, cache_dir=cache_dir, workers=workers).libraries)


def format_graph(graph: LibraryGraph) -> str:
    """Human-readable listing: each library with its edges, then the load order."""
    lines: list[str] = []
    for library in graph.libraries:
        lines.append(str(library))
        if library.soname:
            lines.append(f"  soname:  {library.soname}")
        if library.rpath:
            lines.append(f"  rpath:   {':'.join(library.rpath)}")
        if library.runpath:
            lines.append(f"  runpath: {':'.join(library.runpath)}")
        for dependency in graph.dependencies[library]:
            lines.append(f"  needs    {dependency}")
        for name in graph.system[library]:
            lines.append(f"  needs    {name} (system, not followed)")
    lines.append("load order (dependencies first):")
    width = len(str(len(graph.load_order)))
    for index, library in enumerate(graph.load_order, start=1):
        lines.append(f"  {index:>{width}}. {library}")
    return "\n".join(lines)


def graph_as_json(graph: LibraryGraph) -> dict[str, object]:
    """The graph as plain data, for tools that consume ``patched-wheels graph --json``."""
    return {
        "libraries": [
            {
                **asdict(library),
                "dependencies": [
                    {"wheel": dependency.wheel, "path": dependency.path} for dependency in graph.dependencies[library]
                ],
                "system": list(graph.system[library]),
            }
            for library in graph.libraries
        ],
        "load_order": [{"wheel": library.wheel, "path": library.path} for library in graph.load_order],
    }
