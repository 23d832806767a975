"""Growing the dynamic string table on the stream (a longer search path, a first one, a SONAME to add).

gcc builds a chain: ``liba.so`` needs ``libb.so``, which lies only where the new search path
points.  Each edited library is loaded by the real dynamic loader (ctypes in a subprocess, and a
gcc-linked executable), read back by binutils' ``readelf``, the real patchelf and pyelftools,
run through ``strip``/``objcopy``, and edited a second time.
"""

from __future__ import annotations

import hashlib
import shutil
import struct
import subprocess
import sys
from io import BytesIO
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from patched_wheels.cli import main
from patched_wheels.elf.grow import grow_dynamic
from patched_wheels.elf.read import DT_RPATH, DT_RUNPATH, DT_SONAME, read_dynamic
from patched_wheels.errors import ElfError
from support.fakecuda import build_wheel, compile_shared
from support.rpathfixture import patchelf_binary

NEW = "$ORIGIN/deps/in/a/directory/with/a/name/longer/than/the/old/search/path"
B_DIR = "deps/in/a/directory/with/a/name/longer/than/the/old/search/path"
ANSWER = 42
HAS_BINUTILS = shutil.which("readelf") is not None and shutil.which("strip") is not None


def _chain(directory: Path, kind: str, *flags: str) -> Path:
    """``directory/liba.so`` (search path ``$ORIGIN`` as ``kind``, or none, linked with ``flags``) needing ``B_DIR/libb.so``."""
    build = directory / "build"
    build.mkdir(parents=True)
    compile_shared(build, "libb.so", "int b(void) { return 41; }\n", "-Wl,-soname,libb.so")
    search = (
        []
        if kind == "none"
        else ["-Wl,-rpath,$ORIGIN", f"-Wl,--{'enable' if kind == 'runpath' else 'disable'}-new-dtags"]
    )
    a = compile_shared(
        build, "liba.so", "int b(void);\nint a(void) { return b() + 1; }\n", "-l:libb.so", *search, *flags
    )
    (directory / B_DIR).mkdir(parents=True)
    shutil.copyfile(build / "libb.so", directory / B_DIR / "libb.so")
    shutil.copyfile(a, directory / "liba.so")
    return directory / "liba.so"


def _chunks(path: Path):
    return lambda: iter([path.read_bytes()[start : start + 4096] for start in range(0, path.stat().st_size, 4096)])


def _grow(library: Path, values: dict[int, bytes] | None = None) -> None:
    """Edit ``library`` in place through a temp file: its search path set to NEW (its kind kept), or ``values``."""
    layout = read_dynamic(_chunks(library), library.name)
    if values is None:
        values = dict.fromkeys(layout.search_path_tags(), NEW.encode())
    out = library.with_suffix(".grown")
    grow_dynamic(_chunks(library), layout, values, out, library.name)
    out.replace(library)


def _without_spare_slots(library: Path) -> None:
    """Make the entry after the first DT_NULL non-null (the loader stops at the first), so a tag cannot be added in place."""
    data = bytearray(library.read_bytes())
    elf = ELFFile(BytesIO(bytes(data)))
    dynamic = elf.get_section_by_name(".dynamic")
    live = next(index for index, tag in enumerate(dynamic.iter_tags()) if tag.entry.d_tag == "DT_NULL")
    struct.pack_into("<qQ", data, dynamic["sh_offset"] + (live + 1) * 16, 0x6FFFFDF5, 0)  # DT_GNU_PRELINKED, never read
    library.write_bytes(bytes(data))
    assert read_dynamic(_chunks(library), "x").nulls == 1


def _loads(library: Path) -> subprocess.CompletedProcess[str]:
    code = f"import ctypes; print(ctypes.CDLL({str(library)!r}).a())"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def _links(library: Path, directory: Path) -> subprocess.CompletedProcess[str]:
    """An executable linked against ``library`` only (its own RUNPATH reaches ``library``'s directory, not libb's)."""
    source = directory / "main.c"
    source.write_text('#include <stdio.h>\nint a(void);\nint main(void) { printf("%d\\n", a()); return 0; }\n')
    exe = directory / "main"
    link = [
        "gcc",
        "-o",
        str(exe),
        str(source),
        str(library),
        f"-Wl,-rpath,{library.parent}",
        f"-Wl,-rpath-link,{directory / B_DIR}",
    ]
    subprocess.run(link, check=True, capture_output=True)
    return subprocess.run([str(exe)], capture_output=True, text=True)


