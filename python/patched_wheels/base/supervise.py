"""Run a child in its own session and read what it says, whatever it does.

The probe and ``doctor --run`` run package code, which may write anything, fork daemons, replace the files
it was given or never end.  So the child's stdout, stderr and its record of mapped files (the maps, see
:data:`patched_wheels.loading.probe.CHILD`) come through pipes this process holds, read as they arrive in bounded
memory, and the whole run, reading included, ends at a deadline; then every process the run started is
killed, those that left its session too (this process is their subreaper).
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Sequence

# What a run's report keeps of its output: the end of stdout, and of stderr a line at most this long.
_KEPT_OUTPUT = 64 << 10
_KEPT_LINE = 8 << 10
# A Python exception line ("OSError: libx.so: cannot open ..."), also inside a logged message.
_ERROR_LINE = re.compile(r"\b[A-Za-z_][\w.]*(?:Error|Exception)\b: ")
# The end of a complete maps record on the maps pipe (a maps line never holds a NUL).
_MAPS_END = b"\0"


class Lines:
    """A stream cut into lines as it arrives, each at most ``limit`` bytes (the rest of a longer one dropped):
    any output fits in bounded memory."""

    def __init__(self, limit: int) -> None:
        self.limit, self.partial, self.cut = limit, bytearray(), False

    def feed(self, data: bytes) -> None:
        *lines, rest = data.split(b"\n")
        for line in lines:
            self._take(bytes(self.partial) + line if not self.cut else bytes(self.partial))
            self.partial, self.cut = bytearray(), False
        if not self.cut:
            self.partial += rest
            if len(self.partial) > self.limit:
                del self.partial[self.limit :]
                self.cut = True

    def close(self) -> None:
        if self.partial:
            self._take(bytes(self.partial[: self.limit]))
        self.partial = bytearray()

    def _take(self, line: bytes) -> None:
        raise NotImplementedError


class Errors(Lines):
    """Of a stderr stream: its first exception line (a logged one too) and its last line."""

    def __init__(self) -> None:
        super().__init__(_KEPT_LINE)
        self.first_error: str | None = None
        self.last: str | None = None

    def _take(self, line: bytes) -> None:
        text = line[: self.limit].decode("utf-8", "replace").strip()
        if text and self.first_error is None and _ERROR_LINE.search(text):
            self.first_error = text
        self.last = text or self.last


class Maps(Lines):
    """Of the maps pipe: the mapped paths among ``wanted``, and whether the record arrived whole."""

    def __init__(self, wanted: set[str]) -> None:
        super().__init__(_KEPT_LINE)
        self.wanted, self.paths, self.ended, self.size = wanted, set[str](), False, 0

    def feed(self, data: bytes) -> None:
        self.size += len(data)
        self.ended = data.endswith(_MAPS_END) if data else self.ended
        super().feed(data)

    def _take(self, line: bytes) -> None:
        # address, perms, offset, dev, inode, path: a path's bytes as os.fsdecode gives them (a name that is not
        # UTF-8 still matches), its newlines as the kernel escapes them
        fields = line.rstrip(_MAPS_END).decode("utf-8", "surrogateescape").split(maxsplit=5)
        path = fields[5].replace("\\012", "\n") if len(fields) == 6 else None
        if path in self.wanted:
            self.paths.add(path)


class Tail:
    """The last ``_KEPT_OUTPUT`` bytes of a stream."""

    def __init__(self) -> None:
        self.data, self.cut = bytearray(), False

    def feed(self, data: bytes) -> None:
        self.data += data
        if len(self.data) > 2 * _KEPT_OUTPUT:
            del self.data[:-_KEPT_OUTPUT]
            self.cut = True

    def text(self) -> str:
        """Decoded, a cut first line dropped."""
        cut = self.cut or len(self.data) > _KEPT_OUTPUT
        text = bytes(self.data[-_KEPT_OUTPUT:]).decode("utf-8", "replace")
        return text.split("\n", 1)[-1] if cut else text


@dataclass
class Captured:
    """What one supervised run returned, read from the pipes the tool held."""

    returncode: int
    stdout: Tail
    stderr: Errors
    maps: Maps

    @property
    def mapped(self) -> set[str] | None:
        """The wanted paths the child mapped at exit; None when it recorded no whole maps (a crash, a kill)."""
        return self.maps.paths if self.maps.ended else None


def supervise(
    command: Sequence[str], code: str, environment: dict[str, str], cwd: Path, timeout: float, *, wanted: set[str]
) -> Captured | None:
    """Run ``command`` (a :data:`patched_wheels.loading.probe.CHILD` interpreter; it gets the maps descriptor and ``code``) in its own
    session, reading its stdout, stderr and maps through pipes this process holds, in bounded memory; when it
    ends (or at the deadline), every process it started is killed, those that left its session too.  None when
    it ran (or its output was still open) past ``timeout`` seconds, reading included."""
    deadline = time.monotonic() + timeout
    before = _descendants()
    maps_read, maps_write = os.pipe()
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    sinks: dict[int, Tail | Lines] = {out_read: Tail(), err_read: Errors(), maps_read: Maps(wanted)}
    try:
        child = _start([*command, str(maps_write), code], environment, cwd, out_write, err_write, maps_write)
    finally:
        for fd in (maps_write, out_write, err_write):
            os.close(fd)
    returncode = None
    try:
        with selectors.DefaultSelector() as selector:
            for fd in sinks:
                os.set_blocking(fd, False)
                selector.register(fd, selectors.EVENT_READ)
            while (remaining := deadline - time.monotonic()) > 0:
                if returncode is None and (returncode := child.poll()) is not None:
                    _stop(child, before)  # what it left behind holds no pipe open past this point
                if not selector.get_map():
                    if returncode is not None:
                        break
                    with suppress(subprocess.TimeoutExpired):
                        child.wait(timeout=min(0.1, remaining))
                    continue
                for key, _ in selector.select(timeout=min(0.1, remaining)):
                    if data := os.read(key.fd, 1 << 16):
                        sinks[key.fd].feed(data)
                    else:
                        selector.unregister(key.fd)
            unfinished = returncode is None or bool(selector.get_map())
    finally:
        _stop(child, before)
        with _RUNNING_LOCK:
            _RUNNING.discard(child.pid)
            if not _RUNNING:
                _subreaper(False)
        for fd in sinks:
            os.close(fd)
    if unfinished:
        return None
    for sink in sinks.values():
        if isinstance(sink, Lines):
            sink.close()
    return Captured(returncode, sinks[out_read], sinks[err_read], sinks[maps_read])  # type: ignore[arg-type]


def _start(
    command: Sequence[str], environment: dict[str, str], cwd: Path, stdout: int, stderr: int, maps: int
) -> subprocess.Popen[bytes]:
    """Start and register the run's child, in its own session and process group."""
    with _RUNNING_LOCK:  # started and registered at once: another run's sweep never sees it unregistered
        if not _RUNNING:
            _subreaper(True)
        child = subprocess.Popen(
            command,
            env=environment,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            pass_fds=(maps,),
            start_new_session=True,
        )
        _RUNNING.add(child.pid)
        if _STOPPED[0]:  # registered after a stop_runs copied the runs (it stops first): it never runs on
            _kill_session(child.pid)
    return child


