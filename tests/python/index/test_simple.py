"""The simple index, checked against the PEPs it implements and against the real pip."""

from __future__ import annotations

import hashlib
import html.parser
import json
import os
import shutil
import stat
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest

from patched_wheels.errors import InvalidWheelError
from patched_wheels.index import simple as index_module
from patched_wheels.index.simple import build_index
from support.hostile import count_read_bytes, make_special_file
from support.indexfixtures import make_wheel, run_cli, run_pip, sha256_of, wheel_metadata

# (file name, project page, pip requirement): one of each kind pip2pi gets wrong.
WHEELS = {
    "build_tag": ("tritonfake-2.1.0-0-py3-none-any.whl", "tritonfake", "tritonfake==2.1.0"),
    "local_version": ("torchfake-2.1.0+stripe.5-py3-none-any.whl", "torchfake", "torchfake==2.1.0+stripe.5"),
    "odd_name": ("Odd_Name.Pkg-3.0-py3-none-any.whl", "odd-name-pkg", "ODD.name-pkg==3.0"),
    "requires_python": ("pyreq-1.0-py3-none-any.whl", "pyreq", "pyreq==1.0"),
}
REQUIRES_PYTHON = ">=3.8, <4, !=3.7.*"


class _Anchors(html.parser.HTMLParser):
    """Collect <a> attributes and <meta> tags: pages are checked as HTML, not as strings."""

    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[dict[str, str]] = []
        self.meta: list[dict[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.anchors.append({k: v or "" for k, v in attrs})
        elif tag == "meta":
            self.meta.append({k: v or "" for k, v in attrs})


def _parse(page: Path) -> _Anchors:
    parser = _Anchors()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def _make_index_dir(directory: Path) -> Path:
    directory.mkdir()
    for key, (filename, _project, _req) in WHEELS.items():
        make_wheel(directory, filename, requires_python=REQUIRES_PYTHON if key == "requires_python" else None)
    return directory


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()
    }


def test_pages_follow_pep_503_629_658_714(tmp_path: Path) -> None:
    directory = _make_index_dir(tmp_path / "wheels")
    (directory / "sdistfake-0.5.tar.gz").write_bytes(b"not inspected, only linked")
    (directory / "notes.txt").write_text("ignored")

    result = build_index(directory)

    assert result.hashed == len(WHEELS) + 1
    simple = directory / "simple"
    root = _parse(simple / "index.html")
    expected_projects = sorted([project for _f, project, _r in WHEELS.values()] + ["sdistfake"])
    assert [a["href"] for a in root.anchors] == [f"{p}/" for p in expected_projects]
    assert root.meta == [{"name": "pypi:repository-version", "content": "1.0"}]

    for key, (filename, project, _req) in WHEELS.items():
        page = simple / project / "index.html"
        parsed = _parse(page)
        assert parsed.meta == [{"name": "pypi:repository-version", "content": "1.0"}]
        (anchor,) = parsed.anchors
        url, _, fragment = anchor["href"].partition("#")
        assert "+" not in url
        target = Path(unquote(urlsplit(urljoin(page.as_uri(), url)).path))
        assert target == directory / filename
        wheel_hash = sha256_of(directory / filename)
        assert fragment == f"sha256={wheel_hash}"
        metadata_file = directory / (filename + ".metadata")
        assert metadata_file.read_bytes() == wheel_metadata(directory / filename)
        metadata_hash = hashlib.sha256(metadata_file.read_bytes()).hexdigest()
        assert anchor["data-core-metadata"] == f"sha256={metadata_hash}"
        assert anchor["data-dist-info-metadata"] == f"sha256={metadata_hash}"
        if key == "requires_python":
            # the parser unescaped it: the raw page must hold the escaped form
            assert anchor["data-requires-python"] == REQUIRES_PYTHON
            assert 'data-requires-python="&gt;=3.8, &lt;4, !=3.7.*"' in page.read_text()
        else:
            assert "data-requires-python" not in anchor
    (sdist,) = _parse(simple / "sdistfake" / "index.html").anchors
    assert sdist["href"] == f"../../sdistfake-0.5.tar.gz#sha256={sha256_of(directory / 'sdistfake-0.5.tar.gz')}"
    assert "data-core-metadata" not in sdist
    assert not [p for p in directory.rglob("*") if p.is_symlink()]


@pytest.mark.parametrize("kind", sorted(WHEELS))
def test_pip_downloads_from_the_index(tmp_path: Path, kind: str) -> None:
    directory = _make_index_dir(tmp_path / "wheels")
    build_index(directory)
    filename, _project, requirement = WHEELS[kind]
    out = tmp_path / "out"
    result = run_pip(
        "download", "--no-deps", "--index-url", (directory / "simple").as_uri(), "-d", str(out), requirement
    )
    assert result.returncode == 0, result.stderr
    assert [p.name for p in out.iterdir()] == [filename]
    assert (out / filename).read_bytes() == (directory / filename).read_bytes()


def test_pip_checks_the_fragment_hash_of_a_changed_wheel(tmp_path: Path) -> None:
    """The #sha256 fragments are live: pip refuses a wheel changed since indexing, and accepts
    it once re-indexing has rehashed it."""
    directory = _make_index_dir(tmp_path / "wheels")
    build_index(directory)
    filename, _project, requirement = WHEELS["build_tag"]
    make_wheel(directory, filename, payload="VALUE = 'changed'\n")
    index_url = (directory / "simple").as_uri()
    stale = run_pip("download", "--no-deps", "--index-url", index_url, "-d", str(tmp_path / "a"), requirement)
    assert stale.returncode != 0 and "DO NOT MATCH THE HASHES" in stale.stderr
    assert build_index(directory).hashed == 1
    fresh = run_pip("download", "--no-deps", "--index-url", index_url, "-d", str(tmp_path / "b"), requirement)
    assert fresh.returncode == 0, fresh.stderr


def test_pip_skips_a_release_by_data_requires_python(tmp_path: Path) -> None:
    """pyreq 2.0 needs Python < 3; its wheel and .metadata are deleted, so pip can only pick
    1.0 without error if it filtered 2.0 by the page's data-requires-python."""
    directory = tmp_path / "wheels"
    directory.mkdir()
    make_wheel(directory, "pyreq-1.0-py3-none-any.whl", requires_python=">=3.8")
    make_wheel(directory, "pyreq-2.0-py3-none-any.whl", requires_python="<3")
    build_index(directory)
    for path in directory.glob("pyreq-2.0-*"):
        path.unlink()
    result = run_pip("download", "--index-url", (directory / "simple").as_uri(), "-d", str(tmp_path / "out"), "pyreq")
    assert result.returncode == 0, result.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["pyreq-1.0-py3-none-any.whl"]


def test_pip_resolves_from_metadata_files_without_the_wheel(tmp_path: Path) -> None:
    """appfake 2.0 needs a project that does not exist, so pip must read its metadata, reject it
    and fall back to 1.0. The 2.0 wheel itself is deleted: resolving can only succeed if pip
    takes the dependencies from the PEP 658 ``.metadata`` file."""
    directory = tmp_path / "wheels"
    directory.mkdir()
    make_wheel(directory, "appfake-1.0-py3-none-any.whl")
    make_wheel(directory, "appfake-2.0-py3-none-any.whl", requires_dist=["missingfake>=1"])
    build_index(directory)
    (directory / "appfake-2.0-py3-none-any.whl").unlink()
    index_url = (directory / "simple").as_uri()

    result = run_pip("download", "-v", "--index-url", index_url, "-d", str(tmp_path / "out"), "appfake")

    assert result.returncode == 0, result.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["appfake-1.0-py3-none-any.whl"]
    assert "appfake-2.0-py3-none-any.whl.metadata" in result.stdout

    # Control: without the metadata attributes pip has to fetch the missing wheel, and fails.
    page = directory / "simple" / "appfake" / "index.html"
    text = page.read_text()
    for attribute in ("data-core-metadata", "data-dist-info-metadata"):
        text = text.replace(f' {attribute}="', f' data-x-{attribute}="')
    page.write_text(text)
    control = run_pip("download", "--index-url", index_url, "-d", str(tmp_path / "control"), "appfake")
    assert control.returncode != 0


def test_output_is_deterministic(tmp_path: Path) -> None:
    first = _make_index_dir(tmp_path / "first")
    build_index(first)
    before = _snapshot(first)
    shutil.rmtree(first / "simple")
    for metadata in first.glob("*.metadata"):
        metadata.unlink()
    build_index(first)
    after = _snapshot(first)
    cache = "simple/.patched-wheels-cache.json"
    assert {k: v for k, v in after.items() if k != cache} == {k: v for k, v in before.items() if k != cache}

    second = tmp_path / "second"
    second.mkdir()
    for wheel in sorted(first.glob("*.whl"), reverse=True):  # other order, other mtimes
        shutil.copyfile(wheel, second / wheel.name)
    build_index(second)
    assert {k: v for k, v in _snapshot(second).items() if k != cache} == {k: v for k, v in after.items() if k != cache}


def test_incremental_run_reads_only_changed_wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = _make_index_dir(tmp_path / "wheels")
    reads: list[str] = []
    real_hash, real_metadata = index_module.hash_file, index_module.read_wheel_metadata
    monkeypatch.setattr(index_module, "hash_file", lambda p: reads.append(f"hash {p.name}") or real_hash(p))
    monkeypatch.setattr(
        index_module, "read_wheel_metadata", lambda p: reads.append(f"zip {p.name}") or real_metadata(p)
    )

    assert build_index(directory).hashed == len(WHEELS)
    assert len(reads) == 2 * len(WHEELS)
    pages = _snapshot(directory / "simple")

    reads.clear()
    assert build_index(directory).hashed == 0
    assert reads == []
    assert _snapshot(directory / "simple") == pages

    # Same size, new content and mtime: must be rehashed, and only it.
    filename, project, _req = WHEELS["local_version"]
    make_wheel(directory, filename, payload="VALUE = 7\n")
    assert build_index(directory).hashed == 1
    assert sorted(reads) == [f"hash {filename}", f"zip {filename}"]
    assert f"#sha256={sha256_of(directory / filename)}" in (directory / "simple" / project / "index.html").read_text()

    # A lost .metadata file is re-extracted from its wheel.
    reads.clear()
    other, _, _ = WHEELS["odd_name"]
    (directory / f"{other}.metadata").unlink()
    assert build_index(directory).hashed == 1
    assert sorted(reads) == [f"hash {other}", f"zip {other}"]
    assert (directory / f"{other}.metadata").read_bytes() == wheel_metadata(directory / other)


def test_removed_wheels_leave_the_index(tmp_path: Path) -> None:
    directory = _make_index_dir(tmp_path / "wheels")
    build_index(directory)
    filename, project, _req = WHEELS["build_tag"]
    (directory / filename).unlink()
    build_index(directory)
    assert not (directory / "simple" / project).exists()
    assert not (directory / f"{filename}.metadata").exists()
    assert f'href="{project}/"' not in (directory / "simple" / "index.html").read_text()


@pytest.mark.parametrize(
    "bad_file, setup",
    [
        ("broken-1.0-py3-none-any.whl", lambda d: (d / "broken-1.0-py3-none-any.whl").write_bytes(b"PK junk")),
        ("foo.whl", lambda d: (d / "foo.whl").write_bytes(b"")),
        ("foo-1.0-py3.whl", lambda d: (d / "foo-1.0-py3.whl").write_bytes(b"")),
        ("foo-one-py3-none-any.whl", lambda d: (d / "foo-one-py3-none-any.whl").write_bytes(b"")),
        ("TritonFake-2.1.0-py3-none-any.whl", lambda d: make_wheel(d, "TritonFake-2.1.0-py3-none-any.whl")),
        ("tritonfake-2.1.0-1-py3-none-any.whl", lambda d: make_wheel(d, "tritonfake-2.1.0-1-py3-none-any.whl")),
        ("liar-1.0-py3-none-any.whl", lambda d: make_wheel(d, "liar-1.0-py3-none-any.whl", metadata_name="other")),
        ("foo bar-1.0.tar.gz", lambda d: (d / "foo bar-1.0.tar.gz").write_bytes(b"")),
        ("foo_-1.0-py3-none-any.whl", lambda d: make_wheel(d, "foo_-1.0-py3-none-any.whl")),  # a wheel pip refuses
        ("\u017fx-1.0.zip", lambda d: (d / "\u017fx-1.0.zip").write_bytes(b"")),
        ("outside-1.0-py3-none-any.whl", lambda d: _link_from_outside(d, "outside-1.0-py3-none-any.whl")),
    ],
    ids=[
        "not-a-zip",
        "no-parts",
        "too-few-parts",
        "bad-version",
        "duplicate-name",
        "duplicate-build",
        "metadata-name",
        "sdist-invalid-name",
        "wheel-invalid-name",
        "non-ascii-name",
        "link-outside",
    ],
)
def test_bad_input_is_one_error_and_leaves_the_index_intact(tmp_path: Path, bad_file: str, setup) -> None:
    directory = _make_index_dir(tmp_path / "wheels")
    build_index(directory)
    before = _snapshot(directory)
    setup(directory)

    result = run_cli("index", str(directory))

    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("patched-wheels: error: ") and bad_file in line
    after = _snapshot(directory)
    after.pop(bad_file)
    assert after == before
    with pytest.raises(InvalidWheelError):
        build_index(directory)


def _link_from_outside(directory: Path, filename: str) -> None:
    elsewhere = directory.parent / "elsewhere"
    elsewhere.mkdir()
    (directory / filename).symlink_to(make_wheel(elsewhere, filename))


def test_a_link_to_a_file_inside_the_directory_is_indexed(tmp_path: Path) -> None:
    directory = tmp_path / "wheels"
    (directory / "store").mkdir(parents=True)
    target = make_wheel(directory / "store", "linked-1.0-py3-none-any.whl")
    (directory / target.name).symlink_to(target)
    assert [indexed.filename for indexed in build_index(directory).files] == [target.name]


def test_a_failure_midway_leaves_the_whole_index_as_it_was(tmp_path: Path) -> None:
    """New wheels, a changed one and a stale page, and the last .metadata cannot be written: nothing moves."""
    directory = _make_index_dir(tmp_path / "wheels")
    build_index(directory)
    (directory / WHEELS["build_tag"][0]).unlink()  # its page and .metadata are stale now
    make_wheel(directory, "aaa-1.0-py3-none-any.whl")
    make_wheel(directory, WHEELS["local_version"][0], payload="VALUE = 7\n")
    make_wheel(directory, "zzz-1.0-py3-none-any.whl")
    before = _snapshot(directory)
    (directory / "zzz-1.0-py3-none-any.whl.metadata" / "in-the-way").mkdir(parents=True)

    result = run_cli("index", str(directory))

    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line == (
        f"patched-wheels: error: {directory}/zzz-1.0-py3-none-any.whl.metadata: in the way of the index (a link, or not a file)"
    )
    assert _snapshot(directory) == before
    assert sorted(path.name for path in directory.iterdir() if path.name.startswith(".")) == []


def test_a_stale_metadata_name_that_is_a_directory_stops_the_index_before_anything_moves(tmp_path: Path) -> None:
    """Stale .metadata files are removed after the switch: a directory there failed then, every run, with the new
    pages already published (and ``lock`` on that DIR never got past it)."""
    directory = tmp_path / "wheels"
    directory.mkdir()
    make_wheel(directory, "foo-1.0-py3-none-any.whl")
    (directory / "bar-1.0-py3-none-any.whl.metadata").mkdir()  # no bar wheel: a stale name

    result = run_cli("index", str(directory))

    assert result.returncode == 1
    assert result.stderr == (
        f"patched-wheels: error: {directory}/bar-1.0-py3-none-any.whl.metadata: in the way of the index (a directory "
        "where its stale file goes)\n"
    )
    assert sorted(path.name for path in directory.iterdir()) == [
        "bar-1.0-py3-none-any.whl.metadata",
        "foo-1.0-py3-none-any.whl",
    ]


def test_a_lying_hash_cache_carried_with_a_copied_tree_is_not_believed(tmp_path: Path) -> None:
    """A tree copied with its mtimes (``cp -p``, ``tar``, ``rsync -t``, a CI cache restored, a commit checked out)
    whose cache file lies: other hashes, and a ``.metadata`` of another dependency. Its files have new inodes,
    so they are hashed again and their METADATA read again; size and mtime alone matched."""
    source = tmp_path / "source"
    source.mkdir()
    wheel = make_wheel(source, "demo-1.0-py3-none-any.whl")
    build_index(source)
    cache_file = source / "simple" / index_module.CACHE_FILE
    document = json.loads(cache_file.read_text(encoding="utf-8"))
    forged = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\nRequires-Dist: evil\n"
    (source / f"{wheel.name}.metadata").write_bytes(forged)
    document["files"][wheel.name].update(
        sha256="0" * 64, metadata_sha256=hashlib.sha256(forged).hexdigest(), requires_python=">=9"
    )
    cache_file.write_text(json.dumps(document), encoding="utf-8")
    copied = tmp_path / "copied"
    shutil.copytree(source, copied, copy_function=shutil.copy2)  # mtimes kept, as the tools above keep them

    (indexed,) = build_index(copied).files

    assert (indexed.sha256, indexed.requires_python) == (sha256_of(copied / wheel.name), None)
    assert (copied / f"{wheel.name}.metadata").read_bytes() == wheel_metadata(copied / wheel.name)
    assert "0" * 64 not in (copied / "simple" / "demo" / "index.html").read_text(encoding="utf-8")


def test_an_unchanged_tree_is_not_hashed_again(tmp_path: Path) -> None:
    directory = _make_index_dir(tmp_path / "wheels")
    assert build_index(directory).hashed == len(WHEELS)
    assert build_index(directory).hashed == 0


@pytest.mark.parametrize(
    "cache",
    [
        b"\xff\xfe not json",
        b"[" * 100_000,
        b'{"format": 1, "files": []}',
        b"{}",
        "corrupt entries",
    ],
    ids=["binary", "deeply-nested", "files-not-a-mapping", "no-format", "corrupt-entries"],
)
def test_a_corrupted_hash_cache_is_rebuilt(tmp_path: Path, cache: bytes | str) -> None:
    directory = _make_index_dir(tmp_path / "wheels")
    build_index(directory)
    expected = _snapshot(directory / "simple")
    cache_file = directory / "simple" / index_module.CACHE_FILE
    if cache == "corrupt entries":
        entries = json.loads(cache_file.read_text())
        for number, entry in enumerate(entries["files"].values()):
            entry[["requires_python", "sha256", "sha256", "metadata_sha256"][number % 4]] = [5, "zz", None, 3][
                number % 4
            ]
        cache = json.dumps(entries).encode()
    cache_file.write_bytes(cache)

    result = run_cli("index", str(directory))

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(f"({len(WHEELS)} hashed)")  # nothing trusted
    assert _snapshot(directory / "simple") == expected


def test_cli_reports_what_it_did(tmp_path: Path) -> None:
    directory = _make_index_dir(tmp_path / "wheels")
    first = run_cli("index", str(directory))
    second = run_cli("index", str(directory))
    assert first.returncode == second.returncode == 0
    assert first.stdout.strip().endswith(
        f"{len(WHEELS)} files of {len(WHEELS)} projects ({len(WHEELS)} hashed)"
    )  # several: plural
    assert second.stdout.strip().endswith("(0 hashed)")


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("link-loop", "cannot be read (Too many levels of symbolic links)"),
        ("dangling-link", "cannot be read (No such file or directory)"),
        ("dev-zero-link", "a link to /dev/zero, outside {directory}; copy the file in"),
        ("fifo", "not a regular file (a FIFO); a distribution must be one"),
        ("socket", "not a regular file (a socket); a distribution must be one"),
        ("directory", "not a regular file (a directory); a distribution must be one"),
        ("device", "not a regular file (a device); a distribution must be one"),
    ],
)
def test_a_distribution_name_that_is_no_regular_file_is_one_error(tmp_path: Path, kind: str, reason: str) -> None:
    directory = _make_index_dir(tmp_path / "wheels")
    build_index(directory)
    before = _snapshot(directory)
    path = directory / "x-1.0-py3-none-any.whl"
    make_special_file(kind, path)

    result = run_cli("index", str(directory))

    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [f"patched-wheels: error: {path}: {reason.format(directory=directory)}"]
    assert _snapshot(directory) == before


