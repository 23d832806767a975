"""The WORKSPACE API end to end: `patched_index` + `pip_parse` on the fake CUDA wheels."""

from __future__ import annotations

import pytest

from support.bazelworkspace import SUFFIX, Setup, fakecuda, sha256_of

pytestmark = pytest.mark.bazel


def test_workspace_macros_fix_import(workspace_mode: Setup) -> None:
    workspace = workspace_mode.workspace
    result = workspace.run(
        "test", *workspace.config, "//:fixed_test", "//:runtime_test", "//:uvfixed_test", "//:runtime_layout_test"
    )
    assert result.returncode == 0, result.tail()
    assert "layout_test: PASSED" in workspace.test_log("runtime_layout_test")
    assert f"faketorch.answer() == {fakecuda.EXPECTED_ANSWER}" in workspace.test_log("fixed_test")
    assert f"fakejax.answer() == {fakecuda.RUNTIME_ANSWER}" in workspace.test_log("runtime_test")

    hub = workspace.hub("fixed")
    patched = list((hub / "index").glob(f"faketorch-2.1.0+{SUFFIX}-*.whl"))
    assert len(patched) == 1, sorted(path.name for path in (hub / "index").iterdir())
    lock = (hub / "requirements_lock.txt").read_text(encoding="utf-8")
    # The default index_option: a direct reference to the wheel the hub wrote (any rules_python reads it).
    assert f"faketorch @ file://{patched[0]} \\\n    --hash=sha256:{sha256_of(patched[0])}\n" in lock, lock
    # rules_python 0.22.1 installs with pip, which would fetch the upstream files by URL after every
    # `clean --expunge`: the hub's index serves the unpatched wheels too, and pip reads that index alone.
    nvidia = workspace_mode.pypi.wheels.nvidia
    assert sorted(path.name for path in (hub / "index").glob("*.whl")) == sorted(
        [patched[0].name, *(wheel.name for wheel in nvidia.values())]
    )
    assert f"--index-url={(hub / 'index' / 'simple').as_uri()}\n" in lock, lock
    for name, wheel in nvidia.items():
        assert sha256_of(hub / "index" / wheel.name) == sha256_of(wheel)
        assert f"fake-nvidia-{name}=={fakecuda.NVIDIA_VERSION} \\\n    --hash=sha256:{sha256_of(wheel)}\n" in lock, lock


def test_workspace_macro_reads_a_uv_lock(workspace_mode: Setup) -> None:
    """`patched_index(uv_lock = ...)`: pip_parse gets the requirements lock written from it."""
    workspace = workspace_mode.workspace
    assert f"faketorch.answer() == {fakecuda.EXPECTED_ANSWER}" in workspace.test_log("uvfixed_test")
    hub = workspace.hub("uvfixed")
    (patched,) = (hub / "index").glob(f"faketorch-2.1.0+{SUFFIX}-*.whl")
    lock = (hub / "requirements_lock.txt").read_text(encoding="utf-8")
    assert f"faketorch @ file://{patched} \\\n    --hash=sha256:{sha256_of(patched)}\n" in lock, lock
