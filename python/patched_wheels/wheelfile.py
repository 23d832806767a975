"""Read and write wheels member by member, without recompressing what does not change.

A wheel is a zip archive whose ``<name>-<version>.dist-info/RECORD`` lists every member
with its sha256 and size.  Patching a 670 MB torch wheel touches a few kilobytes, so
the writer copies every unchanged member's *compressed* bytes straight from the input
(CRC and sizes kept, RECORD row reused) and only deflates what was rewritten.  The
standard library's :mod:`zipfile` parses the central directory; it cannot copy a
member without inflating and deflating it again, which is why the member-level
reading and writing below is done by hand.

What a wheel must be to be accepted is decided here, once, for every command: the
checks that need no decompression (one ``.dist-info`` with METADATA, WHEEL and RECORD;
RECORD lists exactly the members with the zip's sizes; members are regular files with
safe, distinct paths) plus METADATA and WHEEL themselves (UTF-8; name and version the
same in the file name, the ``.dist-info`` directory and METADATA) run when a wheel is
opened, and again on what :class:`WheelWriter` wrote before it is renamed into place.
Inflating stops at the size the zip declares, so memory never depends on how far a
member would inflate.  Members that are read are hash-checked against RECORD as they
stream; ``verify=True`` checks every member, inflating on all cores.
"""

from __future__ import annotations

import base64
import csv
import errno
import hashlib
import io
import os
import re
import stat
import struct
import threading
import time
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, Sequence

from packaging.tags import Tag
from packaging.utils import (
    BuildTag,
    InvalidWheelFilename,
    NormalizedName,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from patched_wheels import metadata as core_metadata
from patched_wheels.errors import PatchedWheelsError
from patched_wheels.fsutil import create_temp_file, current_umask
from patched_wheels.names import is_valid_project_name

try:  # Inflating is the cost floor of --verify and of the ELF scan; ISA-L does it ~2-3x faster than zlib.
    from isal import isal_zlib as _inflate_zlib
except ImportError:  # pragma: no cover - depends on the optional "fast" extra
    _inflate_zlib = zlib  # type: ignore[assignment]

INFLATER_NAME = "isal" if _inflate_zlib is not zlib else "zlib"
"""Which inflater members are read with, for benchmarks to report."""

__all__ = [
    "RecordEntry",
    "WheelFilename",
    "WheelReader",
    "WheelWriter",
    "generated_members",
    "inflated_chunks",
    "is_safe_member_path",
    "member_data_offset",
    "parse_record",
    "serialize_record",
]

CHUNK_SIZE = 1 << 20
"""Bytes per read/inflate step: large enough to amortise syscalls, small enough for RSS."""

_STORED, _DEFLATED = zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED
_FLAG_ENCRYPTED = 0x1
_FLAG_DATA_DESCRIPTOR = 0x8
_FLAG_DEFLATE_OPTIONS = 0x6  # informational "compression level" bits, kept on raw copies
_FLAG_UTF8 = 0x800
# Flags whose meaning is known and harmless; others (strong encryption, patched data, masked
# headers) make readers refuse the member, and a raw copy would carry them into the output.
_FLAGS_UNDERSTOOD = _FLAG_DEFLATE_OPTIONS | _FLAG_DATA_DESCRIPTOR | _FLAG_UTF8
_UNIX = 3  # "version made by" host system whose external_attr carries st_mode

# Conservative like zipfile: some readers treat 32-bit fields as signed.
ZIP64_LIMIT = (1 << 31) - 1
ZIP_COUNT_LIMIT = 0xFFFF  # this value itself is the "see ZIP64 record" sentinel
_VERSION_DEFAULT, _VERSION_ZIP64 = 20, 45

_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")
_LOCAL_SIG = 0x04034B50
_LOCAL_TIMESTAMP_OFFSET = 10  # (time, date) inside a local header
_CENTRAL_HEADER = struct.Struct("<IHHHHHHIIIHHHHHII")
_CENTRAL_SIG = 0x02014B50
_END = struct.Struct("<IHHHHIIH")
_END_SIG = 0x06054B50
_END64 = struct.Struct("<IQHHIIQQQQ")
_END64_SIG = 0x06064B50
_END64_LOCATOR = struct.Struct("<IIQI")
_END64_LOCATOR_SIG = 0x07064B50
_ZIP64_EXTRA_ID = 0x0001

_GENERATED_FILES = ("RECORD", "RECORD.jws", "RECORD.p7s")
_REQUIRED_FILES = ("METADATA", "WHEEL")
_WEAK_HASHES = frozenset({"md5", "sha1"})
# RECORD digests must have a fixed length to be compared (SHAKE's is chosen by the caller): the
# length of each one's urlsafe base64 without padding.
_ENCODED_DIGEST_LENGTH = {
    name: (4 * hashlib.new(name).digest_size + 2) // 3
    for name in hashlib.algorithms_guaranteed
    if not name.startswith("shake_")
}
_URLSAFE_BASE64 = re.compile(r"[A-Za-z0-9_-]*")
_ASCII_DIGITS = re.compile(r"[0-9]+")
_SUPPORTED_WHEEL_VERSION = 1  # major Wheel-Version pip installs


# --------------------------------------------------------------------------- names


@dataclass(frozen=True)
class WheelFilename:
    """A parsed wheel filename that remembers the original spelling of its parts.

    ``packaging`` normalises the name and version; the output wheel must keep the input's
    distribution spelling, build tag and platform tags, so ``stem`` is kept verbatim.
    """

    name: NormalizedName
    version: Version
    build_tag: BuildTag
    tags: frozenset[Tag]
    stem: str

    @classmethod
    def parse(cls, filename: str) -> WheelFilename:
        try:
            name, version, build_tag, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename as error:
            raise PatchedWheelsError(f"{filename}: not a valid wheel filename ({error})") from None
        if not is_valid_project_name(filename.split("-", 1)[0]):
            raise PatchedWheelsError(f"{filename}: not a valid wheel filename (invalid project name)")
        return cls(name, version, build_tag, tags, filename[: -len(".whl")])

    def with_version(self, version: str) -> str:
        """The same filename with only the version component replaced."""
        parts = self.stem.split("-")
        parts[1] = version
        return "-".join(parts) + ".whl"


# --------------------------------------------------------------------------- RECORD


@dataclass(frozen=True)
class RecordEntry:
    """One RECORD row: ``path,algorithm=urlsafe-b64-digest,size`` (hash/size may be empty)."""

    path: str
    hash: str
    size: int | None

    @property
    def algorithm(self) -> str:
        return self.hash.partition("=")[0]

    @property
    def digest(self) -> bytes:
        encoded = self.hash.partition("=")[2]
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))


