"""Byte-preserving edits of a wheel's ``METADATA`` (core metadata, RFC 822 style).

``email.parser`` would re-fold headers, change line endings and reorder nothing but
still rewrite bytes we did not mean to touch; reviewers of a patched wheel want a diff
of METADATA that shows only the intended lines.  So the header block is split into
fields (a ``Name: value`` line plus its whitespace-indented continuation lines) kept as
raw bytes, and only the fields being edited are replaced.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, NamedTuple, Sequence

from patched_wheels.base.names import canonicalize_name
from patched_wheels.errors import UNREADABLE_REQUIREMENT, InvalidWheelError, UsageError

if TYPE_CHECKING:
    from packaging.utils import NormalizedName

__all__ = ["add_requires", "field_values", "remove_requires", "required_projects", "set_version"]

_FIELD_NAME = re.compile(rb"([A-Za-z0-9][A-Za-z0-9-]*):")
_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")


class _Field(NamedTuple):
    name: str  # lower-cased, for matching
    raw: bytes  # the exact bytes, continuation lines and line ending included

    @property
    def value(self) -> str:
        """The unfolded value (continuation lines joined by a space).

        Bytes that are not UTF-8 become U+FFFD: a wheel's METADATA is checked to be UTF-8
        when the wheel is read and when it is written, so they never reach an output.
        """
        _, _, value = self.raw.partition(b":")
        return " ".join(line.strip() for line in value.decode("utf-8", "replace").splitlines())


def _split(metadata: bytes) -> tuple[list[_Field], bytes]:
    """Header fields and the rest (the blank separator line and the body), exactly as stored."""
    fields: list[_Field] = []
    name, start = "", None  # the field being read: its name, where its first line starts
    position = 0
    while position < len(metadata):
        end = metadata.find(b"\n", position)
        end = len(metadata) if end < 0 else end + 1
        line = metadata[position:end]
        if line in (b"\n", b"\r\n"):
            break
        # A continuation line only extends the field: its bytes are taken once it ends (joined line by line,
        # a field folded over 800,000 lines took a minute).
        if start is None or line[:1] not in (b" ", b"\t"):
            if start is not None:
                fields.append(_Field(name, metadata[start:position]))
            match = _FIELD_NAME.match(line)
            name, start = (match.group(1).decode("ascii").lower() if match else ""), position
        position = end
    if start is not None:
        fields.append(_Field(name, metadata[start:position]))
    return fields, metadata[position:]


def _join(fields: Sequence[_Field], rest: bytes) -> bytes:
    return b"".join(field.raw for field in fields) + rest


def _line_ending(fields: Sequence[_Field]) -> bytes:
    return b"\r\n" if fields and fields[0].raw.endswith(b"\r\n") else b"\n"


def field_values(metadata: bytes, name: str) -> list[str]:
    """All (unfolded) values of the header ``name``, case-insensitively."""
    fields, _ = _split(metadata)
    return [field.value for field in fields if field.name == name.lower()]


def required_projects(metadata: bytes) -> set[NormalizedName]:
    """The projects named by ``Requires-Dist`` headers (any marker or extra): the one place their names are read."""
    names = set()
    for value in field_values(metadata, "Requires-Dist"):
        match = _REQUIREMENT_NAME.match(value)
        if match:
            names.add(canonicalize_name(match.group(1)))
    return names


def set_version(metadata: bytes, version: str, *, origin: str) -> bytes:
    """Replace the single ``Version:`` header's value, keeping its spelling and line ending."""
    fields, rest = _split(metadata)
    indices = [index for index, field in enumerate(fields) if field.name == "version"]
    if len(indices) != 1:
        raise InvalidWheelError(f"{origin}: expected one Version header, found {len(indices)}")
    old = fields[indices[0]]
    header = old.raw.partition(b":")[0]
    eol = b"\r\n" if old.raw.endswith(b"\r\n") else b"\n"
    fields[indices[0]] = _Field("version", header + b": " + version.encode("ascii") + eol)
    return _join(fields, rest)


def remove_requires(metadata: bytes, names: Sequence[str], *, origin: str) -> bytes:
    """Drop every ``Requires-Dist`` of the given projects (all markers and extras).

    Naming a project the wheel does not require is an error: a typo would otherwise
    silently leave the dependency in place.
    """
    wanted = {canonicalize_name(name): name for name in names}
    fields, rest = _split(metadata)
    found: set[str] = set()
    kept = []
    for field in fields:
        if field.name == "requires-dist":
            match = _REQUIREMENT_NAME.match(field.value)
            project = canonicalize_name(match.group(1)) if match else ""
            if project in wanted:
                found.add(project)
                continue
        kept.append(field)
    missing = [original for canonical, original in wanted.items() if canonical not in found]
    if missing:
        raise UsageError(f"{origin}: no Requires-Dist for {', '.join(missing)} to remove")
    return _join(kept, rest)


def add_requires(metadata: bytes, specs: Sequence[str], *, origin: str, generated: Sequence[str] = ()) -> bytes:
    """Append ``Requires-Dist`` headers after the existing ones (or at the end of the headers): the user's
    ``specs``, each parsed first, then ``generated``, requirements this program built from checked parts
    (a split's pin on its sibling: a project name and the wheel's version), not parsed again."""
    if specs:
        from packaging.requirements import Requirement  # imported here: only a user's needs it

    fields, rest = _split(metadata)
    eol = _line_ending(fields)
    new_fields = []
    for spec in specs:
        try:
            Requirement(spec)
        except UNREADABLE_REQUIREMENT as error:  # packaging's parser recurses per "("
            reason = str(error).splitlines()[0]  # packaging adds the text and a caret on more lines
            raise UsageError(f"{origin}: cannot add requirement {spec!r}: {reason}") from None
    for spec in [*specs, *generated]:
        new_fields.append(_Field("requires-dist", b"Requires-Dist: " + spec.strip().encode("utf-8") + eol))
    existing = [index for index, field in enumerate(fields) if field.name == "requires-dist"]
    insert_at = existing[-1] + 1 if existing else len(fields)
    if insert_at == len(fields) and fields and not fields[-1].raw.endswith(b"\n"):
        fields[-1] = _Field(fields[-1].name, fields[-1].raw + eol)  # METADATA without a final newline
    fields[insert_at:insert_at] = new_fields
    return _join(fields, rest)
