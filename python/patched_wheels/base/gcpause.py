"""Pause Python's cycle collector while many objects without cycles are built.

Opening torch's wheel builds a record per member and a row per RECORD line (10,600 each), and
writing it builds as many again: tens of thousands of small objects, none in a reference cycle,
that the collector, triggered every 700 allocations, traverses over and over (about 5 % of a
split's instructions).  Importing a command's modules and building its parser is the same
(functions, classes, argparse's actions: 7 ms of collections of a command's start-up).
Reference counting frees them as before; only the cycle search waits.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

__all__ = ["cycle_collection_paused"]


@contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """No automatic cycle collection inside; on exit it is as it was before (paused ones nest)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
