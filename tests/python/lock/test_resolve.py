"""Choosing each pin's wheel (URL, sha256) from PEP 503 pages, as the Bazel rules do before fetching."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Sequence

import pytest
from packaging.tags import Tag
from packaging.utils import canonicalize_name

from patched_wheels.base.cache import CacheContext
from patched_wheels.cli import main
from patched_wheels.errors import InvalidLockError
from patched_wheels.lock import resolve as resolve_module
from patched_wheels.lock.resolve import RECORD_KIND, IndexPages, page_url, parse_project_page, resolve

INDEX = "https://example.invalid/simple"
LINUX = [
    Tag("cp311", "cp311", "manylinux_2_17_x86_64"),
    Tag("cp311", "cp311", "manylinux1_x86_64"),
    Tag("py3", "none", "any"),
]


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's helper cache is its own: `resolve` records what pages taught there."""
    root = tmp_path / "cache"
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(root))
    return root


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write_page(pages: Path, project: str, files: dict[str, str]) -> None:
    """A PyPI-like page: absolute and relative links, each with a #sha256 fragment."""
    pages.mkdir(exist_ok=True)
    links = "".join(
        f'<a href="{href}#sha256={sha}" data-requires-python="&gt;=3.8">{href.rsplit("/", 1)[-1]}</a>\n'
        for href, sha in files.items()
    )
    (pages / f"{project}.html").write_text(f"<!DOCTYPE html><html><body>{links}</body></html>", encoding="utf-8")


@pytest.fixture
def torch_page(tmp_path: Path) -> Path:
    write_page(
        tmp_path / "pages",
        "torch",
        {
            "https://files.example.invalid/aa/torch-2.1.0-cp311-cp311-win_amd64.whl": digest("win"),
            "https://files.example.invalid/bb/torch-2.1.0-cp311-cp311-manylinux1_x86_64.whl": digest("linux"),
            "https://files.example.invalid/cc/torch-2.1.0-cp310-cp310-manylinux1_x86_64.whl": digest("cp310"),
            "../../files/torch-2.1.0.tar.gz": digest("sdist"),
        },
    )
    return tmp_path / "pages"


