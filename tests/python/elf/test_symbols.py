"""Dynamic symbol tables, read alone or in the pass that reads a library's dynamic section (real gcc libraries)."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Iterator

import pytest

from patched_wheels.elf import graph as elfgraph
from patched_wheels.elf import read as elfread
from patched_wheels.elf.read import SHT_DYNSYM, read_installed_library, read_library, read_sections
from patched_wheels.elf.symbols import (
    NO_SYMBOLS,
    read_library_and_symbols,
    read_member_symbols,
    read_symbols,
)
from patched_wheels.loading import observe
from support.fakecuda import build_wheel, compile_shared


def test_symbols_of_real_libraries_and_of_truncated_or_foreign_files(tmp_path: Path) -> None:
    library = compile_shared(
        tmp_path, "libs.so.1", "int used(void);\nint defined(void) { return used(); }\n", "-Wl,-soname,libs.so.1"
    )
    defined, undefined = read_symbols(library)
    assert "defined" in defined and "used" in undefined and "used" not in defined
    data = library.read_bytes()
    for cut in (64, len(data) // 2, len(data) - 100):
        (tmp_path / "cut.so").write_bytes(data[:cut])
        assert read_symbols(tmp_path / "cut.so") in (NO_SYMBOLS, read_symbols(library))
    (tmp_path / "text.so").write_bytes(b"not an ELF file")
    assert read_symbols(tmp_path / "text.so") == NO_SYMBOLS


def _name(number: int) -> str:
    return f"a_symbol_name_long_enough_to_fill_the_dynamic_string_table_past_one_mebibyte_{number:06d}"


class _Inflated:
    """Counts the passes over members the ELF reader starts, and the bytes they inflate."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.passes = 0
        self.bytes = 0
        original = elfread.inflated_chunks

        def counted(wheel: Path, info: object) -> Iterator[bytes]:
            self.passes += 1
            for chunk in original(wheel, info):  # type: ignore[arg-type]
                self.bytes += len(chunk)
                yield chunk

        monkeypatch.setattr(elfread, "inflated_chunks", counted)

    def reset(self) -> None:
        self.passes = self.bytes = 0


@pytest.fixture()
def inflated(monkeypatch: pytest.MonkeyPatch) -> _Inflated:
    return _Inflated(monkeypatch)


def _member(wheel: Path) -> tuple[object, str]:
    ((info, path),) = elfgraph.library_members(wheel)
    return info, path


def test_the_table_read_with_the_library_is_the_one_read_alone_in_one_pass_less(
    tmp_path: Path, inflated: _Inflated
) -> None:
    """A library small enough for the kept head: one pass for both (alone: a pass each)."""
    library = compile_shared(
        tmp_path, "libs.so.1", "int used(void);\nint defined(void) { return used(); }\n", "-Wl,-soname,libs.so.1"
    )
    wheel = build_wheel(tmp_path / "wheels", "demo", "1.0", {"demo/libs.so.1": library.read_bytes()})
    info, path = _member(wheel)
    both = read_library_and_symbols(wheel, info, path)  # type: ignore[arg-type]
    assert (inflated.passes, inflated.bytes) == (1, library.stat().st_size)
    inflated.reset()
    alone = read_library(wheel, info, path), read_member_symbols(wheel, info, path)  # type: ignore[arg-type]
    assert inflated.passes == 2
    assert both == alone and both[1] == read_symbols(library) and "defined" in both[1].defined
    installed = tmp_path / "installed.so"
    installed.write_bytes(library.read_bytes())
    assert read_library_and_symbols(wheel, info, path, installed=installed) == both  # type: ignore[arg-type]
    assert read_installed_library(installed, wheel=wheel.name, path=path) == both[0]


def test_a_table_past_the_kept_head_is_read_by_a_second_pass_up_to_it(tmp_path: Path, inflated: _Inflated) -> None:
    """14,000 long names: a string table past the 1 MiB a stream keeps, then 4 MiB of incompressible data."""
    blob = tmp_path / "blob.bin"
    blob.write_bytes(random.Random(0).randbytes(4 << 20))
    labels = "".join(f".globl {_name(number)}\\n{_name(number)}: .byte 0\\n" for number in range(14_000))
    source = (
        f'__asm__(".data\\n{labels}.section .rodata\\n.incbin \\"{blob}\\"\\n.text");\n'
        "int needs_it(void);\nint calls(void) { return needs_it(); }\n"
    )
    library = compile_shared(tmp_path, "libmany.so.1", source, "-Wl,-soname,libmany.so.1")
    with library.open("rb") as opened:
        _, sections = read_sections(elfread.FileReader(opened.fileno(), str(library)), str(library))
    (dynsym,) = [section for section in sections if section["type"] == SHT_DYNSYM]
    strings = sections[dynsym["link"]]
    table_end = max(dynsym["offset"] + dynsym["size"], strings["offset"] + strings["size"])
    size = library.stat().st_size
    assert elfread._HEAD_SIZE < table_end < size - (3 << 20), "the fixture's table lies past the head, data after it"
    wheel = build_wheel(tmp_path / "wheels", "many", "1.0", {"many/libmany.so.1": library.read_bytes()})
    info, path = _member(wheel)
    costs = {}
    for what, read in (
        ("both", lambda: read_library_and_symbols(wheel, info, path)),  # type: ignore[arg-type]
        ("library", lambda: read_library(wheel, info, path)),  # type: ignore[arg-type]
        ("table", lambda: read_member_symbols(wheel, info, path)),  # type: ignore[arg-type]
    ):
        inflated.reset()
        costs[what] = read(), inflated.passes, inflated.bytes
    (library_read, table), passes, inflated_bytes = costs["both"]
    assert passes == costs["library"][1] + 1, "one pass more than the library's, up to the table"
    assert table_end <= inflated_bytes - costs["library"][2] < table_end + (2 << 20)
    assert costs["library"][2] + costs["table"][2] - inflated_bytes >= size, "a whole pass less than both alone"
    assert (library_read, table) == (costs["library"][0], costs["table"][0])
    assert table == read_symbols(library) and _name(13_999) in table.defined and "needs_it" in table.undefined


