"""Large members' data copied into a wheel being written, in a thread of its own: the kernel's copy
(``copy_file_range``, what ``cp`` costs) of each member :class:`~patched_wheels.wheelfile.writer.WheelWriter`
leaves room for, while the writer goes on with the members after it; the writer's own writes that land
meanwhile go out in between, bounded, so neither waits for the other longer than one slice."""

from __future__ import annotations

import errno
import os
import threading
from collections import deque
from queue import Empty, SimpleQueue
from typing import NamedTuple

from patched_wheels.errors import InvalidWheelError
from patched_wheels.wheelfile.zipcontainer import CHUNK_SIZE

_COPY_FILE_RANGE_UNSUPPORTED = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM}
_OUTPUT_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
"""A write's errors that are the output's (its file system full, a quota, a size limit), not the input's."""


class Copy(NamedTuple):
    """A large member's data, copied from the input into the room the writer left for it."""

    source_fd: int
    offset: int
    length: int
    dest: int
    """Where it goes in the output."""
    member: str
    """The member, as errors name it."""


class _Write(NamedTuple):
    """Bytes of the writer's own (its buffer, a header), written at ``offset`` of the output."""

    data: bytes | bytearray
    offset: int


_COPY_SLICE = 8 << 20
"""The most one kernel copy call moves, so that the writer's writes waiting for the thread go out in between."""
_MAX_WAITING_WRITES = 16
"""Writes (the buffer's, about CHUNK_SIZE each) the thread may owe the writer; one more waits: bounded memory."""


class Copier:
    """Copies of large members' data into the output, in a thread of their own and in the order given, while
    the writer goes on with the members after them: the kernel's copy (what ``cp`` costs) and the writer's
    own work (every small member, the central directory) overlap instead of adding up.

    While the thread runs, it also makes the writer's own writes (:meth:`write`), between slices of its
    copies: one thread writes the file, since a write beside a kernel copy into the same file waits for the
    file's lock, which the copy takes for every piece it moves (on a busy machine, for as long as the
    copying thread waits for a core).  Each job names the output offset its bytes go to (the writer leaves
    room for a copy and writes around it), so the output is the same bytes in whatever order they land.
    A job's error is raised by the next :meth:`submit` or :meth:`write`, or by :meth:`wait_for_writes`, which the
    writer calls before it reads back bytes of its own, or :meth:`wait`, which it calls before it closes or removes
    the file; the thread never outlives the descriptors it copies between.
    """

    def __init__(self, out_fd: int, out_name: str) -> None:
        self._out = out_fd
        self._out_name = out_name
        """The output, as errors name it (a full disk is its fault)."""
        self._jobs: SimpleQueue[Copy | _Write | None] = SimpleQueue()
        self._waiting_writes = threading.BoundedSemaphore(_MAX_WAITING_WRITES)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._kernel = hasattr(os, "copy_file_range")

    def submit(self, job: Copy) -> None:
        if self._error is not None:
            self.wait()  # raises it
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="wheel-copy", daemon=True)
            self._thread.start()
        self._jobs.put(job)

    def write(self, data: bytes | bytearray, offset: int) -> None:
        """``data`` (no longer changed by the caller) at ``offset``: by the thread while it runs, else here."""
        if self._thread is None:
            _write_all(self._out, data, offset, self._out_name)
            return
        if self._error is not None:
            self.wait()  # raises it
        self._waiting_writes.acquire()
        self._jobs.put(_Write(data, offset))

    def wait_for_writes(self) -> None:
        """Return once the writes handed to :meth:`write` so far are made, copies perhaps still running; raise a
        job's error.  The bytes the writer wrote itself can then be read back while the kernel copies go on."""
        for _ in range(_MAX_WAITING_WRITES):  # every write owed holds one: all held, none is owed
            self._waiting_writes.acquire()
        for _ in range(_MAX_WAITING_WRITES):
            self._waiting_writes.release()
        if self._error is not None:
            self.wait()  # raises it

    def wait(self) -> None:
        """Return once every job submitted is done; raise the first one's error."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self) -> None:
        later: deque[Copy | None] = deque()  # copies (and the end) met while writing between slices of another
        while (job := later.popleft() if later else self._jobs.get()) is not None:
            if isinstance(job, _Write):
                self._write(job)
            elif self._error is None:  # after a failure the rest is skipped: the output is dropped anyway
                try:
                    self._copy(job, later)
                except BaseException as error:  # handed to the writer's thread
                    self._error = error

    def _write(self, job: _Write) -> None:
        try:
            if self._error is None:
                _write_all(self._out, job.data, job.offset, self._out_name)
        except BaseException as error:  # handed to the writer's thread
            self._error = error
        finally:
            self._waiting_writes.release()

    def _write_waiting(self, later: deque[Copy | None]) -> None:
        """Make the writes queued so far; set aside the copies (and the end) queued between them."""
        while True:
            try:
                job = self._jobs.get_nowait()
            except Empty:
                return
            if isinstance(job, _Write):
                self._write(job)
            else:
                later.append(job)

    def _copy(self, job: Copy, later: deque[Copy | None]) -> None:
        """``job``'s bytes: in kernel copies, like ``cp``, or read and written where the file system cannot
        copy between these files; the writes waiting made between its slices."""
        source_fd, offset, count, dest, member = job
        while count and self._kernel:
            try:
                copied = os.copy_file_range(source_fd, self._out, min(count, _COPY_SLICE), offset, dest)
            except OSError as error:
                if error.errno not in _COPY_FILE_RANGE_UNSUPPORTED:  # named: the writer reports it later
                    raise OSError(
                        error.errno, error.strerror, self._out_name if error.errno in _OUTPUT_FULL else member
                    ) from None
                self._kernel = False
                break
            if not copied:
                raise InvalidWheelError(f"{member}: truncated member data")
            offset, dest, count = offset + copied, dest + copied, count - copied
            self._write_waiting(later)
        while count:
            chunk = os.pread(source_fd, min(CHUNK_SIZE, count), offset)
            if not chunk:
                raise InvalidWheelError(f"{member}: truncated member data")
            _write_all(self._out, chunk, dest, self._out_name)
            offset, dest, count = offset + len(chunk), dest + len(chunk), count - len(chunk)
            self._write_waiting(later)


def _write_all(fd: int, data: bytes | bytearray, offset: int, name: str) -> None:
    """All of ``data`` at ``offset`` of ``fd``, the output ``name`` (a positional write may take only part of it);
    an error names it."""
    view = memoryview(data)
    try:
        while view:
            written = os.pwrite(fd, view, offset)
            view, offset = view[written:], offset + written
    except OSError as error:
        raise OSError(error.errno, error.strerror, name) from None
    finally:
        view.release()
