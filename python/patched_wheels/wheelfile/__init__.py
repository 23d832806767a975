"""Read and write wheels member by member, without recompressing what does not change.

A wheel is a zip archive whose ``<name>-<version>.dist-info/RECORD`` lists every member
with its sha256 and size.  One spec concept per module, re-exported here:

- :mod:`.filename`: the wheel's file name and its members' paths;
- :mod:`.record`: RECORD rows, parsed, checked and written;
- :mod:`.zipdirectory`: the zip's central directory, read as zipfile reads it, faster;
- :mod:`.zipcontainer`: the zip under it, member by member: locating, streaming and
  inflating a member's data (bounded by the size the zip declares), and encoding headers;
- :mod:`.reader`: :class:`WheelReader`, what a wheel we accept is, checked once when a
  wheel is opened, for every command;
- :mod:`.writer`: :class:`WheelWriter`, which copies unchanged members' compressed bytes
  (their local headers checked as they are copied) and checks what it wrote as a reader would.
"""

from patched_wheels.wheelfile.filename import WheelFilename, is_safe_member_path
from patched_wheels.wheelfile.reader import WheelReader
from patched_wheels.wheelfile.record import (
    InvalidRecordEntry,
    RecordEntry,
    generated_members,
    parse_record,
    record_hash,
    serialize_record,
)
from patched_wheels.wheelfile.writer import WheelWriter
from patched_wheels.wheelfile.zipcontainer import CHUNK_SIZE, INFLATER_NAME, RawMember, inflated_chunks
from patched_wheels.wheelfile.zipdirectory import ZipMember

__all__ = [
    "CHUNK_SIZE",
    "INFLATER_NAME",
    "InvalidRecordEntry",
    "RawMember",
    "RecordEntry",
    "WheelFilename",
    "WheelReader",
    "WheelWriter",
    "ZipMember",
    "generated_members",
    "inflated_chunks",
    "is_safe_member_path",
    "parse_record",
    "record_hash",
    "serialize_record",
]