def _dynsym_link_offset(data: bytes) -> int:
    """Where the .dynsym section header's sh_link lies in a 64-bit little-endian ELF file."""
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    for index in range(shnum):
        header = shoff + index * shentsize
        if struct.unpack_from("<I", data, header + 4)[0] == SHT_DYNSYM:
            return header + 40
    raise AssertionError("no .dynsym")


def test_a_table_the_pass_cannot_follow_leaves_the_library_as_it_is_and_is_read_alone_by_the_check(
    tmp_path: Path,
) -> None:
    """A .dynsym whose string table index points nowhere: the library is what it is without asking for symbols,
    the graph holds no table for it, and the observation's check reads it alone (no symbols there either)."""
    library = compile_shared(tmp_path, "libodd.so.1", "int odd(void) { return 1; }\n", "-Wl,-soname,libodd.so.1")
    data = bytearray(library.read_bytes())
    struct.pack_into("<I", data, _dynsym_link_offset(data), 0xFFFF)
    wheel = build_wheel(tmp_path / "wheels", "odd", "1.0", {"odd/libodd.so.1": bytes(data)})
    info, path = _member(wheel)
    assert read_library_and_symbols(wheel, info, path) == (read_library(wheel, info, path), None)  # type: ignore[arg-type]
    graph = elfgraph.read_graph([wheel], symbols=True)
    assert graph == elfgraph.read_graph([wheel]) and graph.symbols == {}
    (odd,) = graph.libraries
    assert observe._member_symbols([odd], graph, {wheel.name: wheel}) == {odd: NO_SYMBOLS}


def test_the_graph_holds_the_tables_only_when_asked_and_is_the_same_graph(tmp_path: Path) -> None:
    base = compile_shared(tmp_path, "libbase.so.1", "int base(void) { return 1; }\n", "-Wl,-soname,libbase.so.1")
    user = compile_shared(
        tmp_path,
        "libuser.so.1",
        "int base(void);\nint user(void) { return base(); }\n",
        "-Wl,-soname,libuser.so.1",
        "-l:libbase.so.1",
    )
    wheels = [
        build_wheel(tmp_path / "wheels", "base", "1.0", {"base/libbase.so.1": base.read_bytes()}),
        build_wheel(tmp_path / "wheels", "user", "1.0", {"user/libuser.so.1": user.read_bytes()}),
    ]
    plain, with_tables = elfgraph.read_graph(wheels), elfgraph.read_graph(wheels, symbols=True)
    assert plain == with_tables and plain.symbols == {}
    files = {"libbase.so.1": base, "libuser.so.1": user}
    assert with_tables.symbols == {library: read_symbols(files[library.filename]) for library in plain.libraries}
    by_name = {library.filename: library for library in with_tables.libraries}
    assert "base" in with_tables.symbols[by_name["libuser.so.1"]].undefined


def _stream(data: bytes, piece: int, opened: list[int]) -> elfread.ForwardReader:
    """A reader over ``data`` in pieces of ``piece`` bytes, counting the passes it starts in ``opened``."""

    def chunks() -> Iterator[bytes]:
        opened.append(1)
        return iter([data[at : at + piece] for at in range(0, len(data), piece)])

    return elfread.ForwardReader(chunks, "demo: libdemo.so")


def test_a_range_kept_ahead_of_the_stream_is_read_after_it_without_another_pass(monkeypatch) -> None:
    monkeypatch.setattr(elfread, "_HEAD_SIZE", 16)
    data = bytes(range(256)) * 64  # 16 KiB, in pieces of 1 KiB
    opened: list[int] = []
    reader = _stream(data, 1024, opened)
    assert reader.read(0, 16, "the head") == data[:16]
    reader.keep(5000, 3000)  # across three pieces
    reader.keep(9000, 10)
    reader.keep(0, 100)  # the head's: not kept again
    assert reader.read(12_000, 8, "past them") == data[12_000:12_008] and len(opened) == 1
    assert reader.read(5000, 3000, "kept") == data[5000:8000]
    assert reader.read(9002, 4, "kept") == data[9002:9006]
    assert len(opened) == 1, "read from what was kept"
    reader.keep(1000, 10)  # behind the stream: nothing to hold, the read takes a pass
    assert reader.read(1000, 10, "behind") == data[1000:1010] and len(opened) == 2
    assert reader.finish() == len(data)


def test_what_a_stream_keeps_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(elfread, "_HEAD_SIZE", 0)
    monkeypatch.setattr(elfread, "_MAX_KEPT", 2048)
    data = bytes(8192)
    opened: list[int] = []
    reader = _stream(data, 512, opened)
    reader.keep(1000, 2048)  # within the bound
    reader.keep(4000, 1)  # one byte past it: not kept
    assert reader.read(6000, 10, "past them") == data[6000:6010]
    assert reader.read(1000, 2048, "kept") == data[1000:3048] and len(opened) == 1
    assert reader.read(4000, 1, "not kept") == data[4000:4001] and len(opened) == 2
