"""The one rewrite pipeline: what each output member is, and the one writer loop for every wheel we write.

:func:`patched_wheels.patch.surgery.patch_wheel` collects a wheel's edits in :class:`WheelEdits`
(new contents by *original* member name), a split (:mod:`patched_wheels.patch.split`) plans
against them and adds a sibling wheel; both wheels are then lists of :class:`OutputMember`
written by :func:`write_wheel`.  A member is one of:

* copied raw: its compressed bytes, CRC and RECORD row, like ``cp`` (every unchanged member,
  and a library a split moves: it keeps its bytes under its new name);
* new bytes (a patched text file, METADATA, the preload module);
* :class:`Overwritten`: an input member streamed with a few bytes replaced (an RPATH edit that
  fits in the old string), deflated on the fly;
* :class:`Spilled`: a temp file (a library whose dynamic string table grew), deflated from there.

So no member is ever held in memory whole unless it is a small file we rewrote.
"""

from __future__ import annotations

import fnmatch
import os
import tempfile
from contextlib import ExitStack, suppress
from itertools import groupby
from pathlib import Path
from typing import Callable, Iterator, Mapping, NamedTuple, Optional, Sequence, Union

from patched_wheels.base.fsutil import temp_directory
from patched_wheels.base.names import canonicalize_name, glob_problem
from patched_wheels.errors import PatchedWheelsError, PatchError, UsageError
from patched_wheels.patch.version import with_local_suffix
from patched_wheels.wheelfile import CHUNK_SIZE, WheelReader, WheelWriter, generated_members, is_safe_member_path
from patched_wheels.wheelfile import metadata as metadata_edits

__all__ = [
    "Content",
    "Later",
    "MemberEdit",
    "OutputMember",
    "Overwritten",
    "Scratch",
    "Spilled",
    "WheelEdits",
    "content_chunks",
    "write_wheel",
]

MemberEdit = Callable[[Optional[bytes]], bytes]
"""Maps a member's current content (None when absent) to its new content."""

_REQUIRED = ("METADATA", "WHEEL")


class Overwritten(NamedTuple):
    """Input member ``source`` with ``patches`` (file offset, new bytes) written over it: same size."""

    source: str
    patches: tuple[tuple[int, bytes], ...]


class Spilled(NamedTuple):
    """New content in a temp file of the run's :class:`Scratch` (a library :mod:`patched_wheels.elf.grow` wrote)."""

    path: Path


Content = Union[bytes, Overwritten, Spilled]


class Later(NamedTuple):
    """Content known only once work under way is done (a split's preload module and moved libraries: once the
    library graph is read, on other threads): :func:`write_wheel` calls ``resolve`` when it reaches the member, so
    the members before it are written meanwhile.  ``resolve`` returns the content, or None for the source
    member's compressed bytes, copied raw; the output is the same bytes as with that content given at once."""

    resolve: Callable[[], Content | None]


class OutputMember(NamedTuple):
    """One member of an output wheel (a named tuple: a wheel has 10,000 of them, a dataclass costs 3x more)."""

    arcname: str
    """Its name in the output."""
    source: str | None
    """The input member it comes from (its mode is kept); None for a new file."""
    content: Content | Later | None = None
    """None: ``source``'s compressed bytes, copied raw."""


_new_member = tuple.__new__


class Scratch:
    """A temp directory in the destination, made on first use and removed on exit: temp files, unfinished outputs.

    In the destination, so outputs are renamed into place on the same file system, and a large
    library edited into a temp file is written where the wheel goes, not to a small ``/tmp``.
    """

    def __init__(self, directory: Path, name: str) -> None:
        self._parent, self._name = directory, name
        self._stack = ExitStack()
        self._path: Path | None = None
        self._made_parent = False

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        self._stack.close()
        if exc_type is not None and self._made_parent:
            with suppress(OSError):  # a failure leaves nothing, not even the directory it made (if still empty)
                self._parent.rmdir()

    @property
    def path(self) -> Path:
        if self._path is None:
            self._made_parent = not self._parent.is_dir()
            self._parent.mkdir(parents=True, exist_ok=True)
            self._path = self._stack.enter_context(temp_directory(self._parent, self._name))
        return self._path

    def new_file(self) -> Path:
        """A new empty file (closed) in the directory."""
        handle, name = tempfile.mkstemp(dir=self.path)
        os.close(handle)
        return Path(name)


def member_chunks(reader: WheelReader, name: str, content: Content | None) -> Callable[[], Iterator[bytes]]:
    """Passes over member ``name``'s current bytes (``content``, or the input member's when None), each
    from the start: what a streamed ELF edit reads (:mod:`patched_wheels.elf.edit`)."""
    source: Content = Overwritten(name, ()) if content is None else content
    return lambda: content_chunks(reader, source)


