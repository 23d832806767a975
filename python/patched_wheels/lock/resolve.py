"""Choose, for every pin of a hashed lock, the one wheel file this interpreter installs, and its URL.

A pip-compile lock names versions and hashes but no URLs, while Bazel's downloader needs a URL and a
sha256 per file. The repository rules download each project's PEP 503 page (PyPI's by default) and
this module picks, among the files whose ``#sha256=`` fragment is one of the pin's hashes, the wheel
whose tags rank best for the running interpreter (``packaging.tags.sys_tags``): exactly what pip
itself would install from that lock, so the rules can fetch it once and serve it from their index.
"""

from __future__ import annotations

import html.parser
import urllib.parse
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Collection, Iterable, Mapping, Sequence

from packaging.tags import Tag, sys_tags
from packaging.utils import NormalizedName

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


def parse_project_page(page: str, page_url: str, *, sha256s: Collection[str] = ()) -> list[_Link]:
    """The file links of a PEP 503 page, made absolute against ``page_url``; with ``sha256s``, only the
    links whose ``#sha256=`` fragment is one of them (torch's page lists 4,000 files, a lock pins a few:
    joining and splitting every URL was most of a resolve's CPU time)."""
    collector = _LinkCollector()
    collector.feed(page)
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


def resolve(
    lock_path: Path,
    *,
    pages_dir: Path,
    index_url: str,
    explicit: Mapping[NormalizedName, tuple[Sequence[str], str]] | None = None,
    tags: Iterable[Tag] | None = None,
    lock_format: str = "requirements",
) -> list[ResolvedWheel]:
    """One ``ResolvedWheel`` per applicable pin of ``lock_path``.

    ``pages_dir`` holds ``<project>.html``, the pages downloaded from ``index_url``; ``explicit``
    maps projects to the (urls, sha256) the user gave, which wins over the lock and the index.
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
        page = read_lock_input(
            pages_dir / page_file(pin.project), max_bytes=MAX_PAGE_BYTES, what=f"the index page of {pin.project}"
        )
        links = parse_project_page(page, page_url(index_url, pin.project), sha256s=pin.sha256s)
        resolved.append(_choose(pin, links, ranking, page_url(index_url, pin.project)))
    return resolved


def _filename_of(url: str) -> str:
    """The file name of a URL's path (a query string, e.g. a signed mirror's token, is not part of it)."""
    return urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])


def _choose(pin: Pin, links: Sequence[_Link], ranking: Mapping[Tag, int], url: str) -> ResolvedWheel:
    version = pin.pinned_version()
    sha256s = pin.sha256s
    best: tuple[int, _Link, str] | None = None  # (rank, link, its sha256)
    for link in links:
        if sha256s and link.sha256 not in sha256s:
            continue
        try:
            wheel = WheelFilename.parse(link.filename)
        except InvalidWheelError:
            continue  # an sdist or other file: pip would build it, we only patch wheels
        if wheel.name != pin.project or wheel.version != version or link.sha256 is None:
            continue
        rank = min((ranking[tag] for tag in wheel.tags if tag in ranking), default=None)
        if rank is not None and (best is None or rank < best[0]):
            best = (rank, link, link.sha256)
    if best is None:
        raise InvalidLockError(
            f"{pin.span.where}: no wheel of {pin.project}=={version} on {url} matches "
            f"the lock's {len(pin.hashes)} hash(es) and this interpreter's tags (best: {next(iter(ranking), 'none')})"
        )
    _, link, sha256 = best
    return ResolvedWheel(pin.project, link.filename, (link.url,), sha256)
