"""Fixtures of the Bazel integration tests: one workspace per mode, shared by a test module.

Starting Bazel (a server, rules_python, pip installs) costs far more than any single assertion, so
each module gets one workspace and shuts its server down (and drops its output base) at the end.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from support.bazelworkspace import (
    BAZEL,
    Setup,
    make_bzlmod_workspace,
    make_cycles_workspace,
    make_workspace_mode_workspace,
    serve_over_http,
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "bazel: drives tools/bazel on a generated workspace (slow; `tools/test --quick` deselects it)"
    )


def _skip_without_bazel_launcher() -> None:
    if not os.access(BAZEL, os.X_OK):
        pytest.skip(f"{BAZEL} is not executable")


@pytest.fixture(scope="module")
def bzlmod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    _skip_without_bazel_launcher()
    setup = make_bzlmod_workspace(tmp_path_factory.mktemp("bzlmod"))
    yield setup
    setup.workspace.shutdown()


@pytest.fixture(scope="module")
def workspace_mode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    _skip_without_bazel_launcher()
    root = tmp_path_factory.mktemp("workspace")
    with serve_over_http(root / "pypi") as http_url:
        setup = make_workspace_mode_workspace(root, http_url)
        yield setup
        setup.workspace.shutdown()


@pytest.fixture(scope="module")
def cycles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Setup, Path]]:
    """The workspace of test_bazel_cycles.py and fakepil's wheel (see make_cycles_workspace)."""
    _skip_without_bazel_launcher()
    setup, pil = make_cycles_workspace(tmp_path_factory.mktemp("cycles"))
    yield setup, pil
    setup.workspace.shutdown()