@pytest.mark.parametrize(
    "kind",
    ["link-loop", "dev-zero-link", "fifo", "socket", "directory", "nested", "huge", "group-writable", "foreign-owner"],
)
def test_a_hostile_hash_cache_is_a_miss_with_one_warning(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = _make_index_dir(tmp_path / "wheels")
    build_index(directory)
    expected = _snapshot(directory / "simple")
    cache_file = directory / "simple" / index_module.CACHE_FILE
    cache_file.unlink()
    if kind == "nested":
        cache_file.write_bytes(b"[" * 200_000)
    elif kind == "huge":
        with open(cache_file, "wb") as stream:
            stream.truncate(150 << 20)  # sparse
    elif kind == "group-writable":
        cache_file.write_bytes(expected[index_module.CACHE_FILE])
        cache_file.chmod(0o664)
    elif kind == "foreign-owner":
        cache_file.write_bytes(expected[index_module.CACHE_FILE])
        if os.geteuid() != 0:
            pytest.skip("chown to another uid needs root; cache.py's test of the decision covers the rest")
        os.chown(cache_file, 12345, -1)
    else:
        make_special_file(kind, cache_file)
    read_bytes = count_read_bytes(monkeypatch)
    capsys.readouterr()

    result = build_index(directory)

    assert result.hashed == len(WHEELS)  # nothing trusted
    (warning,) = capsys.readouterr().err.splitlines()
    assert warning.startswith(f"patched-wheels: warning: {cache_file}: cache file ignored (")
    assert sum(read_bytes) < 1 << 20  # the 150 MB file was refused by its size, not read
    assert _snapshot(directory / "simple") == expected  # rewritten, regular and ours
    assert build_index(directory).hashed == 0
    assert capsys.readouterr().err == ""


def test_a_hash_cache_in_a_world_writable_directory_is_not_believed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _make_index_dir(tmp_path / "wheels")
    build_index(directory)
    (directory / "simple").chmod(0o777)
    capsys.readouterr()
    assert build_index(directory).hashed == len(WHEELS)
    assert capsys.readouterr().err.splitlines() == [
        f"patched-wheels: warning: {directory / 'simple'}: cache directory not read (the directory is writable by group or others (mode 0777))"
    ]
    assert stat.S_IMODE((directory / "simple").stat().st_mode) == 0o755  # published as the index publishes it
    assert build_index(directory).hashed == 0


def _stamps(directory: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime) of every file and directory under ``directory`` and of itself: a rewrite changes one."""
    paths = [directory, *sorted(directory.rglob("*"))]
    return {str(path.relative_to(directory)): (path.stat().st_ino, path.stat().st_mtime_ns) for path in paths}


def test_a_warm_run_writes_nothing(tmp_path: Path) -> None:
    directory = _make_index_dir(tmp_path / "wheels")
    build_index(directory)
    before = _stamps(directory)
    build_index(directory)
    assert _stamps(directory) == before


def test_concurrent_runs_on_one_directory_succeed(tmp_path: Path) -> None:
    """Each run switches simple/ by renames: two at once took turns renaming one tree and failed."""
    import subprocess
    import sys

    directory = _make_index_dir(tmp_path / "wheels")
    for round_ in range(3):
        make_wheel(directory, f"extra{round_}-1.0-py3-none-any.whl")  # every run has pages to write
        command = [sys.executable, "-m", "patched_wheels", "index", str(directory)]
        runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
        for run in runs:
            _, err = run.communicate(timeout=120)
            assert run.returncode == 0, err
        assert f"extra{round_}/" in (directory / "simple" / "index.html").read_text()
