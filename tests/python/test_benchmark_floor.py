"""The inflate floor ``bench_graph`` times beside ``graph``: it must read the members' deflated bytes (at the
offsets :func:`data_extents` finds past each local header), or its time would be the floor of nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

from benchmarks.inflate_floor import FLOOR_CODE, data_extents


def _wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("pkg/lib/libone.so", os.urandom(1000) + b"text " * 300_000)
        info = zipfile.ZipInfo("pkg/lib/libtwo.so.1")
        info.extra = b"\xca\xfe\x04\x00abcd"  # a local extra field the offsets must skip
        archive.writestr(info, b"x" * 5_000_000, compress_type=zipfile.ZIP_DEFLATED)
    return path


def test_extents_point_at_each_members_deflated_bytes(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        members = [(wheel, info) for info in archive.infolist()]
        contents = [archive.read(info) for info in archive.infolist()]
    extents = data_extents(members)
    data = wheel.read_bytes()
    for (name, offset, size), content in zip(extents, contents):
        assert name == str(wheel)
        assert zlib.decompress(data[offset : offset + size], -15) == content


def test_the_floor_inflates_the_extents_and_fails_on_bytes_that_are_not_deflate(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        extents = data_extents([(wheel, info) for info in archive.infolist()])
    good = tmp_path / "good.json"
    good.write_text(json.dumps(extents), encoding="utf-8")
    assert subprocess.run([sys.executable, "-c", FLOOR_CODE, str(good)], check=False).returncode == 0
    shifted = tmp_path / "shifted.json"  # the local headers' bytes read as deflate data
    shifted.write_text(json.dumps([(name, 0, size) for name, _, size in extents]), encoding="utf-8")
    failed = subprocess.run([sys.executable, "-c", FLOOR_CODE, str(shifted)], check=False, capture_output=True)
    assert failed.returncode != 0 and b"error" in failed.stderr.lower()
