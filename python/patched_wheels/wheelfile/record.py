"""RECORD, the wheel's list of members with their hashes and sizes (PEP 376, wheel spec).

Rows are checked when parsed, so a digest the wheel could never match (an unknown or
variable-length algorithm, a truncated digest) is refused up front instead of reading
as a content mismatch later.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
from typing import Iterable, NamedTuple, Sequence

from patched_wheels.errors import InvalidWheelError

__all__ = [
    "InvalidRecordEntry",
    "RecordEntry",
    "generated_members",
    "parse_record",
    "record_hash",
    "serialize_record",
]

_GENERATED_FILES = ("RECORD", "RECORD.jws", "RECORD.p7s")
_WEAK_HASHES = frozenset({"md5", "sha1"})
# RECORD digests must have a fixed length to be compared (SHAKE's is chosen by the caller): the
# length of each one's urlsafe base64 without padding.
_ENCODED_DIGEST_LENGTH = {
    name: (4 * hashlib.new(name).digest_size + 2) // 3
    for name in hashlib.algorithms_guaranteed
    if not name.startswith("shake_")
}
_URLSAFE_BASE64 = re.compile(r"[A-Za-z0-9_-]*")
# What makes csv.reader's rows more than lines split at commas: quoting, other line ends, NUL.
_CSV_SPECIAL = ('"', "\r", "\0")
_CSV_QUOTED = ('"', ",", "\r", "\n")  # what csv.writer quotes a field for (hashes and sizes never hold them)


class InvalidRecordEntry(InvalidWheelError):
    """A RECORD row that is not ``path,algorithm=digest,size``.

    Like pypa/installer's, it carries the row's ``elements`` and the ``issue`` found, so a
    caller can tell what is wrong without parsing the message; ``where`` (the RECORD and row)
    prefixes the message.
    """

    def __init__(self, elements: Sequence[str], issue: str, *, where: str | None = None) -> None:
        super().__init__(issue if where is None else f"{where}: {issue}")
        self.elements = tuple(elements)
        self.issue = issue


class RecordEntry(NamedTuple):
    """One RECORD row: ``path,algorithm=urlsafe-b64-digest,size`` (hash/size may be empty).

    A named tuple: RECORDs of 10,000 rows are parsed on every open, and a frozen dataclass
    costs 3x as much to build.
    """

    path: str
    hash: str
    size: int | None

    @classmethod
    def from_elements(cls, elements: Sequence[str]) -> RecordEntry:
        """The entry of one CSV row; raises :class:`InvalidRecordEntry` on the first bad field."""
        if len(elements) != 3:
            raise InvalidRecordEntry(elements, f"expected 3 fields, got {len(elements)}")
        path, hash_, size = elements
        if hash_:
            algorithm, sep, encoded = hash_.partition("=")
            if not sep or not encoded or algorithm not in _ENCODED_DIGEST_LENGTH:
                raise InvalidRecordEntry(elements, f"bad hash {hash_!r} for {path}")
            if algorithm in _WEAK_HASHES:
                raise InvalidRecordEntry(elements, f"{algorithm} is not allowed ({path})")
            if len(encoded) != _ENCODED_DIGEST_LENGTH[algorithm] or not _URLSAFE_BASE64.fullmatch(encoded):
                raise InvalidRecordEntry(elements, f"bad {algorithm} digest {encoded!r} for {path}")
        if size and not (size.isascii() and size.isdigit()):  # str.isdigit() alone accepts "²", int() does not
            raise InvalidRecordEntry(elements, f"bad size {size!r} for {path}")
        return cls(path, hash_, int(size) if size else None)

    @property
    def algorithm(self) -> str:
        return self.hash.partition("=")[0]

    @property
    def digest(self) -> bytes:
        encoded = self.hash.partition("=")[2]
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))


_new_entry = tuple.__new__


def record_hash(digest: bytes, algorithm: str = "sha256") -> str:
    """RECORD's hash notation: urlsafe base64 without padding (PEP 376 / wheel spec)."""
    return f"{algorithm}=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def parse_record(data: bytes, *, origin: str) -> list[RecordEntry]:
    """Parse RECORD bytes; a malformed row raises :class:`InvalidRecordEntry` naming ``origin`` and the row."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidWheelError(f"{origin}: not UTF-8") from None
    if not any(special in text for special in _CSV_SPECIAL):  # then rows are lines, fields what commas part
        rows = [line.split(",") for line in text.split("\n") if line]  # csv.reader's rows, 3x faster
        if _all_valid(rows):
            # tuple.__new__: the row built in C, without the named tuple's Python-level __new__ per row.
            return [_new_entry(RecordEntry, (path, hash_, int(size) if size else None)) for path, hash_, size in rows]
    import csv  # imported here, as below: only a RECORD that needs quoting is read or written with it

    entries = []
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for line_number, row in enumerate(reader, start=1):  # row by row
            if not row:
                continue
            try:
                entries.append(RecordEntry.from_elements(row))
            except InvalidRecordEntry as error:
                raise InvalidRecordEntry(error.elements, error.issue, where=f"{origin}: row {line_number}") from None
    except csv.Error as error:  # Python < 3.11 refuses a NUL byte (3.11 reads it, and the row check refuses the path)
        raise InvalidWheelError(f"{origin}: row {reader.line_num}: not CSV: {error}") from None
    return entries


def _all_valid(rows: list[list[str]]) -> bool:
    """Whether every row passes :meth:`RecordEntry.from_elements`, checked column by column:
    a few C-level passes over all rows instead of a regular expression and a dozen calls per row."""
    if any(len(row) != 3 for row in rows):
        return False
    hashes = [row[1].partition("=") for row in rows if row[1]]
    algorithms = {algorithm for algorithm, _, _ in hashes}
    if not algorithms <= _ENCODED_DIGEST_LENGTH.keys() or algorithms & _WEAK_HASHES:
        return False
    digests = [digest for _, _, digest in hashes]
    if list(map(len, digests)) != [_ENCODED_DIGEST_LENGTH[algorithm] for algorithm, _, _ in hashes]:
        return False  # also a missing "=" or digest: its length is 0
    sizes = "".join(row[2] for row in rows)
    return bool(_URLSAFE_BASE64.fullmatch("".join(digests))) and (not sizes or (sizes.isascii() and sizes.isdigit()))


def serialize_record(entries: Iterable[RecordEntry]) -> bytes:
    """RECORD's bytes, as :func:`csv.writer` writes them (fields quoted only where they must be)."""
    entries = list(entries)
    # Rows unpacked, not read by attribute: a named tuple's attributes cost a lookup each, 10,600 rows.
    paths = "".join([path for path, _, _ in entries])  # the special characters are single ones: none in any path
    if not any(special in paths for special in _CSV_QUOTED):  # nothing to quote
        return "".join([f"{path},{hash_},{'' if size is None else size}\n" for path, hash_, size in entries]).encode(
            "utf-8"
        )
    import csv

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for entry in entries:
        writer.writerow((entry.path, entry.hash, "" if entry.size is None else entry.size))
    return buffer.getvalue().encode("utf-8")


def generated_members(dist_info: str) -> frozenset[str]:
    """RECORD and its signatures: listed in RECORD without a hash, and never copied into a rewritten
    wheel (RECORD is regenerated; signatures of the old RECORD would be stale)."""
    return frozenset(f"{dist_info}/{name}" for name in _GENERATED_FILES)
