"""Choose, for every pin of a hashed lock, the one wheel file this interpreter installs, and its URL.

A pip-compile lock names versions and hashes but no URLs, while Bazel's downloader needs a URL and a
sha256 per file. The repository rules download each project's PEP 503 page (PyPI's by default) and
this module picks, among the files whose ``#sha256=`` fragment is one of the pin's hashes, the wheel
whose tags rank best for the running interpreter (``packaging.tags.sys_tags``): exactly what pip
itself would install from that lock, so the rules can fetch it once and serve it from their index.

What a page taught is kept in the helper's cache (:data:`RECORD_KIND`: per pin, its wheels' URLs and sha256s on
that page) and read back only when the rule could not download the page (an index down, a runner without
network after ``bazel clean --expunge``, whose wheels all sit in Bazel's repository cache). An online run
always resolves against the page as the index serves it now. A record can send the rule to another URL only for
a file the lock itself pins (only links with one of the pin's hashes are kept or read), and Bazel's downloader
checks that sha256: a stale or edited record can make a fetch fail, never bring another file.
"""

from __future__ import annotations

import hashlib
import html.parser
import json
import urllib.parse
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Collection, Iterable, Mapping, Sequence

from packaging.tags import Tag, sys_tags
from packaging.utils import NormalizedName

from patched_wheels.base.cache import OFF, CacheContext
from patched_wheels.base.fsutil import SHA256_HEX
from patched_wheels.errors import InvalidLockError, InvalidWheelError
from patched_wheels.lock.formats.registry import served_pins
from patched_wheels.lock.model import Pin, read_lock_input
from patched_wheels.wheelfile.filename import WheelFilename


@dataclass(frozen=True)
class ResolvedWheel:
    """One wheel to fetch: where from, what it must hash to, and which pin it satisfies."""

    project: NormalizedName
    filename: str
    urls: tuple[str, ...]
    sha256: str

    def as_json(self) -> dict[str, object]:
        return {**asdict(self), "urls": list(self.urls)}


@dataclass(frozen=True)
class _Link:
    filename: str
    url: str
    sha256: str | None


class _LinkCollector(html.parser.HTMLParser):
    """Collects the ``<a href>`` targets of a PEP 503 project page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


#: The largest index page read: torch's on PyPI is 320 KB for 4,000 files; a page is what an index sends.
MAX_PAGE_BYTES = 32 << 20
_MAX_MARKUP = 256 << 10
"""The longest tag (or comment, or other construct) of a page read: an anchor is a few hundred bytes.  The HTML
parser holds an attribute tuple per attribute of a tag until it ends, 280 bytes of memory per byte of a tag of
one-letter attributes: a 32 MiB page of one tag would have taken 9 GiB."""
_PAGE_PIECE = 64 << 10
"""What the parser is fed at a time, so that a construct past :data:`_MAX_MARKUP` is refused before it ends."""


def parse_project_page(page: str, page_url: str, *, sha256s: Collection[str] = ()) -> list[_Link]:
    """The file links of a PEP 503 page, made absolute against ``page_url``; with ``sha256s``, only the
    links whose ``#sha256=`` fragment is one of them (torch's page lists 4,000 files, a lock pins a few:
    joining and splitting every URL was most of a resolve's CPU time).  A ValueError for a page with a tag (or
    comment) longer than any index writes (:data:`_MAX_MARKUP`)."""
    collector = _LinkCollector()
    for start in range(0, len(page), _PAGE_PIECE):
        collector.feed(page[start : start + _PAGE_PIECE])
        if len(collector.rawdata) > _MAX_MARKUP:  # what it holds back: a construct not ended yet
            raise ValueError(f"a tag or comment longer than {_MAX_MARKUP} bytes, which no index page holds")
    links = []
    for href in collector.hrefs:
        algorithm, _, digest = href.partition("#")[2].partition("=")
        sha256 = digest.lower() if algorithm == "sha256" and digest else None
        if sha256s and sha256 not in sha256s:
            continue
        url = urllib.parse.urljoin(page_url, href).partition("#")[0]
        links.append(_Link(_filename_of(url), url, sha256))
    return links


def projects_to_resolve(pins: Sequence[Pin], explicit: Mapping[NormalizedName, object]) -> list[NormalizedName]:
    """Projects whose page must be downloaded: every applicable pin without an explicit URL."""
    return sorted({pin.project for pin in pins if pin.applies() and pin.project not in explicit and not pin.files})


def page_url(index_url: str, project: NormalizedName) -> str:
    """The PEP 503 page of ``project``: where the rule downloads it from, and the base its relative links are
    resolved against. A ``file://`` index (a local or mirrored one) has no server to map ``<project>/`` to its
    page: Bazel's downloader (Java's file URL handler) returns the directory's listing instead, so it names
    ``index.html``, as pip does for ``file://`` indexes (a link resolves against either alike)."""
    url = f"{index_url.rstrip('/')}/{project}/"
    return url + "index.html" if url.startswith("file:") else url


