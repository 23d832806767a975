"""tools/release: the archive a release tag publishes, and the .bcr/ templates that publish it.

The Bazel test that consumes the archive through a registry is tests/bazel/test_release.py.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from support.releasetool import RELEASE, load_release, make_repository

REPO_ROOT = Path(__file__).resolve().parents[2]


release = load_release()


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return release.write_release(REPO_ROOT, tmp_path_factory.mktemp("release"))


def _read(archive: Path, name: str) -> str:
    with tarfile.open(archive) as tar:
        member = tar.extractfile(f"{archive.name.removesuffix('.tar.gz')}/{name}")
        assert member is not None, name
        return member.read().decode("utf-8")


def test_two_runs_give_the_same_bytes(archive: Path, tmp_path: Path) -> None:
    again = release.write_release(REPO_ROOT, tmp_path)
    assert again.name == archive.name
    assert again.read_bytes() == archive.read_bytes()


def test_the_archive_holds_the_module_and_not_the_repositorys_own_example(archive: Path) -> None:
    version = release.module_attribute((REPO_ROOT / "MODULE.bazel").read_text(encoding="utf-8"), "version")
    assert archive.name == f"rules_patched_wheels-{version}.tar.gz"
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
    names = [member.name.split("/", 1)[1] for member in members]
    assert names == sorted(names)
    assert {"MODULE.bazel", "BUILD.bazel", "python/extensions.bzl", "python/patched_wheels/cli/__init__.py"} <= set(
        names
    )
    assert not [
        name
        for name in names
        if name.split("/")[0] in ("tests", "benchmarks", "third_party", "patches", "tools", "calculator")
    ]
    assert {(member.mtime, member.uid, member.gid, member.uname, member.mode & 0o644) for member in members} == {
        (release._MTIME, 0, 0, "", 0o644)
    }


def test_released_module_file_drops_the_dev_only_example(archive: Path) -> None:
    released = _read(archive, "MODULE.bazel")
    assert "dev_dependency" not in released
    assert "//third_party" not in released and "//patches" not in released
    assert 'bazel_dep(name = "rules_python"' in released
    assert re.search(r'^module\(\s*name = "rules_patched_wheels"', released, flags=re.MULTILINE)


def test_dropping_follows_the_dev_extension_proxies() -> None:
    module_file = (
        '"""Doc (with a parenthesis."""\n\nmodule(name = "m", version = "1.2.3")\n'
        'bazel_dep(name = "a", version = "1")\nbazel_dep(name = "dev", version = "2", dev_dependency = True)\n\n'
        "# The example.\n"
        'ex = use_extension("//x:e.bzl", "e", dev_dependency = True)\nex.tag(\n    label = "//third_party:lock",\n)\n'
        'use_repo(ex, "r")\nkept = use_extension("//python:e.bzl", "e")\nkept.tag(name = "x")\nuse_repo(kept, "s")\n'
    )
    released = release.released_module_file(module_file, "1.2.3")
    code = [line for line in released.splitlines() if line and not line.startswith("#")]
    assert code == [
        'module(name = "m", version = "1.2.3")',
        'bazel_dep(name = "a", version = "1")',
        'kept = use_extension("//python:e.bzl", "e")',
        'kept.tag(name = "x")',
        'use_repo(kept, "s")',
    ]


def test_a_label_outside_the_archive_is_refused() -> None:
    with pytest.raises(release.ReleaseError, match="//third_party"):
        release._check_labels(
            'x.tag(lock = "//third_party:requirements_lock.txt")\n', ["BUILD.bazel", "python/BUILD.bazel"]
        )
    release._check_labels(
        'use_extension("//python:extensions.bzl", "patched")\n', ["BUILD.bazel", "python/BUILD.bazel"]
    )


def test_the_cli_prints_the_integrity_of_the_archive_it_wrote(tmp_path: Path) -> None:
    url = "https://example.invalid/r.tar.gz"
    printed = subprocess.run(
        [sys.executable, str(RELEASE), str(tmp_path), "--url", url], capture_output=True, text=True, check=True
    ).stdout
    archive = Path(printed.splitlines()[0])
    expected = release.integrity(archive)
    assert f"integrity: {expected}\n" in printed
    assert f'    integrity = "{expected}",\n' in printed
    source = json.loads(printed[printed.index("{") :])
    assert source == {"integrity": expected, "strip_prefix": archive.name.removesuffix(".tar.gz"), "url": url}


def test_bcr_templates_match_the_archive(archive: Path) -> None:
    """publish-to-bcr fills {REPO}/{VERSION}/{TAG}: the result must name the archive tools/release writes,
    and the presubmit's test module must be in it."""
    template = json.loads((REPO_ROOT / ".bcr" / "source.template.json").read_text(encoding="utf-8"))
    version = archive.name.removesuffix(".tar.gz").split("-", 1)[1]
    values = {"{REPO}": "rules_patched_wheels", "{VERSION}": version, "{TAG}": f"v{version}", "{OWNER}": "owner"}
    filled = {key: value for key, value in template.items()}
    for key, value in filled.items():
        for placeholder, replacement in values.items():
            value = value.replace(placeholder, replacement)
        filled[key] = value
    assert filled["strip_prefix"] == archive.name.removesuffix(".tar.gz")
    assert filled["url"].endswith(f"/v{version}/{archive.name}")
    presubmit = (REPO_ROOT / ".bcr" / "presubmit.yml").read_text(encoding="utf-8")
    module_path = next(
        line.split(":", 1)[1].strip().strip('"') for line in presubmit.splitlines() if "module_path:" in line
    )
    for name in ("MODULE.bazel", "BUILD.bazel", "requirements_lock.txt"):
        assert _read(archive, f"{module_path}/{name}")
    metadata = json.loads((REPO_ROOT / ".bcr" / "metadata.template.json").read_text(encoding="utf-8"))
    assert metadata["versions"] == []


def test_gzip_header_has_no_name_or_time(archive: Path) -> None:
    header = archive.read_bytes()[:10]
    assert header[3] & 0x08 == 0  # FNAME flag: no file name stored
    assert header[4:8] == b"\0\0\0\0"  # MTIME
    assert io.BytesIO(header).read(2) == b"\x1f\x8b"


# Attacks on tools/release, each on a small committed checkout (support.releasetool.make_repository).


def _names(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        return [member.name.split("/", 1)[1] for member in tar.getmembers()]


def _run(root: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = release.main([str(out)], root=root)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=root,
        check=True,
        capture_output=True,
    )


def test_untracked_and_ignored_files_stay_out_and_are_no_uncommitted_change(tmp_path, capsys) -> None:
    repo = make_repository(tmp_path / "repo", files={".gitignore": b"__pycache__/\n"})
    code, out, err = _run(repo, tmp_path / "a", capsys)
    assert code == 0 and err == "", err
    (repo / "python" / "stray.py").write_text("secret = 1\n")
    (repo / "python" / "__pycache__").mkdir()
    (repo / "python" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    code, out, err = _run(repo, repo / "python" / "dist", capsys)  # OUTDIR inside the tree the archive takes
    assert code == 0 and err == "", err  # nothing tracked changed: no warning
    again = Path(out.splitlines()[0])
    assert again.read_bytes() == (tmp_path / "a" / again.name).read_bytes()
    assert _names(again) == [
        "BUILD.bazel",
        "MODULE.bazel",
        "pyproject.toml",
        "python/BUILD.bazel",
        "python/patched_wheels/__init__.py",
        "python/run.sh",
    ]


def test_a_changed_tracked_file_goes_in_with_a_warning(tmp_path, capsys) -> None:
    repo = make_repository(tmp_path / "repo")
    (repo / "python" / "BUILD.bazel").write_text("# changed\n")
    code, out, err = _run(repo, tmp_path / "out", capsys)
    assert code == 0 and err.startswith("tools/release: warning: the archive holds uncommitted changes"), err
    with tarfile.open(out.splitlines()[0]) as tar:
        assert tar.extractfile("rules_patched_wheels-1.2.3/python/BUILD.bazel").read() == b"# changed\n"


def test_modes_owners_and_times_come_from_git_not_the_work_tree(tmp_path) -> None:
    """Another checkout of the same commit (another umask, owner, time, a file made executable by hand with
    core.fileMode off) gives the same bytes."""
    repo = make_repository(tmp_path / "repo")
    first = release.write_release(repo, tmp_path / "a").read_bytes()
    _git(repo, "config", "core.fileMode", "false")
    (repo / "python" / "BUILD.bazel").chmod(0o755)
    (repo / "python" / "run.sh").chmod(0o700)
    os.utime(repo / "BUILD.bazel", (1e9, 1e9))
    archive = release.write_release(repo, tmp_path / "b")
    assert archive.read_bytes() == first
    with tarfile.open(archive) as tar:
        modes = {member.name.split("/", 1)[1]: member.mode for member in tar.getmembers()}
    assert modes["python/run.sh"] == 0o755 and modes["python/BUILD.bazel"] == 0o644


@pytest.mark.parametrize("target", ["outside", "inside"])
def test_a_tracked_symbolic_link_is_refused(tmp_path, capsys, target: str) -> None:
    """A link's target is not what git tracks: one to a file outside the repository would leak it."""
    (tmp_path / "secret").write_text("token\n")
    repo = tmp_path / "repo"
    (repo / "python").mkdir(parents=True)
    os.symlink(tmp_path / "secret" if target == "outside" else "BUILD.bazel", repo / "python" / "link.txt")
    make_repository(repo)
    code, out, err = _run(repo, tmp_path / "out", capsys)
    assert (code, out) == (1, "")
    assert (
        err == "tools/release: error: python/link.txt: a symbolic link; the release archive holds regular files only\n"
    ), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("version", ["../../evil", "1.0/x", ".hidden", "1 2", "1.0\n"])
def test_a_version_that_is_no_module_version_is_refused(tmp_path, capsys, version: str) -> None:
    repo = make_repository(tmp_path / "repo", version=version.replace("\n", "\\n"))
    code, out, err = _run(repo, tmp_path / "out" / "deep", capsys)
    assert (code, out) == (1, "")
    assert err.startswith("tools/release: error: MODULE.bazel: version = ") and "is not a module version" in err, err
    assert err.count("\n") == 1 and list(tmp_path.iterdir()) == [repo]


def test_a_tag_of_another_version_is_refused(tmp_path, capsys) -> None:
    repo = make_repository(tmp_path / "repo")
    _git(repo, "tag", "v1.2.4")
    code, out, err = _run(repo, tmp_path / "out", capsys)
    assert (code, out) == (1, "")
    assert (
        err
        == "tools/release: error: MODULE.bazel: version = \"1.2.3\", but HEAD is tagged v1.2.4: the release's URL and the registry name the tag's version\n"
    )
    _git(repo, "tag", "v1.2.3")
    code, out, err = _run(repo, tmp_path / "out", capsys)
    assert code == 0 and err == "", err


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("pyproject.toml", '[project]\nname = "patched-wheels"\nversion = "1.2.2"\n'),
        ("python/patched_wheels/__init__.py", '"""Doc."""\n'),
    ],
)
def test_another_file_stating_another_version_is_refused(tmp_path, capsys, path: str, text: str) -> None:
    repo = make_repository(tmp_path / "repo", files={path: text.encode()})
    code, out, err = _run(repo, tmp_path / "out", capsys)
    assert (code, out) == (1, "")
    assert err.startswith(f"tools/release: error: {path}: says ") and 'MODULE.bazel version = "1.2.3"' in err, err


def test_an_interrupted_run_leaves_nothing_and_keeps_the_earlier_archive(tmp_path, monkeypatch) -> None:
    repo = make_repository(tmp_path / "repo")
    out = tmp_path / "out"
    earlier = release.write_release(repo, out)
    before = earlier.read_bytes()
    (repo / "python" / "BUILD.bazel").write_text("# changed: another archive\n")
    added = []

    def interrupt(self, info, fileobj=None):
        added.append(info.name)
        if len(added) == 3:
            raise KeyboardInterrupt
        return addfile(self, info, fileobj)

    addfile = tarfile.TarFile.addfile
    monkeypatch.setattr(tarfile.TarFile, "addfile", interrupt)
    with pytest.raises(KeyboardInterrupt):
        release.write_release(repo, out)
    assert len(added) == 3
    assert os.listdir(out) == [earlier.name] and earlier.read_bytes() == before


def test_an_archive_path_taken_by_a_directory_leaves_no_partial_file(tmp_path, capsys) -> None:
    repo = make_repository(tmp_path / "repo")
    (tmp_path / "out" / "rules_patched_wheels-1.2.3.tar.gz").mkdir(parents=True)
    code, out, err = _run(repo, tmp_path / "out", capsys)
    assert (code, out) == (1, "") and err.count("\n") == 1 and "rules_patched_wheels-1.2.3.tar.gz" in err, err
    assert os.listdir(tmp_path / "out") == ["rules_patched_wheels-1.2.3.tar.gz"]


def test_an_outdir_that_is_a_file_is_one_error_line(tmp_path, capsys) -> None:
    repo = make_repository(tmp_path / "repo")
    (tmp_path / "out").write_text("a file\n")
    code, out, err = _run(repo, tmp_path / "out", capsys)
    assert (code, out) == (1, "")
    assert err == f"tools/release: error: OUTDIR {tmp_path / 'out'}: not a directory\n", err


def test_no_git_or_no_checkout_is_one_error_line(tmp_path, capsys, monkeypatch) -> None:
    exported = tmp_path / "exported"  # a tree without .git (an unpacked archive)
    make_repository(exported)
    shutil.rmtree(exported / ".git")
    code, out, err = _run(exported, tmp_path / "out", capsys)
    assert (code, out) == (1, "") and err.startswith(
        f"tools/release: error: git ls-files in {exported}: fatal: not a git repository"
    ), err
    repo = make_repository(tmp_path / "repo")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    code, out, err = _run(repo, tmp_path / "out", capsys)
    assert err == "tools/release: error: git: not found: the release archive holds the files git tracks\n", err
    assert not (tmp_path / "out").exists()


def test_a_url_with_quotes_stays_one_starlark_string(tmp_path) -> None:
    archive = release.write_release(make_repository(tmp_path / "repo"), tmp_path / "out")
    printed = release.snippets(archive, "1.2.3", 'https://example.invalid/a"b\\c.tar.gz')
    assert '    urls = ["https://example.invalid/a\\"b\\\\c.tar.gz"],\n' in printed, printed


def test_an_outdir_that_takes_no_file_is_named(tmp_path, capsys, monkeypatch) -> None:
    """An OUTDIR without write permission (as root, permissions do not stop the write: the refusal is the
    kernel's answer to creating the file, played here)."""
    repo = make_repository(tmp_path / "repo")

    def refuse(*args, **kwargs):
        raise PermissionError(
            13, "Permission denied", str(tmp_path / "out" / ".rules_patched_wheels-1.2.3.tar.gz.x.partial")
        )

    monkeypatch.setattr(release.tempfile, "mkstemp", refuse)
    code, out, err = _run(repo, tmp_path / "out", capsys)
    assert (code, out, err) == (1, "", f"tools/release: error: OUTDIR {tmp_path / 'out'}: Permission denied\n")


def test_the_version_is_the_module_call_s_not_a_comment_s(tmp_path) -> None:
    module_file = (
        '"""Docs: module(name = "x", version = "8.8.8")."""\n# module(name = "x", version = "9.9.9")\n'
        'module(\n    name = "rules_patched_wheels",\n    version = "1.2.3",  # was "1.2.2"\n)\n'
    )
    repo = make_repository(tmp_path / "repo", files={"MODULE.bazel": module_file.encode()})
    assert release.write_release(repo, tmp_path / "out").name == "rules_patched_wheels-1.2.3.tar.gz"


def test_a_module_file_that_is_not_utf_8_is_one_error_line(tmp_path, capsys) -> None:
    repo = make_repository(tmp_path / "repo")
    (repo / "MODULE.bazel").write_bytes(b'module(name = "rules_patched_wheels", version = "1.2.3")\n# \xff\n')
    code, out, err = _run(repo, tmp_path / "out", capsys)
    assert (code, out) == (1, "")
    assert err == f"tools/release: error: {repo / 'MODULE.bazel'}: not UTF-8 (invalid start byte at byte 59)\n", err
    assert not (tmp_path / "out").exists()
