"""Install schemes: where each archive member of a wheel lands, read from its path alone."""

from __future__ import annotations

import pytest

from patched_wheels.wheelfile.schemes import data_scheme, install_path


@pytest.mark.parametrize(
    ("member", "installed"),
    [
        ("torch/lib/libtorch.so", "torch/lib/libtorch.so"),  # site-packages: as it is
        ("pkg-1.0.data/platlib/pkg/_c.so", "pkg/_c.so"),  # purelib/platlib: into site-packages too
        ("pkg-1.0.data/purelib/pkg/__init__.py", "pkg/__init__.py"),
        ("CyFES-2.7.data/data/cyfes/x.so", "CyFES-2.7.data/data/cyfes/x.so"),  # outside: the prefix stays
        ("pkg-1.0.data/scripts/run", "pkg-1.0.data/scripts/run"),
        ("pkg-1.0.data/headers/pkg.h", "pkg-1.0.data/headers/pkg.h"),
        ("pkg-1.0.data/unknown/x.so", None),  # a scheme no installer knows
        ("pkg-1.0.data/platlib", None),  # the scheme's directory itself, nothing under it
        ("notdata/pkg-1.0.data/data/x", "notdata/pkg-1.0.data/data/x"),  # .data only counts at the top
    ],
)
def test_install_path(member: str, installed: str | None) -> None:
    assert install_path(member) == installed


@pytest.mark.parametrize(
    ("path", "scheme"),
    [
        ("CyFES-2.7.data/data/cyfes/x.so", ("CyFES-2.7", "data", "cyfes/x.so")),
        ("pkg-1.0.data/scripts/bin/run", ("pkg-1.0", "scripts", "bin/run")),
        ("pkg-1.0.data/headers/pkg.h", ("pkg-1.0", "headers", "pkg.h")),
        ("pkg/_c.so", None),
        ("pkg-1.0.data/platlib/pkg/_c.so", None),  # not an install path: install_path strips that prefix
        ("pkg-1.0.data/data/", None),  # nothing under the scheme
    ],
)
def test_data_scheme(path: str, scheme: tuple[str, str, str] | None) -> None:
    assert data_scheme(path) == scheme
