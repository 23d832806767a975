"""Download the pinned distributions of a requirements file into a directory and index it
(the job of ``pip2pi``), with the real pip so hashes, markers and indexes mean what they mean
to pip.

pip writes into its download directory with a plain copy, so it runs against a staging
directory inside ``directory``; files already present are hard-linked there first (pip then
reuses them instead of downloading again, checking their hashes). Only when pip succeeds are
the new files moved into place, each with an atomic rename, and the directory re-indexed; when
pip or the indexing fails (a download the index refuses), the new files are taken out again and
the ones they replaced put back, so nothing in ``directory`` changes.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from patched_wheels.base.fsutil import temp_directory
from patched_wheels.errors import InvalidLockError
from patched_wheels.index.simple import IndexResult, build_index

_DISTRIBUTION_SUFFIXES = (".whl", ".tar.gz", ".zip")
_REPLACED = ".replaced"  # in the staging directory: the files a download replaced, until the index is built


@dataclass(frozen=True)
class MirrorResult:
    """What pip fetched this time, and the index of the whole directory (for ``lock`` to be given)."""

    added: tuple[str, ...]  # file names pip downloaded (new or replaced)
    index: IndexResult


def mirror(
    requirements: Path | str, directory: Path | str, *, pip_args: Sequence[str] = (), named: Path | None = None
) -> MirrorResult:
    """``pip download --no-deps -r requirements`` into ``directory``, then ``build_index`` it.

    ``--no-deps``: the input is a lock, complete by construction; resolving again could pull
    in versions the lock did not choose. ``pip_args`` go to pip unchanged (``--index-url``,
    ``--platform``, ``--python-version``, ``--only-binary=:all:``, ...). ``named``: the lock as errors name it,
    where ``requirements`` is a copy of it (the command's, of the bytes it checked).
    """
    requirements, directory = Path(requirements), Path(directory)
    lock = requirements if named is None else named
    if not requirements.is_file():
        raise InvalidLockError(f"{lock}: no such requirements file")
    made = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    try:
        return _download(requirements, directory, pip_args, lock)
    except BaseException:
        if made:  # a failure leaves nothing, not even the directory it made (empty: the staging has gone)
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise


def _download(requirements: Path, directory: Path, pip_args: Sequence[str], lock: Path) -> MirrorResult:
    """:func:`mirror`'s download into a staging directory inside ``directory``, published there and indexed."""
    with temp_directory(directory, "mirror") as staging:
        present = _seed(directory, staging)
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-r",
            str(requirements),
            "-d",
            str(staging),
            *pip_args,
        ]
        # pip's progress and errors go to this process's stderr itself (descriptor 2), as they come: not held with
        # our warnings (patched_wheels.cli.main), and before our error line when it fails; stdout stays ours.
        status = subprocess.run(command, stdout=2, check=False).returncode
        if status != 0:
            raise InvalidLockError(f"{lock}: pip download failed (exit {status}); pip's message is above")
        added = _publish(staging, directory, present)
        try:
            index = build_index(directory)
        except BaseException:
            _unpublish(staging, directory, added)
            raise
    return MirrorResult(added=added, index=index)


def _seed(directory: Path, staging: Path) -> dict[str, int]:
    """Hard-link the distributions already in ``directory`` into ``staging``; map name -> inode."""
    present = {}
    for entry in os.scandir(directory):
        if entry.is_file(follow_symlinks=False) and entry.name.endswith(_DISTRIBUTION_SUFFIXES):
            try:
                os.link(entry.path, staging / entry.name)
            except OSError:
                continue  # no hard links here: pip downloads the file again
            present[entry.name] = entry.inode()
    return present


def _publish(staging: Path, directory: Path, present: dict[str, int]) -> tuple[str, ...]:
    """Move what pip fetched (anything that is not one of the seeded links) into ``directory``;
    a file it replaces is kept in the staging directory for :func:`_unpublish`."""
    replaced = staging / _REPLACED
    replaced.mkdir()
    added = []
    for entry in sorted(os.scandir(staging), key=lambda e: e.name):
        if entry.is_file(follow_symlinks=False) and present.get(entry.name) != entry.inode():
            target = directory / entry.name
            if os.path.lexists(target):
                os.rename(target, replaced / entry.name)
            os.replace(entry.path, target)
            added.append(entry.name)
    return tuple(added)


def _unpublish(staging: Path, directory: Path, added: tuple[str, ...]) -> None:
    """Undo :func:`_publish`: take the new files out, put the replaced ones back."""
    for name in added:
        kept = staging / _REPLACED / name
        if os.path.lexists(kept):
            os.replace(kept, directory / name)
        else:
            (directory / name).unlink(missing_ok=True)
