"""The strict unified-diff applier."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from patched_wheels.errors import PatchError
from patched_wheels.patch.unidiff import FilePatch, apply_file_patch, parse_patch, read_patch

ORIGINAL = b"".join(b"line %d\n" % number for number in range(1, 21))


def _one(patch: bytes, *, strip: int = 1) -> FilePatch:
    [file_patch] = parse_patch(patch, origin="fix.patch", strip=strip)
    return file_patch


def _git_diff(tmp_path: Path, name: str, before: bytes | None, after: bytes | None) -> bytes:
    """A real ``git diff`` between two versions of a file, as users would produce patches."""
    old, new = tmp_path / "old", tmp_path / "new"
    for root, content in ((old, before), (new, after)):
        root.mkdir(parents=True, exist_ok=True)
        if content is not None:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(content)
    result = subprocess.run(
        ["git", "diff", "--no-index", "--no-prefix", "--src-prefix=a/", "--dst-prefix=b/", "old", "new"],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    assert result.returncode == 1, result.stderr  # 1: "differences found"
    return result.stdout.replace(b"a/old/", b"a/").replace(b"b/new/", b"b/")


def test_multi_hunk_modification_from_git(tmp_path: Path) -> None:
    after = ORIGINAL.replace(b"line 2\n", b"line 2\ninserted\n").replace(b"line 18\n", b"changed 18\n")
    patch = _git_diff(tmp_path, "pkg/mod.py", ORIGINAL, after)
    file_patch = _one(patch)
    assert file_patch.path == "pkg/mod.py"
    assert len(file_patch.hunks) == 2
    assert apply_file_patch(file_patch, ORIGINAL) == after


def test_create_and_delete_from_git(tmp_path: Path) -> None:
    created = _one(_git_diff(tmp_path / "c", "pkg/new.py", None, b"a\nb\n"))
    assert created.old_path is None
    assert apply_file_patch(created, None) == b"a\nb\n"
    deleted = _one(_git_diff(tmp_path / "d", "pkg/old.py", b"x\ny\n", None))
    assert deleted.new_path is None
    assert apply_file_patch(deleted, b"x\ny\n") is None


def _diff_n(tmp_path: Path, name: str, before: bytes | None, after: bytes | None, zone: str) -> bytes:
    """A real ``diff -ruN a b`` (getting-started's recipe) between two trees, in the time zone ``zone``: it dates
    a file one side lacks the Unix epoch in that zone instead of writing /dev/null."""
    for root, content in ((tmp_path / "a", before), (tmp_path / "b", after)):
        root.mkdir(parents=True, exist_ok=True)
        (root / "kept.txt").write_bytes(b"same\n")
        if content is not None:
            (root / name).write_bytes(content)
    result = subprocess.run(
        ["diff", "-ruN", "a", "b"], cwd=tmp_path, capture_output=True, check=False, env={"TZ": zone, "LC_ALL": "C"}
    )
    assert result.returncode == 1, result.stderr  # 1: "differences found"
    return result.stdout


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Asia/Kolkata"])
def test_create_and_delete_from_diff_n(tmp_path: Path, zone: str) -> None:
    """``diff -N`` dates the missing side the epoch (1969-12-31 19:00:00 -0500 in New York): as GNU patch reads
    it, a created file is one the wheel must not have, and a deleted one leaves no empty file behind."""
    created = _one(_diff_n(tmp_path / "c", "new.py", None, b"a\nb\n", zone))
    assert (created.old_path, created.new_path) == (None, "new.py")
    assert apply_file_patch(created, None) == b"a\nb\n"
    with pytest.raises(PatchError, match="creates a file that already exists"):
        apply_file_patch(created, b"")
    deleted = _one(_diff_n(tmp_path / "d", "old.py", b"x\ny\n", None, zone))
    assert (deleted.old_path, deleted.new_path) == ("old.py", None)
    assert apply_file_patch(deleted, b"x\ny\n") is None
    emptied = _one(_diff_n(tmp_path / "e", "old.py", b"x\n", b"", zone))  # emptied, not deleted: a date of its own
    assert emptied.new_path == "old.py" and apply_file_patch(emptied, b"x\n") == b""


@pytest.mark.parametrize(
    "date",
    [
        "1970-01-01 00:00:01.000000000 +0000",  # a second after
        "1970-01-01 00:00:00.000000000 -0500",  # the epoch's wall time, in a zone where it is not the epoch
        "1970-13-01 00:00:00 +0000",  # no date
        "",
    ],
)
def test_a_side_not_dated_the_epoch_is_a_file_that_exists(date: str) -> None:
    """Only the epoch itself marks a missing side; anything else is a path like any other (the hunk then needs
    the file: an empty new side leaves an empty file, as GNU patch without -E does)."""
    patch = f"--- a/f\t{date}\n+++ b/f\t{date}\n@@ -1 +0,0 @@\n-a\n".encode()
    file_patch = _one(patch)
    assert (file_patch.old_path, file_patch.new_path) == ("f", "f")
    assert apply_file_patch(file_patch, b"a\n") == b""


def test_an_epoch_dated_side_that_holds_lines_exists() -> None:
    """A file really last changed at the epoch (a reproducible build's date): the hunk has its lines, so it is
    there; only a side with no lines in any hunk is a missing file."""
    epoch = "1970-01-01 00:00:00.000000000 +0000"
    file_patch = _one(f"--- a/f\t{epoch}\n+++ b/f\t{epoch}\n@@ -1 +1 @@\n-a\n+b\n".encode())
    assert (file_patch.old_path, file_patch.new_path) == ("f", "f")
    assert apply_file_patch(file_patch, b"a\n") == b"b\n"


def test_no_newline_at_end_of_file(tmp_path: Path) -> None:
    before, after = b"a\nb", b"a\nc"
    file_patch = _one(_git_diff(tmp_path, "f.txt", before, after))
    assert apply_file_patch(file_patch, before) == after
    added = _one(_git_diff(tmp_path / "2", "f.txt", b"a\n", b"a\nlast"))
    assert apply_file_patch(added, b"a\n") == b"a\nlast"


def test_pure_insertion_hunk() -> None:
    patch = b"--- a/f\n+++ b/f\n@@ -2,0 +3,1 @@\n+new\n"
    assert apply_file_patch(_one(patch), b"one\ntwo\nthree\n") == b"one\ntwo\nnew\nthree\n"


def test_strip_components() -> None:
    patch = b"--- x/y/pkg/f.py\t2023-01-01\n+++ x/y/pkg/f.py\t2023-01-02\n@@ -1 +1 @@\n-a\n+b\n"
    assert _one(patch, strip=2).path == "pkg/f.py"
    assert _one(patch, strip=0).path == "x/y/pkg/f.py"
    with pytest.raises(PatchError, match="cannot strip 4 components from 'x/y/pkg/f.py'"):
        _one(patch, strip=4)


def test_text_around_diffs_is_ignored_and_files_are_split() -> None:
    patch = (
        b"From 123 Mon Sep 17 00:00:00 2001\nSubject: fix\n---\n"
        b"diff --git a/a.py b/a.py\nindex 1..2 100644\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-1\n+2\n"
        b"diff --git a/b.py b/b.py\nnew file mode 100644\n--- /dev/null\n+++ b/b.py\n@@ -0,0 +1 @@\n+new\n"
        b"-- \n2.40.0\n"
    )
    first, second = parse_patch(patch, origin="0001.patch")
    assert (first.path, second.path, second.old_path) == ("a.py", "b.py", None)


def test_hunk_that_does_not_apply_names_patch_target_and_hunk() -> None:
    patch = b"--- a/pkg/f.py\n+++ b/pkg/f.py\n@@ -3,2 +3,2 @@\n line 3\n-line 4\n+LINE 4\n@@ -10 +10 @@\n-nope\n+x\n"
    with pytest.raises(PatchError) as caught:
        apply_file_patch(_one(patch), ORIGINAL)
    assert str(caught.value) == "patch fix.patch: pkg/f.py: hunk #2 (@@ -10 +10 @@) does not apply at line 10"


def test_no_fuzz_shifted_context_is_refused() -> None:
    patch = b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n line 2\n-line 3\n+x\n"  # really at line 2
    with pytest.raises(PatchError, match=r"hunk #1 \(@@ -1,2 \+1,2 @@\) does not apply at line 1"):
        apply_file_patch(_one(patch), ORIGINAL)


def test_line_endings_must_match_exactly() -> None:
    patch = b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-line 1\n+x\n"
    with pytest.raises(PatchError, match=r"does not apply at line 1: only the line endings differ \(CRLF in one"):
        apply_file_patch(_one(patch), ORIGINAL.replace(b"\n", b"\r\n"))
    with pytest.raises(PatchError, match=r"does not apply at line 1$"):  # no hint where the text differs too
        apply_file_patch(_one(patch), b"line 2\r\n")
    crlf_patch = b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-line 1\r\n+x\r\n"
    assert apply_file_patch(_one(crlf_patch), b"line 1\r\nline 2\r\n") == b"x\r\nline 2\r\n"


def test_missing_target_and_existing_creation() -> None:
    modify = _one(b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(PatchError, match="^patch fix.patch: f: file is not in the wheel$"):
        apply_file_patch(modify, None)
    create = _one(b"--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+a\n")
    with pytest.raises(PatchError, match="creates a file that already exists"):
        apply_file_patch(create, b"a\n")


def test_deletion_must_remove_everything() -> None:
    delete = _one(b"--- a/f\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n")
    with pytest.raises(PatchError, match="deletion leaves 2 bytes behind"):
        apply_file_patch(delete, b"a\nb\n")


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (b"just text\n", "contains no unified diff"),
        (b"--- a/f\n+++ b/f\nnot a hunk\n", "f: no hunks after the file header"),
        (b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n", r"hunk #1 \(@@ -1,2 \+1,2 @@\) is truncated"),
        (b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n?x\n", "unexpected line 4"),
        (b"--- a/f\n+++ b/f\n@@ nonsense @@\n", "malformed header"),
        (b"diff --git a/f b/f\nGIT binary patch\nliteral 1\n", "unsupported git patch"),
        (b"--- /dev/null\n+++ /dev/null\n@@ -0,0 +0,0 @@\n", "both sides are /dev/null"),
        (
            b"--- a/f\t1970-01-01 00:00:00 +0000\n+++ b/f\t1970-01-01 00:00:00 +0000\n@@ -0,0 +0,0 @@\n",
            "line 1: both sides are files that do not exist",
        ),
        (b"--- a/f\xe9\n+++ b/f\xe9\n@@ -1 +1 @@\n-a\n+b\n", r"line 1: the path b'a/f\\xe9' is not UTF-8"),
        (b"GIT binary patch \xff\n", r"line 1: unsupported git patch \('GIT binary patch \ufffd'\)"),
    ],
)
def test_malformed_patches(patch: bytes, message: str) -> None:
    with pytest.raises(PatchError, match=message) as caught:
        parse_patch(patch, origin="bad.patch")
    assert str(caught.value).startswith("patch bad.patch")
    assert "\n" not in str(caught.value)


def test_read_patch_names_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(PatchError, match="missing.patch: cannot read"):
        read_patch(tmp_path / "missing.patch")


def test_negative_strip_is_rejected_naming_the_patch(tmp_path: Path) -> None:
    patch = tmp_path / "fix.patch"
    patch.write_bytes(_git_diff(tmp_path, "pkg/mod.py", ORIGINAL, ORIGINAL + b"tail\n"))
    assert read_patch(patch, strip=0)[0].path == "b/pkg/mod.py"
    with pytest.raises(PatchError, match=f"^{re.escape(f'patch {patch}: strip must be >= 0, got -1')}$"):
        read_patch(patch, strip=-1)