def record_hash(digest: bytes, algorithm: str = "sha256") -> str:
    """RECORD's hash notation: urlsafe base64 without padding (PEP 376 / wheel spec)."""
    return f"{algorithm}=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def parse_record(data: bytes, *, origin: str) -> list[RecordEntry]:
    """Parse RECORD bytes, rejecting malformed rows with the row number in ``origin``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PatchedWheelsError(f"{origin}: not UTF-8") from None
    entries = []
    for line_number, row in enumerate(csv.reader(io.StringIO(text, newline="")), start=1):
        if not row:
            continue
        if len(row) != 3:
            raise PatchedWheelsError(f"{origin}: row {line_number}: expected 3 fields, got {len(row)}")
        path, hash_, size = row
        if hash_:
            algorithm, sep, encoded = hash_.partition("=")
            if not sep or not encoded or algorithm not in _ENCODED_DIGEST_LENGTH:
                raise PatchedWheelsError(f"{origin}: row {line_number}: bad hash {hash_!r} for {path}")
            if algorithm in _WEAK_HASHES:
                raise PatchedWheelsError(f"{origin}: row {line_number}: {algorithm} is not allowed ({path})")
            if len(encoded) != _ENCODED_DIGEST_LENGTH[algorithm] or not _URLSAFE_BASE64.fullmatch(encoded):
                raise PatchedWheelsError(f"{origin}: row {line_number}: bad {algorithm} digest {encoded!r} for {path}")
        if size and not _ASCII_DIGITS.fullmatch(size):
            raise PatchedWheelsError(f"{origin}: row {line_number}: bad size {size!r} for {path}")
        entries.append(RecordEntry(path, hash_, int(size) if size else None))
    return entries


def serialize_record(entries: Iterable[RecordEntry]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for entry in entries:
        writer.writerow((entry.path, entry.hash, "" if entry.size is None else entry.size))
    return buffer.getvalue().encode("utf-8")


# --------------------------------------------------------------------------- reading


# Absolute, "C:"-style, backslashes, NUL, and empty/"."/".." components (a final "/" marks a directory).
_UNSAFE_PATH = re.compile(r"^/|^[^/]*:|[\\\0]|(?:^|/)\.{0,2}(?=/|$)")


def is_safe_member_path(name: str) -> bool:
    """Whether installing ``name`` stays inside the target: relative, POSIX, no ``..``/``.``/empty parts."""
    path = name[:-1] if name.endswith("/") else name
    return bool(name) and _UNSAFE_PATH.search(path) is None


def generated_members(dist_info: str) -> frozenset[str]:
    """RECORD and its signatures: listed in RECORD without a hash, and never copied into a rewritten
    wheel (RECORD is regenerated; signatures of the old RECORD would be stale)."""
    return frozenset(f"{dist_info}/{name}" for name in _GENERATED_FILES)


def _encoded_name(info: zipfile.ZipInfo) -> bytes:
    if info.flag_bits & _FLAG_UTF8:
        return info.filename.encode("utf-8")
    try:
        return info.filename.encode("ascii")  # the common case, and much faster than cp437
    except UnicodeEncodeError:
        return info.filename.encode("cp437")


class WheelReader:
    """An opened wheel that passed the checks of a wheel we accept (see the module docstring).

    Member data is read with ``os.pread`` on one descriptor, so threads can inflate
    different members at the same time without sharing a file position.
    ``filename`` is the name the file stands for when it differs from the path's
    (the writer checks its temporary file under the final name).
    """

    path: Path
    name: str
    """The wheel's file name, as errors name it."""
    filename: WheelFilename
    dist_info: str
    data_dir: str

    def __init__(self, path: Path | str, *, verify: bool = False, filename: str | None = None) -> None:
        self.path = Path(path)
        self.name = filename or self.path.name
        self.filename = WheelFilename.parse(self.name)
        try:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        except OSError as error:
            raise PatchedWheelsError(f"{self.path}: cannot read ({error.strerror or error})") from None
        try:
            self._infos = self._index_members(self._central_directory(), os.fstat(self._fd).st_size)
            self.dist_info = self._find_dist_info()
            self.data_dir = self.dist_info[: -len(".dist-info")] + ".data"
            self._record = self._load_record()
            self._metadata = self._check_metadata()
            self._check_wheel_file()
            if verify:
                self.verify()
        except BaseException:
            os.close(self._fd)
            raise

    # -- context management

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> WheelReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- public queries

    def members(self) -> list[str]:
        return list(self._infos)

    def __contains__(self, name: str) -> bool:
        return name in self._infos

    def info(self, name: str) -> zipfile.ZipInfo:
        """The central directory entry of ``name`` (checked: sizes, offsets, method)."""
        try:
            return self._infos[name]
        except KeyError:
            raise PatchedWheelsError(f"{self.name}: no member {name}") from None

    def file_size(self, name: str) -> int:
        return self.info(name).file_size

    def mode(self, name: str) -> int | None:
        """Unix permission bits, or None when the archiver did not record them."""
        info = self.info(name)
        if info.create_system != _UNIX or not info.external_attr >> 16:
            return None
        return stat.S_IMODE(info.external_attr >> 16)

    def record_entry(self, name: str) -> RecordEntry | None:
        """The RECORD row of ``name`` (None for directory entries)."""
        return self._record.get(name)

    def open(self, name: str) -> BinaryIO:
        """Stream a member's content; reading it to the end checks it against RECORD."""
        return io.BufferedReader(_ChunkStream(self._checked_chunks(name)), CHUNK_SIZE)  # type: ignore[return-value]

    def read(self, name: str) -> bytes:
        return b"".join(self._checked_chunks(name))

    def metadata(self) -> bytes:
        """METADATA's bytes (read and checked when the wheel was opened)."""
        return self._metadata

    def verify(self) -> None:
        """Inflate and hash every member on all cores; raise on the first mismatch.

        Largest members are started first so that one huge library (torch's
        libtorch_cuda.so is half the wheel) runs beside all the small ones.
        """
        names = sorted(
            (name for name in self._infos if name in self._record and self._record[name].hash),
            key=lambda name: -self._infos[name].compress_size,
        )
        # One long-lived worker per core pulls names from a shared list: a task per
        # member would cost more than hashing tens of thousands of tiny files.
        pending = iter(names)
        lock = threading.Lock()
        failed = threading.Event()

        def work() -> None:
            while not failed.is_set():
                with lock:
                    name = next(pending, None)
                if name is None:
                    return
                try:
                    self._drain(name)
                except BaseException:
                    failed.set()
                    raise

        workers = max(1, min(len(names), os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="verify") as executor:
            futures = [executor.submit(work) for _ in range(workers)]
        for future in futures:
            future.result()

    # -- internals shared with WheelWriter

    def _data_offset(self, info: zipfile.ZipInfo) -> int:
        return member_data_offset(self._fd, info, wheel=self.name)

    def _inflated_chunks(self, info: zipfile.ZipInfo) -> Iterator[bytes]:
        return _member_chunks(self._fd, info, wheel=self.name)

    def _checked_chunks(self, name: str) -> Iterator[bytes]:
        info = self.info(name)
        entry = self._record.get(name)
        hasher = hashlib.new(entry.algorithm) if entry is not None and entry.hash else None
        size = 0
        for chunk in self._inflated_chunks(info):
            size += len(chunk)
            if hasher is not None:
                hasher.update(chunk)
            yield chunk
        if size != info.file_size:
            raise PatchedWheelsError(f"{self.name}: {name}: inflated to {size} bytes, zip says {info.file_size}")
        if hasher is not None and entry is not None and hasher.digest() != entry.digest:
            raise PatchedWheelsError(f"{self.name}: {name}: content does not match its RECORD hash")

    def _drain(self, name: str) -> None:
        for _ in self._checked_chunks(name):
            pass

    # -- cheap structural checks (no decompression)

    def _central_directory(self) -> list[zipfile.ZipInfo]:
        try:
            with zipfile.ZipFile(open(self._fd, "rb", closefd=False)) as archive:
                return archive.infolist()
        except OSError as error:
            raise PatchedWheelsError(f"{self.path}: cannot read ({error.strerror or error})") from None
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, struct.error, IndexError) as error:
            raise PatchedWheelsError(f"{self.path}: not a zip archive or truncated ({error})") from None
        except NotImplementedError as error:  # "zip file version 6.3": a feature zipfile lacks
            raise PatchedWheelsError(f"{self.path}: unsupported zip archive ({error})") from None

    def _index_members(self, infos: Sequence[zipfile.ZipInfo], file_size: int) -> dict[str, zipfile.ZipInfo]:
        indexed: dict[str, zipfile.ZipInfo] = {}
        layout = _MemberLayout()
        for info in infos:
            name = info.filename
            where = f"{self.name}: member {name!r}"
            if not is_safe_member_path(name):
                raise PatchedWheelsError(f"{where}: unsafe path (absolute, '..' or empty component)")
            if name in indexed:
                raise PatchedWheelsError(f"{where}: duplicate member name")
            conflict = layout.conflict(name)
            if conflict:
                raise PatchedWheelsError(f"{where}: {conflict}")
            if info.flag_bits & _FLAG_ENCRYPTED:
                raise PatchedWheelsError(f"{where}: encrypted members are not supported")
            if info.flag_bits & ~_FLAGS_UNDERSTOOD:
                raise PatchedWheelsError(f"{where}: zip flags {info.flag_bits:#06x} are not supported")
            if info.compress_type not in (_STORED, _DEFLATED):
                raise PatchedWheelsError(f"{where}: compression method {info.compress_type} is not supported")
            if info.compress_type == _STORED and info.compress_size != info.file_size:
                raise PatchedWheelsError(f"{where}: stored with {info.compress_size} bytes but {info.file_size} declared")
            if info.header_offset < 0 or info.header_offset + _LOCAL_HEADER.size + info.compress_size > file_size:
                raise PatchedWheelsError(f"{where}: data extends past the end of the file (truncated?)")
            kind = stat.S_IFMT(info.external_attr >> 16) if info.create_system == _UNIX else 0
            if kind not in (0, stat.S_IFREG, stat.S_IFDIR):  # archivers disagree on directories' bits, not on links
                raise PatchedWheelsError(f"{where}: not a regular file (a symbolic link or special file)")
            layout.add(name)
            indexed[name] = info
        return indexed

    def _find_dist_info(self) -> str:
        """The one ``<name>-<version>.dist-info`` directory, agreeing with the file name (pip's rule)."""
        top_level = {name.split("/", 1)[0] for name in self._infos if "/" in name}
        found = sorted(directory for directory in top_level if directory.endswith(".dist-info"))
        expected = f"expected one {self.filename.name}-<version>.dist-info directory"
        if len(found) != 1:
            raise PatchedWheelsError(f"{self.name}: {expected}, found: {', '.join(found) or 'none'}")
        directory = found[0]
        distribution, _, version = directory[: -len(".dist-info")].rpartition("-")
        if canonicalize_name(distribution) != self.filename.name:
            raise PatchedWheelsError(f"{self.name}: {expected}, found: {directory}")
        if _parse_version(version) != self.filename.version:
            raise PatchedWheelsError(
                f"{self.name}: {directory}: version {version!r} differs from the file name's {self.filename.version}"
            )
        return directory

    def _load_record(self) -> dict[str, RecordEntry]:
        record_name = f"{self.dist_info}/RECORD"
        origin = f"{self.name}: {record_name}"
        if record_name not in self._infos:
            raise PatchedWheelsError(f"{origin}: missing")
        record: dict[str, RecordEntry] = {}
        unhashed_allowed = generated_members(self.dist_info)
        for entry in parse_record(b"".join(self._inflated_chunks(self._infos[record_name])), origin=origin):
            if entry.path in record:
                raise PatchedWheelsError(f"{origin}: {entry.path} is listed twice")
            info = self._infos.get(entry.path)
            if info is None or entry.path.endswith("/"):
                raise PatchedWheelsError(f"{origin}: lists {entry.path}, which is not in the wheel")
            if not entry.hash and entry.path not in unhashed_allowed:
                raise PatchedWheelsError(f"{origin}: {entry.path} has no hash")
            if entry.size is not None and entry.size != info.file_size:
                raise PatchedWheelsError(
                    f"{origin}: {entry.path} has size {entry.size} in RECORD but {info.file_size} in the zip"
                )
            if entry.hash and entry.size is None:
                raise PatchedWheelsError(f"{origin}: {entry.path} has no size")
            record[entry.path] = entry
        for name in self._infos:
            if not name.endswith("/") and name not in record and name not in unhashed_allowed:
                raise PatchedWheelsError(f"{origin}: does not list {name}")
        for required in _REQUIRED_FILES:
            if f"{self.dist_info}/{required}" not in self._infos:
                raise PatchedWheelsError(f"{self.name}: {self.dist_info}/{required}: missing")
        return record

    # -- METADATA and WHEEL (small members, read once)

    def _read_utf8(self, name: str) -> bytes:
        data = self.read(name)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise PatchedWheelsError(f"{self.name}: {name}: not UTF-8 (byte {error.start})") from None
        return data

    def _check_metadata(self) -> bytes:
        """METADATA's bytes, once its Name and Version agree with the file name (pip refuses a
        mismatch at install time; ``patch`` would otherwise re-version the wrong release)."""
        member = f"{self.dist_info}/METADATA"
        data = self._read_utf8(member)
        where = f"{self.name}: {member}"
        names = core_metadata.field_values(data, "Name")
        versions = core_metadata.field_values(data, "Version")
        if len(names) != 1 or canonicalize_name(names[0]) != self.filename.name:
            raise PatchedWheelsError(
                f"{where}: names project {', '.join(names) or 'none'}, the file name {self.filename.name}"
            )
        if len(versions) != 1 or _parse_version(versions[0]) != self.filename.version:
            raise PatchedWheelsError(
                f"{where}: has version {', '.join(versions) or 'none'}, the file name {self.filename.version}"
            )
        return data

    def _check_wheel_file(self) -> None:
        """WHEEL is UTF-8 and declares a Wheel-Version pip installs."""
        member = f"{self.dist_info}/WHEEL"
        data = self._read_utf8(member)
        versions = core_metadata.field_values(data, "Wheel-Version")
        major = versions[0].split(".", 1)[0] if len(versions) == 1 else ""
        if not (_ASCII_DIGITS.fullmatch(major) and int(major) == _SUPPORTED_WHEEL_VERSION):
            found = ", ".join(versions) or "none"
            raise PatchedWheelsError(f"{self.name}: {member}: Wheel-Version {found} is not 1.x")


