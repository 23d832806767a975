"""One site-packages made of links to the wheels of a test's own layout (``layout_test``'s flat run).

:func:`merge` links the files of every ``sys.path`` entry holding installed wheels where pip would put them
(:mod:`patched_wheels.loading.layout`): symbolic links to the test's own files inside real directories, so
that ``$ORIGIN/..`` stays in the merged tree; a directory only one wheel fills, with no shared library
under it, is one link.  No copies: the tree costs about one call per library and per shared directory.

The test's files are the user's deps, read by the test's own process: a link to a directory is walked only
into the runfiles (a link to ``/`` would walk the whole file system, one to a parent forever), and only a
regular file is opened (a FIFO named ``*.so`` would block the test until Bazel's timeout).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterator, Sequence

from patched_wheels.base.fsutil import NotRegularFileError, open_regular_file, read_regular_file
from patched_wheels.elf.read import ELF_MAGIC, ElfLibrary, is_shared_library_name
from patched_wheels.loading.layout import FLAT, PER_WHEEL_SCHEMES, Layout


@dataclass(frozen=True)
class Merged:
    """The wheels of the test's layout linked into one site-packages."""

    root: Path
    """The virtual environment's prefix."""
    site_packages: Path
    libraries: dict[str, ElfLibrary]
    """The wheels' shared libraries by real path (the same file in both layouts)."""
    wheel_entries: tuple[str, ...]


def dists(entry: str) -> list[str]:
    """The distributions (``name-version``) installed in a ``sys.path`` entry, by their ``*.dist-info`` directories."""
    return [name[: -len(".dist-info")] for name in sorted(os.listdir(entry)) if name.endswith(".dist-info")]


_MAX_RECORD_BYTES = 64 << 20
"""The largest RECORD read (torch's is 2 MB): a bigger one, or one that is no regular file, owns nothing."""


def owners(entry: str) -> dict[str, str]:
    """Install path -> distribution (``name-version``) for an entry holding several wheels, from their RECORDs."""
    owners: dict[str, str] = {}
    for name in sorted(os.listdir(entry)):
        if not name.endswith(".dist-info"):
            continue
        try:
            record = read_regular_file(
                os.path.join(entry, name, "RECORD"), max_bytes=_MAX_RECORD_BYTES, follow_links=True
            )
        except (OSError, NotRegularFileError):
            continue
        for line in record.decode("utf-8", "replace").splitlines():
            path = line.split(",", 1)[0].strip().strip('"')
            owners.setdefault(path, name[: -len(".dist-info")])
    return owners


def inside(path: str, root: str) -> bool:
    """Whether ``path`` (a real path) is ``root`` (a real path) or under it."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _files(directory: str, runfiles: str) -> Iterator[tuple[str, str]]:
    """(path relative to ``directory``, full path) of every file under it, and of every link to a directory
    that is not walked: one leading out of ``runfiles`` (a real path), into a directory already walked (a
    cycle, or a second way to the same files) -- a file of the tree, linked as it is. ``directory`` itself
    is walked only when it is in the runfiles."""
    top = os.path.realpath(directory)
    if not inside(top, runfiles):
        return
    walked = {top}
    pending = [(directory, "")]
    while pending:
        parent, relative = pending.pop()
        try:
            entries = sorted(os.scandir(parent), key=lambda entry: entry.name)
        except OSError:  # vanished, unreadable: as os.walk, nothing under it
            continue
        for entry in entries:
            path = relative + entry.name
            if entry.is_dir(follow_symlinks=False):
                pending.append((entry.path, path + "/"))
                continue
            if entry.is_symlink() and entry.is_dir():
                target = os.path.realpath(entry.path)
                if inside(target, runfiles) and target not in walked and not inside(os.path.realpath(parent), target):
                    walked.add(target)
                    pending.append((entry.path, path + "/"))
                    continue
            yield path, entry.path


def _is_elf(path: str) -> bool:
    """Whether ``path`` is a regular file (through links) starting with the ELF magic; anything else (a FIFO,
    a device, a directory) is not opened for reading, so never waited on."""
    try:
        handle = open_regular_file(path, follow_links=True)
    except (OSError, NotRegularFileError):
        return False
    try:
        return os.read(handle, len(ELF_MAGIC)) == ELF_MAGIC
    except OSError:
        return False
    finally:
        os.close(handle)


@dataclass(frozen=True)
class _File:
    """A file of the merged tree: the test's own file it links to, and whose it is."""

    full: str
    owner: tuple[str, str]
    """(the directory it was found under, its distribution): one wheel's files in one place share it."""
    library: bool


_Tree = dict[str, "_Tree | _File"]
"""A directory of the merged tree: its entries by name, directories and files."""


@dataclass(frozen=True)
class _Whole:
    """What decides whether a directory of the merged tree can be one link to the test's own directory."""

    owner: tuple[str, str] | None
    """The one owner of every file under it; None when several wheels (or places) share it."""
    library: bool
    """Whether a shared library is under it (it must then be a real directory: see :func:`merge`)."""
    source: str | None
    """The test's directory holding exactly its files at the same relative paths; None when there is none."""


