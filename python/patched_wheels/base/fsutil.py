"""Whole-file and whole-tree writes that a concurrent reader never sees half done, the
temporary files behind them, bounded reads of files that must be regular, and the streamed sha256
of a file (the index's links, the ELF cache's key).

Every temporary file or directory patched-wheels creates next to an output is named
``.<name>.pw-<pid>-<random>.tmp``.  A run that is killed cannot remove its own (a killed
``patch`` of torch leaves 700 MB), so the first time a run creates one in a directory it
removes those there whose process is gone and that are older than the run: a concurrent
run's files are left alone.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Iterable, Iterator, Mapping

_FILE_MODE = 0o644
"""Temp files are created 0600; what is published (index pages, the index's hash cache) must stay world-readable."""
_DIRECTORY_MODE = 0o755
_TEMP_SUFFIX = ".tmp"
_CHUNK = 1 << 20
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
"""A sha256 as :func:`hash_file` gives it (and locks, caches and Bazel name it): 64 lowercase hex digits."""
_TEMP_NAME = re.compile(r"\..+\.pw-(?P<pid>[0-9]+)-[^/]*\.tmp")
_STARTED = time.time()
_swept: set[str] = set()


def write_atomic(path: Path, data: bytes, *, mode: int = _FILE_MODE) -> None:
    """Replace ``path`` with ``data`` (permission bits ``mode``) via a temp file in the same directory,
    so a reader sees the old or the new file, never a part, and a failure leaves no temp file behind;
    equal content is not rewritten, so a warm run writes nothing (and mtimes stay put)."""
    if holds(path, data, mode=mode):
        return
    temp = write_temp(path, data, mode=mode)
    try:
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def holds(path: Path, data: bytes | str | Iterable[str], *, mode: int | None = None) -> bool:
    """Whether ``path`` is a readable regular file holding exactly ``data`` (a text, or its pieces as they are
    made: in UTF-8, compared a chunk at a time, up to the first that differs; a FIFO, a device or a longer file
    is not read: it does not hold ``data``) and,
    given ``mode``, one of ours with those permission bits (a cache file someone made group-writable is
    replaced, not kept for its content)."""
    try:
        handle = open_regular_file(path)
    except (OSError, ValueError):
        return False
    try:
        status = os.fstat(handle)
        if mode is not None and (stat.S_IMODE(status.st_mode) != mode or status.st_uid != os.geteuid()):
            return False
        if isinstance(data, bytes):
            return read_descriptor(handle, max_bytes=len(data), size=status.st_size) == data
        with os.fdopen(os.dup(handle), "rb") as stream:
            return all(stream.read(len(chunk)) == chunk for chunk in utf8_chunks(data)) and stream.read(1) == b""
    except (OSError, ValueError):
        return False
    finally:
        os.close(handle)


_TEXT_CHUNK = 1 << 20


def utf8_chunks(text: str | Iterable[str]) -> Iterator[bytes]:
    """``text`` (or its pieces, as they are made) in UTF-8, a chunk at a time: an output of tens of megabytes
    (a uv.lock) is compared and written without being held a second time as bytes."""
    for piece in [text] if isinstance(text, str) else text:
        for start in range(0, len(piece), _TEXT_CHUNK):
            yield piece[start : start + _TEXT_CHUNK].encode("utf-8")


def resolved_path(path: Path) -> Path:
    """``path`` made absolute with its links followed (``Path.resolve``), a loop of links an ``OSError`` naming
    it (``ELOOP``), as opening it would be: Python 3.9 to 3.12 raise ``RuntimeError`` there (a traceback, not
    one error line), 3.13 returns the path as it is.  A NUL in it (a lock's path source) is an ``OSError`` too."""
    try:
        resolved = path.resolve()
    except RuntimeError:  # "Symlink loop from ..."
        resolved = None
    except ValueError:  # "embedded null byte": no file has that name
        raise OSError(errno.EINVAL, "a path holding a NUL byte", str(path)) from None
    if resolved is None or resolved.is_symlink():  # a link left unresolved is one of a loop (3.13)
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
    return resolved


class NotRegularFileError(ValueError):
    """A path that must be a regular file of bounded size is something else; the message says what."""


def open_regular_file(
    path: Path | str, *, dir_fd: int | None = None, follow_links: bool = False, append: bool = False
) -> int:
    """A read-only descriptor of ``path`` if it is a regular file, else :class:`NotRegularFileError`;
    with ``append``, a write-only one that appends, creating the file (``0600``) when it is missing.

    Opened without following a final symbolic link (``O_NOFOLLOW``: a link is refused, not read
    through; ``follow_links`` for an input that may be one, as Bazel hands a label's file) and without
    blocking (``O_NONBLOCK``: opening a FIFO with no writer would wait forever), and checked with
    ``fstat`` on what was opened, so a device or socket is not read.
    """
    access = os.O_WRONLY | os.O_APPEND | os.O_CREAT if append else os.O_RDONLY
    flags = access | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        handle = os.open(path, flags, 0o600, dir_fd=dir_fd)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise NotRegularFileError("a loop of symbolic links" if follow_links else "a symbolic link") from None
        if error.errno == errno.ENXIO:  # a socket, or a FIFO opened for writing elsewhere
            raise NotRegularFileError("not a regular file") from None
        raise
    mode = os.fstat(handle).st_mode
    if not stat.S_ISREG(mode):
        os.close(handle)
        raise NotRegularFileError("not a regular file (a FIFO, device, socket or directory)")
    return handle


def read_descriptor(handle: int, *, max_bytes: int, size: int) -> bytes:
    """At most ``max_bytes`` from the open regular file ``handle`` of ``size`` bytes (its ``fstat``);
    a larger file, or one growing past the cap while read, is :class:`NotRegularFileError`."""
    if size > max_bytes:
        raise NotRegularFileError(f"larger than {max_bytes} bytes")
    chunks = []
    remaining = max_bytes + 1  # one byte more than allowed tells a file that grew since fstat
    while remaining:
        chunk = os.read(handle, min(remaining, _CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    if not remaining:
        raise NotRegularFileError(f"larger than {max_bytes} bytes")
    return b"".join(chunks)


def read_regular_file(path: Path | str, *, max_bytes: int, follow_links: bool = False) -> bytes:
    """The content of ``path``, which must be a regular file (not a link, unless ``follow_links``) of at
    most ``max_bytes``: else :class:`NotRegularFileError` (or ``OSError``), never a hang or an unbounded read."""
    handle = open_regular_file(path, follow_links=follow_links)
    try:
        return read_descriptor(handle, max_bytes=max_bytes, size=os.fstat(handle).st_size)
    finally:
        os.close(handle)


def read_input_text(path: Path, *, max_bytes: int, what: str, where: str, error: type[Exception]) -> str:
    """The UTF-8 text of ``path``, an input the user named (a lock, a file read to resolve one, a facts file):
    a regular file (a FIFO would block, a device never end) of at most ``max_bytes``; anything else is one
    ``error`` line starting with ``where``, saying it is not ``what`` we read. Unlike a cache file, it may be
    a symbolic link (Bazel hands a label's file to a repository rule as one)."""
    try:
        data = read_regular_file(path, max_bytes=max_bytes, follow_links=True)
    except NotRegularFileError as problem:
        raise error(f"{where}: {problem}; not {what} we read") from None
    except OSError as problem:
        raise error(f"{where}: cannot read {what}: {problem.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as problem:
        raise error(f"{where}: not UTF-8 ({problem.reason} at byte {problem.start})") from None


def write_temp(path: Path, data: bytes | str | Iterable[str], *, mode: int = _FILE_MODE) -> Path:
    """``data`` (a text, or its pieces as they are made, which a big output is never held whole as: in UTF-8,
    :func:`utf8_chunks`) in a new temp file next to ``path`` (world-readable unless ``mode`` says otherwise),
    for the caller to rename onto ``path`` (or remove); nothing is left behind when writing fails."""
    handle, temp = create_temp_file(path.parent, path.name)
    try:
        with os.fdopen(handle, "wb") as stream:
            if isinstance(data, bytes):
                stream.write(data)
            else:
                stream.writelines(utf8_chunks(data))
        os.chmod(temp, mode)
    except BaseException as error:
        temp.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename is None:  # a write's (a full disk): the output's fault
            raise OSError(error.errno, error.strerror, str(path)) from None
        raise
    return temp


def create_temp_file(directory: Path, name: str) -> tuple[int, Path]:
    """A new temp file (descriptor, path) in ``directory`` for an output called ``name``."""
    remove_stale_temps(directory)
    handle, temp = tempfile.mkstemp(dir=directory, prefix=_temp_prefix(name), suffix=_TEMP_SUFFIX)
    return handle, Path(temp)


def stage_tree(target: Path, files: Mapping[str, bytes]) -> Path:
    """A new directory next to ``target`` holding ``files`` (relative POSIX paths, world-readable),
    for :func:`switch_tree`; nothing is left behind when writing fails."""
    remove_stale_temps(target.parent)
    staged = Path(tempfile.mkdtemp(dir=target.parent, prefix=_temp_prefix(target.name), suffix=_TEMP_SUFFIX))
    try:
        # mkdtemp makes it private; it is published like its files, whatever the umask: readable by all,
        # writable by us only (the index's hash cache in it is not believed otherwise, see cache.py).
        os.chmod(staged, _DIRECTORY_MODE)
        for name, data in files.items():
            path = staged / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            os.chmod(path, _FILE_MODE)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return staged


def tree_holds(target: Path, files: Mapping[str, bytes]) -> bool:
    """Whether ``target`` is what :func:`stage_tree` would make of ``files``: exactly those files (no other file
    or directory), with that content, ours and with its permissions; then a warm run need not write it again."""
    try:
        status = os.lstat(target)
    except OSError:
        return False
    if (
        not stat.S_ISDIR(status.st_mode)
        or stat.S_IMODE(status.st_mode) != _DIRECTORY_MODE
        or status.st_uid != os.geteuid()
    ):
        return False
    found: set[str] = set()
    for root, directories, names in os.walk(target):
        relative = Path(root).relative_to(target).as_posix()
        prefix = "" if relative == "." else relative + "/"  # keyed as ``files`` is: "pwi/index.html"
        found.update([*(prefix + name for name in names), *(prefix + name + "/" for name in directories)])
    expected = set(files) | {name[: at + 1] for name in files for at, char in enumerate(name) if char == "/"}
    return found == expected and all(holds(target / name, data, mode=_FILE_MODE) for name, data in files.items())


def switch_tree(staged: Path, target: Path) -> None:
    """Put the directory ``staged`` at ``target`` and remove the tree that was there.

    Two renames: a reader sees the old tree or the new one (for an instant, none); if the
    first rename fails, the empty directory made for the old tree is removed; if the second fails, the
    old tree is put back. Two writers of one target must take turns (:func:`locked_directory`).
    """
    if not os.path.lexists(target):
        os.rename(staged, target)
        return
    old = Path(tempfile.mkdtemp(dir=target.parent, prefix=_temp_prefix(target.name), suffix=_TEMP_SUFFIX))
    try:
        os.rename(target, old)  # onto the empty directory just made
    except BaseException:
        os.rmdir(old)
        raise
    try:
        os.rename(staged, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def locked_directory(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``directory`` itself (flock on its descriptor: no file is added to it) for
    the block, so that two processes writing the same tree (two ``index`` or ``lock`` runs) take turns."""
    import fcntl

    handle = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # releases the lock


def current_umask() -> int:
    """The process umask (only readable by setting it)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


@contextlib.contextmanager
def temp_directory(directory: Path, name: str) -> Iterator[Path]:
    """A new temp directory in ``directory``, removed with its content on exit."""
    remove_stale_temps(directory)
    temp = Path(tempfile.mkdtemp(dir=directory, prefix=_temp_prefix(name), suffix=_TEMP_SUFFIX))
    try:
        yield temp
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def remove_stale_temps(directory: Path) -> None:
    """Remove the temp files and directories of dead runs from ``directory``, once per run and directory.

    Best effort: what cannot be listed or removed stays, for a later run.
    """
    key = os.path.abspath(directory)
    if key in _swept:
        return
    _swept.add(key)
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        match = _TEMP_NAME.fullmatch(entry.name)
        if match is None or _is_alive(int(match["pid"])):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_mtime >= _STARTED:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            continue


def _temp_prefix(name: str, pid: int | None = None) -> str:
    return f".{name}.pw-{os.getpid() if pid is None else pid}-"


NAME_MAX = 255
"""The most bytes a file name may hold (NAME_MAX of Linux and macOS file systems)."""


def longest_temp_name(name: str) -> int:
    """The most bytes the name of a temp file written for ``name`` may hold (:func:`create_temp_file`: a pid of up to
    7 digits, Linux's largest, and ``mkstemp``'s 8 random characters), for a check that it fits a file name."""
    return len((_temp_prefix(name, pid=4_194_304) + "x" * 8 + _TEMP_SUFFIX).encode())


def _is_alive(pid: int) -> bool:
    """Whether a process with this id exists (it may be another program that reused the id: then
    its temp files wait for a later run)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # no such process; an id no process can have
        return False
    except PermissionError:  # another user's process
        return True
    return True


def hash_file(path: Path) -> str:
    """sha256 hex digest of a file, read in chunks into one buffer (hashlib releases the GIL, so threads scale)."""
    digest = hashlib.sha256()
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb") as stream:
        while size := stream.readinto(buffer):
            digest.update(view[:size])
    return digest.hexdigest()