def page_file(project: NormalizedName) -> str:
    """The name of ``project``'s downloaded page in the pages directory :func:`resolve` reads."""
    return f"{project}.html"


@dataclass(frozen=True)
class IndexPages:
    """The index pages the rule downloaded for :func:`resolve`: one value, because a page is read as the page of
    ``index_url`` it was downloaded from (its links resolve against that URL, errors and records name it).

    ``directory`` holds each as ``<project>.html`` (:func:`page_file`), but for those named in ``unfetched``,
    which could not be downloaded: what an earlier run recorded of them answers instead."""

    directory: Path
    index_url: str
    unfetched: Collection[str] = ()


def resolve(
    lock_path: Path,
    pages: IndexPages,
    *,
    explicit: Mapping[NormalizedName, tuple[Sequence[str], str]] | None = None,
    tags: Iterable[Tag] | None = None,
    lock_format: str = "requirements",
    caches: CacheContext = OFF,
) -> list[ResolvedWheel]:
    """One ``ResolvedWheel`` per applicable pin of ``lock_path``, its files found on the downloaded ``pages``.

    ``explicit`` maps projects to the (urls, sha256) the user gave, which wins over the lock and the index.
    ``caches``: where what the pages taught is recorded, and read back for an unfetched page.
    """
    explicit = explicit or {}
    ranking = {tag: rank for rank, tag in enumerate(tags if tags is not None else sys_tags())}
    resolved = []
    for pin in served_pins(lock_path, lock_format):
        if not pin.applies():
            continue
        if pin.project in explicit:
            urls, sha256 = explicit[pin.project]
            resolved.append(ResolvedWheel(pin.project, _filename_of(urls[0]), tuple(urls), sha256))
            continue
        if pin.files:  # the lock names its files (uv.lock, pylock.toml): no page needed
            links = [_Link(f.filename, f.url, f.sha256) for f in pin.files]
            resolved.append(_choose(pin, links, ranking, str(lock_path)))
            continue
        url = page_url(pages.index_url, pin.project)
        page = None if page_file(pin.project) in pages.unfetched else pages.directory / page_file(pin.project)
        resolved.append(_choose(pin, _page_links(pin, page, url, caches), ranking, url))
    return resolved


#: The cache kind of what index pages taught (:func:`_page_links`); not a wheel fact, so never in ``wheel_facts``.
RECORD_KIND = "indexlinks"
_RECORD_VERSION = 1
_MAX_RECORD_BYTES = 1 << 20
_MAX_RECORD_FILES = 1000
_MAX_URL = 8192