def lock(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "requirements_lock.txt"
    path.write_text(text, encoding="utf-8")
    return path


def test_picks_the_wheel_whose_hash_is_locked_and_whose_tags_match(tmp_path: Path, torch_page: Path) -> None:
    requirements = lock(
        tmp_path,
        f"torch==2.1.0 \\\n    --hash=sha256:{digest('win')} \\\n    --hash=sha256:{digest('linux')} \\\n    --hash=sha256:{digest('cp310')}\n",
    )
    [wheel] = resolve(requirements, IndexPages(torch_page, INDEX), tags=LINUX)
    assert wheel.filename == "torch-2.1.0-cp311-cp311-manylinux1_x86_64.whl"
    assert wheel.urls == ("https://files.example.invalid/bb/torch-2.1.0-cp311-cp311-manylinux1_x86_64.whl",)
    assert wheel.sha256 == digest("linux")


def test_a_file_whose_hash_is_not_locked_is_never_chosen(tmp_path: Path, torch_page: Path) -> None:
    requirements = lock(tmp_path, f"torch==2.1.0 --hash=sha256:{digest('win')}\n")
    with pytest.raises(InvalidLockError, match=r"requirements_lock.txt:1: no wheel of torch==2.1.0 .* matches"):
        resolve(requirements, IndexPages(torch_page, INDEX), tags=LINUX)


def test_relative_links_are_resolved_against_the_page(torch_page: Path) -> None:
    links = parse_project_page((torch_page / "torch.html").read_text(), f"{INDEX}/torch/")
    sdist = [link for link in links if link.filename.endswith(".tar.gz")]
    assert sdist[0].url == "https://example.invalid/files/torch-2.1.0.tar.gz"
    assert sdist[0].sha256 == digest("sdist")


@pytest.mark.parametrize(
    ("index_url", "page"),
    [
        ("https://pypi.org/simple", "https://pypi.org/simple/torch/"),
        ("https://pypi.org/simple/", "https://pypi.org/simple/torch/"),
        # Bazel's downloader lists a file:// directory instead of serving its page: the page is named.
        ("file:///srv/pypi/simple", "file:///srv/pypi/simple/torch/index.html"),
    ],
)
def test_the_page_url_is_where_the_rule_downloads_the_page_and_what_links_resolve_against(
    index_url: str, page: str
) -> None:
    assert page_url(index_url, canonicalize_name("torch")) == page
    (link,) = parse_project_page('<a href="../../files/torch-2.1.0-py3-none-any.whl">t</a>', page)
    assert link.url == index_url.rstrip("/").rsplit("/", 1)[0] + "/files/torch-2.1.0-py3-none-any.whl"


def test_only_the_wanted_hashes_are_kept_and_joined(torch_page: Path) -> None:
    page = (torch_page / "torch.html").read_text()
    every = parse_project_page(page, f"{INDEX}/torch/")
    wanted = parse_project_page(page, f"{INDEX}/torch/", sha256s={digest("sdist"), digest("linux"), "0" * 64})
    assert len(every) > 2
    assert wanted == [link for link in every if link.sha256 in {digest("sdist"), digest("linux")}]
    assert {link.sha256 for link in wanted} == {digest("sdist"), digest("linux")}


def test_a_page_read_in_pieces_gives_the_links_it_gives_whole() -> None:
    """Anchors straddle the pieces the parser is fed (64 KiB), a comment and an entity too."""
    anchors = [
        f'<a href="f/p{n}-1.0-py3-none-any.whl#sha256={n:064x}" data-x="&amp;{n}">p{n}</a>\n' for n in range(3000)
    ]
    page = "<html><!-- " + "c" * 70_000 + " -->" + "".join(anchors) + "</html>"
    links = parse_project_page(page, f"{INDEX}/p/")
    assert [link.filename for link in links] == [f"p{n}-1.0-py3-none-any.whl" for n in range(3000)]
    assert [link.sha256 for link in links] == [f"{n:064x}" for n in range(3000)]


@pytest.mark.parametrize("markup", ["<a " + "a " * 200_000 + ">", "<!-- " + "x " * 200_000])
def test_a_tag_longer_than_any_index_writes_is_refused_before_the_parser_holds_it(tmp_path: Path, markup: str) -> None:
    """The parser holds a tuple per attribute of a tag until it ends: 280 bytes of memory per byte of a page of
    one tag of one-letter attributes (1 MB: 283 MiB; the 32 MiB a page may be: 9 GiB)."""
    (tmp_path / "pages").mkdir()
    page = tmp_path / "pages" / "torch.html"
    page.write_text(f"<html>{markup}</html>", encoding="utf-8")
    requirements = lock(tmp_path, f"torch==2.1.0 --hash=sha256:{digest('linux')}\n")
    with pytest.raises(InvalidLockError) as caught:
        resolve(requirements, IndexPages(tmp_path / "pages", INDEX), tags=LINUX)
    assert str(caught.value) == (
        f"{page}: not the index page of torch we read: a tag or comment longer than 262144 bytes, "
        "which no index page holds"
    )


def test_percent_encoded_local_versions_are_decoded(tmp_path: Path) -> None:
    write_page(tmp_path / "pages", "torch", {"torch-2.1.0%2Bstripe.5-py3-none-any.whl": digest("local")})
    requirements = lock(tmp_path, f"torch==2.1.0+stripe.5 --hash=sha256:{digest('local')}\n")
    [wheel] = resolve(requirements, IndexPages(tmp_path / "pages", INDEX), tags=LINUX)
    assert wheel.filename == "torch-2.1.0+stripe.5-py3-none-any.whl"
    assert wheel.urls == (f"{INDEX}/torch/torch-2.1.0%2Bstripe.5-py3-none-any.whl",)


def test_pins_whose_marker_is_false_are_skipped(tmp_path: Path, torch_page: Path) -> None:
    requirements = lock(
        tmp_path,
        f'pywin32==306 ; sys_platform == "win32" --hash=sha256:{digest("x")}\n'
        f"torch==2.1.0 --hash=sha256:{digest('linux')}\n",
    )
    wheels = resolve(requirements, IndexPages(torch_page, INDEX), tags=LINUX)
    assert [wheel.project for wheel in wheels] == ["torch"]


def test_explicit_urls_win_and_need_no_page(tmp_path: Path) -> None:
    requirements = lock(tmp_path, "torch==2.1.0 --hash=sha256:" + digest("linux") + "\n")
    url = "https://mirror.example.invalid/torch-2.1.0-cp311-cp311-manylinux1_x86_64.whl"
    [wheel] = resolve(
        requirements, IndexPages(tmp_path / "absent", INDEX), explicit={"torch": ([url], "ab" * 32)}, tags=LINUX
    )
    assert (wheel.filename, wheel.urls, wheel.sha256) == (
        "torch-2.1.0-cp311-cp311-manylinux1_x86_64.whl",
        (url,),
        "ab" * 32,
    )


def test_cli_lists_projects_then_resolves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_page(tmp_path / "pages", "six", {"six-1.16.0-py2.py3-none-any.whl": digest("six")})
    requirements = lock(tmp_path, f"Six==1.16.0 --hash=sha256:{digest('six')}\ntorch==2.1.0\n")
    explicit = tmp_path / "explicit.json"
    explicit.write_text(
        json.dumps({"torch": {"urls": ["https://x.invalid/torch-2.1.0-py3-none-any.whl"], "sha256": "cd" * 32}})
    )
    common = ["resolve", "--requirements", str(requirements), "--explicit", str(explicit)]
    assert main([*common, "--list-projects", "--index-url", INDEX]) == 0
    # Each page to download and the name --pages reads it by: the rule computes neither.
    assert json.loads(capsys.readouterr().out) == [{"url": f"{INDEX}/six/", "file": "six.html"}]
    assert main([*common, "--pages", str(tmp_path / "pages"), "--index-url", INDEX]) == 0
    resolved = json.loads(capsys.readouterr().out)
    assert [(w["project"], w["filename"]) for w in resolved] == [
        ("six", "six-1.16.0-py2.py3-none-any.whl"),
        ("torch", "torch-2.1.0-py3-none-any.whl"),
    ]


@pytest.mark.parametrize(
    "explicit, expected",
    [
        ("[]", "expected an object of projects, not list"),
        ('{"torch": {}}', "'torch': expected"),
        ('{"torch": 3}', "'torch': expected"),
        ('{"torch": {"urls": [], "sha256": "' + "cd" * 32 + '"}}', "'torch': expected"),  # no URL to fetch
        (
            '{"torch": {"urls": "https://x.invalid/torch-2.1.0-py3-none-any.whl", "sha256": "' + "cd" * 32 + '"}}',
            "'torch': expected",
        ),
        ('{"torch": {"urls": ["https://x.invalid/t.whl"], "sha256": "cd"}}', "'torch': expected"),
        ("[" * 100_000, "nested too deeply"),
    ],
    ids=["a-list", "no-keys", "not-an-object", "no-url", "urls-a-string", "short-sha256", "deep"],
)
@pytest.mark.parametrize("mode", ["--list-projects", "--pages"])
def test_a_malformed_explicit_file_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], explicit: str, expected: str, mode: str
) -> None:
    """``--explicit`` is the rule's JSON of the user's ``urls`` + ``sha256``: a flaw is one line naming the file
    and the flag, never a traceback nor a wheel resolved from a string's characters."""
    requirements = lock(tmp_path, f"torch==2.1.0 --hash=sha256:{digest('linux')}\n")
    path = tmp_path / "explicit.json"
    path.write_text(explicit, encoding="utf-8")
    args = (
        [mode, "--index-url", INDEX]
        if mode == "--list-projects"
        else [mode, str(tmp_path / "pages"), "--index-url", INDEX]
    )
    code = main(["resolve", "--requirements", str(requirements), "--explicit", str(path), *args])
    captured = capsys.readouterr()
    assert code == 1 and captured.out == "" and captured.err.count("\n") == 1, captured
    assert captured.err.startswith(f"patched-wheels: error: {path}: cannot read the wheels given by --explicit: "), (
        captured.err
    )
    assert expected in captured.err, captured.err