def _parse_version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


class _MemberLayout:
    """The paths of a wheel's members as a tree: a file must not stand where a directory is.

    A member under another member's path (``a.py`` and ``a.py/b``) cannot be unpacked;
    installers fail half-way or overwrite one with the other.
    """

    def __init__(self) -> None:
        self._files: set[str] = set()
        self._directories: set[str] = set()

    def conflict(self, name: str) -> str | None:
        """Why ``name`` cannot be added, or None."""
        path = name.rstrip("/")
        if path in (self._files if name.endswith("/") else self._directories):
            return f"{path} is a file, not a directory" if name.endswith("/") else f"{path} is a directory of other members"
        parent = path.rpartition("/")[0]
        while parent and parent not in self._directories:  # a known directory's parents are known too
            if parent in self._files:
                return f"{parent} is a file, not a directory"
            parent = parent.rpartition("/")[0]
        return None

    def add(self, name: str) -> None:
        path = name.rstrip("/")
        (self._directories if name.endswith("/") else self._files).add(path)
        parent = path.rpartition("/")[0]
        while parent and parent not in self._directories:
            self._directories.add(parent)
            parent = parent.rpartition("/")[0]


def member_data_offset(fd: int, info: zipfile.ZipInfo, *, wheel: str) -> int:
    """Where a member's compressed bytes start in the archive open as ``fd``.

    The local header's own name/extra lengths count, not the central directory's.  The
    header must name the same file and agree with the central directory, since local
    headers are copied verbatim into patched wheels.  ``wheel`` names the archive in errors.
    """
    name = _encoded_name(info)
    header = os.pread(fd, _LOCAL_HEADER.size + len(name), info.header_offset)
    if len(header) < _LOCAL_HEADER.size or _LOCAL_HEADER.unpack_from(header)[0] != _LOCAL_SIG:
        raise PatchedWheelsError(f"{wheel}: {info.filename}: bad local file header")
    fields = _LOCAL_HEADER.unpack_from(header)
    flags, method = fields[2:4]
    crc, compress_size, file_size, name_length, extra_length = fields[6:]
    if header[_LOCAL_HEADER.size :] != name:
        raise PatchedWheelsError(f"{wheel}: {info.filename}: local header names another file")
    if flags & ~_FLAGS_UNDERSTOOD or method != info.compress_type:
        raise PatchedWheelsError(f"{wheel}: {info.filename}: local header disagrees with the central directory")
    if not info.flag_bits & _FLAG_DATA_DESCRIPTOR and (
        crc != info.CRC
        or (compress_size != 0xFFFFFFFF and compress_size != info.compress_size)
        or (file_size != 0xFFFFFFFF and file_size != info.file_size)
    ):
        raise PatchedWheelsError(f"{wheel}: {info.filename}: local header disagrees with the central directory")
    return info.header_offset + _LOCAL_HEADER.size + name_length + extra_length


