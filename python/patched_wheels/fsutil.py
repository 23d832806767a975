"""Whole-file writes that a concurrent reader never sees half done."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_FILE_MODE = 0o644
"""Temp files are created 0600; what is published (index pages, caches) must stay world-readable."""


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` via a temp file in the same directory, so a reader sees
    the old or the new file, never a part, and a failure leaves no temp file behind; equal
    content is not rewritten, so a warm run writes nothing (and mtimes stay put)."""
    try:
        if path.read_bytes() == data:
            return
    except OSError:
        pass
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temp, _FILE_MODE)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