def _page_links(pin: Pin, page: Path | None, url: str, caches: CacheContext) -> list[_Link]:
    """The links of ``pin``'s files on its index page ``url``, downloaded to ``page``; recorded for a later run.

    ``page`` None: the rule could not download it. Then the record of an earlier run's page stands in for it
    (see the module docstring), and without one the error says what is missing and where it was looked for.
    """
    name = _record_name(url, pin)
    if page is None:
        recorded = _recorded_links(caches.read(RECORD_KIND, name, max_bytes=_MAX_RECORD_BYTES), url)
        kept = [link for _, link, _ in _candidates(pin, recorded or [])]
        if kept:
            return kept
        where = caches.where(RECORD_KIND, name) if caches.root is not None else "none: RULES_PATCHED_WHEELS_CACHE=off"
        raise InvalidLockError(
            f"{pin.span.where}: the index page {url} could not be downloaded, and no earlier download of it "
            f"recorded the files of {pin.project}=={pin.pinned_version()} (record: {where}); "
            "build once with the index reachable"
        )
    text = read_lock_input(page, max_bytes=MAX_PAGE_BYTES, what=f"the index page of {pin.project}")
    try:
        links = parse_project_page(text, url, sha256s=pin.sha256s)
    except ValueError as error:
        raise InvalidLockError(f"{page}: not the index page of {pin.project} we read: {error}") from None
    kept = [link for _, link, _ in _candidates(pin, links)]
    if kept:  # else the pin fails here and now: nothing to record
        files = [{"url": link.url, "sha256": link.sha256} for link in kept]
        caches.write(RECORD_KIND, name, {"v": _RECORD_VERSION, "page": url, "files": files})
    return kept


def _record_name(url: str, pin: Pin) -> str:
    """The record's file: one per page and pin (version and hashes), so two locks pinning a project differently
    never overwrite each other's."""
    key = json.dumps([url, str(pin.pinned_version()), sorted(pin.sha256s)])
    return f"{hashlib.sha256(key.encode()).hexdigest()}.v{_RECORD_VERSION}.json"


def _recorded_links(value: object, url: str) -> list[_Link] | None:
    """The links a record holds, or None when it is no record of ``url`` (a miss: the caller says so)."""
    if not (isinstance(value, dict) and value.get("v") == _RECORD_VERSION and value.get("page") == url):
        return None
    files = value.get("files")
    if not isinstance(files, list) or len(files) > _MAX_RECORD_FILES:
        return None
    links = []
    for entry in files:
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("url"), str)
            and 0 < len(entry["url"]) <= _MAX_URL
            and entry["url"].isprintable()
            and isinstance(entry.get("sha256"), str)
            and SHA256_HEX.fullmatch(entry["sha256"])
        ):
            return None
        links.append(_Link(_filename_of(entry["url"]), entry["url"], entry["sha256"]))
    return links


def _filename_of(url: str) -> str:
    """The file name of a URL's path (a query string, e.g. a signed mirror's token, is not part of it)."""
    return urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])


def _candidates(pin: Pin, links: Sequence[_Link]) -> list[tuple[WheelFilename, _Link, str]]:
    """The links that may be ``pin``'s wheel, whatever the interpreter: a wheel of the pinned project and
    version with a sha256 (one of the lock's, when it has hashes); sdists and other files are left out (pip
    would build them, we only patch wheels)."""
    version = pin.pinned_version()
    sha256s = pin.sha256s
    candidates = []
    for link in links:
        sha256 = link.sha256
        if sha256 is None or (sha256s and sha256 not in sha256s):
            continue
        try:
            wheel = WheelFilename.parse(link.filename)
        except InvalidWheelError:
            continue
        if wheel.name == pin.project and wheel.version == version:
            candidates.append((wheel, link, sha256))
    return candidates


def _choose(pin: Pin, links: Sequence[_Link], ranking: Mapping[Tag, int], url: str) -> ResolvedWheel:
    best: tuple[int, _Link, str] | None = None  # (rank, link, its sha256)
    for wheel, link, sha256 in _candidates(pin, links):
        rank = min((ranking[tag] for tag in wheel.tags if tag in ranking), default=None)
        if rank is not None and (best is None or rank < best[0]):
            best = (rank, link, sha256)
    if best is None:
        raise InvalidLockError(
            f"{pin.span.where}: no wheel of {pin.project}=={pin.pinned_version()} on {url} matches "
            f"the lock's {len(pin.hashes)} hash(es) and this interpreter's tags (best: {next(iter(ranking), 'none')})"
        )
    _, link, sha256 = best
    return ResolvedWheel(pin.project, link.filename, (link.url,), sha256)