def _raw_chunks(fd: int, info: zipfile.ZipInfo, *, wheel: str) -> Iterator[bytes]:
    offset = member_data_offset(fd, info, wheel=wheel)
    remaining = info.compress_size
    while remaining:
        chunk = os.pread(fd, min(CHUNK_SIZE, remaining), offset)
        if not chunk:
            raise PatchedWheelsError(f"{wheel}: {info.filename}: truncated member data")
        offset += len(chunk)
        remaining -= len(chunk)
        yield chunk


def _member_chunks(fd: int, info: zipfile.ZipInfo, *, wheel: str) -> Iterator[bytes]:
    """A stored or deflated member's content in pieces of at most CHUNK_SIZE, read with ``os.pread``
    (so threads can share ``fd``).  Inflating stops one byte past the size the zip declares (a
    small archive can inflate to gigabytes); whether the result is complete is up to the caller."""
    if info.compress_type == _STORED:
        yield from _raw_chunks(fd, info, wheel=wheel)
        return
    inflater = _inflate_zlib.decompressobj(wbits=-15)
    allowed = info.file_size  # bytes still expected

    def bounded(out: bytes) -> bytes:
        nonlocal allowed
        allowed -= len(out)
        if allowed < 0:
            raise PatchedWheelsError(f"{wheel}: {info.filename}: inflates past the {info.file_size} bytes the zip declares")
        return out

    try:
        for chunk in _raw_chunks(fd, info, wheel=wheel):
            while chunk:
                out = inflater.decompress(chunk, min(CHUNK_SIZE, allowed + 1))
                chunk = inflater.unconsumed_tail
                if out:
                    yield bounded(out)
        tail = inflater.flush()
    except _inflate_zlib.error as error:
        raise PatchedWheelsError(f"{wheel}: {info.filename}: corrupt deflate data ({error})") from None
    if tail:
        yield bounded(tail)
    if not inflater.eof:
        raise PatchedWheelsError(f"{wheel}: {info.filename}: truncated deflate data")


