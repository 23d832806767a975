"""Direct references in every lock format: each keeps its source's integrity when it is written again (a VCS
commit, an archive's hashes), and a patched project pinned to anything but a wheel (a directory, an sdist, a
VCS checkout, an editable install) is refused by one rule, whichever reader read it
(``lock.model.reference_version``). In memory and on small files; what real pip and uv make of the locks is
tested in test_apply.py and test_uvlock.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from packaging.tags import parse_tag
from packaging.version import Version

from patched_wheels.errors import InvalidLockError
from patched_wheels.index.simple import IndexedFile
from patched_wheels.lock.formats.pipwriter import render_exported
from patched_wheels.lock.formats.pylock import read_pylock
from patched_wheels.lock.formats.requirements import parse_requirements
from patched_wheels.lock.formats.uvlock import read_uv_lock
from patched_wheels.lock.model import Lock
from patched_wheels.lock.plan import LockOptions, plan_lock

COMMIT = "0123456789abcdef0123456789abcdef01234567"
A = "a" * 64
PWU = IndexedFile(
    "pwu-1.0+s.1-py3-none-any.whl",
    "pwu",
    Version("1.0+s.1"),
    frozenset(parse_tag("py3-none-any")),
    hashlib.sha256(b"pwu").hexdigest(),
    None,
    b"Metadata-Version: 2.1\nName: pwu\nVersion: 1.0+s.1\n",
)


def planned(lock: Lock) -> str:
    """The requirements lock written from ``lock`` for an index holding the patched pwu."""
    return "".join(render_exported(lock, plan_lock(lock, [PWU], LockOptions(index_dir=Path("/idx")))))


def pylock(tmp_path: Path, *packages: str) -> Lock:
    path = tmp_path / "pylock.toml"
    path.write_text(
        'lock-version = "1.0"\ncreated-by = "test"\n' + "".join(f"\n[[packages]]\n{p}\n" for p in packages),
        encoding="utf-8",
    )
    return read_pylock(path, {})


def test_a_pylock_vcs_entry_keeps_its_vcs_and_commit(tmp_path: Path) -> None:
    """It was written ``other @ https://g.example/other.git``: no ``git+`` (pip downloads the URL as a file) and
    no commit (it follows whatever the branch holds)."""
    lock = pylock(
        tmp_path,
        f'name = "other"\nversion = "2.0"\nvcs = {{ type = "git", url = "https://g.example/other.git", '
        f'requested-revision = "main", commit-id = "{COMMIT}", subdirectory = "python" }}',
    )
    assert f"other @ git+https://g.example/other.git@{COMMIT}#subdirectory=python\n" in planned(lock)


def test_a_pylock_vcs_entry_without_a_commit_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidLockError, match=r"pylock\.toml:4: package 'other': vcs: 'commit-id' is missing$"):
        pylock(tmp_path, 'name = "other"\nvcs = { type = "git", url = "https://g.example/other.git" }')


def test_a_pylock_archive_entry_keeps_its_hashes(tmp_path: Path) -> None:
    lock = pylock(
        tmp_path,
        f'name = "other"\nversion = "2.0"\narchive = {{ url = "https://h.example/other-2.0.tar.gz", hashes = {{ sha256 = "{A}" }} }}',
    )
    assert f"other @ https://h.example/other-2.0.tar.gz \\\n    --hash=sha256:{A}\n" in planned(lock)


@pytest.mark.parametrize(
    ("entry", "url"),
    [
        ('directory = { path = "src/pwu" }', "file://{root}/src/pwu"),
        (
            f'sdist = {{ url = "https://h.example/pwu-1.0.tar.gz", hashes = {{ sha256 = "{A}" }} }}',
            "https://h.example/pwu-1.0.tar.gz",
        ),
        (
            f'vcs = {{ type = "git", url = "https://g.example/pwu.git", commit-id = "{COMMIT}" }}',
            f"git+https://g.example/pwu.git@{COMMIT}",
        ),
        (
            f'archive = {{ url = "https://h.example/pwu-1.0.zip", hashes = {{ sha256 = "{A}" }} }}',
            "https://h.example/pwu-1.0.zip",
        ),
    ],
    ids=["directory", "sdist", "vcs", "archive-sdist"],
)
def test_a_patched_project_from_a_pylock_source_is_refused_as_in_a_requirements_lock(
    tmp_path: Path, entry: str, url: str
) -> None:
    """docs/locks.md: a direct reference of a patched project to an sdist or a directory is one error line; it
    was silently replaced by the patched wheel when read from a pylock.toml. The same words as the requirements
    reader's: one rule."""
    url = url.format(root=tmp_path)
    with pytest.raises(InvalidLockError) as from_pylock:
        planned(pylock(tmp_path, f'name = "pwu"\nversion = "1.0"\n{entry}'))
    with pytest.raises(InvalidLockError) as from_requirements:
        planned(parse_requirements(f"pwu @ {url}\n", "in.txt").lock)
    assert (
        str(from_pylock.value)
        == f"{tmp_path / 'pylock.toml'}:4: pwu @ {url}: names no wheel file, so its version is unknown"
    )
    assert str(from_requirements.value) == f"in.txt:1: pwu @ {url}: names no wheel file, so its version is unknown"