def test_missing_page_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    requirements = lock(tmp_path, f"six==1.16.0 --hash=sha256:{digest('six')}\n")
    code = main(
        ["resolve", "--requirements", str(requirements), "--pages", str(tmp_path / "none"), "--index-url", INDEX]
    )
    error = capsys.readouterr().err
    assert code == 1
    assert error.count("\n") == 1 and "six.html" in error and "cannot read the index page of six" in error


@pytest.mark.parametrize("cache", ["on", "off"])
def test_a_page_never_downloaded_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, own_cache: Path, cache: str
) -> None:
    """No page and no record of one: the error names the pin, the page and where its record was looked for."""
    if cache == "off":
        monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", "off")
    requirements = lock(tmp_path, f"six==1.16.0 --hash=sha256:{digest('six')}\n")
    code, _, error = _resolve_cli(requirements, tmp_path / "none", capsys, unfetched=["six.html"])
    assert code == 1 and error.count("\n") == 1, error
    assert error.startswith(
        f"patched-wheels: error: {requirements}:1: the index page {INDEX}/six/ could not be downloaded, and no "
        "earlier download of it recorded the files of six==1.16.0 (record: "
    ), error
    where = str(own_cache / RECORD_KIND) if cache == "on" else "none: RULES_PATCHED_WHEELS_CACHE=off"
    assert where in error, error