def _readelf(library: Path) -> str:
    result = subprocess.run(["readelf", "-dW", str(library)], capture_output=True, text=True, check=True)
    assert "Warning" not in result.stderr and "Error" not in result.stderr, result.stderr
    return result.stdout


def _pyelftools_tags(library: Path) -> dict[str, str]:
    with open(library, "rb") as handle:
        tags = ELFFile(handle).get_section_by_name(".dynamic").iter_tags()
        return {
            tag.entry.d_tag: getattr(tag, tag.entry.d_tag[3:].lower())
            for tag in tags
            if tag.entry.d_tag in ("DT_RPATH", "DT_RUNPATH", "DT_SONAME")
        }


@pytest.mark.parametrize("spare", [True, False], ids=["spare-slot", "moved-dynamic"])
@pytest.mark.parametrize(("kind", "tag"), [("runpath", "DT_RUNPATH"), ("rpath", "DT_RPATH"), ("none", "DT_RUNPATH")])
def test_a_grown_search_path_loads_the_chain_and_every_tool_reads_it(tmp_path, kind, tag, spare):
    library = _chain(tmp_path, kind)
    if not spare:
        _without_spare_slots(library)
    before = _loads(library)
    assert before.returncode != 0 and "libb.so: cannot open shared object file" in before.stderr, before.stderr
    size = library.stat().st_size
    _grow(library)
    assert library.stat().st_size > size
    layout = read_dynamic(_chunks(library), "x")
    assert layout.search_path() == NEW and layout.search_path_tags() == (
        (DT_RPATH,) if kind == "rpath" else (DT_RUNPATH,)
    )
    assert (
        layout.dynamic["offset"] != read_dynamic(_chunks(tmp_path / "build" / "liba.so"), "x").dynamic["offset"]
    ) == (kind == "none" and not spare)
    assert _loads(library).stdout.strip() == str(ANSWER)
    linked = _links(library, tmp_path)
    assert linked.returncode == 0 and linked.stdout.strip() == str(ANSWER), linked.stderr
    assert _pyelftools_tags(library) == {tag: NEW}
    printed = subprocess.run(
        [patchelf_binary(), "--print-rpath", str(library)], capture_output=True, text=True, check=True
    )
    assert printed.stdout.strip() == NEW
    if HAS_BINUTILS:
        assert f"({tag.removeprefix('DT_')})" in _readelf(library) and f"[{NEW}]" in _readelf(library)
        for tool in ("strip", "objcopy"):
            copy = tmp_path / f"liba-{tool}.so"
            command = (
                ["strip", "-o", str(copy), str(library)]
                if tool == "strip"
                else ["objcopy", "--strip-debug", str(library), str(copy)]
            )
            subprocess.run(command, check=True, capture_output=True)
            assert _loads(copy).stdout.strip() == str(ANSWER), tool


def test_a_grown_library_grows_again(tmp_path):
    library = _chain(tmp_path, "runpath")
    _grow(library)
    second = f"$ORIGIN/elsewhere/entirely/and/longer/still:{NEW}"
    _grow(library, {DT_RUNPATH: second.encode()})
    assert read_dynamic(_chunks(library), "x").search_path() == second
    assert _pyelftools_tags(library) == {"DT_RUNPATH": second}
    assert _loads(library).stdout.strip() == str(ANSWER)
    if HAS_BINUTILS:
        assert f"[{second}]" in _readelf(library)


@pytest.mark.parametrize("linker", ["bfd", "gold"])
def test_every_allocated_section_stays_where_its_segment_maps_its_address(tmp_path, linker):
    """gold ends the data segment with an empty ``.tm_clone_table`` at the end of its file bytes: it stays there."""
    if shutil.which(f"ld.{linker}") is None:
        pytest.skip(f"ld.{linker} is not installed")
    library = _chain(tmp_path, "runpath", f"-fuse-ld={linker}")
    _grow(library)
    assert _loads(library).stdout.strip() == str(ANSWER)
    with open(library, "rb") as handle:
        elf = ELFFile(handle)
        for section in elf.iter_sections():
            if section["sh_flags"] & 2 and section["sh_type"] not in ("SHT_NOBITS", "SHT_NULL"):  # SHF_ALLOC
                assert list(elf.address_offsets(section["sh_addr"])) == [section["sh_offset"]], section.name