def inflated_chunks(path: Path, info: zipfile.ZipInfo) -> Iterator[bytes]:
    """One member of the archive at ``path``, in pieces, checked against the zip directory's size and CRC-32.

    For readers that want a few members fast, with ``info`` from :meth:`WheelReader.info` (so the
    wheel passed its checks): this does not hash, and the CRC costs a fraction of the inflating.
    """
    where = f"{path.name}: {info.filename}"
    size = crc = 0
    with open(path, "rb") as handle:
        for chunk in _member_chunks(handle.fileno(), info, wheel=path.name):
            size += len(chunk)
            crc = _inflate_zlib.crc32(chunk, crc)
            yield chunk
    if size != info.file_size or crc != info.CRC:
        raise PatchedWheelsError(f"{where}: inflated data does not match the zip directory")


class _ChunkStream(io.RawIOBase):
    """Adapts a chunk iterator to a file object, so callers can stream a member."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            try:
                self._pending = memoryview(next(self._chunks))
            except StopIteration:
                return 0
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count


# --------------------------------------------------------------------------- writing


_DOS_FIRST = (1980, 1, 1, 0, 0, 0)
_DOS_LAST = (2107, 12, 31, 23, 59, 58)


def _dos_timestamp() -> tuple[int, int]:
    """(date, time) of every member: SOURCE_DATE_EPOCH, else 1980-01-01, for reproducible output.

    Times the zip format cannot hold are clamped to its range; a value that is not a
    number of seconds is an error, as the reproducible-builds specification asks.
    """
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    if epoch and not _ASCII_DIGITS.fullmatch(epoch):
        raise PatchedWheelsError(f"SOURCE_DATE_EPOCH={epoch!r}: not a number of seconds since 1970")
    try:
        moment = tuple(time.gmtime(int(epoch))[:6]) if epoch else _DOS_FIRST
    except (OverflowError, OSError, ValueError):  # beyond what the C library can represent
        moment = _DOS_LAST
    year, month, day, hour, minute, second = max(_DOS_FIRST, min(moment, _DOS_LAST))
    return (year - 1980) << 9 | month << 5 | day, hour << 11 | minute << 5 | second // 2


def _deflate_bound(size: int) -> int:
    """zlib's compressBound: the most deflate can expand ``size`` bytes."""
    return size + (size >> 12) + (size >> 14) + (size >> 25) + 13


