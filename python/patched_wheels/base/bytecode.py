"""Where the Bazel rules' helper keeps its bytecode: a persistent cache, so a cold fetch compiles nothing.

The repository rules run the helper from files Bazel puts under its output base (the pure wheels it
depends on are extracted there), with ``PYTHONPYCACHEPREFIX`` sending bytecode away from the helper's
sources, a tree Bazel watches. A prefix inside the repository goes away with it, so every cold fetch
(``bazel clean --expunge``, a fresh CI machine with a warm repository cache) compiled the interpreter's
start-up modules, the stdlib modules the helper imports, ``packaging`` and the helper,
twice (once for the module extension, once for the hub repository), each time more CPU than a hub that
patches torch spends on the patch (benchmarks/bench_e2e.py measures the cold fetch).

So ``prepare_helper`` (``python/private/helper.bzl``) runs ``python -m patched_wheels.base.bytecode`` first,
which prints a directory under the cache root (:func:`patched_wheels.base.cache.cache_root`), or nothing
when there is none to trust, in which case the rule keeps its per-repository prefix.

Bytecode is code, so the directory follows the caches' trust rule more strictly than a cache of JSON
rows can: Python reads ``.pyc`` files without asking us, and creates the directories below the prefix
with the umask's mode. Below ``bytecode``, one directory per interpreter (``sys.implementation.cache_tag``)
and helper source digest: Python checks a ``.pyc`` only against its source's mtime and size, and a release
of this module extracted at the same path with normalised mtimes must not run another release's bytecode.
The prefix is checked once, here, and every later helper process reads it by path, so it is used only if
nobody else could change what that path names until then (otherwise one warning names the directory at
fault and the rule keeps its per-repository prefix):

* ``bytecode`` and the release's directory (an existing one included) are real directories (``lstat``:
  no symbolic link), this user's, that nobody else may even enter (mode ``0700``, how they are created);
* every directory on the way to them, ``/`` to the cache root (symbolic links followed, each link
  root's or this user's), is root's or this user's and writable by nobody else unless sticky (``/tmp``),
  as sshd's ``StrictModes`` asks: a cache root others may write (a shared ``RULES_PATCHED_WHEELS_CACHE``
  of mode ``0777``) would let them rename ``bytecode`` away and put their own ``.pyc`` files there.

That costs one ``lstat`` per component of the path, at each helper start; nothing is listed.

Each release (or edit) of the helper thus gets a new directory, of about 1 MB per path the rules extract
the helper to (one per hub and output base). The one in use is touched each time it is chosen, and its
siblings untouched for :data:`STALE_AFTER` are removed then, so the cache holds the releases in use. A
process of an old release that loses its directory that way only compiles again (Python creates the
directories it writes into again, below the private root).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import sys
import time
from pathlib import Path

from patched_wheels.base.cache import cache_dir, make_private_directories
from patched_wheels.errors import UsageError, warn

PACKAGE = Path(__file__).resolve().parents[1]
"""The helper's sources, whose digest keys the bytecode (the pure wheels' files are pinned by sha256)."""

STALE_AFTER = 30 * 24 * 3600
"""Seconds since a release's directory was last chosen after which another release's run removes it."""

_MAX_LINKS = 40  # symbolic links followed on the way to the cache root, as Linux does (ELOOP)
_RELEASE_DIRECTORY = re.compile(r"[a-z0-9_.-]+-[0-9a-f]{16}")  # cache_tag-digest, any interpreter


def source_digest(package: Path = PACKAGE) -> str:
    """sha256 over every ``.py`` file of ``package``: its path below ``package`` and its bytes."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix().encode("utf-8", "surrogateescape")
        data = path.read_bytes()
        digest.update(b"%d:%s%d:" % (len(name), name, len(data)))
        digest.update(data)
    return digest.hexdigest()


def bytecode_dir(package: Path = PACKAGE) -> Path | None:
    """The persistent prefix for ``package``'s helper under this interpreter, created; None (with one
    warning when something is wrong, nothing when caching is ``off``) if there is none to trust."""
    try:
        root = cache_dir("bytecode")
    except UsageError:  # e.g. a relative RULES_PATCHED_WHEELS_CACHE: the helper's own run reports it
        return None
    if root is None:
        return None
    try:
        directory = _private_release(root, package)
    except OSError as error:
        where = f"{error.filename}: " if error.filename and os.fspath(error.filename) != str(root) else ""
        warn(
            f"{root}: bytecode directory not usable ({where}{error.strerror or error}); the helper compiles its modules"
        )
        return None
    if isinstance(directory, str):
        warn(f"{directory}; the helper compiles its modules")
        return None
    # Housekeeping, never a reason to give up the directory: a cache filled in advance may be read-only.
    with contextlib.suppress(OSError):
        os.utime(directory)
        _remove_stale(root, keep=directory.name)
    return directory


