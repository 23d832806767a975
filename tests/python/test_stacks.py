"""The stacks of issue 17 in miniature: one site-packages vs one directory per wheel vs patched, and doctor on each."""

from __future__ import annotations

import pytest

import stackshapes
from fakecuda import flat_layout, per_wheel_layout, run_import

BUILDERS = {
    "plugin": stackshapes.build_plugin_stack,
    "symbol": stackshapes.build_symbol_stack,
    "provider": stackshapes.build_provider_stack,
    "framework": stackshapes.build_framework_stack,
}


@pytest.fixture(scope="module")
def stacks(tmp_path_factory):
    root = tmp_path_factory.mktemp("stacks")
    return {name: build(root / name) for name, build in BUILDERS.items()}


@pytest.mark.parametrize("name", BUILDERS)
def test_each_stack_works_in_one_site_packages_only(stacks, name, tmp_path):
    stack = stacks[name]
    flat = run_import(flat_layout(stack.wheels, tmp_path / "flat"), stack.code)
    assert flat.returncode == 0 and flat.stdout.strip() == stack.expected, flat.stderr
    per_wheel = run_import(per_wheel_layout(stack.wheels, tmp_path / "per-wheel"), stack.code)
    assert per_wheel.stdout.strip() != stack.expected, per_wheel.stderr
