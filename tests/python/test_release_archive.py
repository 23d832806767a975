"""tools/release: the archive a release tag publishes, and the .bcr/ templates that publish it.

The Bazel test that consumes the archive through a registry is tests/bazel/test_release.py.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from support.releasetool import RELEASE, load_release

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
    assert {"MODULE.bazel", "BUILD.bazel", "python/extensions.bzl", "python/patched_wheels/cli/__init__.py"} <= set(names)
    assert not [name for name in names if name.split("/")[0] in ("tests", "benchmarks", "third_party", "patches", "tools", "calculator")]
    assert {(member.mtime, member.uid, member.gid, member.uname, member.mode & 0o644) for member in members} == {(release._MTIME, 0, 0, "", 0o644)}


def test_released_module_file_drops_the_dev_only_example(archive: Path) -> None:
    released = _read(archive, "MODULE.bazel")
    assert "dev_dependency" not in released
    assert "//third_party" not in released and "//patches" not in released
    assert 'bazel_dep(name = "rules_python"' in released
    assert 'module(name = "rules_patched_wheels"' in released


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
        release._check_labels('x.tag(lock = "//third_party:requirements_lock.txt")\n', ["BUILD.bazel", "python/BUILD.bazel"])
    release._check_labels('use_extension("//python:extensions.bzl", "patched")\n', ["BUILD.bazel", "python/BUILD.bazel"])


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
    module_path = next(line.split(":", 1)[1].strip().strip('"') for line in presubmit.splitlines() if "module_path:" in line)
    for name in ("MODULE.bazel", "BUILD.bazel", "requirements_lock.txt"):
        assert _read(archive, f"{module_path}/{name}")
    metadata = json.loads((REPO_ROOT / ".bcr" / "metadata.template.json").read_text(encoding="utf-8"))
    assert metadata["versions"] == []


def test_gzip_header_has_no_name_or_time(archive: Path) -> None:
    header = archive.read_bytes()[:10]
    assert header[3] & 0x08 == 0  # FNAME flag: no file name stored
    assert header[4:8] == b"\0\0\0\0"  # MTIME
    assert io.BytesIO(header).read(2) == b"\x1f\x8b"
