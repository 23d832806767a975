"""End to end: ``patched-wheels patch`` and ``patch_wheel`` on synthetic wheels, checked by real clients."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from installer.sources import WheelFile as InstallerWheel
from packaging.tags import sys_tags

from patched_wheels.cli import main
from patched_wheels.errors import PatchError, UsageError
from patched_wheels.patch.surgery import PatchOptions, PatchResult, patch_wheel
from support.indexfixtures import sha256_of
from support.wheelbuilder import build_wheel, replace_members

INIT = b"".join(b"line = %d\n" % number for number in range(1, 11))
INIT_PATCH = b"""\
--- a/demo/__init__.py
+++ b/demo/__init__.py
@@ -2,3 +2,4 @@
 line = 2
 line = 3
+patched = True
 line = 4
"""
SCRIPT = b"#!python\nimport demo\nprint(demo.line)\n"
REQUIRES = ('triton (==2.1.0) ; platform_system == "Linux"', "filelock")


def _demo_wheel(directory: Path, version: str = "1.0", **kwargs: object) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "demo/__init__.py": INIT,
        "demo/data.bin": os.urandom(50_000),
        ".data/scripts/demo-run": SCRIPT,
        ".data/purelib/demo_extra.py": b"EXTRA = 1\n",
    }
    kwargs.setdefault("requires", REQUIRES)
    return build_wheel(
        directory, "demo", version, files, modes={f"demo-{version}.data/scripts/demo-run": 0o755}, **kwargs
    )  # type: ignore[arg-type]


def _patch_file(directory: Path, name: str, content: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(content)
    return path


def _cli(*args: object) -> int:
    return main([str(arg) for arg in args])


def _pip_install(wheel: Path, target: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            "--quiet",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
    )


def _validate_record(wheel: Path) -> None:
    with InstallerWheel.open(wheel) as source:
        source.validate_record(validate_contents=True)


# ---------------------------------------------------------------- round trips


def test_cli_round_trip_installs_with_pip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wheel = _demo_wheel(tmp_path / "in")
    patch_dir = tmp_path / "patches"
    _patch_file(patch_dir, "01-init.patch", INIT_PATCH)
    out = tmp_path / "out"
    assert (
        _cli(
            "patch",
            "--wheel",
            wheel,
            "--dest-dir",
            out,
            "--suffix",
            "stripe.5",
            "--patch-dir",
            patch_dir,
            "--remove-requires",
            "triton",
            "--add-requires",
            "nvidia-nvjitlink-cu12==12.1.105",
        )
        == 0
    )
    expected = out / "demo-1.0+stripe.5-py3-none-any.whl"
    assert capsys.readouterr().out == f"{expected}\ndemo==1.0+stripe.5\n"
    assert [path.name for path in out.iterdir()] == [expected.name]
    _validate_record(expected)

    target = tmp_path / "site"
    _pip_install(expected, target)
    assert (target / "demo/__init__.py").read_bytes() == INIT.replace(b"line = 4\n", b"patched = True\nline = 4\n")
    assert (target / "demo_extra.py").read_bytes() == b"EXTRA = 1\n"  # .data/purelib
    script = target / "bin/demo-run"  # .data/scripts, renamed .data dir
    assert script.stat().st_mode & stat.S_IXUSR
    assert script.read_bytes().endswith(b"import demo\nprint(demo.line)\n")
    metadata = (target / "demo-1.0+stripe.5.dist-info/METADATA").read_text()
    assert metadata == (
        "Metadata-Version: 2.1\nName: demo\nVersion: 1.0+stripe.5\nRequires-Dist: filelock\n"
        "Requires-Dist: nvidia-nvjitlink-cu12==12.1.105\n\nA test wheel.\n"
    )
    assert not (target / "demo-1.0.dist-info").exists()


def test_platlib_wheel_keeps_filename_tags_build_tag_and_wheel_file(tmp_path: Path) -> None:
    platform_tag = next(iter(sys_tags()))
    wheel = _demo_wheel(tmp_path / "in", version="2.1.2+cu118", build_tag="7", tag=str(platform_tag))
    # Like torch 2.1.0: the WHEEL file's Tag differs from the filename's; the filename wins.
    original_wheel_file = zipfile.ZipFile(wheel).read("demo-2.1.2+cu118.dist-info/WHEEL")
    result = patch_wheel(
        wheel, tmp_path / "out", PatchOptions(suffix="stripe.5", patches=[_patch_file(tmp_path, "p.diff", INIT_PATCH)])
    )
    assert result == PatchResult(
        tmp_path / "out" / f"demo-2.1.2+cu118.stripe.5-7-{platform_tag}.whl", "demo==2.1.2+cu118.stripe.5"
    )
    with zipfile.ZipFile(result.path) as archive:
        assert archive.read("demo-2.1.2+cu118.stripe.5.dist-info/WHEEL") == original_wheel_file
        assert "Root-Is-Purelib: false" in original_wheel_file.decode()
    _validate_record(result.path)
    target = tmp_path / "site"
    _pip_install(result.path, target)
    assert b"patched = True" in (target / "demo/__init__.py").read_bytes()
    assert (target / "demo-2.1.2+cu118.stripe.5.dist-info/METADATA").read_text().count(
        "Version: 2.1.2+cu118.stripe.5\n"
    ) == 1


def test_name_normalisation_keeps_input_spelling(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    wheel = build_wheel(tmp_path / "in", "Foo.Bar", "1.0", {"foo_bar/__init__.py": b"X = 1\n"}, distribution="Foo_Bar")
    result = patch_wheel(wheel, tmp_path / "out", PatchOptions(suffix="p1"))
    assert result.path.name == "Foo_Bar-1.0+p1-py3-none-any.whl"
    assert result.requirement == "Foo.Bar==1.0+p1"
    with zipfile.ZipFile(result.path) as archive:
        assert "Foo_Bar-1.0+p1.dist-info/METADATA" in archive.namelist()
    _validate_record(result.path)
    target = tmp_path / "site"
    _pip_install(result.path, target)
    assert (target / "foo_bar/__init__.py").read_bytes() == b"X = 1\n"


def test_unchanged_members_are_copied_raw_and_modes_kept(tmp_path: Path) -> None:
    wheel = _demo_wheel(tmp_path / "in")
    result = patch_wheel(
        wheel, tmp_path / "out", PatchOptions(suffix="x", patches=[_patch_file(tmp_path, "p.diff", INIT_PATCH)])
    )
    with zipfile.ZipFile(wheel) as before, zipfile.ZipFile(result.path) as after:
        raw_before = before.getinfo("demo/data.bin")
        raw_after = after.getinfo("demo/data.bin")
        assert (raw_after.CRC, raw_after.compress_size) == (raw_before.CRC, raw_before.compress_size)
        assert after.getinfo("demo-1.0+x.data/scripts/demo-run").external_attr >> 16 == 0o100755
        assert after.getinfo("demo/__init__.py").CRC != before.getinfo("demo/__init__.py").CRC
        assert after.namelist()[-1] == "demo-1.0+x.dist-info/RECORD"


def test_patch_order_creation_deletion_globs_and_member_edits(tmp_path: Path) -> None:
    wheel = _demo_wheel(tmp_path / "in")
    patch_dir = tmp_path / "patches"
    # 02 only applies on top of 01: sorted order matters.
    _patch_file(
        patch_dir,
        "02-second.patch",
        INIT_PATCH.replace(b"+patched = True\n line = 4", b" patched = True\n+second = True\n line = 4")
        .replace(b"@@ -2,3 +2,4 @@", b"@@ -3,3 +3,4 @@")
        .replace(b" line = 2\n", b""),
    )
    _patch_file(patch_dir, "01-first.patch", INIT_PATCH)
    _patch_file(patch_dir, "README", b"not a patch")
    create = _patch_file(tmp_path, "create.patch", b"--- /dev/null\n+++ b/demo/new.py\n@@ -0,0 +1 @@\n+NEW = 1\n")
    seen: dict[str, bytes | None] = {}

    def edit_init(content: bytes | None) -> bytes:
        seen["demo/__init__.py"] = content
        return b"import demo._preload\n" + (content or b"")

    result = patch_wheel(
        wheel,
        tmp_path / "out",
        PatchOptions(
            suffix="x",
            patches=[*sorted(patch_dir.glob("*.patch")), create],
            delete=["demo/*.bin"],
            member_edits={"demo/__init__.py": edit_init, "demo/_preload.py": lambda content: b"# generated\n"},
        ),
    )
    assert seen["demo/__init__.py"] is not None and b"second = True\n" in seen["demo/__init__.py"]
    with zipfile.ZipFile(result.path) as archive:
        names = archive.namelist()
        init = archive.read("demo/__init__.py")
        assert archive.read("demo/new.py") == b"NEW = 1\n"
        assert archive.read("demo/_preload.py") == b"# generated\n"
    assert init.startswith(b"import demo._preload\nline = 1\n") and init.count(b"= True") == 2
    assert "demo/data.bin" not in names
    assert names.index("demo/new.py") < names.index("demo-1.0+x.dist-info/METADATA")
    _validate_record(result.path)


def test_without_suffix_only_content_changes(tmp_path: Path) -> None:
    wheel = _demo_wheel(tmp_path / "in")
    result = patch_wheel(wheel, tmp_path / "out", PatchOptions(remove_requires=["TRITON"]))
    assert result == PatchResult(tmp_path / "out" / wheel.name, "demo==1.0")
    with zipfile.ZipFile(result.path) as archive:
        assert b"triton" not in archive.read("demo-1.0.dist-info/METADATA")
    with pytest.raises(UsageError, match="output would overwrite the input"):
        patch_wheel(wheel, wheel.parent, PatchOptions(remove_requires=["filelock"]))


def test_patching_twice_gives_identical_bytes(tmp_path: Path) -> None:
    wheel = _demo_wheel(tmp_path / "in")
    patch = _patch_file(tmp_path, "p.patch", INIT_PATCH)
    digests = set()
    for run in ("a", "b"):
        assert (
            _cli(
                "patch",
                "--wheel",
                wheel,
                "--dest-dir",
                tmp_path / run,
                "--suffix",
                "s.1",
                "--patch",
                patch,
                "--add-requires",
                "x>=1",
            )
            == 0
        )
        digests.add(sha256_of(tmp_path / run / "demo-1.0+s.1-py3-none-any.whl"))
    assert len(digests) == 1


def test_verify_accepts_intact_wheel(tmp_path: Path) -> None:
    wheel = _demo_wheel(tmp_path / "in")
    assert _cli("patch", "--wheel", wheel, "--dest-dir", tmp_path / "out", "--suffix", "v", "--verify") == 0
    _validate_record(tmp_path / "out" / "demo-1.0+v-py3-none-any.whl")


# ---------------------------------------------------------------- bad input


def _tampered(tmp_path: Path, member: str) -> Path:
    """Same size, different bytes: passes the cheap checks, fails the hash."""
    wheel = _demo_wheel(tmp_path / "in")
    content = zipfile.ZipFile(wheel).read(member)
    replace_members(wheel, {member: bytes([content[0] ^ 1]) + content[1:]})
    return wheel


def _delete_wheel_patch(directory: Path, wheel: Path) -> Path:
    """A patch deleting the WHEEL file of ``wheel``."""
    lines = zipfile.ZipFile(wheel).read("demo-1.0.dist-info/WHEEL").splitlines(keepends=True)
    return _patch_file(
        directory,
        "delete-wheel.patch",
        b"--- a/demo-1.0.dist-info/WHEEL\n+++ /dev/null\n@@ -1,%d +0,0 @@\n" % len(lines)
        + b"".join(b"-" + line for line in lines),
    )


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[list[object], str]]:
    good = _demo_wheel(tmp_path / "good")
    not_zip = tmp_path / "nz" / "demo-1.0-py3-none-any.whl"
    not_zip.parent.mkdir()
    not_zip.write_bytes(b"PK\x03\x04 but not really")
    truncated = _demo_wheel(tmp_path / "trunc")
    truncated.write_bytes(truncated.read_bytes()[:-30])
    evil = _demo_wheel(tmp_path / "evil")
    with zipfile.ZipFile(evil, "a") as archive:
        archive.writestr("../evil.py", b"")
    duplicate = _demo_wheel(tmp_path / "dup")
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(duplicate, "a") as archive:
        archive.writestr("demo/__init__.py", INIT)
    size = _demo_wheel(tmp_path / "size")
    replace_members(size, {"demo/data.bin": b"short"})
    unchanged_tampered = _tampered(tmp_path / "t1", "demo/data.bin")
    rewritten_tampered = _tampered(tmp_path / "t2", "demo/__init__.py")
    reversioned = _demo_wheel(tmp_path / "rev", metadata_version="3.0")
    symlink = _demo_wheel(tmp_path / "link")
    with zipfile.ZipFile(symlink, "a") as archive:
        info = zipfile.ZipInfo("demo/link")
        info.create_system, info.external_attr = 3, (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, "/etc/passwd")
    patch = _patch_file(tmp_path, "fix.patch", INIT_PATCH)
    delete_wheel = _delete_wheel_patch(tmp_path, good)
    second_dist_info = _patch_file(
        tmp_path, "dist-info.patch", b"--- /dev/null\n+++ b/other-1.0.dist-info/METADATA\n@@ -0,0 +1 @@\n+Name: other\n"
    )
    under_file = _patch_file(
        tmp_path, "under.patch", b"--- /dev/null\n+++ b/demo/__init__.py/x.py\n@@ -0,0 +1 @@\n+X = 1\n"
    )
    latin1_path = _patch_file(tmp_path, "latin1.patch", INIT_PATCH.replace(b"demo/__init__.py", b"demo/\xe9t\xe9.py"))
    latin1_metadata = _patch_file(
        tmp_path,
        "latin1-metadata.patch",
        b"--- a/demo-1.0.dist-info/METADATA\n+++ b/demo-1.0.dist-info/METADATA\n@@ -5 +5 @@\n"
        b"-Requires-Dist: filelock\n+Requires-Dist: filelock\xe9\n",
    )
    stale = _patch_file(tmp_path, "stale.patch", INIT_PATCH.replace(b" line = 3\n", b" line = 33\n"))
    missing = _patch_file(tmp_path, "missing.patch", INIT_PATCH.replace(b"demo/__init__.py", b"demo/gone.py"))
    base = ["--dest-dir", tmp_path / "out", "--suffix", "s"]
    return {
        "not a zip": (["--wheel", not_zip, *base], f"{not_zip}: not a zip archive or truncated"),
        "truncated": (["--wheel", truncated, *base], f"{truncated}: not a zip archive or truncated"),
        "unsafe path": (["--wheel", evil, *base], f"{evil.name}: member '../evil.py': unsafe path"),
        "duplicate": (
            ["--wheel", duplicate, *base],
            f"{duplicate.name}: member 'demo/__init__.py': duplicate member name",
        ),
        "record size": (["--wheel", size, *base], "RECORD: demo/data.bin has size 50000 in RECORD but 5 in the zip"),
        "hash --verify": (
            ["--wheel", unchanged_tampered, *base, "--verify"],
            f"{unchanged_tampered.name}: demo/data.bin: content does not match its RECORD hash",
        ),
        "hash rewritten": (
            ["--wheel", rewritten_tampered, *base, "--patch", patch],
            f"{rewritten_tampered.name}: demo/__init__.py: content does not match its RECORD hash",
        ),
        "stale patch": (
            ["--wheel", good, *base, "--patch", stale],
            f"patch {stale}: demo/__init__.py: hunk #1 (@@ -2,3 +2,4 @@) does not apply at line 2",
        ),
        "missing target": (
            ["--wheel", good, *base, "--patch", missing],
            f"patch {missing}: demo/gone.py: file is not in the wheel",
        ),
        "negative strip": (
            ["--wheel", good, *base, "--patch", patch, "--strip", "-1"],
            "patch: argument --strip: '-1' is not a number of path components (0 or more)",
        ),
        "invalid suffix": (
            ["--wheel", good, "--dest-dir", tmp_path / "out", "--suffix", "bad+suffix"],
            "--suffix 'bad+suffix' is not a valid PEP 440 local version label",
        ),
        "delete no match": (
            ["--wheel", good, *base, "--delete", "*.nothing"],
            "--delete '*.nothing': matches no member",
        ),
        "remove unknown": (
            ["--wheel", good, *base, "--remove-requires", "numpy"],
            "no Requires-Dist for numpy to remove",
        ),
        "edit RECORD": (
            ["--wheel", good, *base, "--delete", "demo-1.0.dist-info/*"],
            "would delete demo-1.0.dist-info/METADATA, which a wheel needs",
        ),
        "empty suffix": (
            ["--wheel", good, "--dest-dir", tmp_path / "out", "--suffix", ""],
            "--suffix '' is not a valid PEP 440 local version label",
        ),
        "non-ASCII suffix": (
            ["--wheel", good, "--dest-dir", tmp_path / "out", "--suffix", "\u017ftripe"],
            "--suffix 'ſtripe' is not a valid PEP 440 local version label",
        ),
        "bad add-requires": (
            ["--wheel", good, *base, "--add-requires", "foo >="],
            "demo-1.0.dist-info/METADATA: cannot add requirement 'foo >=': Expected ",
        ),
        "re-versioned": (
            ["--wheel", reversioned, *base],
            f"{reversioned.name}: demo-1.0.dist-info/METADATA: has version 3.0, the file name 1.0",
        ),
        "symlink member": (["--wheel", symlink, *base], f"{symlink.name}: member 'demo/link': not a regular file"),
        "patch deletes WHEEL": (
            ["--wheel", good, *base, "--patch", delete_wheel],
            f"patch {delete_wheel}: would delete demo-1.0.dist-info/WHEEL, which a wheel needs",
        ),
        "patch adds a dist-info": (
            ["--wheel", good, *base, "--patch", second_dist_info],
            f"patch {second_dist_info}: other-1.0.dist-info/METADATA would add a second .dist-info directory",
        ),
        "patch creates under a file": (
            ["--wheel", good, *base, "--patch", under_file],
            "demo-1.0+s-py3-none-any.whl: member 'demo/__init__.py/x.py': demo/__init__.py is a file, not a directory",
        ),
        "patch path not UTF-8": (
            ["--wheel", good, *base, "--patch", latin1_path],
            f"patch {latin1_path}: line 1: the path b'a/demo/\\xe9t\\xe9.py' is not UTF-8",
        ),
        "patched METADATA not UTF-8": (
            ["--wheel", good, *base, "--patch", latin1_metadata, "--remove-requires", "triton"],
            "demo-1.0+s-py3-none-any.whl: demo-1.0+s.dist-info/METADATA: not UTF-8",
        ),
    }


BAD_CASES = [
    "not a zip",
    "truncated",
    "unsafe path",
    "duplicate",
    "record size",
    "hash --verify",
    "hash rewritten",
    "stale patch",
    "missing target",
    "negative strip",
    "invalid suffix",
    "delete no match",
    "remove unknown",
    "edit RECORD",
    "empty suffix",
    "non-ASCII suffix",
    "bad add-requires",
    "re-versioned",
    "symlink member",
    "patch deletes WHEEL",
    "patch adds a dist-info",
    "patch creates under a file",
    "patch path not UTF-8",
    "patched METADATA not UTF-8",
]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_gives_one_error_line_and_no_output(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args, message = _bad_inputs(tmp_path)[case]
    assert _cli("patch", *args) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("patched-wheels: error: ")
    assert message in captured.err
    out = tmp_path / "out"
    assert not out.exists() or list(out.iterdir()) == []


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (dict(delete=["*.nothing"]), UsageError, "--delete '[*].nothing': matches no member"),
        (dict(delete=["demo-1.0.dist-info/*"]), UsageError, "would delete demo-1.0.dist-info/METADATA"),
        (
            dict(member_edits={"other-1.0.dist-info/METADATA": lambda _: b""}),
            PatchError,
            "would add a second .dist-info",
        ),
        (dict(member_edits={"demo/../x.py": lambda _: b""}), PatchError, "is not a safe file path"),
    ],
)
def test_errors_say_whose_fault_they_are(tmp_path: Path, options: dict, error: type, message: str) -> None:
    """An option contradicting the wheel is a UsageError; an edit that cannot apply to it, a PatchError."""
    wheel = _demo_wheel(tmp_path / "in")
    with pytest.raises(error, match=message):
        patch_wheel(wheel, tmp_path / "out", PatchOptions(suffix="s", **options))
    assert not (tmp_path / "out").exists()


def test_a_patch_deleting_a_needed_file_is_a_patch_error(tmp_path: Path) -> None:
    wheel = _demo_wheel(tmp_path / "in")
    with pytest.raises(PatchError, match="would delete demo-1.0.dist-info/WHEEL, which a wheel needs"):
        patch_wheel(wheel, tmp_path / "out", PatchOptions(patches=[_delete_wheel_patch(tmp_path, wheel)]))


@pytest.mark.parametrize("epoch", ["\u00b2", "1e9"])
def test_bad_source_date_epoch_is_one_line_and_no_output(
    epoch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = _demo_wheel(tmp_path / "in")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
    assert _cli("patch", "--wheel", wheel, "--dest-dir", tmp_path / "out", "--suffix", "s") == 1
    assert (
        capsys.readouterr().err
        == f"patched-wheels: error: SOURCE_DATE_EPOCH={epoch!r}: not a number of seconds since 1970\n"
    )
    assert not (tmp_path / "out").exists()  # not even the directory it would have made


def test_tampered_unchanged_member_passes_without_verify(tmp_path: Path) -> None:
    """The default mode trusts unchanged members (Bazel pins the download's sha256); --verify does not."""
    wheel = _tampered(tmp_path, "demo/data.bin")
    assert patch_wheel(wheel, tmp_path / "out", PatchOptions(suffix="s")).path.exists()


def test_preload_flags_must_come_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wheel = _demo_wheel(tmp_path / "in")
    assert _cli("patch", "--wheel", wheel, "--dest-dir", tmp_path / "out", "--preload-for", "demo") == 1
    assert "--preload-for and --preload-from must be given together" in capsys.readouterr().err


def test_signatures_are_dropped_and_generated_files_protected(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    wheel = build_wheel(tmp_path / "in", "demo", "1.0", {"demo/x.py": b"", ".dist-info/RECORD.jws": b"{}"})
    result = patch_wheel(wheel, tmp_path / "out", PatchOptions(suffix="s"))
    with zipfile.ZipFile(result.path) as archive:
        assert not [name for name in archive.namelist() if name.endswith(".jws")]
        assert b"RECORD.jws" not in archive.read("demo-1.0+s.dist-info/RECORD")
    edit_record = {"demo-1.0.dist-info/RECORD": lambda content: b""}
    with pytest.raises(PatchError, match="^member edit: demo-1.0.dist-info/RECORD is generated"):
        patch_wheel(wheel, tmp_path / "out2", PatchOptions(suffix="s", member_edits=edit_record))
    assert not (tmp_path / "out2").exists()
