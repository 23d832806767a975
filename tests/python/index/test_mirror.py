"""``mirror``: the real pip downloads from a local source index (made by our own ``index``, so
no network is needed) into a directory that then serves as an index itself."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from patched_wheels.cli import main
from patched_wheels.index.simple import build_index
from support.hostile import make_special_file
from support.indexfixtures import make_wheel, pip_env, run_cli, run_pip, sha256_of

SOURCE_WHEELS = (
    "tritonfake-2.1.0-0-py3-none-any.whl",
    "torchfake-2.1.0+stripe.5-py3-none-any.whl",
    "other-1.0-py3-none-any.whl",
)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    directory = tmp_path / "source"
    directory.mkdir()
    for filename in SOURCE_WHEELS:
        make_wheel(directory, filename)
    build_index(directory)
    return directory


def _requirements(tmp_path: Path, source: Path, *, wrong_hash_for: str | None = None) -> Path:
    lines = []
    for filename, pin in zip(SOURCE_WHEELS[:2], ("tritonfake==2.1.0", "torchfake==2.1.0+stripe.5")):
        digest = "0" * 64 if pin.startswith(wrong_hash_for or "-") else sha256_of(source / filename)
        lines.append(f"{pin} \\\n    --hash=sha256:{digest}\n")
    path = tmp_path / "requirements.txt"
    path.write_text("# a lock\n" + "".join(lines))
    return path


def _mirror(requirements: Path, destination: Path, source: Path):
    return run_cli(
        "mirror",
        "-r",
        str(requirements),
        str(destination),
        "--",
        f"--index-url={(source / 'simple').as_uri()}",
        env=pip_env(),
    )


def test_mirror_downloads_the_pins_and_serves_them(tmp_path: Path, source: Path) -> None:
    destination = tmp_path / "mirror"
    result = _mirror(_requirements(tmp_path, source), destination, source)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:2] == [f"downloaded {name}" for name in sorted(SOURCE_WHEELS[:2])]
    assert sorted(p.name for p in destination.glob("*.whl")) == sorted(SOURCE_WHEELS[:2])  # not "other"
    for filename in SOURCE_WHEELS[:2]:
        assert (destination / filename).read_bytes() == (source / filename).read_bytes()
    assert not list(destination.glob(".*.tmp"))
    # The mirror is an index pip can install from, with hashes.
    out = tmp_path / "dl"
    fetched = run_pip(
        "download",
        "--no-deps",
        "--index-url",
        (destination / "simple").as_uri(),
        "-d",
        str(out),
        "torchfake==2.1.0+stripe.5",
        "tritonfake==2.1.0",
    )
    assert fetched.returncode == 0, fetched.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(SOURCE_WHEELS[:2])


def test_mirror_reuses_files_already_present(tmp_path: Path, source: Path) -> None:
    destination = tmp_path / "mirror"
    requirements = _requirements(tmp_path, source)
    assert _mirror(requirements, destination, source).returncode == 0
    inodes = {p.name: p.stat().st_ino for p in destination.glob("*.whl")}

    again = _mirror(requirements, destination, source)

    assert again.returncode == 0, again.stderr
    assert not [line for line in again.stdout.splitlines() if line.startswith("downloaded")]
    assert again.stdout.strip().endswith("(0 hashed)")
    assert {p.name: p.stat().st_ino for p in destination.glob("*.whl")} == inodes


def test_failed_download_changes_nothing(tmp_path: Path, source: Path) -> None:
    destination = tmp_path / "mirror"
    destination.mkdir()
    make_wheel(destination, "kept-1.0-py3-none-any.whl")
    build_index(destination)
    before = {p: p.read_bytes() for p in destination.rglob("*") if p.is_file()}

    result = _mirror(_requirements(tmp_path, source, wrong_hash_for="torchfake"), destination, source)

    assert result.returncode == 1
    last = result.stderr.splitlines()[-1]
    assert last.startswith("patched-wheels: error: ") and "requirements.txt: pip download failed" in last
    assert "DO NOT MATCH THE HASHES" in result.stderr  # pip's own explanation is shown above
    assert {p: p.read_bytes() for p in destination.rglob("*") if p.is_file()} == before
    assert not list(destination.glob(".*.tmp"))


def test_a_download_the_index_refuses_is_taken_out_again(tmp_path: Path) -> None:
    """pip downloads a wheel whose RECORD misses a member (pip does not check); indexing refuses it."""
    links = tmp_path / "links"
    links.mkdir()
    bad = make_wheel(links, "badfake-1.0-py3-none-any.whl")
    with zipfile.ZipFile(bad, "a") as archive:
        archive.writestr("badfake/unlisted.py", b"")
    destination = tmp_path / "mirror"
    destination.mkdir()
    make_wheel(destination, "kept-1.0-py3-none-any.whl")
    build_index(destination)
    before = {p: p.read_bytes() for p in destination.rglob("*") if p.is_file()}
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"badfake==1.0 --hash=sha256:{sha256_of(bad)}\n")

    result = run_cli(
        "mirror", "-r", str(requirements), str(destination), "--", "--no-index", f"--find-links={links}", env=pip_env()
    )

    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "patched-wheels: error: badfake-1.0-py3-none-any.whl: badfake-1.0.dist-info/RECORD: does not list badfake/unlisted.py"
    )
    assert {p: p.read_bytes() for p in destination.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in destination.iterdir()) == [
        "kept-1.0-py3-none-any.whl",
        "kept-1.0-py3-none-any.whl.metadata",
        "simple",
    ]


@pytest.mark.parametrize(
    ("kind", "option"), [("fifo", "-r"), ("fifo", "-c"), ("dev-zero-link", "-c"), ("dev-zero-link", "--requirement")]
)
def test_a_lock_including_a_file_is_refused_before_pip_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str, option: str
) -> None:
    """pip would follow the include: a FIFO blocks it for ever, /dev/zero never ends. The lock is read as
    ``lock`` reads it, and refused as ``lock`` refuses it, before DIR is touched."""
    make_special_file(kind, tmp_path / "included")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"# a lock\n{option} included\n")
    destination = tmp_path / "mirror"

    def no_pip(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"pip started: {args}")

    monkeypatch.setattr(subprocess, "run", no_pip)
    status = main(["mirror", "-r", str(requirements), str(destination), "--", "--no-index"])

    assert (status, capsys.readouterr().err) == (
        1,
        f"patched-wheels: error: {requirements}:2: {option} included: included files are not followed; "
        "put their lines into this lock\n",
    )
    assert not destination.exists()


def test_a_lock_including_a_file_is_one_error_line(tmp_path: Path) -> None:
    """Through the command line: one error line naming the lock's line, nothing left in DIR (an included regular
    file, which pip would follow at once, so that the old behaviour fails fast instead of hanging)."""
    (tmp_path / "included.txt").write_text("other==1.0\n")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("-r included.txt\n")
    destination = tmp_path / "mirror"
    destination.mkdir()

    result = run_cli("mirror", "-r", str(requirements), str(destination), "--", "--no-index", env=pip_env())

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"patched-wheels: error: {requirements}:1: -r included.txt: included files are not followed; "
        "put their lines into this lock"
    ]
    assert list(destination.iterdir()) == []


def test_a_lock_that_is_no_regular_file_is_refused_before_pip_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    requirements = tmp_path / "requirements.txt"
    make_special_file("fifo", requirements)
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: pytest.fail("pip started"))

    assert main(["mirror", "-r", str(requirements), str(tmp_path / "mirror")]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"patched-wheels: error: {requirements}: ") and "not a lock we read" in line
    assert not (tmp_path / "mirror").exists()