def test_a_pylock_archive_of_a_wheel_is_the_pin_of_its_version(tmp_path: Path) -> None:
    wheel = "https://h.example/pwu-1.0-py3-none-any.whl"
    lock = pylock(
        tmp_path, f'name = "pwu"\nversion = "1.0"\narchive = {{ url = "{wheel}", hashes = {{ sha256 = "{A}" }} }}'
    )
    assert f"pwu @ file:///idx/{PWU.filename} \\\n    --hash=sha256:{PWU.sha256}\n" in planned(lock)


@pytest.mark.parametrize("option", ["-e ", "--editable=", "--editable ", "-e"])
def test_an_editable_install_of_the_patched_project_is_refused(option: str) -> None:
    """``-e git+…#egg=pwu`` was an option line: it stayed, and the patched pwu was added beside it."""
    text = f"other==2.0\n{option}git+https://g.example/pwu.git@{COMMIT}#egg=pwu\n"
    with pytest.raises(
        InvalidLockError,
        match=rf"^in\.txt:2: pwu @ git\+https://g\.example/pwu\.git@{COMMIT}#egg=pwu: names no wheel file",
    ):
        planned(parse_requirements(text, "in.txt").lock)


def test_an_editable_install_of_another_project_stays_and_adds_nothing() -> None:
    from patched_wheels.lock.formats.pipwriter import render_requirements

    text = f"pwu==1.0\n-e git+https://g.example/other.git@{COMMIT}#egg=other\n-e ./local\n"
    requirements = parse_requirements(text, "in.txt")
    written = render_requirements(
        requirements, plan_lock(requirements.lock, [PWU], LockOptions(index_dir=Path("/idx")))
    )
    assert written == f"pwu @ file:///idx/{PWU.filename}#sha256={PWU.sha256}\n" + text.split("\n", 1)[1]


def uv_lock(tmp_path: Path, *packages: str) -> Path:
    path = tmp_path / "uv.lock"
    path.write_text(
        'version = 1\nrequires-python = ">=3.9"\n' + "".join(f"\n[[package]]\n{p}\n" for p in packages),
        encoding="utf-8",
    )
    return path


def test_two_spellings_of_one_project_in_a_uv_lock_are_one_error(tmp_path: Path) -> None:
    """Both were pinned and both rewritten: two pins of pwu in the lock written."""
    registry = 'source = { registry = "https://pypi.org/simple" }'
    path = uv_lock(tmp_path, f'name = "pwu"\nversion = "1.0"\n{registry}', f'name = "PWU"\nversion = "1.1"\n{registry}')
    with pytest.raises(
        InvalidLockError,
        match=r"uv\.lock:9: package 'PWU': a second spelling of pwu \(the first, 'pwu', is at line 4\)$",
    ):
        read_uv_lock(path, {})


def test_a_uv_lock_git_source_keeps_its_commit(tmp_path: Path) -> None:
    """uv writes ``URL?rev=…#COMMIT``; ``git+`` that, as it was, is a URL pip checks out at the branch."""
    source = f'source = {{ git = "https://g.example/other.git?subdirectory=python&rev=main#{COMMIT}" }}'
    lock = read_uv_lock(uv_lock(tmp_path, f'name = "other"\nversion = "2.0"\n{source}'), {}).lock
    assert f"other @ git+https://g.example/other.git@{COMMIT}#subdirectory=python\n" in planned(lock)
    with pytest.raises(
        InvalidLockError,
        match=r"uv\.lock:4: package 'other': git source 'https://g\.example/other\.git\?rev=main' names no commit",
    ):
        read_uv_lock(
            uv_lock(
                tmp_path, 'name = "other"\nversion = "2.0"\nsource = { git = "https://g.example/other.git?rev=main" }'
            ),
            {},
        )


@pytest.mark.parametrize(
    "url",
    [
        "https://g.example/other.git@attacker-branch#",
        "https://g.example/other.git#egg=x",
        "https://g.example/a@b/c.git",
        "https://g.example/o/r.git?ref=main",  # the commit written after it lands in the query: pip sees no revision
    ],
    ids=["branch-and-fragment", "fragment", "at-in-path", "query"],
)
def test_a_pylock_vcs_url_that_would_name_another_revision_is_one_error(tmp_path: Path, url: str) -> None:
    """pip takes the revision from the last '@' of the path and drops what follows a '#': written
    ``git+URL@COMMIT``, such a URL checked out the branch and never the commit-id."""
    with pytest.raises(
        InvalidLockError,
        match=r"pylock\.toml:4: package .other.: vcs: vcs url .*another revision than the commit-id, or none",
    ):
        pylock(tmp_path, f'name = "other"\nvcs = {{ type = "git", url = "{url}", commit-id = "{COMMIT}" }}')
