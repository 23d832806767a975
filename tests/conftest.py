"""pytest's configuration for every test folder: the checks a run makes before any test.

Fixtures that build inputs (wheels, ELF chains, indexes, locks, workspaces) are plain modules of
``support`` (``from support.fakecuda import build_fake_cuda_wheels``), importable because
pyproject.toml names ``tests`` in pytest's ``pythonpath``; no test edits ``sys.path``.
"""

from __future__ import annotations

import importlib.util


def pytest_configure(config) -> None:
    """One ``support`` package, this one: a stale install or a second folder of that name on the path
    would hand the tests other fixtures than the ones next to them."""
    from pathlib import Path

    spec = importlib.util.find_spec("support")
    expected = Path(__file__).resolve().parent / "support" / "__init__.py"
    if spec is None or spec.origin is None or Path(spec.origin).resolve() != expected:
        raise RuntimeError(f"tests/conftest.py: `support` resolves to {spec and spec.origin}, not {expected}")