@pytest.mark.parametrize("spare", [True, False], ids=["spare-slot", "moved-dynamic"])
def test_an_added_soname_is_what_the_loader_matches(tmp_path, spare):
    """``libx`` has no SONAME; once it has one, ``liby`` (needing ``libx.so.1``, with no search path to it)
    loads after ``libx`` was loaded by its full path: the loader matched the SONAME."""
    build = tmp_path / "build"
    build.mkdir()
    libx = compile_shared(build, "libx.so.1", "int x(void) { return 41; }\n")
    liby = compile_shared(build, "liby.so", "int x(void);\nint a(void) { return x() + 1; }\n", "-l:libx.so.1")
    placed = tmp_path / "elsewhere" / "libx.so.1"
    placed.parent.mkdir()
    shutil.copyfile(libx, placed)
    if not spare:
        _without_spare_slots(placed)
    code = f"import ctypes; ctypes.CDLL({str(placed)!r}, ctypes.RTLD_GLOBAL); print(ctypes.CDLL({str(liby)!r}).a())"
    before = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert before.returncode != 0 and "libx.so.1: cannot open shared object file" in before.stderr, before.stderr
    _grow(placed, {DT_SONAME: b"libx.so.1"})
    after = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert after.stdout.strip() == str(ANSWER), after.stderr
    assert _pyelftools_tags(placed) == {"DT_SONAME": "libx.so.1"}
    printed = subprocess.run(
        [patchelf_binary(), "--print-soname", str(placed)], capture_output=True, text=True, check=True
    )
    assert printed.stdout.strip() == "libx.so.1"
    if HAS_BINUTILS:
        assert "(SONAME)" in _readelf(placed) and "[libx.so.1]" in _readelf(placed)


def _wheel(directory: Path, library: Path) -> Path:
    return build_wheel(
        directory,
        "pkg",
        "1.0",
        {"pkg/__init__.py": b"", "pkg/liba.so": library.read_bytes()},
        executable=["pkg/liba.so"],
    )


def test_a_grown_member_is_the_same_bytes_every_time(tmp_path):
    wheel = _wheel(tmp_path / "in", _chain(tmp_path / "chain", "runpath"))
    digests = set()
    for run in range(2):
        out = tmp_path / f"out{run}"
        assert (
            main(["patch", "--wheel", str(wheel), "--dest-dir", str(out), "--prepend-rpath", f"pkg/liba.so={NEW}"]) == 0
        )
        (written,) = out.iterdir()
        digests.add(hashlib.sha256(written.read_bytes()).hexdigest())
    assert len(digests) == 1


def _set(data: bytearray, offset: int, fmt: str, value: int) -> bytearray:
    struct.pack_into(fmt, data, offset, value)
    return data


def _dynamic_offset(data: bytes) -> int:
    return ELFFile(BytesIO(data)).get_section_by_name(".dynamic")["sh_offset"]