@dataclass
class _Entry:
    """What the central directory needs to know about one written member."""

    name: bytes
    flags: int
    method: int
    crc: int
    compress_size: int
    file_size: int
    offset: int
    create_system: int
    external_attr: int
    local_zip64: bool
    verbatim: bool = False  # local header copied from the input; only its timestamp is rewritten


def _local_header(entry: _Entry, dos_date: int, dos_time: int) -> bytes:
    """Local file header; ZIP64 puts both sizes in the extra field (a requirement of the spec)."""
    if entry.local_zip64:
        extra = struct.pack("<HHQQ", _ZIP64_EXTRA_ID, 16, entry.file_size, entry.compress_size)
        sizes = (0xFFFFFFFF, 0xFFFFFFFF)
    else:
        extra = b""
        sizes = (entry.compress_size, entry.file_size)
    version = _VERSION_ZIP64 if entry.local_zip64 else _VERSION_DEFAULT
    header = _LOCAL_HEADER.pack(
        _LOCAL_SIG, version, entry.flags, entry.method, dos_time, dos_date, entry.crc, *sizes, len(entry.name), len(extra)
    )
    return header + entry.name + extra


def _central_header(entry: _Entry, dos_date: int, dos_time: int) -> bytes:
    """Central directory record; only fields that overflow go to the ZIP64 extra, in spec order."""
    values: list[int] = []
    if entry.file_size > ZIP64_LIMIT or entry.compress_size > ZIP64_LIMIT:
        values += [entry.file_size, entry.compress_size]
        sizes = (0xFFFFFFFF, 0xFFFFFFFF)
    else:
        sizes = (entry.compress_size, entry.file_size)
    if entry.offset > ZIP64_LIMIT:
        values.append(entry.offset)
    offset = 0xFFFFFFFF if entry.offset > ZIP64_LIMIT else entry.offset
    extra = struct.pack(f"<HH{len(values)}Q", _ZIP64_EXTRA_ID, 8 * len(values), *values) if values else b""
    version = _VERSION_ZIP64 if values or entry.local_zip64 else _VERSION_DEFAULT
    header = _CENTRAL_HEADER.pack(
        _CENTRAL_SIG,
        entry.create_system << 8 | version,
        version,
        entry.flags,
        entry.method,
        dos_time,
        dos_date,
        entry.crc,
        *sizes,
        len(entry.name),
        len(extra),
        0,  # comment length
        0,  # disk number
        0,  # internal attributes
        entry.external_attr,
        offset,
    )
    return header + entry.name + extra


