"""A strict unified-diff applier for wheel members.

GNU ``patch`` is not available everywhere Bazel runs, and its fuzzy matching can
silently apply a hunk in the wrong place when upstream shifts code around.  Here a hunk
applies only where its header says and only if every context and removed line matches
byte for byte; otherwise the error names the patch file, the target path and the hunk.
Patches may create (``--- /dev/null``) and delete (``+++ /dev/null``) files; as GNU ``patch`` reads
``diff -N``'s output, a side dated the Unix epoch whose hunks hold none of its lines is a file that does
not exist there (``--- a/new.py  1970-01-01 00:00:00.000000000 +0000`` with ``@@ -0,0 +1,3 @@`` creates it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from patched_wheels.base.fsutil import NotRegularFileError, read_regular_file
from patched_wheels.errors import PatchError

__all__ = ["FilePatch", "Hunk", "apply_file_patch", "parse_patch", "read_patch"]

MAX_PATCH_BYTES = 64 * 1024 * 1024
"""A patch is a few diffs of text files a patched wheel needs changed: a bigger file is none we apply."""
_HUNK_HEADER = re.compile(rb"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_NEWLINE = b"\\"  # "\ No newline at end of file"
_UNSUPPORTED_GIT = (b"GIT binary patch", b"Binary files ", b"rename from ", b"copy from ")
_DIFF_DATE = re.compile(rb"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? ([+-]\d{4})")
"""The date ``diff -u`` writes after a path and a tab: ISO, with nanoseconds and the zone's offset."""


@dataclass(frozen=True)
class Hunk:
    number: int  # 1-based position within its file's diff, as quoted in errors
    header: str
    old_start: int
    old_lines: tuple[bytes, ...]  # context and removed lines, line endings included
    new_lines: tuple[bytes, ...]  # context and added lines


@dataclass(frozen=True)
class FilePatch:
    """The changes a patch file makes to one path (``None`` stands for /dev/null)."""

    patch: str
    old_path: str | None
    new_path: str | None
    hunks: tuple[Hunk, ...]

    @property
    def path(self) -> str:
        """The archive path this diff changes, creates or deletes."""
        return self.new_path if self.new_path is not None else self.old_path  # type: ignore[return-value]


def read_patch(path: Path, *, strip: int = 1) -> list[FilePatch]:
    """The file diffs of the patch file ``path``: a regular file (or a link to one) of at most
    :data:`MAX_PATCH_BYTES`; a FIFO would block, a device never end."""
    try:
        data = read_regular_file(path, max_bytes=MAX_PATCH_BYTES, follow_links=True)
    except NotRegularFileError as error:
        raise PatchError(f"patch {path}: {error}") from None
    except OSError as error:
        raise PatchError(f"patch {path}: cannot read ({error.strerror or error})") from None
    return parse_patch(data, origin=str(path), strip=strip)


def parse_patch(data: bytes, *, origin: str, strip: int = 1) -> list[FilePatch]:
    """Split a patch into per-file diffs; text between them (commit messages, git headers) is ignored.

    ``strip`` leading path components are dropped from each path, as ``patch -p``; negative is an error.
    """
    if strip < 0:
        raise PatchError(f"patch {origin}: strip must be >= 0, got {strip}")
    lines = _split_lf(data)
    patches: list[FilePatch] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith(_UNSUPPORTED_GIT):
            raise PatchError(
                f"patch {origin}: line {index + 1}: unsupported git patch ({line.strip().decode('utf-8', 'replace')!r})"
            )
        if line.startswith(b"--- ") and index + 1 < len(lines) and lines[index + 1].startswith(b"+++ "):
            old_header, new_header = line, lines[index + 1]
            header_line = index + 1  # the "---" line, 1-based, as errors quote it
            old_path = _diff_path(old_header[4:], strip, origin, header_line)
            new_path = _diff_path(new_header[4:], strip, origin, header_line + 1)
            target = new_path if new_path is not None else old_path
            if target is None:
                raise PatchError(f"patch {origin}: line {header_line}: both sides are /dev/null")
            index += 2
            hunks: list[Hunk] = []
            while index < len(lines) and lines[index].startswith(b"@@ "):
                hunk, index = _parse_hunk(lines, index, len(hunks) + 1, origin, target)
                hunks.append(hunk)
            if not hunks:
                raise PatchError(f"patch {origin}: {target}: no hunks after the file header")
            if _dated_epoch(old_header[4:]) and not any(hunk.old_lines for hunk in hunks):
                old_path = None  # diff -N: a file the old side does not have
            if _dated_epoch(new_header[4:]) and not any(hunk.new_lines for hunk in hunks):
                new_path = None  # diff -N: a file the new side does not have
            if old_path is None and new_path is None:
                raise PatchError(f"patch {origin}: line {header_line}: both sides are files that do not exist")
            patches.append(FilePatch(origin, old_path, new_path, tuple(hunks)))
        else:
            index += 1
    if not patches:
        raise PatchError(f"patch {origin}: contains no unified diff")
    return patches