def _whole(tree: _Tree, wholes: dict[int, _Whole]) -> _Whole:
    """Summarise every directory of ``tree`` into ``wholes`` (by ``id`` of its dict), bottom-up."""
    owners, library, sources = set(), False, set()
    for name, node in tree.items():
        part = _whole(node, wholes) if isinstance(node, dict) else _Whole(node.owner, node.library, node.full)
        owners.add(part.owner)
        library = library or part.library
        sources.add(os.path.dirname(part.source) if part.source and os.path.basename(part.source) == name else None)
    whole = _Whole(owners.pop() if len(owners) == 1 else None, library, sources.pop() if len(sources) == 1 else None)
    wholes[id(tree)] = whole
    return whole


def _may_be_one_link(parts: tuple[str, ...], site_packages: tuple[str, ...]) -> bool:
    """Whether the merged tree's directory at ``parts`` (below the prefix) may be a link at all.

    Never the prefix's own directories (``bin``, ``lib``, ``include``: the virtual environment's, which the
    wheels' files join) nor site-packages and its parents; and no top-level package: code that reaches its
    siblings as ``dirname(__file__)/..`` must find the merged site-packages, not its wheel's directory."""
    if parts[: len(site_packages)] == site_packages:
        return len(parts) >= len(site_packages) + 2
    return len(parts) >= 2 and site_packages[: len(parts)] != parts


def _make(
    tree: _Tree, directory: str, parts: tuple[str, ...], site_packages: tuple[str, ...], wholes: dict[int, _Whole]
) -> None:
    """Make ``tree`` at ``directory`` (a real directory made here): files and whole directories as links."""
    os.makedirs(directory, exist_ok=True)
    for name, node in tree.items():
        target = os.path.join(directory, name)
        if not isinstance(node, dict):
            os.symlink(
                node.full, target
            )  # to the test's own file: resolving every runfiles link costs more than the run
            continue
        whole, child = wholes[id(node)], parts + (name,)
        if whole.owner is not None and not whole.library and whole.source and _may_be_one_link(child, site_packages):
            os.symlink(whole.source, target)  # one wheel's directory without a library: one link for all its files
        else:
            _make(node, target, child, site_packages, wholes)


def merge(wheel_entries: Sequence[str], root: Path, runfiles: str) -> Merged:
    """Link the wheels of ``wheel_entries`` into the flat layout at ``root`` (a later wheel's file wins, as with
    pip) and find their shared libraries; ``root`` holds its virtual environment already (FileExistsError
    when a wheel installs one of its files: the caller names the dep). No link is walked out of ``runfiles``
    (the test's runfiles directory): see :func:`_files`.

    A shared library is a link to the test's own file inside real directories up to ``root``, so that the
    ``$ORIGIN/..`` of its RUNPATH (``nvidia/*/lib``'s, torch's) resolves in the merged tree, not in its own
    wheel's.  A directory only one wheel installs files into, with no shared library under it (torch's
    10,000 headers), is one link to the test's own directory: one call instead of one per file."""
    layout = Layout(FLAT, PurePosixPath(root))
    libraries: dict[str, ElfLibrary] = {}
    tree: _Tree = {}
    prefix = str(root).rstrip("/") + "/"
    runfiles = os.path.realpath(runfiles)
    for entry in wheel_entries:
        installed = dists(entry)
        owned = owners(entry) if len(installed) > 1 else {}
        sources = [(path, path, full, entry) for path, full in _files(entry, runfiles)]
        if os.path.basename(entry) == PER_WHEEL_SCHEMES["site-packages"] and len(installed) == 1:
            for (
                scheme,
                directory,
            ) in PER_WHEEL_SCHEMES.items():  # rules_python's repository: the other schemes beside it
                sibling = os.path.join(os.path.dirname(entry), directory)
                if scheme != "site-packages" and os.path.isdir(sibling):
                    sources += [
                        (f"{installed[0]}.data/{scheme}/{path}", os.path.join(directory, path), full, sibling)
                        for path, full in _files(sibling, runfiles)
                    ]
        for install_path, record_path, full, place in sources:
            dist = owned.get(record_path, installed[0] if installed else os.path.basename(entry))
            library = is_shared_library_name(install_path) and _is_elf(full)
            if library:
                libraries[os.path.realpath(full)] = ElfLibrary(dist, install_path, None, (), (), ())
            *parents, name = str(layout.target(dist, install_path))[len(prefix) :].split("/")
            node = tree
            for part in parents:
                child = node.get(part)
                if not isinstance(child, dict):
                    child = node[part] = {}
                node = child
            node[name] = _File(full, (place, dist), library)  # a later wheel's file wins, as with pip
    wholes: dict[int, _Whole] = {}
    _whole(tree, wholes)
    site_packages = PurePosixPath(layout.site_packages("")).relative_to(root).parts
    _make(tree, str(root), (), site_packages, wholes)
    return Merged(root, Path(layout.site_packages("")), libraries, tuple(wheel_entries))