def _end_records(count: int, directory_offset: int, directory_size: int) -> bytes:
    """End of central directory, preceded by the ZIP64 record and locator when anything overflows."""
    needs_zip64 = count >= ZIP_COUNT_LIMIT or directory_offset > ZIP64_LIMIT or directory_size > ZIP64_LIMIT
    records = b""
    if needs_zip64:
        end64_offset = directory_offset + directory_size
        records += _END64.pack(
            _END64_SIG, _END64.size - 12, _UNIX << 8 | _VERSION_ZIP64, _VERSION_ZIP64,
            0, 0, count, count, directory_size, directory_offset,
        )
        records += _END64_LOCATOR.pack(_END64_LOCATOR_SIG, 0, end64_offset, 1)
        count = min(count, 0xFFFF)
        directory_offset = min(directory_offset, 0xFFFFFFFF)
        directory_size = min(directory_size, 0xFFFFFFFF)
    return records + _END.pack(_END_SIG, 0, 0, count, count, directory_size, directory_offset, 0)


def _encode_name(arcname: str) -> tuple[bytes, int]:
    try:
        return arcname.encode("ascii"), 0
    except UnicodeEncodeError:
        return arcname.encode("utf-8"), _FLAG_UTF8


_COPY_FILE_RANGE_UNSUPPORTED = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM}


