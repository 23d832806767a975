"""The generated preloader, end to end: real imports in flat and per-wheel layouts."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest

from fakecuda import (
    EXPECTED_ANSWER,
    LIBRARY_PATHS,
    build_fake_cuda_wheels,
    flat_layout,
    per_wheel_layout,
    run_import,
    with_escaping_library,
)
from patched_wheels.errors import PatchedWheelsError
from patched_wheels.preload import (
    PRELOAD_MODULE,
    add_preload_import,
    preload_member_edits,
    read_preload_module,
    render_preload_module,
)
from patched_wheels.surgery import patch_wheel


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    return build_fake_cuda_wheels(tmp_path_factory.mktemp("fakecuda"))


@pytest.fixture(scope="module")
def preloaded_torch(wheels, tmp_path_factory):
    edits = preload_member_edits("faketorch", wheels.all)
    return patch_wheel(wheels.torch, tmp_path_factory.mktemp("patched"), suffix="pw.1", member_edits=edits).path


def _imports(result):
    return result.returncode == 0 and result.stdout.strip() == str(EXPECTED_ANSWER)


def test_per_wheel_layout_fails_without_preload_and_works_with_it(wheels, preloaded_torch, tmp_path):
    without = run_import(per_wheel_layout(wheels.all, tmp_path / "without"))
    assert without.returncode != 0
    assert "libjit.so.12: cannot open shared object file" in without.stderr
    with_preload = run_import(per_wheel_layout([*wheels.nvidia.values(), preloaded_torch], tmp_path / "with"))
    assert _imports(with_preload), with_preload.stderr


def test_flat_layout_works_with_and_without_preload(wheels, preloaded_torch, tmp_path):
    assert _imports(run_import(flat_layout(wheels.all, tmp_path / "without")))
    result = run_import(flat_layout([*wheels.nvidia.values(), preloaded_torch], tmp_path / "with"))
    assert _imports(result), result.stderr


def test_the_failure_is_the_preload_order(tmp_path):
    fixed = build_fake_cuda_wheels(tmp_path / "wheels", broken_order=False)
    result = run_import(per_wheel_layout(fixed.all, tmp_path / "site"))
    assert _imports(result), result.stderr


def test_generated_module_loads_foreign_libraries_dependencies_first(wheels, preloaded_torch):
    with zipfile.ZipFile(preloaded_torch) as archive:
        libraries = read_preload_module(archive.read(f"faketorch/{PRELOAD_MODULE}.py"), where="test")
        init = archive.read("faketorch/__init__.py").decode()
    assert sorted(libraries) == sorted(LIBRARY_PATHS[name] for name in ("jit", "sparse", "solver", "blas"))
    assert libraries.index(LIBRARY_PATHS["jit"]) < libraries.index(LIBRARY_PATHS["sparse"])
    assert libraries.index(LIBRARY_PATHS["sparse"]) < libraries.index(LIBRARY_PATHS["solver"])
    docstring_end = init.index('"""', 3) + 3
    assert init[docstring_end:].lstrip("\n").startswith(f"from . import {PRELOAD_MODULE}")


def test_edits_need_the_package_and_something_to_preload(wheels):
    with pytest.raises(PatchedWheelsError, match="nosuchpkg: no wheel in the set ships nosuchpkg/__init__.py"):
        preload_member_edits("nosuchpkg", wheels.all)
    with pytest.raises(PatchedWheelsError, match="faketorch needs no shared library from the other wheels"):
        preload_member_edits("faketorch", [wheels.torch])


def test_generated_module_skips_absent_libraries_and_is_a_no_op_off_linux(tmp_path, wheels):
    sites = per_wheel_layout([wheels.nvidia["jit"]], tmp_path / "site")
    module = tmp_path / "probe.py"
    module.write_bytes(render_preload_module("probe", ["no/such/libnothere.so.1", LIBRARY_PATHS["jit"]]))
    probe = (
        "import ctypes, sys\n"
        "loaded = []\n"
        "ctypes.CDLL = lambda path, mode=0: loaded.append(path)\n"
        "sys.platform = {platform!r}\n"
        "exec(compile(open({module!r}).read(), 'probe', 'exec'), {{}})\n"
        "print(loaded)\n"
    )
    for platform, expected in (("linux", [str(sites[0] / LIBRARY_PATHS["jit"])]), ("darwin", [])):
        result = subprocess.run(
            [sys.executable, "-c", probe.format(platform=platform, module=str(module))],
            env={"PYTHONPATH": str(sites[0])},
            capture_output=True,
            text=True,
            check=True,
        )
        assert result.stdout.strip() == repr(expected)


def test_import_goes_after_docstring_and_future_imports_and_only_once():
    source = b'"""Doc."""\nfrom __future__ import annotations\nimport os\n'
    edited = add_preload_import(source, where="pkg/__init__.py")
    lines = edited.decode().splitlines()
    assert lines[:2] == ['"""Doc."""', "from __future__ import annotations"]
    assert lines[2].startswith(f"from . import {PRELOAD_MODULE}")
    assert lines[3] == "import os"
    assert add_preload_import(edited, where="pkg/__init__.py") == edited
    compile(edited, "pkg/__init__.py", "exec")


def test_import_keeps_crlf_coding_cookie_and_handles_empty_files():
    source = b"# -*- coding: utf-8 -*-\r\nimport os\r\n"
    assert add_preload_import(source, where="x").split(b"\r\n")[:3] == [
        b"# -*- coding: utf-8 -*-",
        f"from . import {PRELOAD_MODULE}  # patched-wheels: load shared libraries from other wheels first".encode(),
        b"import os",
    ]
    assert add_preload_import(b"", where="x").startswith(f"from . import {PRELOAD_MODULE}".encode())


def test_import_into_broken_or_missing_init_is_an_error():
    with pytest.raises(PatchedWheelsError, match="^pkg/__init__.py: cannot parse"):
        add_preload_import(b"def broken(:\n", where="pkg/__init__.py")
    with pytest.raises(PatchedWheelsError, match="^pkg/__init__.py: missing"):
        add_preload_import(None, where="pkg/__init__.py")


def test_reading_a_module_that_is_not_a_preload_is_an_error():
    with pytest.raises(PatchedWheelsError, match="^w.whl: pkg/_patched_wheels_preload.py: not a patched-wheels preload module"):
        read_preload_module(b"X = 1\n", where="w.whl: pkg/_patched_wheels_preload.py")


def test_a_wheel_with_an_escaping_member_never_reaches_the_preload(wheels, tmp_path):
    with pytest.raises(PatchedWheelsError) as caught:
        preload_member_edits("faketorch", with_escaping_library(wheels, tmp_path))
    assert str(caught.value) == (
        f"{wheels.nvidia['jit'].name}: member '../../../../tmp/x/libjit.so.12': unsafe path (absolute, '..' or empty component)"
    )