def apply_file_patch(file_patch: FilePatch, content: bytes | None) -> bytes | None:
    """Apply one file's hunks to ``content`` (None: the file does not exist); None means deleted."""
    where = f"patch {file_patch.patch}: {file_patch.path}"
    if file_patch.old_path is None:
        if content is not None:
            raise PatchError(f"{where}: creates a file that already exists in the wheel")
        content = b""
    elif content is None:
        raise PatchError(f"{where}: file is not in the wheel")
    lines = _split_lf(content)
    result: list[bytes] = []
    position = 0
    for hunk in file_patch.hunks:
        # "-5,0" means "after line 5": an insertion has no old line to point at.
        start = hunk.old_start if not hunk.old_lines else hunk.old_start - 1
        end = start + len(hunk.old_lines)
        if start < position or end > len(lines) or tuple(lines[start:end]) != hunk.old_lines:
            hint = ""
            if start >= position and _without_cr(lines[start:end]) == _without_cr(hunk.old_lines):
                hint = ": only the line endings differ (CRLF in one, LF in the other)"
            raise PatchError(f"{where}: hunk #{hunk.number} ({hunk.header}) does not apply at line {start + 1}{hint}")
        result.extend(lines[position:start])
        result.extend(hunk.new_lines)
        position = end
    result.extend(lines[position:])
    patched = b"".join(result)
    if file_patch.new_path is None:
        if patched:
            raise PatchError(f"{where}: deletion leaves {len(patched)} bytes behind")
        return None
    return patched


def _split_lf(data: bytes) -> list[bytes]:
    """Split after each LF only, so a CR before it stays part of the line and must match."""
    lines = data.split(b"\n")
    tail = lines.pop()
    return [line + b"\n" for line in lines] + ([tail] if tail else [])


def _without_cr(lines: Sequence[bytes]) -> list[bytes]:
    return [line[:-2] + b"\n" if line.endswith(b"\r\n") else line for line in lines]


def _dated_epoch(raw: bytes) -> bool:
    """Whether a file header's date (after the path and a tab) is the Unix epoch in its zone: how ``diff -N``
    dates a file that does not exist on that side."""
    match = _DIFF_DATE.search(raw.partition(b"\t")[2])
    if match is None:
        return False
    try:
        moment = datetime.strptime(b" ".join(match.groups()).decode("ascii"), "%Y-%m-%d %H:%M:%S %z")
    except ValueError:  # not a date (a 61st second, a 13th month)
        return False
    return moment == datetime(1970, 1, 1, tzinfo=timezone.utc)


def _diff_path(raw: bytes, strip: int, origin: str, line_number: int) -> str | None:
    path = raw.split(b"\t", 1)[0].rstrip(b"\r\n")
    if path == b"/dev/null":
        return None
    if path.startswith(b'"'):
        raise PatchError(f"patch {origin}: line {line_number}: quoted paths are not supported")
    try:
        text = path.decode("utf-8")
    except UnicodeDecodeError:
        raise PatchError(f"patch {origin}: line {line_number}: the path {path!r} is not UTF-8") from None
    parts = text.split("/")
    if len(parts) <= strip:
        raise PatchError(f"patch {origin}: line {line_number}: cannot strip {strip} components from {text!r}")
    return "/".join(parts[strip:])


def _parse_hunk(lines: list[bytes], index: int, number: int, origin: str, target: str) -> tuple[Hunk, int]:
    header_line = lines[index]
    match = _HUNK_HEADER.match(header_line)
    header = header_line.rstrip(b"\r\n").decode("utf-8", "replace")
    if not match:
        raise PatchError(f"patch {origin}: {target}: hunk #{number}: malformed header {header!r}")
    old_start, old_count, _, new_count = (int(group) if group is not None else 1 for group in match.groups())
    old: list[bytes] = []
    new: list[bytes] = []
    index += 1
    while len(old) < old_count or len(new) < new_count:
        if index >= len(lines):
            raise PatchError(f"patch {origin}: {target}: hunk #{number} ({header}) is truncated")
        line = lines[index]
        kind, text = line[:1], line[1:]
        if line in (b"\n", b"\r\n"):  # editors strip the space of an empty context line
            kind, text = b" ", line
        if kind == _NO_NEWLINE:
            _drop_line_ending(old, new, lines[index - 1][:1])
        elif kind == b" ":
            old.append(text)
            new.append(text)
        elif kind == b"-":
            old.append(text)
        elif kind == b"+":
            new.append(text)
        else:
            raise PatchError(f"patch {origin}: {target}: hunk #{number} ({header}): unexpected line {index + 1}")
        index += 1
    if index < len(lines) and lines[index][:1] == _NO_NEWLINE:
        _drop_line_ending(old, new, lines[index - 1][:1])
        index += 1
    if len(old) != old_count or len(new) != new_count:
        raise PatchError(f"patch {origin}: {target}: hunk #{number} ({header}): line counts do not match")
    return Hunk(number, header, old_start, tuple(old), tuple(new)), index


def _drop_line_ending(old: list[bytes], new: list[bytes], previous_kind: bytes) -> None:
    """Apply "\\ No newline at end of file" to the line just before it."""
    sides = {b" ": (old, new), b"-": (old,), b"+": (new,)}.get(previous_kind, ())
    for side in sides:
        if side[-1].endswith(b"\n"):
            side[-1] = side[-1][:-1]
