"""The one schema reader, for the modules that still name it here (``hub/verified.py`` and its test, which another
change owns): it lives in :mod:`patched_wheels.base.schema`, where ``loading/`` and ``lock/`` can read their documents
with it too. Import it from there."""

from __future__ import annotations

from patched_wheels.base.schema import read_object, to_json

__all__ = ["read_object", "to_json"]