class WheelWriter:
    """Writes a wheel to ``<dest>`` atomically: a temp file in the same directory, renamed on success.

    RECORD is generated from what was written and appended last.  Every member gets
    the same timestamp and no extra fields other than ZIP64, so the output depends
    only on the input bytes and the order of calls.  Before the rename the file is
    opened as a :class:`WheelReader` under its final name: what we write passes the
    checks of what we read (one ``.dist-info`` with METADATA and WHEEL, names and
    versions that agree, no file where a directory is).
    """

    def __init__(self, dest: Path | str, *, dist_info: str) -> None:
        self.dest = Path(dest)
        self.dist_info = dist_info
        self._record_name = f"{dist_info}/RECORD"
        self._dos_date, self._dos_time = _dos_timestamp()
        fd, self._temp = create_temp_file(self.dest.parent, self.dest.name)
        self._file = os.fdopen(fd, "wb", buffering=0)
        self._buffer = bytearray()
        self._run: tuple[int, int, int] | None = None  # (input fd, offset, length) not yet written
        self._offset = 0
        self._entries: list[_Entry] = []
        self._record: list[RecordEntry] = []
        self._names: set[str] = set()
        self._copy_file_range = hasattr(os, "copy_file_range")

    def __enter__(self) -> WheelWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # -- members

    def copy_raw(self, reader: WheelReader, name: str, *, arcname: str | None = None) -> None:
        """Copy a member's compressed bytes unchanged; its RECORD row is reused under the new name.

        A member that keeps its name keeps its local header too (its timestamp is
        normalised at the end), so runs of unchanged members are contiguous in input and
        output and go out in one kernel copy each, like ``cp``.
        """
        info = reader.info(name)
        arcname = name if arcname is None else arcname
        encoded, utf8_flag = self._claim(arcname)
        verbatim = arcname == name and not info.flag_bits & _FLAG_DATA_DESCRIPTOR
        entry = _Entry(
            name=_encoded_name(info) if verbatim else encoded,
            flags=info.flag_bits if verbatim else (info.flag_bits & _FLAG_DEFLATE_OPTIONS) | utf8_flag,
            method=info.compress_type,
            crc=info.CRC,
            compress_size=info.compress_size,
            file_size=info.file_size,
            offset=self._offset,
            create_system=info.create_system,
            external_attr=info.external_attr,
            local_zip64=info.file_size > ZIP64_LIMIT or info.compress_size > ZIP64_LIMIT,
            verbatim=verbatim,
        )
        data_offset = reader._data_offset(info)
        if verbatim:
            self._copy_range(reader._fd, info.header_offset, data_offset + info.compress_size - info.header_offset)
        else:
            self._write(_local_header(entry, self._dos_date, self._dos_time))
            self._copy_range(reader._fd, data_offset, info.compress_size)
        self._entries.append(entry)
        row = reader.record_entry(name)
        if row is not None:
            self._record.append(RecordEntry(arcname, row.hash, row.size))

    def write_bytes(self, arcname: str, data: bytes, *, mode: int = 0o644) -> None:
        self._write_deflated(arcname, (data,), len(data), mode)

    def write_file(self, arcname: str, source: Path | str, *, mode: int | None = None) -> None:
        """Deflate a file from disk in chunks: never the whole file in memory."""
        with open(source, "rb") as handle:
            stats = os.fstat(handle.fileno())
            chunks = iter(lambda: handle.read(CHUNK_SIZE), b"")
            self._write_deflated(arcname, chunks, stats.st_size, stat.S_IMODE(stats.st_mode) if mode is None else mode)

    # -- finishing

    def close(self) -> None:
        """Append RECORD and the central directory, then move the file into place."""
        if self._file.closed:
            return
        try:
            rows = [*self._record, RecordEntry(self._record_name, "", None)]
            self._write_deflated(self._record_name, (serialize_record(rows),), None, 0o644, reserved_ok=True)
            self._drain()
            timestamp = struct.pack("<HH", self._dos_time, self._dos_date)
            for entry in self._entries:
                if entry.verbatim:
                    os.pwrite(self._file.fileno(), timestamp, entry.offset + _LOCAL_TIMESTAMP_OFFSET)
            directory_offset = self._offset
            for entry in self._entries:
                self._write(_central_header(entry, self._dos_date, self._dos_time))
            self._write(_end_records(len(self._entries), directory_offset, self._offset - directory_offset))
            self._drain()
            os.fchmod(self._file.fileno(), 0o666 & ~current_umask())
            self._file.close()
            WheelReader(self._temp, filename=self.dest.name).close()
            os.replace(self._temp, self.dest)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Drop everything written so far: a failed patch leaves no output behind."""
        self._file.close()
        self._temp.unlink(missing_ok=True)

    # -- internals

    def _claim(self, arcname: str) -> tuple[bytes, int]:
        if not is_safe_member_path(arcname):
            raise PatchedWheelsError(f"{self.dest.name}: unsafe member path {arcname!r}")
        if arcname in self._names:
            raise PatchedWheelsError(f"{self.dest.name}: member {arcname} written twice")
        self._names.add(arcname)
        return _encode_name(arcname)

    def _write_deflated(
        self, arcname: str, chunks: Iterable[bytes], size_hint: int | None, mode: int, *, reserved_ok: bool = False
    ) -> None:
        """Deflate ``chunks`` into a new member, then rewrite its local header with the real CRC and sizes."""
        if arcname == self._record_name and not reserved_ok:
            raise PatchedWheelsError(f"{self.dest.name}: {arcname} is generated, it cannot be written directly")
        encoded, utf8_flag = self._claim(arcname)
        entry = _Entry(
            name=encoded,
            flags=utf8_flag,
            method=_DEFLATED,
            crc=0,
            compress_size=0,
            file_size=0,
            offset=self._offset,
            create_system=_UNIX,
            external_attr=(stat.S_IFREG | mode) << 16,
            local_zip64=size_hint is not None and _deflate_bound(size_hint) > ZIP64_LIMIT,
        )
        header_length = len(_local_header(entry, self._dos_date, self._dos_time))
        self._write(b"\0" * header_length)
        deflater = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
        hasher = hashlib.sha256()
        for chunk in chunks:
            hasher.update(chunk)
            entry.crc = zlib.crc32(chunk, entry.crc)
            entry.file_size += len(chunk)
            compressed = deflater.compress(chunk)
            entry.compress_size += len(compressed)
            self._write(compressed)
        tail = deflater.flush()
        entry.compress_size += len(tail)
        self._write(tail)
        if not entry.local_zip64 and max(entry.file_size, entry.compress_size) > ZIP64_LIMIT:
            raise PatchedWheelsError(f"{self.dest.name}: {arcname} grew past 2 GiB while being written")
        self._drain()
        os.pwrite(self._file.fileno(), _local_header(entry, self._dos_date, self._dos_time), entry.offset)
        self._entries.append(entry)
        if arcname != self._record_name:
            self._record.append(RecordEntry(arcname, record_hash(hasher.digest()), entry.file_size))

    def _write(self, data: bytes) -> None:
        self._flush_run()
        self._offset += len(data)
        self._buffer_bytes(data)

    def _copy_range(self, source_fd: int, offset: int, count: int) -> None:
        """Queue ``count`` input bytes at ``offset`` for output, merged with the queued run if adjacent."""
        run = self._run
        if run is not None and run[0] == source_fd and run[1] + run[2] == offset:
            self._run = (source_fd, run[1], run[2] + count)
        else:
            self._flush_run()
            self._run = (source_fd, offset, count)
        self._offset += count

    def _flush_run(self) -> None:
        """Write the queued input range: in the kernel when large, through the buffer when small.

        A syscall per small member would dominate on wheels with thousands of files.
        """
        if self._run is None:
            return
        source_fd, offset, count = self._run
        self._run = None
        if count >= CHUNK_SIZE and self._copy_file_range:
            self._flush()
        while count >= CHUNK_SIZE and self._copy_file_range:
            try:
                copied = os.copy_file_range(source_fd, self._file.fileno(), count, offset)
            except OSError as error:
                if error.errno not in _COPY_FILE_RANGE_UNSUPPORTED:
                    raise
                self._copy_file_range = False
                break
            if not copied:
                raise PatchedWheelsError(f"{self.dest.name}: input ended while copying member data")
            offset += copied
            count -= copied
        while count:
            chunk = os.pread(source_fd, min(CHUNK_SIZE, count), offset)
            if not chunk:
                raise PatchedWheelsError(f"{self.dest.name}: input ended while copying member data")
            self._buffer_bytes(chunk)
            offset += len(chunk)
            count -= len(chunk)

    def _buffer_bytes(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) >= CHUNK_SIZE:
            self._flush()

    def _flush(self) -> None:
        view = memoryview(self._buffer)
        while view:
            view = view[self._file.write(view) :]
        view.release()
        self._buffer.clear()

    def _drain(self) -> None:
        """Everything queued goes to the file: needed before any pwrite."""
        self._flush_run()
        self._flush()