def content_chunks(reader: WheelReader, content: Content) -> Iterator[bytes]:
    """``content``'s bytes in pieces of at most CHUNK_SIZE (an input member's checked against RECORD)."""
    if isinstance(content, bytes):
        yield content
    elif isinstance(content, Spilled):
        with open(content.path, "rb") as handle:
            yield from iter(lambda: handle.read(CHUNK_SIZE), b"")
    else:
        position = 0
        with reader.open(content.source) as stream:
            for chunk in iter(lambda: stream.read(CHUNK_SIZE), b""):
                end = position + len(chunk)
                overlapping = [
                    (offset, data) for offset, data in content.patches if offset < end and offset + len(data) > position
                ]
                if overlapping:
                    piece = bytearray(chunk)
                    for offset, data in overlapping:
                        start = max(offset, position)
                        stop = min(offset + len(data), end)
                        piece[start - position : stop - position] = data[start - offset : stop - offset]
                    chunk = bytes(piece)
                yield chunk
                position = end


def write_wheel(reader: WheelReader, path: Path, *, dist_info: str, members: Sequence[OutputMember]) -> None:
    """Write ``members`` (from ``reader``'s wheel) as the wheel ``path``: the one writer loop of every output."""
    with WheelWriter(path, dist_info=dist_info) as writer:
        for raw, run in groupby(members, key=_is_raw_copy):
            if raw:  # runs of raw copies (nearly every member) in one call each
                writer.copy_raw_members(reader, ((source, arcname) for arcname, source, _ in run))  # type: ignore[misc]
            else:
                for member in run:
                    _write_new(writer, reader, member)


def _is_raw_copy(member: OutputMember) -> bool:
    """Whether ``member`` is its source's compressed bytes (no content of its own)."""
    _, _, content = member  # unpacked: cheaper than a named tuple's attribute, once per member
    return content is None


def _write_new(writer: WheelWriter, reader: WheelReader, member: OutputMember) -> None:
    """Write an output member with content of its own (not the input's compressed bytes), or whose content
    comes :class:`Later` (which may be the input's compressed bytes after all)."""
    content = member.content.resolve() if isinstance(member.content, Later) else member.content
    if content is None:  # a Later's raw copy: the bytes a run of raw copies gives it (no state spans members)
        assert member.source is not None  # a new file has content
        writer.copy_raw_members(reader, ((member.source, member.arcname),))
        return
    mode = (reader.mode(member.source) if member.source is not None and member.source in reader else None) or 0o644
    if isinstance(content, bytes):
        writer.write_bytes(member.arcname, content, mode=mode)
    elif isinstance(content, Spilled):
        writer.write_file(member.arcname, content.path, mode=mode)
    else:
        size = reader.file_size(content.source)
        writer.write_stream(member.arcname, content_chunks(reader, content), size=size, mode=mode)


