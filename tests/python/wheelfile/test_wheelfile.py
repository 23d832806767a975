"""Wheel reading (structural checks, hash-checked streaming) and raw-copy writing."""

from __future__ import annotations

import csv
import hashlib
import io
import os
import random
import re
import stat
import struct
import time
import zipfile
import zlib
from pathlib import Path

import pytest
from installer.sources import WheelFile as InstallerWheel

from patched_wheels import wheelfile
from patched_wheels.errors import InvalidWheelError, PatchedWheelsError, UsageError
from patched_wheels.wheelfile import (
    InvalidRecordEntry,
    RecordEntry,
    WheelFilename,
    WheelReader,
    WheelWriter,
    parse_record,
    serialize_record,
    zipcontainer,
    zipdirectory,
)
from support.wheelbuilder import build_wheel, edit_headers, replace_members

FILES = {
    "demo/__init__.py": b"print('hello')\n" * 50,
    "demo/lib.so": os.urandom(300_000),  # incompressible: deflate would not shrink it
    "demo/empty.txt": b"",
    ".data/scripts/demo-run": b"#!python\nimport demo\n",
}


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return build_wheel(tmp_path, "demo", "1.0", FILES, modes={"demo-1.0.data/scripts/demo-run": 0o755})


def _copy_all(reader: WheelReader, dest: Path) -> None:
    with WheelWriter(dest, dist_info=reader.dist_info) as writer:
        for name in reader.members():
            if name != f"{reader.dist_info}/RECORD":
                writer.copy_raw(reader, name)