def _hostile(data: bytes) -> dict[str, bytes]:
    """Damaged copies of a library, each a way a header can lie."""
    elf = ELFFile(BytesIO(data))
    shoff, dynamic = elf["e_shoff"], _dynamic_offset(data)
    dynamic_size = elf.get_section_by_name(".dynamic")["sh_size"]
    no_null = bytearray(data)
    for position in range(dynamic, dynamic + dynamic_size, 16):
        if struct.unpack_from("<q", no_null, position)[0] == 0:
            struct.pack_into("<q", no_null, position, 0x6FFFFDF5)
    straddling = bytearray(data)
    strtab_index = next(index for index, section in enumerate(elf.iter_sections()) if section.name == ".strtab")
    _set(straddling, shoff + strtab_index * 64 + 24, "<Q", 0x100)  # .strtab's sh_offset inside the first segment...
    _set(straddling, shoff + strtab_index * 64 + 32, "<Q", len(data))  # ... and running past the last one
    decoy = bytearray(data)  # PT_DYNAMIC's p_offset at a copy in the padding after the first segment: the loader
    decoy[0x800 : 0x800 + dynamic_size] = data[dynamic : dynamic + dynamic_size]  # reads p_vaddr, never the copy
    dynamic_header = next(
        index for index, segment in enumerate(elf.iter_segments()) if segment["p_type"] == "PT_DYNAMIC"
    )
    _set(decoy, elf["e_phoff"] + dynamic_header * 56 + 8, "<Q", 0x800)
    return {
        "truncated in the dynamic section": data[: dynamic + 8],
        "truncated after the dynamic section": data[: dynamic + dynamic_size + 8],
        "truncated in the section headers": data[: shoff + 100],
        "huge program header count": bytes(_set(bytearray(data), 56, "<H", 0xFFFE)),
        "program headers past the end": bytes(_set(bytearray(data), 32, "<Q", 1 << 40)),
        "section headers past the end": bytes(_set(bytearray(data), 40, "<Q", len(data) + 4096)),
        "huge section header count": bytes(_set(bytearray(data), 60, "<H", 0xFFFF)),
        "no DT_NULL": bytes(no_null),
        "a section across the insertion": bytes(straddling),
        "PT_DYNAMIC's offset not where its address is mapped": bytes(decoy),
    }


HOSTILE_CASES = (
    "truncated in the dynamic section",
    "truncated after the dynamic section",
    "truncated in the section headers",
    "huge program header count",
    "program headers past the end",
    "section headers past the end",
    "huge section header count",
    "no DT_NULL",
    "a section across the insertion",
    "PT_DYNAMIC's offset not where its address is mapped",
)


@pytest.mark.parametrize("case", HOSTILE_CASES)
def test_a_hostile_library_is_one_error_line_naming_wheel_and_member(tmp_path, capsys, case):
    library = _chain(tmp_path / "chain", "runpath")
    damaged = tmp_path / "liba.so"
    damaged.write_bytes(_hostile(library.read_bytes())[case])
    wheel = _wheel(tmp_path / "in", damaged)
    out = tmp_path / "out"
    assert main(["patch", "--wheel", str(wheel), "--dest-dir", str(out), "--prepend-rpath", f"pkg/liba.so={NEW}"]) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("patched-wheels: error: "), captured.err
    assert "pkg-1.0-py3-none-linux_x86_64.whl: pkg/liba.so: " in captured.err and "Traceback" not in captured.err
    assert not out.exists() or not any(out.iterdir())


def test_read_dynamic_refuses_what_it_cannot_stream(tmp_path):
    data = _chain(tmp_path, "runpath").read_bytes()
    with pytest.raises(ElfError, match=r"^w.whl: m.so: not an ELF file"):
        read_dynamic(lambda: iter([b"\x7fELF\x09" + data[5:]]), "w.whl: m.so")


