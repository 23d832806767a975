"""The one schema reader, for the hub modules that still name it here (``hub/verified.py``, which another change
owns): it lives in :mod:`patched_wheels.base.schema`, where ``loading/`` and ``lock/`` can read their documents
with it too. Import it from there."""

from __future__ import annotations

from patched_wheels.base.schema import read_object

__all__ = ["read_object"]
