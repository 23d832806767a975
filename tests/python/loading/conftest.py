"""Fixtures the loading tests share: the runtime-loaded fake CUDA set, and a private helper cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.fakecuda import RuntimeLoadedWheels, build_runtime_loaded_wheels


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> RuntimeLoadedWheels:
    """The set whose package maps its libraries with ctypes when imported: built once per module."""
    return build_runtime_loaded_wheels(tmp_path_factory.mktemp("runtime"))


@pytest.fixture()
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The helper cache's directory of probe observations, in a cache of the test's own."""
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "observed"
