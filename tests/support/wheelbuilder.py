"""Build small, valid wheels with the standard library, for tests.

Built independently of ``patched_wheels.wheelfile`` (stdlib ``zipfile`` only), so tests
of the engine do not check its output against itself.

API (kept small on purpose, other test modules import it):

* ``build_wheel(directory, name, version, files, ...) -> Path`` writes
  ``<dist>-<version>[-<build>]-<tag>.whl`` with METADATA, WHEEL and a correct RECORD.
  Keys of ``files`` are archive paths; a key starting with ``.data/`` or ``.dist-info/``
  is placed in the wheel's ``<dist>-<version>.data/`` or ``.dist-info/`` directory.
* ``replace_members(wheel, replacements)`` rewrites members *without* touching RECORD
  (``None`` removes a member): the way to make a tampered or inconsistent wheel.
* ``edit_headers(wheel, member, **fields)`` overwrites fields of a member's local and central
  headers in place (sizes, CRC, "version needed", attributes): zip-level lies.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import shutil
import struct
import zipfile
from pathlib import Path
from typing import Mapping, Sequence

__all__ = ["build_wheel", "dist_name", "edit_headers", "replace_members"]


def dist_name(name: str) -> str:
    """The filename/dist-info spelling of a project name (wheel spec: runs of -_. become _)."""
    return re.sub(r"[-_.]+", "_", name)


def build_wheel(
    directory: Path,
    name: str,
    version: str,
    files: Mapping[str, bytes],
    *,
    build_tag: str | None = None,
    tag: str = "py3-none-any",
    requires: Sequence[str] = (),
    metadata_extra: str = "",
    modes: Mapping[str, int] | None = None,
    distribution: str | None = None,
    compression: int = zipfile.ZIP_DEFLATED,
    metadata_version: str | None = None,
) -> Path:
    """Write a wheel into ``directory`` and return its path.

    ``metadata_extra`` is appended verbatim to METADATA's headers; ``modes`` gives unix
    permission bits per archive path (default 0o644); ``distribution`` overrides the
    spelling used in the filename and dist-info directory (default ``dist_name(name)``);
    ``compression`` is the zip method of every member; ``metadata_version`` overrides
    METADATA's ``Version:`` (to build a wheel that disagrees with its own file name).
    """
    distribution = distribution or dist_name(name)
    prefix = f"{distribution}-{version}"
    dist_info, data = f"{prefix}.dist-info", f"{prefix}.data"
    members: dict[str, bytes] = {}
    for path, content in files.items():
        if path.startswith(".data/"):
            path = data + path[len(".data") :]
        elif path.startswith(".dist-info/"):
            path = dist_info + path[len(".dist-info") :]
        members[path] = content
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {metadata_version or version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    metadata += metadata_extra + "\nA test wheel.\n"
    purelib = "true" if tag.endswith("-none-any") else "false"
    wheel = f"Wheel-Version: 1.0\nGenerator: wheelbuilder\nRoot-Is-Purelib: {purelib}\n"
    wheel += "".join(f"Tag: {one}\n" for one in _expand_tags(tag))
    if build_tag is not None:
        wheel += f"Build: {build_tag}\n"
    members[f"{dist_info}/METADATA"] = metadata.encode()
    members[f"{dist_info}/WHEEL"] = wheel.encode()
    record = io.StringIO()  # csv quotes a name holding a comma, a quote or a line break, as installers read it
    writer = csv.writer(record, lineterminator="\n")
    writer.writerows([(path, f"sha256={_digest(content)}", len(content)) for path, content in members.items()])
    writer.writerow((f"{dist_info}/RECORD", "", ""))
    members[f"{dist_info}/RECORD"] = record.getvalue().encode()

    build = f"-{build_tag}" if build_tag is not None else ""
    path = Path(directory) / f"{distribution}-{version}{build}-{tag}.whl"
    with zipfile.ZipFile(path, "w", compression) as archive:
        for member, content in members.items():
            info = zipfile.ZipInfo(member, date_time=(2020, 2, 2, 12, 0, 0))
            info.compress_type = compression
            info.external_attr = (0o100000 | (modes or {}).get(member, 0o644)) << 16
            archive.writestr(info, content)
    return path


def replace_members(wheel: Path, replacements: Mapping[str, bytes | None]) -> None:
    """Rewrite ``wheel`` in place with some members' contents replaced or (None) removed."""
    temporary = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            if info.filename not in replacements:
                target.writestr(info, source.read(info))
            elif replacements[info.filename] is not None:
                target.writestr(info, replacements[info.filename])
    shutil.move(temporary, wheel)


# Offsets of the fields edit_headers knows, in the local header and in the central directory entry.
_LOCAL_FIELDS = {
    "extract_version": (4, "<H"),
    "flags": (6, "<H"),
    "method": (8, "<H"),
    "crc": (14, "<I"),
    "compress_size": (18, "<I"),
    "file_size": (22, "<I"),
}
_CENTRAL_FIELDS = {
    "extract_version": (6, "<H"),
    "flags": (8, "<H"),
    "method": (10, "<H"),
    "crc": (16, "<I"),
    "compress_size": (20, "<I"),
    "file_size": (24, "<I"),
    "external_attr": (38, "<I"),
    "header_offset": (42, "<I"),
}


def edit_headers(wheel: Path, member: str, *, local_only: bool = False, **fields: int) -> None:
    """Overwrite ``fields`` of ``member``'s local header and central directory entry, or of its local
    header only (32-bit zips only); ``header_offset`` is the central entry's only."""
    data = bytearray(wheel.read_bytes())
    end = data.rfind(b"PK\x05\x06")
    count, _size, position = struct.unpack_from("<HII", data, end + 10)
    for _ in range(count):
        name_length, extra_length, comment_length = struct.unpack_from("<HHH", data, position + 28)
        name = bytes(data[position + 46 : position + 46 + name_length]).decode("utf-8")
        if name == member:
            local = struct.unpack_from("<I", data, position + 42)[0]
            for field, value in fields.items():
                if field in _LOCAL_FIELDS:
                    offset, layout = _LOCAL_FIELDS[field]
                    struct.pack_into(layout, data, local + offset, value)
                if not local_only:
                    offset, layout = _CENTRAL_FIELDS[field]
                    struct.pack_into(layout, data, position + offset, value)
            wheel.write_bytes(bytes(data))
            return
        position += 46 + name_length + extra_length + comment_length
    raise KeyError(member)


def _digest(content: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()


def _expand_tags(tag: str) -> list[str]:
    python, abi, platform = tag.split("-")
    return [f"{p}-{a}-{pl}" for p in python.split(".") for a in abi.split(".") for pl in platform.split(".")]
