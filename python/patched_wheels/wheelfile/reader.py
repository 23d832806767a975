"""What a wheel we accept is, decided once for every command: :class:`WheelReader` opens only those.

The structural checks (one ``.dist-info`` with METADATA, WHEEL and RECORD; RECORD lists
exactly the members with the zip's sizes; members are regular files with safe, distinct
paths, no file where a directory is, in the archive and once installed: a ``<dist>.data/purelib/`` or
``platlib/`` member lands in site-packages beside the others) plus METADATA and WHEEL themselves (UTF-8; name and
version the same in the file name, the ``.dist-info`` directory and METADATA) run when a
wheel is opened.  Only RECORD, METADATA and WHEEL are inflated for them.  Members that are
read later are hash-checked against RECORD as they stream; ``verify=True`` checks every
member, inflating on all cores.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
from pathlib import Path
from typing import BinaryIO, Iterator, Mapping, NamedTuple, Sequence

from packaging.version import InvalidVersion, Version

from patched_wheels.base.fsutil import NotRegularFileError, open_regular_file
from patched_wheels.base.gcpause import cycle_collection_paused
from patched_wheels.base.names import canonicalize_name
from patched_wheels.errors import InvalidWheelError
from patched_wheels.wheelfile import metadata as core_metadata
from patched_wheels.wheelfile.filename import WheelFilename, all_safe_member_paths, is_safe_member_path
from patched_wheels.wheelfile.record import RecordEntry, generated_members, parse_record
from patched_wheels.wheelfile.zipcontainer import (
    CHUNK_SIZE,
    RawMember,
    ReadAhead,
    bound_members,
    crc32,
    member_content,
    member_problem,
    unix_mode,
)
from patched_wheels.wheelfile.zipdirectory import ZipMember, read_directory

__all__ = ["WheelReader", "WrittenArchive"]

_REQUIRED_FILES = ("METADATA", "WHEEL")
_SUPPORTED_WHEEL_VERSION = 1  # major Wheel-Version pip installs
_MAX_RECORD_BYTES = 64 * 1024 * 1024
"""RECORD is read whole, a row per member: torch's is 1 MiB for 10,600 members.  A bigger one declared is a zip
bomb (a few KiB that inflate to gigabytes of rows), refused before it is inflated."""
_MAX_METADATA_BYTES = 16 * 1024 * 1024
"""METADATA and WHEEL are read whole (a long description makes METADATA the larger, rarely past 1 MiB)."""


class WrittenArchive(NamedTuple):
    """What :class:`~patched_wheels.wheelfile.WheelWriter` wrote, known without parsing it back: the check of
    a wheel about to be published (``WheelReader(..., written=...)``) asks of it only what its writer's callers
    decide.

    The central directory's records and RECORD's rows, as the writer encoded them into the file.  True by the
    writer's construction, so not checked again (each costs a pass over torch's 10,600 members): member
    names safe and distinct (``WheelWriter._claim`` refuses any other); each record sound (a raw copy keeps the
    record the input's own check passed, a deflated member's is the writer's); members one after another, the
    central directory after the last (no overlap, nothing past the end); RECORD a row per member written, no
    other, each a raw copy's input row (its size the same record's) or one counted from the bytes deflated.

    Still checked, since the members written decide them (a patch that adds ``a.py/b``, a rename, a METADATA
    or WHEEL edited): no file where a directory is; one ``.dist-info``, named as the file; RECORD lists every
    member but directories and RECORD's own files, and hashes all but those; METADATA and WHEEL there, UTF-8,
    their name, version and Wheel-Version agreeing, read back from the file (their local headers checked,
    their bytes against RECORD's hashes).
    """

    members: list[ZipMember]
    record: list[RecordEntry]
    directory_offset: int
    """Where the central directory starts."""


class _Checked(NamedTuple):
    """What opening a wheel found, once its checks passed: never changed after."""

    infos: dict[str, ZipMember]
    dist_info: str
    record: dict[str, RecordEntry]
    metadata: bytes


class WheelReader:
    """An opened wheel that passed the checks of a wheel we accept (see the module docstring).

    Member data is read with ``os.pread`` on one descriptor, so threads can inflate
    different members at the same time without sharing a file position.
    ``filename`` is the name the file stands for when it differs from the path's
    (the writer checks its temporary file under the final name), ``written`` what the
    writer knows it wrote (:class:`WrittenArchive`).
    """

    path: Path
    name: str
    """The wheel's file name, as errors name it."""
    filename: WheelFilename
    dist_info: str
    data_dir: str

    def __init__(
        self,
        path: Path | str,
        *,
        verify: bool = False,
        filename: str | None = None,
        written: WrittenArchive | None = None,
    ) -> None:
        self.path = Path(path)
        self.name = filename or self.path.name
        try:  # a link is read through (Bazel hands wheels as links); a FIFO is refused, not waited on
            self._fd = open_regular_file(self.path, follow_links=True)
        except NotRegularFileError as error:
            raise InvalidWheelError(f"{self.path}: {error}") from None
        except OSError as error:  # before its name is judged: a path mistyped is that, whatever its name
            raise InvalidWheelError(f"{self.path}: cannot read ({error.strerror or error})") from None
        try:
            self.filename = WheelFilename.parse(self.name)
            status = os.fstat(self._fd)
            with cycle_collection_paused():
                checked = self._check(status.st_size, written)
            self._infos, self.dist_info, self._record, self._metadata = checked
            self.data_dir = self.dist_info[: -len(".dist-info")] + ".data"
            if verify:
                self.verify()
        except BaseException:
            os.close(self._fd)
            raise

    def _check(self, file_size: int, written: WrittenArchive | None) -> _Checked:
        """The structural checks, METADATA's and WHEEL's (the module docstring): what they found.  Given what a
        writer ``written``, those its construction does not make true (:class:`WrittenArchive`)."""
        if written is None:
            members, directory_offset = read_directory(self._fd, path=self.path)
        else:
            members, directory_offset = written.members, written.directory_offset
        self._infos, directories = self._index_members(members, file_size, written=written is not None)
        overlap = bound_members(members, directory_offset)  # also each member's end, for reading METADATA and WHEEL
        if overlap is not None:
            member, next_member = overlap
            into = "the central directory" if next_member is None else f"member {next_member.filename!r}"
            raise InvalidWheelError(f"{self.name}: member {member.filename!r}: overlaps {into}")
        top_level = {directory for directory in directories if "/" not in directory}
        self._check_installed_paths(directories, top_level)
        self.dist_info = self._find_dist_info(top_level)
        self._record = self._load_record() if written is None else self._written_record(written.record)
        metadata = self._check_metadata()
        self._check_wheel_file()
        return _Checked(self._infos, self.dist_info, self._record, metadata)

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

    def info(self, name: str) -> ZipMember:
        """The central directory entry of ``name`` (checked: sizes, offsets, method)."""
        try:
            return self._infos[name]
        except KeyError:
            raise InvalidWheelError(f"{self.name}: no member {name}") from None

    def file_size(self, name: str) -> int:
        return self.info(name).file_size

    def mode(self, name: str) -> int | None:
        """Unix permission bits, or None when the archiver did not record them."""
        mode = unix_mode(self.info(name))
        return stat.S_IMODE(mode) if mode else None

    def record_entry(self, name: str) -> RecordEntry | None:
        """The RECORD row of ``name`` (None for directory entries)."""
        return self._record.get(name)

    def raw_member(self, name: str) -> RawMember:
        """Where ``name``'s compressed bytes lie, its local header checked: for reading them without inflating.

        Valid while this reader is open.
        """
        return RawMember.locate(self._fd, self.info(name), archive=self.name)

    def read_ahead(self) -> ReadAhead:
        """A window over this wheel's bytes for reading members in the order they lie (one per sequential reader):
        what :meth:`WheelWriter.copy_raw_members` reads local headers and small members through."""
        return ReadAhead(self._fd)

    def open(self, name: str) -> BinaryIO:
        """Stream a member's content; reading it to the end checks it against RECORD."""
        return io.BufferedReader(_ChunkStream(self._checked_chunks(name)), CHUNK_SIZE)

    def chunks(self, name: str, *, check_record: bool = True) -> Iterator[bytes]:
        """A member's content in inflated chunks, for copying it out without a buffer in between; reading
        them to the end checks the size and the zip's CRC-32, and RECORD's hash unless ``check_record`` is
        False: for a wheel whose whole file was checked against a pinned sha256 already (a hub's, from its
        lock), where hashing every member again proves nothing more about where the bytes came from."""
        return self._checked_chunks(name, check_record=check_record)

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
        import threading  # imported here, as the pool: only --verify inflates every member
        from concurrent.futures import ThreadPoolExecutor

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

    # -- reading members

    def _checked_chunks(self, name: str, *, check_record: bool = True) -> Iterator[bytes]:
        info = self.info(name)
        entry = self._record.get(name) if check_record else None  # RECORD itself is read before there are rows
        hasher = hashlib.new(entry.algorithm) if entry is not None and entry.hash else None
        size = crc = 0
        for chunk in member_content(self.raw_member(name)):
            size += len(chunk)
            crc = crc32(chunk, crc)
            if hasher is not None:
                hasher.update(chunk)
            yield chunk
        if size != info.file_size:
            raise InvalidWheelError(f"{self.name}: {name}: inflated to {size} bytes, zip says {info.file_size}")
        if hasher is not None and entry is not None and hasher.digest() != entry.digest:
            raise InvalidWheelError(f"{self.name}: {name}: content does not match its RECORD hash")
        if crc != info.CRC:  # whatever RECORD says, a raw copy keeps this CRC, and zipfile (so pip) would refuse it
            raise InvalidWheelError(f"{self.name}: {name}: content does not match the zip directory's CRC-32")

    def _read_whole(self, name: str, most: int, *, check_record: bool = True) -> bytes:
        """A member read whole while the wheel is opened (RECORD, METADATA, WHEEL), once its declared size is at
        most ``most`` bytes: the checks of :meth:`chunks` (RECORD's hash unless ``check_record`` is False)."""
        declared = self.info(name).file_size
        if declared > most:
            raise InvalidWheelError(f"{self.name}: {name}: {declared} bytes, more than the {most} such a file may hold")
        return b"".join(self._checked_chunks(name, check_record=check_record))

    def _drain(self, name: str) -> None:
        for _ in self._checked_chunks(name):
            pass

    # -- structural checks

    def _index_members(
        self, infos: Sequence[ZipMember], file_size: int, *, written: bool
    ) -> tuple[dict[str, ZipMember], set[str]]:
        """The members by name, once each passed its checks (``written``: a writer's, whose names and records
        are sound by its construction, so only their layout is checked), and the directories they are in."""
        names = [info.filename for info in infos]
        by_name = dict(zip(names, infos))
        if written:  # the names are safe and distinct by the writer's construction
            directories = _tree_directories(names)
            if directories is not None:
                return by_name, directories
        elif (  # every check at once; where one fails, the checks of each member decide, the first failed named
            len(by_name) == len(names)
            and all_safe_member_paths(names)
            and not any(member_problem(info, file_size) for info in infos)
            and (directories := _tree_directories(names)) is not None
        ):
            return by_name, directories
        layout = _MemberLayout()
        if written:
            for info in infos:
                if conflict := layout.add(info.filename):
                    raise InvalidWheelError(f"{self.name}: member {info.filename!r}: {conflict}")
            return by_name, layout.directories
        indexed: dict[str, ZipMember] = {}  # the members before each, for its duplicate check
        for info in infos:
            name = info.filename
            if not is_safe_member_path(name):
                problem: str | None = "unsafe path (absolute, '..' or empty component)"
            elif name in indexed:
                problem = "duplicate member name"
            else:
                problem = layout.add(name) or member_problem(info, file_size)
            if problem:
                raise InvalidWheelError(f"{self.name}: member {name!r}: {problem}")
            indexed[name] = info
        return indexed, layout.directories

    def _check_installed_paths(self, directories: set[str], top_level: set[str]) -> None:
        """No two members land on one path of site-packages, nor a file where a directory is: a member of a
        ``<dist>.data/purelib/`` or ``platlib/`` directory installs beside the wheel's root members (``demo/x.py``
        and ``demo-1.0.data/purelib/demo/x.py`` clash once installed; pypa's ``installer`` refuses such a wheel).
        ``directories``: those of the members' archive paths (:meth:`_index_members`), ``top_level`` the first.

        Only those few members are looked at: a wheel without such a directory costs a look at its top level, one
        with them a search of its names joined (no Python code per member: a NUL ends each, as no safe name holds
        one), then set lookups for each member found."""
        prefixes = tuple(
            f"{top}/{scheme}/"
            for top in sorted(top_level)
            if top.endswith(".data")
            for scheme in _SITE_SCHEMES
            if f"{top}/{scheme}" in directories
        )
        if not prefixes:
            return
        placed = _Installed(self._infos, directories)
        found = re.compile("\0(?:" + "|".join(map(re.escape, prefixes)) + ")[^\0]*")
        for match in found.finditer("\0" + "\0".join(self._infos)):
            member = match.group()[1:]
            clash = placed.add(member)
            if clash is not None:
                other, path, same = clash
                how = f"both install {path}" if same else f"{path} is a file of one and a directory of the other"
                raise InvalidWheelError(f"{self.name}: members {other!r} and {member!r} clash once installed: {how}")

    def _find_dist_info(self, top_level: set[str]) -> str:
        """The one ``<name>-<version>.dist-info`` directory, agreeing with the file name (pip's rule)."""
        found = sorted(directory for directory in top_level if directory.endswith(".dist-info"))
        expected = f"expected one {self.filename.name}-<version>.dist-info directory"
        if len(found) != 1:
            raise InvalidWheelError(f"{self.name}: {expected}, found: {', '.join(found) or 'none'}")
        directory = found[0]
        distribution, _, version = directory[: -len(".dist-info")].rpartition("-")
        if canonicalize_name(distribution) != self.filename.name:
            raise InvalidWheelError(f"{self.name}: {expected}, found: {directory}")
        if _parse_version(version) != self.filename.version:
            raise InvalidWheelError(
                f"{self.name}: {directory}: version {version!r} differs from the file name's {self.filename.version}"
            )
        return directory

    def _load_record(self) -> dict[str, RecordEntry]:
        """RECORD's rows, checked against the zip's members."""
        origin = self._record_origin()
        record_name = f"{self.dist_info}/RECORD"
        # Its size and CRC-32 checked as every member's (pip refuses a RECORD whose CRC is wrong); it has no hash.
        rows = parse_record(self._read_whole(record_name, _MAX_RECORD_BYTES, check_record=False), origin=origin)
        record: dict[str, RecordEntry] = {}
        unhashed_allowed = generated_members(self.dist_info)
        infos = self._infos
        for entry in rows:
            path, hash_, size = entry  # unpacked: a named tuple's attributes cost a lookup each, 10,600 rows
            if path in record:
                raise InvalidWheelError(f"{origin}: {path} is listed twice")
            info = infos.get(path)
            if info is None or path.endswith("/"):
                raise InvalidWheelError(f"{origin}: lists {path}, which is not in the wheel")
            if not hash_ and path not in unhashed_allowed:
                raise InvalidWheelError(f"{origin}: {path} has no hash")
            if size is not None and size != info.file_size:
                raise InvalidWheelError(f"{origin}: {path} has size {size} in RECORD but {info.file_size} in the zip")
            if hash_ and size is None:
                raise InvalidWheelError(f"{origin}: {path} has no size")
            record[path] = entry
        self._check_listed(record, origin)
        return record

    def _written_record(self, rows: Sequence[RecordEntry]) -> dict[str, RecordEntry]:
        """The rows a writer wrote (:class:`WrittenArchive`: one per member written, sizes its own), once they
        list and hash what a wheel's RECORD must."""
        origin = self._record_origin()
        record = {row[0]: row for row in rows}
        unhashed_allowed = generated_members(self.dist_info)
        for path, hash_, _ in rows:
            if not hash_ and path not in unhashed_allowed:
                raise InvalidWheelError(f"{origin}: {path} has no hash")
        self._check_listed(record, origin)
        return record

    def _record_origin(self) -> str:
        """RECORD as errors name it, once it is known to be there."""
        origin = f"{self.name}: {self.dist_info}/RECORD"
        if f"{self.dist_info}/RECORD" not in self._infos:
            raise InvalidWheelError(f"{origin}: missing")
        return origin

    def _check_listed(self, record: dict[str, RecordEntry], origin: str) -> None:
        """Every member but directories and RECORD's own files is in ``record``; METADATA and WHEEL are there."""
        unlisted = self._infos.keys() - record.keys() - generated_members(self.dist_info)
        missing = {name for name in unlisted if not name.endswith("/")}
        if missing:  # the first in the zip's order, as errors name it
            raise InvalidWheelError(f"{origin}: does not list {next(name for name in self._infos if name in missing)}")
        for required in _REQUIRED_FILES:
            if f"{self.dist_info}/{required}" not in self._infos:
                raise InvalidWheelError(f"{self.name}: {self.dist_info}/{required}: missing")

    # -- METADATA and WHEEL (small members, read once)

    def _read_utf8(self, name: str) -> bytes:
        data = self._read_whole(name, _MAX_METADATA_BYTES)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise InvalidWheelError(f"{self.name}: {name}: not UTF-8 (byte {error.start})") from None
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
            raise InvalidWheelError(
                f"{where}: names project {', '.join(names) or 'none'}, the file name {self.filename.name}"
            )
        if len(versions) != 1 or _parse_version(versions[0]) != self.filename.version:
            raise InvalidWheelError(
                f"{where}: has version {', '.join(versions) or 'none'}, the file name {self.filename.version}"
            )
        return data

    def _check_wheel_file(self) -> None:
        """WHEEL is UTF-8 and declares a Wheel-Version pip installs."""
        member = f"{self.dist_info}/WHEEL"
        data = self._read_utf8(member)
        versions = core_metadata.field_values(data, "Wheel-Version")
        major = versions[0].split(".", 1)[0] if len(versions) == 1 else ""
        if not (major.isascii() and major.isdigit() and int(major) == _SUPPORTED_WHEEL_VERSION):
            found = ", ".join(versions) or "none"
            raise InvalidWheelError(f"{self.name}: {member}: Wheel-Version {found} is not 1.x")


def _parse_version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _tree_directories(names: Sequence[str]) -> set[str] | None:
    """The directories of members named ``names`` (every parent of one) when no file stands where a directory is
    (what :class:`_MemberLayout` decides adding them in any order), else None: a pass over all names at once, then
    one step per directory, instead of a call per name."""
    directories: set[str] = set()
    for parent in {name.rpartition("/")[0] for name in names}:  # a directory entry's is itself
        while parent and parent not in directories:
            directories.add(parent)
            parent = parent.rpartition("/")[0]
    if not directories.isdisjoint([name for name in names if not name.endswith("/")]):
        return None
    return directories


_SITE_SCHEMES = ("purelib", "platlib")
"""The ``<dist>.data/`` schemes that install into site-packages, beside the wheel's root members."""


class _Installed:
    """The site-packages paths of a wheel's ``.data`` purelib/platlib members, added one at a time, against those
    of its root members (their archive paths, ``infos``, in ``directories``)."""

    def __init__(self, infos: Mapping[str, ZipMember], directories: set[str]) -> None:
        self._infos, self._directories = infos, directories
        self._files: dict[str, str] = {}
        """Installed path -> the .data member installing a file there."""
        self._under: dict[str, str] = {}
        """Installed directory -> the first .data member in it (or that directory's own entry)."""

    def add(self, member: str) -> tuple[str, str, bool] | None:
        """Add the .data member ``member``; or, where it clashes, the member it clashes with (a root member, or a
        .data member added before), the installed path where, and whether both are files there (and add nothing)."""
        installed = member.split("/", 2)[2]  # <dist>.data/<scheme>/<installed>
        is_directory, path = installed.endswith("/"), installed.rstrip("/")
        if not path:  # the scheme's directory itself
            return None
        # A root member installs at its archive path, unless that lies in a top-level *.data directory.
        rooted = not path.partition("/")[0].endswith(".data")
        infos, files, under = self._infos, self._files, self._under
        other = files.get(path) or (path if rooted and path in infos else None)  # a file there
        if other is not None:
            return other, path, not is_directory
        if not is_directory:  # a directory there
            other = under.get(path) or (self._root_member_in(path) if rooted and path in self._directories else None)
            if other is not None:
                return other, path, False
        parent = path.rpartition("/")[0]
        while parent:  # a file where one of its directories is
            other = files.get(parent) or (parent if rooted and parent in infos else None)
            if other is not None:
                return other, parent, False
            parent = parent.rpartition("/")[0]
        if is_directory:
            under.setdefault(path, member)
        else:
            files[path] = member
        parent = path.rpartition("/")[0]
        while parent:
            under.setdefault(parent, member)
            parent = parent.rpartition("/")[0]
        return None

    def _root_member_in(self, directory: str) -> str:
        """A member in the root directory ``directory``, to name it in an error: looked for once one failed."""
        return next(name for name in self._infos if name.startswith(directory + "/"))


class _MemberLayout:
    """The paths of a wheel's members as a tree: a file must not stand where a directory is.

    A member under another member's path (``a.py`` and ``a.py/b``) cannot be unpacked;
    installers fail half-way or overwrite one with the other.
    """

    def __init__(self) -> None:
        self._files: set[str] = set()
        self._directories: set[str] = set()

    def add(self, name: str) -> str | None:
        """Add ``name``; or, when it cannot be added, why not (and add nothing)."""
        files, directories = self._files, self._directories
        if not name.endswith("/") and name not in directories:  # a file (nearly every member): its parent is
            parent = name.rpartition("/")[0]  # most often known already, then only the file is new
            if not parent or parent in directories:
                files.add(name)
                return None
        path = name.rstrip("/")
        is_directory = name.endswith("/")
        if path in (files if is_directory else directories):
            return f"{path} is a file, not a directory" if is_directory else f"{path} is a directory of other members"
        new_parents = []
        parent = path.rpartition("/")[0]
        while parent and parent not in directories:  # a known directory's parents are known too
            if parent in files:
                return f"{parent} is a file, not a directory"
            new_parents.append(parent)
            parent = parent.rpartition("/")[0]
        (directories if is_directory else files).add(path)
        directories.update(new_parents)
        return None

    @property
    def directories(self) -> set[str]:
        """The directories of the members added (every parent of one, and the directory entries)."""
        return self._directories


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