def _one_line_error(excinfo: pytest.ExceptionInfo[PatchedWheelsError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------- reading


def test_reader_exposes_structure(wheel: Path) -> None:
    with WheelReader(wheel) as reader:
        assert reader.filename == WheelFilename.parse(wheel.name)
        assert reader.dist_info == "demo-1.0.dist-info"
        assert reader.data_dir == "demo-1.0.data"
        assert reader.members()[:3] == ["demo/__init__.py", "demo/lib.so", "demo/empty.txt"]
        assert reader.metadata().startswith(b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
        assert reader.file_size("demo/lib.so") == 300_000
        assert reader.mode("demo-1.0.data/scripts/demo-run") == 0o755
        assert reader.mode("demo/__init__.py") == 0o644
        assert reader.open("demo/lib.so").read() == FILES["demo/lib.so"]
        assert reader.read("demo/empty.txt") == b""


def test_filename_keeps_spelling_and_build_tag() -> None:
    parsed = WheelFilename.parse("Foo_Bar-2.1.2+cu118-7-cp311-cp311-manylinux1_x86_64.whl")
    assert (parsed.name, str(parsed.version), parsed.build_tag) == ("foo-bar", "2.1.2+cu118", (7, ""))
    assert parsed.with_version("2.1.2+cu118.x") == "Foo_Bar-2.1.2+cu118.x-7-cp311-cp311-manylinux1_x86_64.whl"


def test_streaming_read_detects_tampering(wheel: Path) -> None:
    replace_members(wheel, {"demo/__init__.py": b"print('evil')\n"})
    # Sizes differ, so the cheap check already refuses the wheel.
    with pytest.raises(InvalidWheelError) as caught:
        WheelReader(wheel)
    assert _one_line_error(caught) == (
        f"{wheel.name}: demo-1.0.dist-info/RECORD: demo/__init__.py has size 750 in RECORD but 14 in the zip"
    )


def test_a_record_whose_crc_lies_is_refused_as_zipfile_and_pip_refuse_it(wheel: Path) -> None:
    """RECORD has no hash of its own: it was read without its CRC-32 checked, so a wheel pip refuses was indexed."""
    with zipfile.ZipFile(wheel) as archive:
        crc = archive.getinfo("demo-1.0.dist-info/RECORD").CRC
    edit_headers(wheel, "demo-1.0.dist-info/RECORD", crc=crc ^ 1)
    with pytest.raises(zipfile.BadZipFile, match="Bad CRC-32"), zipfile.ZipFile(wheel) as archive:
        archive.read("demo-1.0.dist-info/RECORD")
    with pytest.raises(InvalidWheelError) as caught:
        WheelReader(wheel)
    assert _one_line_error(caught) == (
        f"{wheel.name}: demo-1.0.dist-info/RECORD: content does not match the zip directory's CRC-32"
    )


@pytest.mark.parametrize(("member", "most"), [("RECORD", 64 << 20), ("METADATA", 16 << 20), ("WHEEL", 16 << 20)])
def test_a_file_read_whole_that_declares_gigabytes_is_refused_before_it_is_inflated(
    wheel: Path, member: str, most: int
) -> None:
    """A few kB of deflated rows inflate to gigabytes (a zip bomb): RECORD, METADATA and WHEEL are read whole,
    so a size past any real one is refused as declared."""
    name = f"demo-1.0.dist-info/{member}"
    if member != "RECORD":  # RECORD, checked first, says the same size: its author made the bomb
        with zipfile.ZipFile(wheel) as archive:
            rows = archive.read("demo-1.0.dist-info/RECORD").decode()
        rows = re.sub(rf"^({re.escape(name)},[^,]*,)\d+$", rf"\g<1>{0xFFFF_FFFE}", rows, flags=re.M)
        assert str(0xFFFF_FFFE) in rows
        replace_members(wheel, {"demo-1.0.dist-info/RECORD": rows.encode()})
    edit_headers(wheel, name, file_size=0xFFFF_FFFE)
    with pytest.raises(InvalidWheelError) as caught:
        WheelReader(wheel)
    assert _one_line_error(caught) == (
        f"{wheel.name}: demo-1.0.dist-info/{member}: {0xFFFF_FFFE} bytes, more than the {most} such a file may hold"
    )


def test_same_size_tampering_is_caught_when_read_and_by_verify(wheel: Path) -> None:
    original = FILES["demo/__init__.py"]
    replace_members(wheel, {"demo/__init__.py": original.replace(b"hello", b"HELLO")})
    with WheelReader(wheel) as reader:  # cheap checks pass: same size
        with pytest.raises(InvalidWheelError) as caught:
            reader.read("demo/__init__.py")
        assert _one_line_error(caught) == f"{wheel.name}: demo/__init__.py: content does not match its RECORD hash"
        assert reader.read("demo/lib.so") == FILES["demo/lib.so"]
    with pytest.raises(InvalidWheelError, match="demo/__init__.py: content does not match its RECORD hash"):
        WheelReader(wheel, verify=True)


def test_verify_accepts_intact_wheel(wheel: Path) -> None:
    with WheelReader(wheel, verify=True) as reader:
        assert reader.dist_info == "demo-1.0.dist-info"


def _raw_zip(path: Path, members: list[tuple[str, bytes]]) -> Path:
    """A zip with exactly these members (stdlib allows duplicates and odd names)."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in members:
            archive.writestr(zipfile.ZipInfo(name), content)
    return path


def _record_for(members: list[tuple[str, bytes]], dist_info: str) -> bytes:
    rows = [
        RecordEntry(name, wheelfile.record_hash(hashlib.sha256(data).digest()), len(data)) for name, data in members
    ]
    return serialize_record([*rows, RecordEntry(f"{dist_info}/RECORD", "", None)])


_BASE = {
    "a/__init__.py": b"x",
    "a-1.0.dist-info/METADATA": b"Name: a\nVersion: 1.0\n",
    "a-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nTag: py3-none-any\n",
}


def _wheel_with(
    tmp_path: Path,
    extra: list[tuple[str, bytes]],
    *,
    record_extra: list[tuple[str, bytes]] = (),
    base: dict[str, bytes | None] | None = None,
    filename: str = "a-1.0-py3-none-any.whl",
) -> Path:
    """A wheel of project ``a`` with ``extra`` members; ``base`` overrides (None: drops) members of ``_BASE``."""
    members = {**_BASE, **(base or {})}
    listed = [(name, data) for name, data in members.items() if data is not None] + extra
    record = _record_for(listed + list(record_extra), "a-1.0.dist-info")
    return _raw_zip(tmp_path / filename, listed + [("a-1.0.dist-info/RECORD", record)])


@pytest.mark.parametrize(
    ("member", "message"),
    [
        ("../evil.py", "member '../evil.py': unsafe path"),
        ("/etc/passwd", "member '/etc/passwd': unsafe path"),
        ("a/../../evil.py", "member 'a/../../evil.py': unsafe path"),
        ("C:/evil.py", "member 'C:/evil.py': unsafe path"),
        ("a\\..\\evil.py", "unsafe path"),
    ],
)
def test_unsafe_member_paths(tmp_path: Path, member: str, message: str) -> None:
    path = _wheel_with(tmp_path, [(member, b"boom")])
    with pytest.raises(InvalidWheelError) as caught:
        WheelReader(path)
    assert _one_line_error(caught).startswith(f"{path.name}: ")
    assert message in str(caught.value)


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_duplicate_member(tmp_path: Path) -> None:
    path = _wheel_with(tmp_path, [("a/x.py", b"1"), ("a/x.py", b"2")])
    with pytest.raises(InvalidWheelError, match=r"^a-1.0-py3-none-any.whl: member 'a/x.py': duplicate member name$"):
        WheelReader(path)


def test_member_missing_from_record(tmp_path: Path) -> None:
    path = _wheel_with(tmp_path, [("a/x.py", b"1")])
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("a/sneaky.py", b"import os")
    with pytest.raises(InvalidWheelError, match=r"RECORD: does not list a/sneaky.py$"):
        WheelReader(path)


def test_record_lists_missing_member(tmp_path: Path) -> None:
    path = _wheel_with(tmp_path, [], record_extra=[("a/gone.py", b"1")])
    with pytest.raises(InvalidWheelError, match=r"RECORD: lists a/gone.py, which is not in the wheel$"):
        WheelReader(path)


SHA256_X = wheelfile.record_hash(hashlib.sha256(b"x").digest())


def test_malformed_record_row(tmp_path: Path) -> None:
    with pytest.raises(InvalidRecordEntry, match="^w: row 2: expected 3 fields, got 2$") as caught:
        parse_record(f"a,{SHA256_X},1\nb,{SHA256_X}\n".encode(), origin="w")
    assert (caught.value.elements, caught.value.issue) == (("b", SHA256_X), "expected 3 fields, got 2")
    with pytest.raises(InvalidWheelError, match="md5 is not allowed"):
        parse_record(b"a,md5=abc,1\n", origin="w")


@pytest.mark.parametrize(
    "text",
    [
        f"a,{SHA256_X},1\n\nb/c.py,,\nd.dist-info/RECORD,,\n",  # no quotes: read as lines split at commas
        f"a,{SHA256_X},1\r\nb,,\r\n",
        f'"a,b",{SHA256_X},1\n"q""q",,\n',
        f"a,{SHA256_X},01\n,,\n",
    ],
)
def test_record_rows_are_what_csv_reads(text: str) -> None:
    rows = [row for row in csv.reader(io.StringIO(text, newline="")) if row]
    assert parse_record(text.encode(), origin="r") == [RecordEntry.from_elements(row) for row in rows]


@pytest.mark.parametrize("path", ["a b/c.py", " x\t\u00e9", "a,b.py", 'q"q.py', "a\nb", "a\rb"])
def test_record_is_written_as_csv_writes_it(path: str) -> None:
    entries = [RecordEntry(path, SHA256_X, 3), RecordEntry("x.dist-info/RECORD", "", None)]
    expected = io.StringIO()
    writer = csv.writer(expected, lineterminator="\n")
    writer.writerows([(path, SHA256_X, 3), ("x.dist-info/RECORD", "", "")])
    assert serialize_record(entries) == expected.getvalue().encode("utf-8")


def test_a_bad_row_after_blank_lines_is_named_by_its_line() -> None:
    with pytest.raises(InvalidRecordEntry, match="^w: row 4: bad size 'x' for b$"):
        parse_record(f"a,{SHA256_X},1\n\n\nb,{SHA256_X},x\n".encode(), origin="w")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("a,shake_128=AAAA,1", "row 1: bad hash 'shake_128=AAAA' for a"),  # no fixed digest length
        ("a,sha256=%%%,1", "row 1: bad sha256 digest '%%%' for a"),
        ("a,sha256=AAAA,1", "row 1: bad sha256 digest 'AAAA' for a"),  # valid base64, 3 bytes
        ("a,sha256=é,1", "row 1: bad sha256 digest 'é' for a"),
        (f"a,{SHA256_X},\u00b2", "row 1: bad size '²' for a"),  # str.isdigit() says yes, int() says no
        (f"a,{SHA256_X},\u0661", "row 1: bad size '١' for a"),
        (f"a,{SHA256_X},-1", "row 1: bad size '-1' for a"),
    ],
)
def test_record_fields_are_checked_when_parsed(row: str, message: str) -> None:
    with pytest.raises(InvalidRecordEntry) as caught:
        parse_record(row.encode(), origin="w")
    assert _one_line_error(caught) == f"w: {message}"
    assert caught.value.elements == tuple(row.split(","))
    with pytest.raises(InvalidRecordEntry) as direct:
        RecordEntry.from_elements(row.split(","))
    assert str(direct.value) == direct.value.issue == message.partition(": ")[2]


def test_not_a_zip_and_truncated(tmp_path: Path, wheel: Path) -> None:
    not_zip = tmp_path / "x-1.0-py3-none-any.whl"
    not_zip.write_bytes(b"<html>404</html>")
    with pytest.raises(InvalidWheelError, match=r"x-1.0-py3-none-any.whl: not a zip archive or truncated"):
        WheelReader(not_zip)
    data = wheel.read_bytes()
    wheel.write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidWheelError) as caught:
        WheelReader(wheel)
    assert _one_line_error(caught).startswith(f"{wheel}: not a zip archive or truncated")


def test_wrong_dist_info(tmp_path: Path) -> None:
    path = build_wheel(tmp_path, "demo", "1.0", {"demo/x.py": b""})
    renamed = path.with_name("other-1.0-py3-none-any.whl")
    path.rename(renamed)
    with pytest.raises(InvalidWheelError, match="expected one other-<version>.dist-info directory, found: demo-1.0"):
        WheelReader(renamed)


def test_record_parse_serialize_round_trip() -> None:
    entries = [RecordEntry('a,b/c "q".py', SHA256_X, 3), RecordEntry("x.dist-info/RECORD", "", None)]
    assert parse_record(serialize_record(entries), origin="r") == entries


# ---------------------------------------------------------------- writing


def test_raw_copy_round_trip_keeps_compressed_bytes(wheel: Path, tmp_path: Path) -> None:
    dest = tmp_path / "out" / wheel.name
    dest.parent.mkdir()
    with WheelReader(wheel) as reader:
        _copy_all(reader, dest)
    with zipfile.ZipFile(wheel) as before, zipfile.ZipFile(dest) as after:
        assert after.testzip() is None
        assert after.namelist() == before.namelist()  # RECORD was last in both
        for info in before.infolist():
            copied = after.getinfo(info.filename)
            assert (copied.CRC, copied.external_attr) == (info.CRC, info.external_attr)
            if info.filename != "demo-1.0.dist-info/RECORD":  # written again from the same rows, not copied
                assert copied.compress_size == info.compress_size
            assert copied.date_time == (1980, 1, 1, 0, 0, 0)
        assert (
            after.read("demo-1.0.dist-info/RECORD").splitlines()
            == before.read("demo-1.0.dist-info/RECORD").splitlines()
        )
    with InstallerWheel.open(dest) as source:
        source.validate_record(validate_contents=True)
    assert list(tmp_path.joinpath("out").iterdir()) == [dest]  # no temp file left


def test_raw_member_is_the_compressed_stream_copy_raw_keeps(wheel: Path, tmp_path: Path) -> None:
    """The public raw-copy API: a member's compressed bytes, the same in the copy whether renamed or not."""
    dest = tmp_path / "out" / wheel.name
    dest.parent.mkdir()
    with WheelReader(wheel) as reader:
        raw = reader.raw_member("demo/lib.so")
        with pytest.raises(AttributeError):  # immutable
            raw.data_offset = 0  # type: ignore[misc]
        compressed = b"".join(raw.chunks())
        assert raw.info == reader.info("demo/lib.so") and raw.data_end - raw.data_offset == len(compressed)
        assert zlib.decompress(compressed, wbits=-15) == FILES["demo/lib.so"]
        kept = b"".join(reader.raw_member("demo/__init__.py").chunks())
        with WheelWriter(dest, dist_info=reader.dist_info) as writer:
            for name in reader.members():
                if name == "demo/lib.so":
                    writer.copy_raw(reader, name, arcname="demo/_lib.so")  # a new local header
                elif name != f"{reader.dist_info}/RECORD":
                    writer.copy_raw(reader, name)  # the input's local header
        row = reader.record_entry("demo/lib.so")
        assert row is not None
    with WheelReader(dest, verify=True) as copy:
        assert b"".join(copy.raw_member("demo/_lib.so").chunks()) == compressed
        assert b"".join(copy.raw_member("demo/__init__.py").chunks()) == kept
        assert "demo/lib.so" not in copy
        assert copy.record_entry("demo/_lib.so") == RecordEntry("demo/_lib.so", row.hash, 300_000)
    with InstallerWheel.open(dest) as source:
        source.validate_record(validate_contents=True)


def test_written_members_and_record(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(1 << 20) * 3)  # > CHUNK_SIZE: streamed in several chunks
    big.chmod(0o750)
    dest = tmp_path / "n-1-py3-none-any.whl"
    with WheelWriter(dest, dist_info="n-1.dist-info") as writer:
        writer.write_bytes("n/é.py", b"x = 1\n", mode=0o600)
        writer.write_file("n/big.bin", big)
        writer.write_bytes("n-1.dist-info/METADATA", b"Name: n\nVersion: 1\n")
        writer.write_bytes("n-1.dist-info/WHEEL", b"Wheel-Version: 1.0\n")
    with zipfile.ZipFile(dest) as archive:
        assert archive.testzip() is None
        assert archive.read("n/é.py") == b"x = 1\n"
        assert archive.read("n/big.bin") == big.read_bytes()
        assert archive.getinfo("n/big.bin").external_attr >> 16 == 0o100750
        assert archive.getinfo("n/é.py").external_attr >> 16 == 0o100600
        record = archive.read("n-1.dist-info/RECORD").decode()
    digest = wheelfile.record_hash(hashlib.sha256(big.read_bytes()).digest())
    assert record.splitlines()[1] == f"n/big.bin,{digest},{3 << 20}"
    assert "=" not in digest[len("sha256=") :]
    assert record.endswith("n-1.dist-info/RECORD,,\n")
    with WheelReader(dest, verify=True) as reader:
        assert reader.members()[-1] == "n-1.dist-info/RECORD"


def test_writer_is_deterministic_and_honours_source_date_epoch(
    wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = []
    for index, epoch in enumerate(["", "", "1700000000"]):
        monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
        dest = tmp_path / str(index) / wheel.name
        dest.parent.mkdir()
        with WheelReader(wheel) as reader:
            _copy_all(reader, dest)
        outputs.append(hashlib.sha256(dest.read_bytes()).hexdigest())
    assert outputs[0] == outputs[1] != outputs[2]
    with zipfile.ZipFile(dest) as archive:
        assert archive.infolist()[0].date_time == (2023, 11, 14, 22, 13, 20)


def test_writer_leaves_nothing_on_error(wheel: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with WheelReader(wheel) as reader, pytest.raises(InvalidWheelError, match="member demo/lib.so written twice"):
        with WheelWriter(out / wheel.name, dist_info=reader.dist_info) as writer:
            writer.copy_raw(reader, "demo/lib.so")
            writer.copy_raw(reader, "demo/lib.so")
    assert list(out.iterdir()) == []


def test_writer_refuses_unsafe_and_generated_names(tmp_path: Path) -> None:
    with pytest.raises(InvalidWheelError, match="unsafe member path '../x'"):
        with WheelWriter(tmp_path / "n-1-py3-none-any.whl", dist_info="n-1.dist-info") as writer:
            writer.write_bytes("../x", b"")
    with pytest.raises(InvalidWheelError, match="n-1.dist-info/RECORD is generated"):
        with WheelWriter(tmp_path / "n-1-py3-none-any.whl", dist_info="n-1.dist-info") as writer:
            writer.write_bytes("n-1.dist-info/RECORD", b"")
    assert list(tmp_path.iterdir()) == []


def test_more_than_65535_members_use_zip64_end_records(tmp_path: Path) -> None:
    count = 70_000
    files = {f"many/m{index}.txt": b"%d" % index for index in range(count)}
    wheel = build_wheel(tmp_path, "many", "1.0", files)
    dest = tmp_path / "out" / wheel.name
    dest.parent.mkdir()
    with WheelReader(wheel) as reader:
        _copy_all(reader, dest)
    data = dest.read_bytes()
    assert struct.pack("<I", 0x06064B50) in data[-200:]  # ZIP64 end of central directory record
    with zipfile.ZipFile(dest) as archive:
        assert len(archive.infolist()) == count + 3
        assert archive.read("many/m69999.txt") == b"69999"
    with WheelReader(dest, verify=True) as reader:
        assert len(reader.members()) == count + 3


def test_zip64_headers_for_members_beyond_4_gib(tmp_path: Path) -> None:
    """Central directory of a member at 6 GiB with 5 GiB sizes, parsed back by stdlib zipfile.

    The data region is a sparse hole, so the test writes only the directory.
    """
    size, compressed, offset = 5 << 30, (5 << 30) - 7, 6 << 30
    entry = zipdirectory.ZipMember(
        "big/huge.bin",
        b"big/huge.bin",
        3,
        0,
        zipfile.ZIP_DEFLATED,
        0x12345678,
        compressed,
        size,
        offset,
        0o100755 << 16,
        b"",
    )
    directory_offset = offset + (7 << 30)
    path = tmp_path / "sparse.zip"
    with open(path, "wb") as handle:
        handle.truncate(directory_offset)
        handle.seek(directory_offset)
        central = zipcontainer.central_header(entry, True, 0x21, 0)
        handle.write(central + zipcontainer.end_records(1, directory_offset, len(central)))
    with zipfile.ZipFile(path) as archive:
        [info] = archive.infolist()
    assert (info.filename, info.file_size, info.compress_size, info.header_offset) == (
        "big/huge.bin",
        size,
        compressed,
        offset,
    )
    assert (info.CRC, info.external_attr >> 16, info.extract_version) == (0x12345678, 0o100755, 45)

    local = zipcontainer.local_header(entry, True, 0x21, 0)
    fields = struct.unpack_from("<IHHHHHIIIHH", local)
    assert fields[0] == 0x04034B50 and fields[1] == 45
    assert fields[7:9] == (0xFFFFFFFF, 0xFFFFFFFF)
    extra = local[30 + fields[9] :]
    assert struct.unpack("<HHQQ", extra) == (1, 16, size, compressed)

    with open(path, "rb") as handle:
        [member], _ = zipdirectory.read_directory(handle.fileno(), path=path)
    assert (member.filename, member.file_size, member.compress_size, member.header_offset) == (
        "big/huge.bin",
        size,
        compressed,
        offset,
    )
    assert member.extra == entry.extra != b""  # the record as written is the record as read


_FIELDS = (
    "filename",
    "create_system",
    "flag_bits",
    "compress_type",
    "CRC",
    "compress_size",
    "file_size",
    "header_offset",
    "external_attr",
    "extra",
)


def _directories(path: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """The central directory as our parser reads it, and as zipfile does."""
    with open(path, "rb") as handle:
        ours = [
            tuple(getattr(member, field) for field in _FIELDS)
            for member in zipdirectory.read_directory(handle.fileno(), path=path)[0]
        ]
    with zipfile.ZipFile(path) as archive:
        theirs = [tuple(getattr(info, field) for field in _FIELDS) for info in archive.infolist()]
    return ours, theirs


def test_the_central_directory_reads_as_zipfile_reads_it(tmp_path: Path) -> None:
    """Comment, prepended data, ZIP64 extra fields and end records, other extra fields, cp437 and UTF-8 names."""
    path = tmp_path / "mixed.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.comment = b"a comment " * 100
        archive.writestr("plain.txt", b"plain")
        with archive.open("zip64.bin", "w", force_zip64=True) as handle:
            handle.write(b"x" * 1000)
        info = zipfile.ZipInfo("caf\u00e9/\u00fcber.txt")
        info.extra = struct.pack("<HH4s", 0x5455, 4, b"time")
        archive.writestr(info, b"utf-8 name, extended timestamp extra field")
        for index in range(3):
            archive.writestr(f"many/{index}", b"%d" % index)
    cp437 = bytearray(path.read_bytes())
    position = cp437.index(b"plain.txt", cp437.index(struct.pack("<I", 0x02014B50)))
    cp437[position : position + 1] = b"\x81"  # "\u00fc" in cp437, no UTF-8 flag
    path.write_bytes(b"#!/bin/sh\nprepended data\n" + cp437)
    ours, theirs = _directories(path)
    assert ours == theirs and ours[0][0] == "\u00fclain.txt" and ours[2][0] == "caf\u00e9/\u00fcber.txt"
    assert ours[0][7] > 0  # offsets shifted by the prepended data

    many = tmp_path / "many.zip"
    with zipfile.ZipFile(many, "w") as archive:
        for index in range(0x10000):  # more than the end record can count: ZIP64 end records
            archive.writestr(f"{index}", b"")
    ours, theirs = _directories(many)
    assert ours == theirs and len(ours) == 0x10000


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda data: data[:-30], "File is not a zip file"),
        (lambda data: data.replace(b"PK\x01\x02", b"PK\x01\x03", 1), "Bad magic number for central directory"),
        (
            lambda data: b"UT\x09\x00".join(data.rsplit(b"UT\x04\x00", 1)),
            "Corrupt extra field 5455 (size=9)",
        ),  # the central one
    ],
)
def test_a_damaged_central_directory_fails_like_zipfile(tmp_path: Path, damage, message) -> None:
    path = tmp_path / "x-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        info = zipfile.ZipInfo("x/a.txt")
        info.extra = struct.pack("<HH4s", 0x5455, 4, b"time")
        archive.writestr(info, b"a")
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(zipfile.BadZipFile, match=re.escape(message)):
        zipfile.ZipFile(path)
    with pytest.raises(InvalidWheelError) as caught:
        WheelReader(path)
    assert _one_line_error(caught) == f"{path}: not a zip archive or truncated ({message})"


def test_small_entries_need_no_zip64() -> None:
    entry = zipdirectory.ZipMember("a", b"a", 3, 0, 8, 0, 10, 20, 30, 0, b"")
    assert len(zipcontainer.central_header(entry, False, 0, 0)) == 46 + 1
    assert entry.extra == b""
    assert len(zipcontainer.local_header(entry, False, 0, 0)) == 30 + 1
    assert len(zipcontainer.end_records(0xFFFE, 100, 100)) == 22
    assert len(zipcontainer.end_records(0xFFFF, 100, 100)) == 22 + 56 + 20


SAFE = ["a/b.py", "a/", "a/b/", "x.dist-info/RECORD", ".hidden/x", "a/.x", "a/..x", "...", "x."]
UNSAFE = ["", "/", "/a", "../a", "../", "a/../b", "a/..", "a/.", "./a", "a//b", "a//", "a\\b", "C:/x", "a\0", "..", "."]


@pytest.mark.parametrize("name", SAFE + UNSAFE)
def test_is_safe_member_path(name: str) -> None:
    assert wheelfile.is_safe_member_path(name) is (name in SAFE)


def test_all_names_checked_at_once_get_the_verdict_of_each_checked() -> None:
    """all_safe_member_paths (the reader's check of every name at once) is True exactly where is_safe_member_path
    accepts every name: seeded lists of names built from the pieces that make or break a path."""
    import random

    from patched_wheels.wheelfile.filename import all_safe_member_paths

    pieces = ["a", "b.py", ".", "..", "...", "/", "/", "\\", ":", "c:", "\0", "\n", "\u00e9", ".x", ""]
    pick = random.Random(29)
    verdicts = set()
    for _ in range(20_000):
        names = ["".join(pick.choices(pieces, k=pick.randrange(6))) for _ in range(pick.randrange(4))]
        expected = all(wheelfile.is_safe_member_path(name) for name in names)
        assert all_safe_member_paths(names) is expected, names
        verdicts.add(expected)
    assert verdicts == {True, False}
    for name in SAFE + UNSAFE:  # each known case beside safe names, first, last and alone
        for names in ([name], ["a/b.py", name], [name, "a/", "x."]):
            assert all_safe_member_paths(names) is (name in SAFE), names


def test_the_tree_of_all_names_at_once_is_the_layout_of_each_name_added() -> None:
    """The reader's check that no file stands where a directory is, made over all names at once, agrees with
    _MemberLayout adding them one by one (in any order): the same verdict, the same directories."""
    import random

    from patched_wheels.wheelfile import reader as reader_module

    pick = random.Random(31)
    verdicts = set()
    for _ in range(5_000):
        names = {
            "/".join(pick.choices(["a", "b", "c.py"], k=pick.randrange(1, 4))) + pick.choice(["", "", "/"])
            for _ in range(pick.randrange(1, 7))
        }
        ordered = pick.sample(sorted(names), len(names))
        layout = reader_module._MemberLayout()
        conflict = any([layout.add(name) for name in ordered])
        directories = reader_module._tree_directories(ordered)
        assert (directories is None) is conflict, ordered
        if not conflict:
            assert directories == layout.directories, ordered
        verdicts.add(conflict)
    assert verdicts == {True, False}


def test_raw_copies_get_the_fixed_timestamp_in_local_headers_too(wheel: Path, tmp_path: Path) -> None:
    dest = tmp_path / "out" / wheel.name
    dest.parent.mkdir()
    with WheelReader(wheel) as reader:
        _copy_all(reader, dest)
    data = dest.read_bytes()
    with zipfile.ZipFile(dest) as archive:
        for info in archive.infolist():
            # (time, date) at offset 10 of the local header: 1980-01-01 00:00:00
            assert struct.unpack_from("<HH", data, info.header_offset + 10) == (0, 0x21), info.filename


class _Unseekable:
    """A write-only stream: makes zipfile use data descriptors (flag bit 3) like streaming archivers."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, chunk: bytes) -> int:
        self.data += chunk
        return len(chunk)

    def flush(self) -> None:
        pass


def test_members_with_data_descriptors_are_copied_and_renamed(wheel: Path, tmp_path: Path) -> None:
    stream = _Unseekable()
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(stream, "w", zipfile.ZIP_DEFLATED) as target:  # type: ignore[arg-type]
        for info in source.infolist():
            with target.open(zipfile.ZipInfo(info.filename, info.date_time), "w") as member:
                member.write(source.read(info))
    streamed = tmp_path / "streamed" / wheel.name
    streamed.parent.mkdir()
    streamed.write_bytes(stream.data)
    with zipfile.ZipFile(streamed) as archive:
        assert all(info.flag_bits & 0x8 for info in archive.infolist())
    dest = tmp_path / "out" / "demo-2-py3-none-any.whl"
    dest.parent.mkdir()
    with WheelReader(streamed) as reader, WheelWriter(dest, dist_info="demo-2.dist-info") as writer:
        for name in reader.members():
            if name.endswith("/METADATA"):
                writer.write_bytes("demo-2.dist-info/METADATA", reader.metadata().replace(b"1.0", b"2"))
            elif not name.endswith("/RECORD"):
                writer.copy_raw(reader, name, arcname=name.replace("demo-1.0.", "demo-2."))
    with zipfile.ZipFile(dest) as archive:
        assert archive.testzip() is None
        assert archive.read("demo/lib.so") == FILES["demo/lib.so"]
        assert not any(info.flag_bits & 0x8 for info in archive.infolist())
    with InstallerWheel.open(dest) as source:
        source.validate_record(validate_contents=True)


def test_local_header_must_agree_with_central_directory(wheel: Path) -> None:
    data = bytearray(wheel.read_bytes())
    with zipfile.ZipFile(wheel) as archive:
        offset = archive.getinfo("demo/lib.so").header_offset
    data[offset + 14 : offset + 18] = b"\0\0\0\0"  # CRC in the local header only
    wheel.write_bytes(bytes(data))
    with WheelReader(wheel) as reader, pytest.raises(InvalidWheelError) as caught:
        reader.read("demo/lib.so")
    assert _one_line_error(caught) == f"{wheel.name}: demo/lib.so: local header disagrees with the central directory"


# ---------------------------------------------------------------- what a wheel must be


def _symlink_member(name: str, target: bytes) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info, target


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("no WHEEL", "a-1.0-py3-none-any.whl: a-1.0.dist-info/WHEEL: missing"),
        ("no METADATA", "a-1.0-py3-none-any.whl: a-1.0.dist-info/METADATA: missing"),
        ("second dist-info", "expected one a-<version>.dist-info directory, found: a-1.0.dist-info, b-1.0.dist-info"),
        ("METADATA version", "a-1.0.dist-info/METADATA: has version 3.0, the file name 1.0"),
        ("METADATA name", "a-1.0.dist-info/METADATA: names project b, the file name a"),
        ("METADATA two versions", "a-1.0.dist-info/METADATA: has version 1.0, 1.1, the file name 1.0"),
        ("METADATA not UTF-8", "a-1.0.dist-info/METADATA: not UTF-8 (byte 15)"),
        ("WHEEL not UTF-8", "a-1.0.dist-info/WHEEL: not UTF-8 (byte 0)"),
        ("WHEEL version", "a-1.0.dist-info/WHEEL: Wheel-Version 2.0 is not 1.x"),
        ("WHEEL without version", "a-1.0.dist-info/WHEEL: Wheel-Version none is not 1.x"),
        ("file under a file", "member 'a/__init__.py/x.py': a/__init__.py is a file, not a directory"),
        ("directory over a file", "member 'a': a is a directory of other members"),
    ],
)
def test_wheels_that_are_not_accepted(tmp_path: Path, case: str, message: str) -> None:
    base: dict[str, bytes | None] = {}
    extra: list[tuple[str, bytes]] = []
    if case == "no WHEEL":
        base["a-1.0.dist-info/WHEEL"] = None
    elif case == "no METADATA":
        base["a-1.0.dist-info/METADATA"] = None
    elif case == "second dist-info":
        extra = [("b-1.0.dist-info/METADATA", b"Name: b\nVersion: 1.0\n")]
    elif case.startswith("METADATA"):
        base["a-1.0.dist-info/METADATA"] = {
            "METADATA version": b"Name: a\nVersion: 3.0\n",
            "METADATA name": b"Name: b\nVersion: 1.0\n",
            "METADATA two versions": b"Name: a\nVersion: 1.0\nVersion: 1.1\n",
            "METADATA not UTF-8": b"Name: a\nVersion\xff: 1.0\n",
        }[case]
    elif case.startswith("WHEEL"):
        base["a-1.0.dist-info/WHEEL"] = {
            "WHEEL not UTF-8": b"\xffWheel-Version: 1.0\n",
            "WHEEL version": b"Wheel-Version: 2.0\n",
            "WHEEL without version": b"Tag: py3-none-any\n",
        }[case]
    elif case == "file under a file":
        extra = [("a/__init__.py/x.py", b"")]
    elif case == "directory over a file":
        extra = [("a", b"")]
    path = _wheel_with(tmp_path, extra, base=base)
    with pytest.raises(InvalidWheelError) as caught:
        WheelReader(path)
    assert _one_line_error(caught).startswith(f"{path.name}: ")
    assert message in str(caught.value)


def test_dist_info_version_must_be_the_file_names(tmp_path: Path) -> None:
    path = build_wheel(tmp_path, "demo", "1.0", {"demo/x.py": b""})
    renamed = path.with_name("demo-1.0.0-py3-none-any.whl")  # the same version, spelled differently: fine
    path.rename(renamed)
    assert WheelReader(renamed).dist_info == "demo-1.0.dist-info"
    other = renamed.with_name("demo-2.0-py3-none-any.whl")
    renamed.rename(other)
    with pytest.raises(InvalidWheelError) as caught:
        WheelReader(other)
    assert (
        _one_line_error(caught) == f"{other.name}: demo-1.0.dist-info: version '1.0' differs from the file name's 2.0"
    )


def test_symlink_members_are_refused(tmp_path: Path) -> None:
    path = _wheel_with(tmp_path, [])
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(*_symlink_member("a/link", b"/etc/passwd"))
    with pytest.raises(InvalidWheelError) as caught:
        WheelReader(path)
    assert (
        _one_line_error(caught) == f"{path.name}: member 'a/link': not a regular file (a symbolic link or special file)"
    )


def test_invalid_project_name_in_the_file_name(tmp_path: Path) -> None:
    with pytest.raises(InvalidWheelError) as caught:
        WheelFilename.parse("\u017fx-1.0-py3-none-any.whl")  # 'ſ' matches [a-z] case-insensitively
    assert _one_line_error(caught) == "ſx-1.0-py3-none-any.whl: not a valid wheel filename (invalid project name)"
    with pytest.raises(InvalidWheelError, match="invalid project name"):
        WheelFilename.parse("foo_-1.0-py3-none-any.whl")


def test_unsupported_zip_version_is_one_line(tmp_path: Path, wheel: Path) -> None:
    edit_headers(wheel, "demo/__init__.py", extract_version=99)  # zipfile raises NotImplementedError
    with pytest.raises(InvalidWheelError) as caught:
        WheelReader(wheel)
    assert _one_line_error(caught).startswith(f"{wheel}: unsupported zip archive (zip file version 9.9)")


def test_stored_member_whose_sizes_differ(tmp_path: Path) -> None:
    path = build_wheel(tmp_path, "demo", "1.0", {"demo/x.py": b"12345"}, compression=zipfile.ZIP_STORED)
    edit_headers(path, "demo/x.py", compress_size=3)
    with pytest.raises(InvalidWheelError) as caught:
        WheelReader(path)
    assert _one_line_error(caught) == f"{path.name}: member 'demo/x.py': stored with 3 bytes but 5 declared"


def test_inflating_stops_at_the_declared_size(tmp_path: Path) -> None:
    """A member whose deflate stream inflates far past what the zip and RECORD declare."""
    path = build_wheel(tmp_path, "demo", "1.0", {"demo/x.py": b"\0" * 100})
    replace_members(path, {"demo/x.py": b"\0" * (8 << 20)})
    edit_headers(path, "demo/x.py", file_size=100)
    chunks = []
    with WheelReader(path) as reader, pytest.raises(InvalidWheelError) as caught:
        for chunk in reader.open("demo/x.py"):
            chunks.append(len(chunk))
    assert _one_line_error(caught) == f"{path.name}: demo/x.py: inflates past the 100 bytes the zip declares"
    assert sum(chunks) <= 101


@pytest.mark.parametrize(
    ("epoch", "expected"),
    [
        ("", (1980, 1, 1, 0, 0, 0)),
        ("0", (1980, 1, 1, 0, 0, 0)),
        ("99999999999999999999", (2107, 12, 31, 23, 59, 58)),  # past what gmtime takes
        ("5000000000", (2107, 12, 31, 23, 59, 58)),  # 2128: past what a zip can say
    ],
)
def test_source_date_epoch_is_clamped_to_the_zip_range(
    wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, epoch: str, expected: tuple[int, ...]
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
    dest = tmp_path / "out" / wheel.name
    dest.parent.mkdir()
    with WheelReader(wheel) as reader:
        _copy_all(reader, dest)
    with zipfile.ZipFile(dest) as archive:
        assert archive.infolist()[0].date_time == expected


@pytest.mark.parametrize("epoch", ["\u00b2", "\u0661\u0662", "-5", "1e9", "soon"])
def test_source_date_epoch_that_is_not_a_number_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, epoch: str
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
    with pytest.raises(UsageError) as caught:
        WheelWriter(tmp_path / "n-1-py3-none-any.whl", dist_info="n-1.dist-info")
    assert _one_line_error(caught) == f"SOURCE_DATE_EPOCH={epoch!r}: not a number of seconds since 1970"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({"n-1.dist-info/METADATA": b"Name: n\nVersion: 1\n"}, "n-1-py3-none-any.whl: n-1.dist-info/WHEEL: missing"),
        (
            {**dict.fromkeys(["n-1.dist-info/METADATA", "m-1.dist-info/METADATA"], b"Name: n\nVersion: 1\n")},
            "expected one n-<version>.dist-info directory, found: m-1.dist-info, n-1.dist-info",
        ),
        ({"n-1.dist-info/METADATA": b"Name: n\nVersion: 2\n"}, "METADATA: has version 2, the file name 1"),
        ({"n/x.py": b"", "n/x.py/y.py": b""}, "member 'n/x.py/y.py': n/x.py is a file, not a directory"),
    ],
)
def test_writer_refuses_to_finish_what_a_reader_would_refuse(
    tmp_path: Path, members: dict[str, bytes], message: str
) -> None:
    with pytest.raises(InvalidWheelError) as caught:
        with WheelWriter(tmp_path / "n-1-py3-none-any.whl", dist_info="n-1.dist-info") as writer:
            for name, data in {"n-1.dist-info/WHEEL": b"Wheel-Version: 1.0\n", **members}.items():
                if not (name.endswith("/WHEEL") and "WHEEL: missing" in message):
                    writer.write_bytes(name, data)
    assert message in _one_line_error(caught)
    assert list(tmp_path.iterdir()) == []


def test_the_writer_checks_what_a_reader_would_parse(
    wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's check is handed the records and rows it encoded: exactly what parsing the file gives."""
    from patched_wheels.wheelfile import writer as writer_module

    handed: list[wheelfile.reader.WrittenArchive] = []
    real = writer_module.WrittenArchive
    monkeypatch.setattr(writer_module, "WrittenArchive", lambda *args: handed.append(real(*args)) or handed[-1])
    monkeypatch.setattr(zipcontainer, "ZIP64_LIMIT", 1000)  # the big member gets ZIP64 extra fields
    monkeypatch.setattr(writer_module, "ZIP64_LIMIT", 1000)
    dest = tmp_path / "out" / wheel.name
    dest.parent.mkdir()
    with WheelReader(wheel) as reader, WheelWriter(dest, dist_info=reader.dist_info) as writer:
        for name in reader.members():
            if name.endswith(".py"):
                writer.copy_raw(reader, name, arcname=name.replace("demo/", "demo/renamed/"))
            elif name != f"{reader.dist_info}/RECORD":
                writer.copy_raw(reader, name)
        writer.write_bytes("demo/caf\u00e9.txt", b"a UTF-8 name", mode=0o600)
    [written] = handed
    with open(dest, "rb") as handle:
        parsed, directory_offset = zipdirectory.read_directory(handle.fileno(), path=dest)
    assert written.directory_offset == directory_offset
    fields = [*_FIELDS, "raw_name"]
    assert [[getattr(member, field) for field in fields] for member in written.members] == [
        [getattr(member, field) for field in fields] for member in parsed
    ]
    assert any(member.extra for member in parsed) and "demo/caf\u00e9.txt" in {member.filename for member in parsed}
    with zipfile.ZipFile(dest) as archive:
        assert written.record == parse_record(archive.read("demo-1.0.dist-info/RECORD"), origin="RECORD")


def test_the_written_check_runs_only_what_the_writer_does_not_make_true(
    wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each record a writer wrote is the input's (checked when it was opened) or its own: the check of the written
    wheel runs no record's check again (what it still checks: test_writer_refuses_to_finish_what_a_reader_would_refuse)."""
    from patched_wheels.wheelfile import reader as reader_module

    checked: list[str] = []
    real = reader_module.member_problem
    monkeypatch.setattr(
        reader_module, "member_problem", lambda info, size: checked.append(info.filename) or real(info, size)
    )
    with WheelReader(wheel) as reader:
        opened = list(checked)
        (tmp_path / "out").mkdir()
        _copy_all(reader, tmp_path / "out" / wheel.name)
    assert opened == reader.members() and checked == opened


@pytest.mark.parametrize(
    ("fields", "local_only", "message"),
    [
        ({"flags": 0x40}, False, "member 'demo/lib.so': zip flags 0x0040 are not supported"),  # strong encryption
        ({"flags": 0x1}, True, "demo/lib.so: local header disagrees with the central directory"),  # encrypted, locally
        ({"method": 0}, True, "demo/lib.so: local header disagrees with the central directory"),
    ],
)
def test_zip_features_a_raw_copy_would_carry_are_refused(
    wheel: Path, fields: dict[str, int], local_only: bool, message: str
) -> None:
    """Local headers are copied verbatim: one that other readers would read differently must not pass."""
    edit_headers(wheel, "demo/lib.so", local_only=local_only, **fields)
    with pytest.raises(InvalidWheelError) as caught:
        with (
            WheelReader(wheel) as reader,
            WheelWriter(wheel.with_name("out.whl"), dist_info=reader.dist_info) as writer,
        ):
            writer.copy_raw(reader, "demo/lib.so")
    assert _one_line_error(caught) == f"{wheel.name}: {message}"


@pytest.fixture
def directory_reads(monkeypatch):
    """Counts the central directories parsed: one per wheel opened."""
    from patched_wheels.wheelfile import reader as reader_module

    calls = []
    real = reader_module.read_directory

    def counting(fd, *, path):
        calls.append(Path(path).name)
        return real(fd, path=path)

    monkeypatch.setattr(reader_module, "read_directory", counting)
    return calls


def test_every_open_checks_the_wheel_so_one_changed_in_place_is_refused(wheel, directory_reads):
    """No process-wide memo of what an earlier open found: a wheel rewritten in place, its mtime put back, is
    refused by the next open."""
    WheelReader(wheel).close()
    before = os.stat(wheel)
    changed = wheel.parent / "changed" / wheel.name
    changed.parent.mkdir()
    changed.write_bytes(wheel.read_bytes())
    replace_members(changed, {"demo/__init__.py": None})  # no longer what RECORD lists
    with open(wheel, "r+b") as stream:  # the same inode, rewritten
        stream.write(changed.read_bytes())
        stream.truncate()
    os.utime(wheel, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(InvalidWheelError, match="RECORD: lists demo/__init__.py, which is not in the wheel"):
        WheelReader(wheel)
    assert directory_reads == [wheel.name, wheel.name]


# ---------------------------------------------------------------- large members: aligned kernel copies


def _data_offset(path: Path, name: str) -> tuple[int, bytes]:
    """Where ``name``'s data starts in the archive at ``path``, and its local header's extra field."""
    with zipfile.ZipFile(path) as archive, open(path, "rb") as handle:
        info = archive.getinfo(name)
        handle.seek(info.header_offset)
        header = handle.read(30)
        name_length, extra_length = struct.unpack("<HH", header[26:30])
        handle.seek(info.header_offset + 30 + name_length)
        return info.header_offset + 30 + name_length + extra_length, handle.read(extra_length)


@pytest.mark.parametrize("prefix", [1, 4093, 70_001])
def test_a_large_member_keeps_a_cheap_place_for_the_kernel_copy(tmp_path: Path, prefix: int) -> None:
    """A member copied by the kernel is put at its input offset within a page, in the first page of a 64 KiB
    block (zipalign's extra field pads its local header); every client still reads the same wheel."""
    import subprocess
    import sys

    files = {"big/a.txt": os.urandom(prefix), "big/lib.so": os.urandom(3 << 20), "big/__init__.py": b"ANSWER = 42\n"}
    (tmp_path / "in").mkdir()
    wheel = build_wheel(tmp_path / "in", "big", "1.0", files, compression=zipfile.ZIP_STORED)
    source, _ = _data_offset(wheel, "big/lib.so")
    dest = tmp_path / "out" / wheel.name
    dest.parent.mkdir()
    with WheelReader(wheel) as reader:
        with WheelWriter(dest, dist_info=reader.dist_info) as writer:
            writer.copy_raw(reader, "big/__init__.py")  # first: lib.so lands at another offset than in the input
            writer.copy_raw(reader, "big/lib.so", arcname="big/moved.so")
            for name in reader.members():
                if name not in {"big/__init__.py", "big/lib.so", f"{reader.dist_info}/RECORD"}:
                    writer.copy_raw(reader, name)
    offset, extra = _data_offset(dest, "big/moved.so")
    assert offset % 65536 == source % 4096, (offset, source)
    kind, length, alignment = struct.unpack_from("<HHH", extra)
    assert (kind, alignment, length + 4) == (0xD935, 4096, len(extra)) and not extra[6:].strip(b"\0")

    with zipfile.ZipFile(dest) as archive:
        assert archive.read("big/moved.so") == files["big/lib.so"] and archive.testzip() is None
    with WheelReader(dest, verify=True) as reader:
        assert reader.read("big/moved.so") == files["big/lib.so"]
    with InstallerWheel.open(dest) as installer_source:
        installer_source.validate_record(validate_contents=True)
    uv = pytest.importorskip("uv").find_uv_bin()
    for client, command in {
        "pip": [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            "--quiet",
        ],
        "uv": [uv, "pip", "install", "--no-deps", "--no-index", "--quiet", "--python", sys.executable],
    }.items():
        target = tmp_path / client
        subprocess.run([*command, "--target", str(target), str(dest)], check=True)
        assert (target / "big" / "moved.so").read_bytes() == files["big/lib.so"], client


def _slow_kernel_copies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The copier's kernel copies in pieces of 64 KiB, each 20 ms: a MiB takes a third of a second (the writer's
    writes waiting for the copier's thread go out between pieces).  Returns the pieces copied so far."""
    from patched_wheels.wheelfile import copier

    real = os.copy_file_range
    copied: list[int] = []

    def slow(source: int, dest: int, count: int, offset: int, dest_offset: int) -> int:
        time.sleep(0.02)
        copied.append(real(source, dest, min(count, 1 << 16), offset, dest_offset))
        return copied[-1]

    monkeypatch.setattr(copier.os, "copy_file_range", slow)
    return copied


def test_the_written_wheel_is_checked_while_its_kernel_copies_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check of a written wheel reads back only METADATA and WHEEL, the writer's own bytes: it runs while the
    large members' kernel copies are still under way (slowed down here), then the wheel is whole."""
    from patched_wheels.wheelfile import writer as writer_module

    files = {"big/a.txt": os.urandom(1000), "big/lib.so": os.urandom(3 << 20)}
    (tmp_path / "in").mkdir()
    wheel = build_wheel(tmp_path / "in", "big", "1.0", files, compression=zipfile.ZIP_STORED)
    copied = _slow_kernel_copies(monkeypatch)
    copied_when_checked: list[int] = []
    real_reader = writer_module.WheelReader

    def check(*args: object, **kwargs: object) -> WheelReader:
        copied_when_checked.append(sum(copied))
        return real_reader(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(writer_module, "WheelReader", check)
    dest = tmp_path / "out" / wheel.name
    dest.parent.mkdir()
    with WheelReader(wheel) as reader:
        _copy_all(reader, dest)
    [when_checked] = copied_when_checked
    assert when_checked < 2 << 20 and sum(copied) == 3 << 20  # checked with a third of a second of copies left at least
    with WheelReader(dest, verify=True) as reader:
        assert reader.read("big/lib.so") == files["big/lib.so"]


def test_a_metadata_large_enough_for_a_kernel_copy_is_read_back_once_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A METADATA over a MiB, copied raw, goes out in a kernel copy like a library: the check of the written wheel
    reads it back only once that copy is done (slowed down here), and passes."""
    import random

    from patched_wheels.wheelfile import zipcontainer as container

    description = "".join(random.Random(7).choices("abcdefghijklmnopqrstuvwxyz \n", k=(3 << 20) // 2))
    (tmp_path / "in").mkdir()
    wheel = build_wheel(
        tmp_path / "in",
        "big",
        "1.0",
        {"big/__init__.py": b""},
        metadata_extra=f"Description: {description}\n",
        compression=zipfile.ZIP_STORED,
    )
    with WheelReader(wheel) as reader:
        assert container.kernel_copied(reader.info(f"{reader.dist_info}/METADATA").compress_size)
    _slow_kernel_copies(monkeypatch)
    dest = tmp_path / "out" / wheel.name
    dest.parent.mkdir()
    with WheelReader(wheel) as reader:
        _copy_all(reader, dest)
        metadata = reader.metadata()
    with WheelReader(dest) as written:
        assert written.metadata() == metadata


def _rewritten(wheel: Path, dest: Path, *, unused_after: str = "", unused: int = 0) -> Path:
    """``wheel``'s members written again by zipfile into ``dest``, ``unused`` bytes of nothing after the data of
    ``unused_after`` (a gap no member claims: the next member's local header starts after it)."""
    with zipfile.ZipFile(wheel) as source:
        entries = [(info, source.read(info)) for info in source.infolist()]
    with zipfile.ZipFile(dest, "w") as out:
        for info, data in entries:
            out.writestr(info, data)
            if info.filename == unused_after:
                out.fp.write(b"\xaa" * unused)  # type: ignore[union-attr]
                out.start_dir = out.fp.tell()  # type: ignore[union-attr]  # the next member after the gap
    return dest


def test_unused_bytes_in_the_input_leave_the_output_as_without_them(tmp_path: Path) -> None:
    """The large members' copies start before the small members are copied, to the places foreseen from the
    central directory; unused bytes after a small member put them elsewhere, and the output is still the one
    the same members without the gap give, byte for byte (the copies put where foreseen are written over,
    what they wrote past the end cut off)."""
    files = {
        "big/a.txt": os.urandom(1000),
        "big/lib.so": os.urandom(3 << 20),
        "big/lib2.so": os.urandom(2 << 20),
        "big/z.py": b"ANSWER = 42\n",
    }
    (tmp_path / "in").mkdir()
    built = build_wheel(tmp_path / "in", "big", "1.0", files, compression=zipfile.ZIP_STORED)
    outputs = []
    for kind, unused in (("tight", 0), ("gap", 4 << 20)):
        (tmp_path / kind).mkdir()
        wheel = _rewritten(built, tmp_path / kind / built.name, unused_after="big/a.txt", unused=unused)
        dest = tmp_path / kind / "out" / built.name
        dest.parent.mkdir()
        with WheelReader(wheel) as reader:
            with WheelWriter(dest, dist_info=reader.dist_info) as writer:
                names = [name for name in reader.members() if name != f"{reader.dist_info}/RECORD"]
                writer.copy_raw_members(reader, ((name, name) for name in names))
        outputs.append(dest.read_bytes())
    sizes = [(tmp_path / kind / built.name).stat().st_size for kind in ("tight", "gap")]
    assert sizes[1] == sizes[0] + (4 << 20)  # the gap is there
    assert outputs[0] == outputs[1]
    with WheelReader(tmp_path / "gap" / "out" / built.name, verify=True) as reader:
        assert reader.read("big/lib2.so") == files["big/lib2.so"]


def test_alignment_padding_lands_where_the_copy_is_cheap_and_fits() -> None:
    """Every start and source: nothing, or an extra field (6 bytes at least) that ends at the source's offset
    within a page, in the first page of a 64 KiB block unless the extra field has no room for that."""
    import random

    pick = random.Random(19)
    for _ in range(20_000):
        start, source, room = pick.randrange(1 << 40), pick.randrange(1 << 40), pick.choice([0xFFFF, 0xFFFF - 20, 5000])
        padding = zipcontainer._alignment_padding(start, source, room)
        assert padding == 0 or 6 <= padding <= room
        assert (start + padding) % 4096 == source % 4096
        if room == 0xFFFF and not 0 < (source % 4096 - start) % 65536 < 6:  # else 64 KiB more would not fit
            assert (start + padding) % 65536 == source % 4096


def test_without_kernel_copies_the_large_member_goes_through_the_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file system that cannot copy_file_range between the two files (EXDEV, ENOSYS, ...) gets the same bytes."""
    import errno

    files = {"big/a.txt": os.urandom(1000), "big/lib.so": os.urandom(3 << 20)}
    (tmp_path / "in").mkdir()
    wheel = build_wheel(tmp_path / "in", "big", "1.0", files, compression=zipfile.ZIP_STORED)
    outputs = []
    for kind in ("kernel", "buffer"):
        dest = tmp_path / kind / wheel.name
        dest.parent.mkdir()
        with WheelReader(wheel) as reader:
            _copy_all(reader, dest)
        outputs.append(dest.read_bytes())

        def unsupported(*args: object) -> int:
            raise OSError(errno.EXDEV, "Invalid cross-device link")

        monkeypatch.setattr(os, "copy_file_range", unsupported)
    assert outputs[0] == outputs[1]
    with zipfile.ZipFile(tmp_path / "buffer" / wheel.name) as archive:
        assert archive.read("big/lib.so") == files["big/lib.so"]


def test_the_central_directory_is_each_member_s_central_header_whatever_overflows() -> None:
    """central_directory packs the common record itself (one call per member of 10,600): its bytes, and the members
    as a reader parses them back (a ZIP64 extra set), are central_header's, seeded members of every kind."""
    generator = random.Random(50)
    limit = zipcontainer.ZIP64_LIMIT

    def members() -> list[zipdirectory.ZipMember]:
        made = []
        for number in range(400):
            size, compressed, offset = (generator.choice([0, 7, 1 << 20, limit, limit + 1, 1 << 33]) for _ in range(3))
            name = f"pkg/é{number}.py".encode() if number % 3 else f"pkg/m{number}".encode()
            made.append(
                zipdirectory.ZipMember(
                    name.decode(), name, generator.choice([0, 3]), generator.choice([0, 0x800, 0x806]),
                    generator.choice([0, 8]), generator.getrandbits(32), compressed, size, offset,
                    generator.getrandbits(32), b"",
                )
            )  # fmt: skip
        return made

    state = generator.getstate()
    mine, theirs = members(), (generator.setstate(state), members())[1]
    local_zip64 = {member.filename for member in mine if generator.random() < 0.3}
    expected = b"".join(
        zipcontainer.central_header(member, member.filename in local_zip64, 0x5A21, 0x6B3) for member in theirs
    )
    assert zipcontainer.central_directory(mine, local_zip64, 0x5A21, 0x6B3) == expected
    assert [member.extra for member in mine] == [member.extra for member in theirs]
    assert any(member.extra for member in mine) and not all(member.extra for member in mine)
