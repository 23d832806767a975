"""The installed six is the hub's: patched (the marker) and renamed (the local version suffix)."""

import importlib.metadata
import sys

import six

failures = []
if getattr(six, "PATCHED_BY_RULES_PATCHED_WHEELS", None) != "e2e":
    failures.append(f"{six.__file__} lacks the patch's marker")
if importlib.metadata.version("six") != "1.17.0+e2e.1":
    failures.append(f"six's installed version is {importlib.metadata.version('six')}, not 1.17.0+e2e.1")
print("\n".join(failures) or "patched six imported")
sys.exit(1 if failures else 0)
