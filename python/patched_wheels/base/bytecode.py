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
with the umask's mode, so the ``bytecode`` directory is used only if it is ours (or root's) and nobody
else may enter it (mode ``0700``, which is how it is created). Below it, one directory per interpreter
(``sys.implementation.cache_tag``) and helper source digest: Python checks a ``.pyc`` only against its
source's mtime and size, and a release of this module extracted at the same path with normalised
mtimes must not run another release's bytecode.

Each release (or edit) of the helper thus gets a new directory, of about 1 MB per path the rules extract
the helper to (one per hub and output base). The one in use is touched each time it is chosen, and its
siblings untouched for :data:`STALE_AFTER` are removed then, so the cache holds the releases in use. A
process of an old release that loses its directory that way only compiles again (Python creates the
directories it writes into again, below the private root).
"""

from __future__ import annotations

import contextlib
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
        make_private_directories(root)
        status = os.stat(root)
        if status.st_uid not in (os.geteuid(), 0) or stat.S_IMODE(status.st_mode) & 0o077:
            warn(
                f"{root}: bytecode directory not used (owned by uid {status.st_uid}, mode "
                f"{stat.S_IMODE(status.st_mode):04o}: it must be this user's and 0700); the helper compiles its modules"
            )
            return None
        directory = root / f"{sys.implementation.cache_tag}-{source_digest(package)[:16]}"
        make_private_directories(directory)
    except OSError as error:
        warn(f"{root}: bytecode directory not usable ({error.strerror or error}); the helper compiles its modules")
        return None
    # Housekeeping, never a reason to give up the directory: a cache filled in advance may be read-only.
    with contextlib.suppress(OSError):
        os.utime(directory)
        _remove_stale(root, keep=directory.name)
    return directory


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