def stop_runs() -> None:
    """Kill the session of every run under way, and of every run that starts afterwards until :func:`allow_runs`
    (from a signal handler: no lock taken, and a run may be starting in another thread, its child not yet
    registered); each run then ends as after a crash, and its own end sweeps what left its session."""
    _STOPPED[0] = True  # before the copy: a run missing from it sees the stop once registered
    for pid in list(_RUNNING):  # one C call: a consistent copy whatever the other threads do
        _kill_session(pid)


def allow_runs() -> None:
    """Runs start again after :func:`stop_runs` (a new runner in the same process: a test's)."""
    _STOPPED[0] = False


def _kill_session(pid: int) -> None:
    """SIGKILL to the session's process group (its leader's pid); nothing when it has ended."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37
# The sessions (their leaders' pids) of the runs under way in this process: layout_test runs both layouts at
# once, and one run's end must not sweep away the other's processes.
_RUNNING: set[int] = set()
_RUNNING_LOCK = threading.Lock()
# Whether stop_runs was called (and allow_runs not since): a one-element list, set from a signal handler.
_STOPPED: list[bool] = [False]
# Whether this process was a subreaper before the first run under way made it one: restored after the last.
_WAS_SUBREAPER: list[bool] = []


def _subreaper(on: bool) -> None:
    """While runs are under way, make this process the parent of every orphan among its descendants (Linux
    3.4+), so that a process a run started in a new session (a daemon's double fork) is still found below this
    one and killed; afterwards, what it was before.  Only while: the caller's own daemons (a Bazel server that
    a test suite starts) must not become children this process never waits for, zombies that never die."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if on:
        state = ctypes.c_int(0)
        libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(state), 0, 0, 0)
        _WAS_SUBREAPER[:] = [bool(state.value)]
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    elif _WAS_SUBREAPER and not _WAS_SUBREAPER[0]:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def _descendants() -> dict[int, int]:
    """This process's descendants now, each with its session, from /proc (with this process a subreaper,
    orphans stay among them)."""
    children: dict[int, list[int]] = {}
    sessions: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read(4096).rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        sessions[int(entry.name)] = int(fields[3])
    found: dict[int, int] = {}
    pending = [os.getpid()]
    while pending:
        for pid in children.get(pending.pop(), ()):
            if pid not in found:
                found[pid] = sessions[pid]
                pending.append(pid)
    return found


def _stop(child: subprocess.Popen[bytes], before: Collection[int]) -> None:
    """Kill the run's session and every process below this one that the run started (they hold its pipes and
    its directories), and reap them.  Processes that were below this one before the run, and those in the
    session of another run under way, are left alone."""
    _kill_session(child.pid)
    child.wait()
    for _ in range(1000):  # each round kills what the last one's kills orphaned; a fork bomb ends with the rounds
        with _RUNNING_LOCK:  # no run starts while the strays are listed and killed
            others = _RUNNING - {child.pid}
            strays = [pid for pid, session in _descendants().items() if pid not in before and session not in others]
            for pid in strays:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if not strays:
            return
        for pid in strays:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not this process's child (yet): reaped by its own parent, or next round
                pass
        time.sleep(0.01)  # the kills take effect
