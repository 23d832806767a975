"""doctor: its predictions are checked against real imports of the fixtures."""

from __future__ import annotations

import pytest

from fakecuda import LIBRARY_PATHS, build_fake_cuda_wheels, per_wheel_layout, run_import, with_escaping_library
from patched_wheels.cli import main
from patched_wheels.doctor import COVERED, FAILS, NOT_COVERED, NOT_LOADED, diagnose, system_library_names
from patched_wheels.preload import preload_member_edits
from patched_wheels.surgery import patch_wheel


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    return build_fake_cuda_wheels(tmp_path_factory.mktemp("fakecuda"))


def _pairs(diagnosis):
    return {(finding.library.path, finding.needed): finding.status for finding in diagnosis.findings}


def test_lists_what_fails_with_one_directory_per_wheel(wheels, tmp_path):
    diagnosis = diagnose(wheels.all)
    assert _pairs(diagnosis) == {
        (LIBRARY_PATHS["sparse"], "libjit.so.12"): FAILS,
        (LIBRARY_PATHS["solver"], "libsparse.so.12"): FAILS,
        (LIBRARY_PATHS["faketorch"], "libsolver.so.12"): FAILS,
        (LIBRARY_PATHS["faketorch"], "libblas.so.12"): FAILS,
    }
    assert diagnosis.fails
    # The prediction matches reality: the first library torch's order loads is libsparse, and it fails on libjit.
    result = run_import(per_wheel_layout(wheels.all, tmp_path))
    assert "libjit.so.12" in result.stderr and result.returncode != 0


def test_planned_preload_covers_every_failure(wheels):
    diagnosis = diagnose(wheels.all, package="faketorch")
    assert diagnosis.preload_origin == "planned"
    assert set(_pairs(diagnosis).values()) == {COVERED}
    assert not diagnosis.fails


def test_installed_preload_is_read_from_the_wheel(wheels, tmp_path):
    # Patched against solver+sparse only: its preload cannot know jit and blas.
    edits = preload_member_edits("faketorch", [wheels.torch, wheels.nvidia["solver"], wheels.nvidia["sparse"]])
    patched = patch_wheel(wheels.torch, tmp_path / "out", suffix="pw.1", member_edits=edits).path
    diagnosis = diagnose([*wheels.nvidia.values(), patched], package="faketorch")
    assert diagnosis.preload_origin == "installed"
    assert diagnosis.preload == (LIBRARY_PATHS["sparse"], LIBRARY_PATHS["solver"])
    assert _pairs(diagnosis) == {
        (LIBRARY_PATHS["sparse"], "libjit.so.12"): NOT_COVERED,
        (LIBRARY_PATHS["solver"], "libsparse.so.12"): COVERED,
        (LIBRARY_PATHS["faketorch"], "libsolver.so.12"): COVERED,
        (LIBRARY_PATHS["faketorch"], "libblas.so.12"): NOT_COVERED,
    }
    assert diagnosis.fails
    result = run_import(per_wheel_layout([*wheels.nvidia.values(), patched], tmp_path / "site"))
    assert result.returncode != 0 and "libjit.so.12" in result.stderr


def test_missing_dependency_is_reported_and_libraries_the_package_never_loads_do_not_fail_it(wheels, capsys):
    subset = [wheels.nvidia["sparse"], wheels.nvidia["solver"], wheels.nvidia["blas"], wheels.torch]
    diagnosis = diagnose(subset, package="faketorch")
    missing = [finding for finding in diagnosis.findings if finding.needed == "libjit.so.12"]
    assert len(missing) == 1 and missing[0].provider is None and missing[0].status == NOT_COVERED
    assert main(["doctor", "--no-cache", "--package", "faketorch", *map(str, subset)]) == 1
    out = capsys.readouterr().out
    assert f"{LIBRARY_PATHS['sparse']} ({wheels.nvidia['sparse'].name}): needs libjit.so.12, found in no wheel given nor on this system" in out
    assert main(["doctor", "--no-cache", "--package", "faketorch", "--assume-system", "libjit.so.12", *map(str, subset)]) == 0
    capsys.readouterr()
    unrelated = diagnose([wheels.nvidia["jit"], wheels.nvidia["sparse"], wheels.torch, wheels.nvidia["blas"]], package="faketorch")
    assert _pairs(unrelated)[(LIBRARY_PATHS["sparse"], "libjit.so.12")] == NOT_LOADED


def test_system_libraries_are_not_findings(wheels):
    assert {"libc.so.6", "libcuda.so.1"} <= system_library_names()  # libcuda: the GPU driver's, even on this GPU-less host
    diagnosis = diagnose([wheels.nvidia["jit"]], system_names=set())
    assert _pairs(diagnosis) == {(LIBRARY_PATHS["jit"], "libc.so.6"): FAILS}
    assert diagnose([wheels.nvidia["jit"]]).findings == ()


def test_command_exit_status_follows_the_prediction(wheels, capsys):
    assert main(["doctor", "--no-cache", *map(str, wheels.all)]) == 1
    out = capsys.readouterr().out
    assert "4 dependencies would fail to load with one directory per wheel" in out
    assert main(["doctor", "--no-cache", "--package", "faketorch", *map(str, wheels.all)]) == 0
    out = capsys.readouterr().out
    assert "covered by faketorch's preload" in out and "planned preload of faketorch: 4 libraries" in out


def test_a_wheel_with_an_escaping_member_is_one_error_line(wheels, tmp_path, capsys):
    wheel_set = with_escaping_library(wheels, tmp_path)
    assert main(["doctor", "--no-cache", "--package", "faketorch", *map(str, wheel_set)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"patched-wheels: error: {wheels.nvidia['jit'].name}: member '../../../../tmp/x/libjit.so.12': "
        "unsafe path (absolute, '..' or empty component)\n"
    )