@pytest.fixture
def cp311_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI as a CPython 3.11 on Linux runs it (the pages' wheels are cp311), whatever runs the suite."""
    monkeypatch.setattr(resolve_module, "sys_tags", lambda: iter(LINUX))


def _resolve_cli(
    requirements: Path, pages: Path, capsys: pytest.CaptureFixture[str], *, unfetched: Sequence[str] = ()
) -> tuple[int, str, str]:
    """`resolve --pages` as the rule runs it: ``unfetched`` names the pages it could not download."""
    args = ["resolve", "--requirements", str(requirements), "--pages", str(pages), "--index-url", INDEX]
    code = main([*args, *(f"--unfetched={name}" for name in unfetched)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_page_that_cannot_be_downloaded_again_is_answered_by_what_it_taught(
    tmp_path: Path, torch_page: Path, own_cache: Path, cp311_linux: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """After `clean --expunge` with no network the rule has no page: the earlier run's record picks the same
    wheel, and keeps only the lock's files (the Windows wheel is locked, the sdist and cp310 wheel are not)."""
    requirements = lock(
        tmp_path, f"torch==2.1.0 \\\n    --hash=sha256:{digest('win')} \\\n    --hash=sha256:{digest('linux')}\n"
    )
    code, online, _ = _resolve_cli(requirements, torch_page, capsys)
    assert code == 0
    [record] = (own_cache / RECORD_KIND).iterdir()
    assert sorted(file["sha256"] for file in json.loads(record.read_text())["files"]) == sorted(
        [digest("win"), digest("linux")]
    )
    # A page left over from an earlier attempt is not read: the rule says which pages it could not download.
    code, offline, error = _resolve_cli(requirements, torch_page, capsys, unfetched=["torch.html"])
    assert (code, offline, error) == (0, online, ""), error
    # The record holds every locked wheel, not only this interpreter's choice: another interpreter chooses too.
    [windows] = resolve(
        requirements,
        IndexPages(tmp_path / "no-pages", INDEX, {"torch.html"}),
        tags=[Tag("cp311", "cp311", "win_amd64")],
        caches=CacheContext.from_environment(),
    )
    assert windows.filename == "torch-2.1.0-cp311-cp311-win_amd64.whl" and windows.sha256 == digest("win")
    # Another pin of the project (a lock bump) has no record: the page is needed again.
    bumped = lock(tmp_path, f"torch==2.1.0 --hash=sha256:{digest('linux')}\n")
    code, _, error = _resolve_cli(bumped, tmp_path / "no-pages", capsys, unfetched=["torch.html"])
    assert code == 1 and "could not be downloaded" in error, error


@pytest.mark.parametrize(
    "edit",
    ["unlocked-hash", "another-page", "not-json", "url-not-a-string", "short-sha256", "a-directory"],
)
def test_a_record_that_is_not_one_of_this_page_and_pin_is_a_miss(
    tmp_path: Path, torch_page: Path, own_cache: Path, cp311_linux: None, capsys: pytest.CaptureFixture[str], edit: str
) -> None:
    """A record is a cache file (owner-trusted, bounded, never a traceback) and a claim about the lock's own files:
    a record of another file than the lock's, or of another page, never answers; the page is then needed."""
    requirements = lock(tmp_path, f"torch==2.1.0 --hash=sha256:{digest('linux')}\n")
    assert _resolve_cli(requirements, torch_page, capsys)[0] == 0
    [record] = (own_cache / RECORD_KIND).iterdir()
    value = json.loads(record.read_text())
    wheel = value["files"][0]
    if edit == "unlocked-hash":
        value["files"] = [{"url": wheel["url"].replace("bb/", "evil/"), "sha256": digest("cp310")}]
    elif edit == "another-page":
        value["page"] = "https://elsewhere.invalid/simple/torch/"
    elif edit == "url-not-a-string":
        value["files"] = [{"url": ["x"], "sha256": wheel["sha256"]}]
    elif edit == "short-sha256":
        value["files"] = [{"url": wheel["url"], "sha256": "ab"}]
    if edit == "not-json":
        record.write_bytes(b"\xff{")
    elif edit == "a-directory":
        record.unlink()
        record.mkdir()
    else:
        record.write_text(json.dumps(value))
    code, out, error = _resolve_cli(requirements, tmp_path / "no-pages", capsys, unfetched=["torch.html"])
    assert code == 1 and out == "" and "Traceback" not in error, error
    assert error.splitlines()[-1].startswith("patched-wheels: error: ") and "could not be downloaded" in error, error
    assert all(line.startswith("patched-wheels: ") for line in error.splitlines()), error


def test_a_page_read_again_replaces_its_record(
    tmp_path: Path, torch_page: Path, own_cache: Path, cp311_linux: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Online, the page wins over the record and rewrites it: a moved file is recorded where it is now."""
    requirements = lock(tmp_path, f"torch==2.1.0 --hash=sha256:{digest('linux')}\n")
    assert _resolve_cli(requirements, torch_page, capsys)[0] == 0
    moved = "https://mirror.example.invalid/torch-2.1.0-cp311-cp311-manylinux1_x86_64.whl"
    write_page(torch_page, "torch", {moved: digest("linux")})
    code, out, _ = _resolve_cli(requirements, torch_page, capsys)
    assert code == 0 and json.loads(out)[0]["urls"] == [moved]
    code, out, _ = _resolve_cli(requirements, tmp_path / "no-pages", capsys, unfetched=["torch.html"])
    assert code == 0 and json.loads(out)[0]["urls"] == [moved]


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("not UTF-8", "six.html: not UTF-8 (invalid start byte at byte 8)"),
        ("oversized", f"six.html: larger than {32 << 20} bytes; not the index page of six we read"),
        (
            "a FIFO",
            "six.html: not a regular file (a FIFO, device, socket or directory); not the index page of six we read",
        ),
    ],
)
def test_a_hostile_page_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, expected: str
) -> None:
    """Pages are what an index sent: read bounded (no 300 MB page in memory), decoded strictly, never a traceback."""
    requirements = lock(tmp_path, f"six==1.16.0 --hash=sha256:{digest('six')}\n")
    page = tmp_path / "pages" / "six.html"
    page.parent.mkdir()
    if kind == "not UTF-8":
        page.write_bytes(b"<a href=\xff></a>")
    elif kind == "oversized":
        with page.open("wb") as handle:
            handle.truncate((32 << 20) + 1)  # sparse: the size is refused before anything is read
    else:
        os.mkfifo(page)
    code = main(["resolve", "--requirements", str(requirements), "--pages", str(page.parent), "--index-url", INDEX])
    error = capsys.readouterr().err
    assert code == 1 and error.count("\n") == 1 and "Traceback" not in error, error
    assert error.startswith("patched-wheels: error: ") and error.rstrip().endswith(expected), error


def test_a_query_string_is_not_part_of_the_filename(tmp_path: Path) -> None:
    write_page(
        tmp_path / "pages", "six", {"https://mirror.invalid/six-1.16.0-py2.py3-none-any.whl?token=abc": digest("six")}
    )
    requirements = lock(tmp_path, f"six==1.16.0 --hash=sha256:{digest('six')}\n")
    [wheel] = resolve(requirements, IndexPages(tmp_path / "pages", INDEX), tags=LINUX)
    assert wheel.filename == "six-1.16.0-py2.py3-none-any.whl"