def _private_release(root: Path, package: Path) -> Path | str:
    """``root``'s directory for ``package`` under this interpreter, created, once it and everything on its path
    are checked; else why not, as a warning's start naming the directory at fault."""
    make_private_directories(root)
    problem = _shared_path(root) or _not_private(root)
    if problem is not None:
        return problem
    directory = root / f"{sys.implementation.cache_tag}-{source_digest(package)[:16]}"
    make_private_directories(directory)  # an existing one is as good as the checks below say
    return _not_private(directory) or directory


def _not_private(directory: Path) -> str | None:
    """Why ``directory`` (``bytecode`` or a release's, a symbolic link not followed) must not hold bytecode, as a
    warning's start naming it; None when it is a directory of this user's that nobody else may enter."""
    status = os.lstat(directory)
    mode = stat.S_IMODE(status.st_mode)
    if stat.S_ISLNK(status.st_mode):
        why = "a symbolic link"
    elif not stat.S_ISDIR(status.st_mode):
        why = f"not a directory ({stat.filemode(status.st_mode)})"
    elif status.st_uid != os.geteuid() or mode & 0o077:
        why = f"owned by uid {status.st_uid}, mode {mode:04o}"
    else:
        return None
    return f"{directory}: bytecode directory not used ({why}: it must be a directory of this user's, mode 0700)"


def _shared_path(root: Path) -> str | None:
    """Why another user could replace ``root`` (absolute, existing) or a directory above it, as a warning's start
    naming the directory (or symbolic link) at fault; None when nobody else can.

    Every directory walked through to reach ``root``'s parent, ``/`` first, symbolic links followed as the kernel
    does, must be root's or this user's and writable by nobody else unless sticky (``/tmp``); a symbolic link on the
    way must be root's or this user's (in a sticky directory its owner may replace it). As sshd's ``StrictModes``
    does: what the prefix names then stays what was checked here until this user (or root) changes it, so the later
    helper processes may read it by path. One ``lstat`` per component, no directory listed.
    """
    uid = os.geteuid()
    pending = str(root.parent).split("/")[::-1]  # components still to walk, the next one last
    current, links = "/", 0
    why = _shared(os.lstat(current), uid)
    while pending and why is None:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":  # ``current`` is a real directory (links resolved): its parent is the one walked through
            current = os.path.dirname(current)
            continue
        current = os.path.join(current, name)
        status = os.lstat(current)
        if stat.S_ISLNK(status.st_mode):
            links += 1
            if links > _MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), current)
            if status.st_uid not in (uid, 0):
                why = f"a symbolic link owned by uid {status.st_uid}"
                break
            target = os.readlink(current)
            pending.extend(target.split("/")[::-1])
            current = "/" if target.startswith("/") else os.path.dirname(current)
            continue
        if not stat.S_ISDIR(status.st_mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), current)
        why = _shared(status, uid)
    if why is None:
        return None
    return f"{current}: bytecode directory {root} not used (on its path, {why}: another user could replace it)"


def _shared(status: os.stat_result, uid: int) -> str | None:
    """Why another user could change what a directory with this ``lstat`` holds, or None."""
    if status.st_uid not in (uid, 0):
        return f"a directory owned by uid {status.st_uid}"
    if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not status.st_mode & stat.S_ISVTX:
        return f"a directory writable by group or others, not sticky (mode {stat.S_IMODE(status.st_mode):04o})"
    return None


def _remove_stale(root: Path, *, keep: str) -> None:
    """Remove ``root``'s release directories (only names this module makes; never through a symlink)
    not chosen for :data:`STALE_AFTER`; one that cannot be removed now is tried again next time."""
    oldest = time.time() - STALE_AFTER
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.name == keep or not _RELEASE_DIRECTORY.fullmatch(entry.name):
                continue
            try:
                stale = entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < oldest
            except OSError:  # removed meanwhile by another helper process choosing its own directory
                continue
            if stale:
                shutil.rmtree(entry.path, ignore_errors=True)


def main() -> int:
    """Print the directory (or an empty line); exits 0 whatever happens, so the rule can fall back."""
    directory = bytecode_dir()
    print("" if directory is None else directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