def _synthetic_library(wide: bool, order: str) -> bytes:
    """A minimal shared library of any class and byte order (gcc here builds only 64-bit little-endian):
    one PT_LOAD with a .bss, PT_DYNAMIC (DT_NEEDED, DT_RUNPATH ``$ORIGIN``, DT_STRTAB, DT_STRSZ), sections."""
    word = "Q" if wide else "I"
    ehsize, phentsize, shentsize, dynsize = (64, 56, 64, 16) if wide else (52, 32, 40, 8)
    base = 0x10000
    dynstr = b"\0libfoo.so\0$ORIGIN\0"
    shstrtab = b"\0.dynstr\0.dynamic\0.bss\0.shstrtab\0"
    dynstr_offset = ehsize + 2 * phentsize
    dynamic_offset = -(-(dynstr_offset + len(dynstr)) // 8) * 8
    entries = [(1, 1), (29, 11), (5, base + dynstr_offset), (10, len(dynstr)), (0, 0)]
    dynamic = b"".join(struct.pack(order + ("qQ" if wide else "iI"), *entry) for entry in entries)
    end = dynamic_offset + len(dynamic)
    shstrtab_offset = end
    shoff = -(-(shstrtab_offset + len(shstrtab)) // 8) * 8
    program = (
        (
            lambda kind, flags, offset, vaddr, filesz, memsz, align: struct.pack(
                order + "IIQQQQQQ", kind, flags, offset, vaddr, vaddr, filesz, memsz, align
            )
        )
        if wide
        else (
            lambda kind, flags, offset, vaddr, filesz, memsz, align: struct.pack(
                order + "IIIIIIII", kind, offset, vaddr, vaddr, filesz, memsz, flags, align
            )
        )
    )
    programs = program(1, 6, 0, base, end, end + 0x40, 0x1000) + program(
        2, 6, dynamic_offset, base + dynamic_offset, len(dynamic), len(dynamic), 8
    )
    section = struct.Struct(order + ("IIQQQQIIQQ" if wide else "IIIIIIIIII"))
    sections = b"".join(
        section.pack(*fields)
        for fields in (
            (0,) * 10,
            (1, 3, 2, base + dynstr_offset, dynstr_offset, len(dynstr), 0, 0, 1, 0),
            (9, 6, 3, base + dynamic_offset, dynamic_offset, len(dynamic), 1, 0, 8, dynsize),
            (18, 8, 3, base + end, end, 0x40, 0, 0, 8, 0),
            (23, 3, 0, 0, shstrtab_offset, len(shstrtab), 0, 0, 1, 0),
        )
    )
    ident = b"\x7fELF" + bytes([2 if wide else 1, 1 if order == "<" else 2, 1]) + bytes(9)
    header = ident + struct.pack(
        order + f"HHI{word}{word}{word}IHHHHHH",
        3,
        62 if wide else 20,
        1,
        0,
        ehsize,
        shoff,
        0,
        ehsize,
        phentsize,
        2,
        shentsize,
        5,
        4,
    )
    image = bytearray(shoff + len(sections))
    image[: len(header)] = header
    image[ehsize : ehsize + len(programs)] = programs
    image[dynstr_offset : dynstr_offset + len(dynstr)] = dynstr
    image[dynamic_offset:end] = dynamic
    image[shstrtab_offset : shstrtab_offset + len(shstrtab)] = shstrtab
    image[shoff:] = sections
    return bytes(image)


@pytest.mark.parametrize(
    ("wide", "order"), [(True, "<"), (True, ">"), (False, "<"), (False, ">")], ids=["64le", "64be", "32le", "32be"]
)
def test_every_class_and_byte_order_grows_and_pyelftools_reads_it(tmp_path, wide, order):
    library = tmp_path / "lib.so"
    library.write_bytes(_synthetic_library(wide, order))
    assert _pyelftools_tags(library) == {"DT_RUNPATH": "$ORIGIN"}
    before = read_dynamic(_chunks(library), "x").dynamic["offset"]
    _grow(library)
    assert read_dynamic(_chunks(library), "x").dynamic["offset"] == before  # DT_RUNPATH there: rewritten in place
    _grow(
        library, {DT_RUNPATH: (NEW + ":$ORIGIN").encode(), DT_SONAME: b"libsynthetic.so"}
    )  # a tag added: .dynamic moves
    layout = read_dynamic(_chunks(library), "x")
    assert layout.search_path() == NEW + ":$ORIGIN" and layout.string(DT_SONAME) == b"libsynthetic.so"
    assert layout.dynamic["offset"] > before
    assert _pyelftools_tags(library) == {"DT_RUNPATH": NEW + ":$ORIGIN", "DT_SONAME": "libsynthetic.so"}
    with open(library, "rb") as handle:
        elf = ELFFile(handle)
        assert elf.get_section_by_name(".bss")["sh_type"] == "SHT_PROGBITS"
        assert [
            tag.needed for tag in elf.get_section_by_name(".dynamic").iter_tags() if tag.entry.d_tag == "DT_NEEDED"
        ] == ["libfoo.so"]
        (load,) = [segment for segment in elf.iter_segments() if segment["p_type"] == "PT_LOAD"]
        dynamic = next(segment for segment in elf.iter_segments() if segment["p_type"] == "PT_DYNAMIC")
        assert (
            load["p_filesz"] == load["p_memsz"]
            and dynamic["p_offset"] + dynamic["p_filesz"] <= load["p_offset"] + load["p_filesz"]
        )
