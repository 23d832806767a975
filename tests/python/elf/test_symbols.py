"""Dynamic symbol tables, read alone or in the pass that reads a library's dynamic section (real gcc libraries)."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Callable, Iterator

import pytest

from patched_wheels.elf import graph as elfgraph
from patched_wheels.elf import read as elfread
from patched_wheels.elf import symbols as symbols_module
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


def test_a_table_larger_than_any_library_s_is_read_as_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A section header can claim any size; the graph holds every library's table: past the bounds, none is read."""
    library = compile_shared(
        tmp_path, "libs.so.1", "int a(void) { return 1; }\nint b(void) { return 2; }\n", "-Wl,-soname,libs.so.1"
    )
    assert {"a", "b"} <= read_symbols(library).defined
    monkeypatch.setattr(symbols_module, "_MAX_SYMBOLS", 2)
    assert read_symbols(library) == NO_SYMBOLS
    monkeypatch.setattr(symbols_module, "_MAX_SYMBOLS", 1 << 20)
    monkeypatch.setattr(symbols_module, "_MAX_SYMBOL_NAMES", 8)
    assert read_symbols(library) == NO_SYMBOLS
    wheel = build_wheel(tmp_path / "wheels", "demo", "1.0", {"demo/libs.so.1": library.read_bytes()})
    info, path = _member(wheel)
    assert read_library_and_symbols(wheel, info, path) == (read_library(wheel, info, path), NO_SYMBOLS)  # type: ignore[arg-type]


_SECTION = struct.Struct("<IIQQQQIIQQ")  # a 64-bit little-endian section header


def _with_sections(data: bytes, edit: Callable[[list[list[int]], bytearray], None]) -> bytes:
    """``data`` (a gcc library) with its section headers edited by ``edit`` (which may append bytes and headers),
    the table written again at the end."""
    out = bytearray(data)
    (shoff,) = struct.unpack_from("<Q", out, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", out, 0x3A)
    sections = [list(_SECTION.unpack_from(out, shoff + index * shentsize)) for index in range(shnum)]
    edit(sections, out)
    out += bytes(-len(out) % 8)
    struct.pack_into("<Q", out, 0x28, len(out))
    struct.pack_into("<H", out, 0x3C, len(sections))
    out += b"".join(_SECTION.pack(*section) for section in sections)
    return bytes(out)


def _dynsym(sections: list[list[int]]) -> list[int]:
    return next(section for section in sections if section[1] == SHT_DYNSYM)


def _long_names(sections: list[list[int]], out: bytearray, *, ended: bool, count: int = 64) -> None:
    """Point ``count`` defined symbols into one 1 MiB name (NUL-ended or not), through a string table of its own."""
    name_at = len(out)
    out += b"A" * (1 << 20) + (b"\0" if ended else b"")
    table_at = len(out)
    for number in range(count):
        out += struct.pack("<IBBHQQ", 1 + number * 1000, 0x12, 0, 1, 0, 0)
    sections.append([0, 3, 0, 0, name_at, len(out[name_at:table_at]), 0, 0, 1, 0])
    _dynsym(sections)[4:7] = [table_at, count * 24, len(sections) - 1]


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda sections, out: _long_names(sections, out, ended=False), id="names no NUL ends"),
        pytest.param(lambda sections, out: _long_names(sections, out, ended=True), id="many tails of one long name"),
        pytest.param(lambda sections, out: sections.append(list(_dynsym(sections))), id="a second SHT_DYNSYM"),
        pytest.param(lambda sections, out: _dynsym(sections).__setitem__(4, 1 << 63), id="an offset past off_t"),
    ],
)
def test_a_hostile_table_is_read_as_none_by_every_reader_in_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: Callable[[list[list[int]], bytearray], None]
) -> None:
    """The graph holds every library's table: what a crafted member asks of it must stay small whatever it claims."""
    monkeypatch.setattr(symbols_module, "_MAX_SYMBOL_NAMES", 4 << 20)  # 64 tails of a 1 MiB name would pass it
    library = compile_shared(tmp_path, "libx.so.1", "int x(void) { return 1; }\n", "-Wl,-soname,libx.so.1")
    data = _with_sections(library.read_bytes(), edit)
    (tmp_path / "installed.so").write_bytes(data)
    wheel = build_wheel(tmp_path / "wheels", "evil", "1.0", {"evil/libx.so.1": data})
    info, path = _member(wheel)
    expected = read_library(wheel, info, path)  # type: ignore[arg-type]
    assert read_symbols(tmp_path / "installed.so") == NO_SYMBOLS
    assert read_member_symbols(wheel, info, path) == NO_SYMBOLS  # type: ignore[arg-type]
    for installed in (None, tmp_path / "installed.so"):
        read = read_library_and_symbols(wheel, info, path, installed=installed)  # type: ignore[arg-type]
        assert read in ((expected, NO_SYMBOLS), (expected, None))
    graph = elfgraph.read_graph([wheel], symbols=True)
    assert graph.libraries == (expected,) and graph.symbols in ({}, {expected: NO_SYMBOLS})


def test_section_headers_claimed_past_any_file_offset_are_a_library_problem_not_a_crash(tmp_path: Path) -> None:
    library = compile_shared(tmp_path, "libx.so.1", "int x(void) { return 1; }\n", "-Wl,-soname,libx.so.1")
    data = bytearray(library.read_bytes())
    struct.pack_into("<Q", data, 0x28, 1 << 63)
    installed = tmp_path / "installed.so"
    installed.write_bytes(data)
    wheel = build_wheel(tmp_path / "wheels", "evil", "1.0", {"evil/libx.so.1": bytes(data)})
    problems = [
        elfgraph.scan_wheels([wheel], installed=lambda *_: installed, symbols=symbols).problems for symbols in (0, 1)
    ]
    assert problems[0] == problems[1] and "its sh table ends past its end" in problems[0][wheel.name].message
    assert read_symbols(installed) == NO_SYMBOLS


def test_tables_past_the_set_s_budget_are_none_of_them_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each table within its own bounds, a set of many adds up: past the set's budget no table is kept, so which
    thread read first decides nothing, and the observation's check says it reads none."""
    wheels, sizes = [], []
    for name in ("liba.so.1", "libb.so.1"):
        library = compile_shared(tmp_path, name, "int x(void) { return 1; }\n", f"-Wl,-soname,{name}")
        table = read_symbols(library)
        sizes.append(sum(map(len, table.defined | table.undefined)))
        wheels.append(build_wheel(tmp_path / "wheels", name[3], "1.0", {f"{name[3]}/{name}": library.read_bytes()}))
    assert len(elfgraph.read_graph(wheels, symbols=True).symbols) == 2
    monkeypatch.setattr(symbols_module, "_MAX_SET_SYMBOL_NAMES", sum(sizes) - 1)
    graph = elfgraph.read_graph(wheels, symbols=True)
    assert graph.symbols == {}
    files = {wheel.name: wheel for wheel in wheels}
    assert observe._member_symbols(graph.libraries, graph, files) == dict.fromkeys(graph.libraries, NO_SYMBOLS)
    assert capsys.readouterr().err == (
        "patched-wheels: warning: the symbol tables of the 2 libraries the probe maps hold more names than this tool "
        "reads for one set: none is read, so no library is taken for an extension module or preloaded RTLD_GLOBAL\n"
    )
