"""tools/release, importable by the tests (a script without a .py suffix)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from types import ModuleType

RELEASE = Path(__file__).resolve().parents[2] / "tools" / "release"


def load_release() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("rpw_release", str(RELEASE))
    spec = importlib.util.spec_from_loader("rpw_release", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