class WheelEdits:
    """New contents by original member name (None: deleted), over the reader's originals.

    A split plans against it (:meth:`patched_wheels.patch.split.SplitRequest.plan`): which members
    still exist and what they hold once the other edits are made.
    """

    def __init__(self, reader: WheelReader) -> None:
        self.reader = reader
        self.contents: dict[str, Content | Later | None] = {}
        self._generated = generated_members(reader.dist_info)  # rewritten or dropped, never edited
        self._protected = self._generated | {f"{reader.dist_info}/{name}" for name in _REQUIRED}

    def current(self, name: str) -> bytes | None:
        """A member's content in memory: for the small files edits rewrite (never a library's streamed edit)."""
        if name not in self.contents:
            return self.reader.read(name) if name in self.reader else None
        content = self.contents[name]
        if content is None or isinstance(content, bytes):
            return content
        raise UsageError(f"{self.reader.path.name}: {name}: its RPATH is edited; it cannot also be edited as a file")

    def edited(self, name: str) -> Content | None:
        """What the edits made of ``name`` (None: the input member as is, or none): asked while planning, before
        any content comes :class:`Later` (the preload modules of a split, set last)."""
        content = self.contents.get(name)
        assert not isinstance(content, Later)
        return content

    def exists(self, name: str) -> bool:
        return self.contents[name] is not None if name in self.contents else name in self.reader

    def existing(self) -> list[str]:
        """Every member the output will hold (generated ones included), originals in input order, then new ones."""
        created = sorted(name for name in self.contents if name not in self.reader and self.exists(name))
        return self._originals_kept() + created

    def _originals_kept(self) -> list[str]:
        """The input's members that are not deleted, in input order (:meth:`exists` for each, in one pass)."""
        deleted = {name for name, content in self.contents.items() if content is None}
        return [name for name in self.reader.members() if name not in deleted]

    def set(self, name: str, content: Content | Later | None) -> None:
        self.contents[name] = content

    def check_editable(self, name: str, source: str) -> None:
        if not is_safe_member_path(name) or name.endswith("/"):
            raise PatchError(f"{source}: {name!r} is not a safe file path inside the wheel")
        if name in self._generated:
            raise PatchError(f"{source}: {name} is generated by patched-wheels and cannot be edited")
        top = name.split("/", 1)[0]
        if top.endswith(".dist-info") and top != self.reader.dist_info:
            raise PatchError(f"{source}: {name} would add a second .dist-info directory")

    def check_deletable(self, name: str, source: str, error: type[PatchedWheelsError]) -> None:
        """``error``: whose fault a refused deletion is (a patch's, or the ``--delete`` option's)."""
        if name in self._protected:
            raise error(f"{source}: would delete {name}, which a wheel needs")

    def matching(self, pattern: str, option: str) -> list[str]:
        """Existing members matching ``pattern`` (fnmatch: ``*`` also crosses ``/``), in name order; ``option``: how
        the user gave it (``--delete``), which names a pattern fnmatch would misread."""
        if problem := glob_problem(pattern):
            raise UsageError(f"{option} {pattern!r}: {problem}")
        candidates = {*self.reader.members(), *self.contents}
        return sorted(name for name in candidates if fnmatch.fnmatchcase(name, pattern) and self.exists(name))

    def delete_matching(self, pattern: str) -> None:
        """Delete members matching ``pattern``; matching nothing is an error."""
        matches = set(self.matching(pattern, "--delete"))
        if not matches:
            raise UsageError(f"--delete {pattern!r}: matches no member of {self.reader.path.name}")
        for name in sorted(matches):
            self.check_deletable(name, f"--delete {pattern!r}", UsageError)
        for name in matches:
            self.contents[name] = None

    def apply_member_edits(self, member_edits: Mapping[str, MemberEdit], source: str) -> None:
        """Replace each named member by what its edit makes of its current content."""
        for name, edit in member_edits.items():
            self.check_editable(name, source)
            self.set(name, edit(self.current(name)))

    def version(self, suffix: str | None) -> str:
        """The output's version: METADATA's (as patched), with ``suffix`` as its local label when given."""
        content = self._metadata()
        versions = metadata_edits.field_values(content, "Version")
        if len(versions) != 1:
            raise PatchError(f"{self._metadata_origin}: expected one Version header, found {len(versions)}")
        return with_local_suffix(versions[0], suffix) if suffix is not None else versions[0]

    def edit_metadata(
        self,
        version: str,
        suffix: str | None,
        remove_requires: Sequence[str],
        add_requires: Sequence[str],
        generated_requires: Sequence[str] = (),
    ) -> str:
        """Apply the METADATA edits (``version`` is set when a ``suffix`` changed it); return the project name to pin.
        ``generated_requires``: requirements built here, valid by construction (:func:`metadata.add_requires`)."""
        origin = self._metadata_origin
        content = self._metadata()
        edited = content
        if remove_requires:
            edited = metadata_edits.remove_requires(edited, remove_requires, origin=origin)
        if add_requires or generated_requires:
            edited = metadata_edits.add_requires(edited, add_requires, origin=origin, generated=generated_requires)
        if suffix is not None:
            edited = metadata_edits.set_version(edited, version, origin=origin)
        if edited != content:
            self.contents[f"{self.reader.dist_info}/METADATA"] = edited
        names = metadata_edits.field_values(edited, "Name")
        project = names[0] if names else self.reader.filename.name
        if canonicalize_name(project) != self.reader.filename.name:
            raise PatchError(f"{origin}: Name {project!r} does not match the wheel filename")
        return project

    @property
    def _metadata_origin(self) -> str:
        return f"{self.reader.path.name}: {self.reader.dist_info}/METADATA"

    def _metadata(self) -> bytes:
        content = self.current(f"{self.reader.dist_info}/METADATA")
        if content is None:
            raise PatchError(f"{self._metadata_origin}: missing (deleted by a patch?)")
        return content

    def output_members(self, renames: Mapping[str, str]) -> list[OutputMember]:
        """The main wheel: input order, new files after the originals of their part, .dist-info last (as the
        spec recommends); ``renames`` maps a top-level directory to its new name (``.dist-info``, ``.data``)."""
        dist_info = self.reader.dist_info + "/"
        kept = [name for name in self._originals_kept() if name not in self._generated]
        created = sorted(
            name for name, content in self.contents.items() if content is not None and name not in self.reader
        )
        ordered = [name for name in kept if not name.startswith(dist_info)]
        ordered += [name for name in created if not name.startswith(dist_info)]
        ordered += [name for name in kept if name.startswith(dist_info)]
        ordered += [name for name in created if name.startswith(dist_info)]
        new, contents = set(created), self.contents
        members = []
        for name in ordered:
            arcname = name
            if renames:
                top, slash, rest = name.partition("/")
                arcname = renames.get(top, top) + slash + rest
            # tuple.__new__: built in C, without the named tuple's Python-level __new__ (one per member).
            members.append(_new_member(OutputMember, (arcname, None if name in new else name, contents.get(name))))
        return members
