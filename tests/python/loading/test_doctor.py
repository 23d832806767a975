"""doctor: its two verdicts, checked against real imports of the fixtures (`--run` and by hand)."""

from __future__ import annotations

import re

import pytest

from patched_wheels.cli import main
from patched_wheels.elf.syslibs import system_library_names
from patched_wheels.loading.doctor import (
    COVERED,
    FAILS,
    MAY_FAIL,
    NOT_COVERED,
    NOT_LOADED,
    SKIPPED,
    diagnose,
)
from patched_wheels.loading.preload import PreloadRequest, plan_package_preload
from patched_wheels.patch.surgery import PatchOptions, patch_wheel
from support.fakecuda import (
    LIBRARY_PATHS,
    MISSING_SYSTEM_LIBRARY,
    RUNTIME_CODE,
    RUNTIME_GLOB,
    RUNTIME_LIBRARY_PATHS,
    build_fake_cuda_wheels,
    per_wheel_layout,
    run_import,
    with_escaping_library,
)

FOREIGN = ("jit", "sparse", "solver", "blas")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    return build_fake_cuda_wheels(tmp_path_factory.mktemp("fakecuda"))


@pytest.fixture(scope="module")
def patched_torch(wheels, tmp_path_factory):
    preload = plan_package_preload(PreloadRequest("faketorch"), wheels.all)
    return patch_wheel(
        wheels.torch, tmp_path_factory.mktemp("patched"), PatchOptions(suffix="pw.1", preload=preload)
    ).path


@pytest.fixture(scope="module")
def patched_runtime(runtime, tmp_path_factory):
    preload = plan_package_preload(PreloadRequest("fakejax", preload_wheels=[RUNTIME_GLOB]), runtime.all)
    return patch_wheel(
        runtime.package, tmp_path_factory.mktemp("patched"), PatchOptions(suffix="pw.1", preload=preload)
    ).path


def _pairs(findings):
    return {(finding.library.path, finding.needed): finding.status for finding in findings}


def _torch_pairs(status):
    return {
        (LIBRARY_PATHS["sparse"], "libjit.so.12"): status,
        (LIBRARY_PATHS["solver"], "libsparse.so.12"): status,
        (LIBRARY_PATHS["faketorch"], "libsolver.so.12"): status,
        (LIBRARY_PATHS["faketorch"], "libblas.so.12"): status,
    }


def test_lists_what_fails_with_one_directory_per_wheel(wheels, tmp_path):
    diagnosis = diagnose(wheels.all)
    assert _pairs(diagnosis.findings) == _torch_pairs(FAILS)
    assert diagnosis.fails
    # The prediction matches reality: the first library torch's order loads is libsparse, and it fails on libjit.
    result = run_import(per_wheel_layout(wheels.all, tmp_path))
    assert "libjit.so.12" in result.stderr and result.returncode != 0


def test_as_is_fails_and_the_generated_preload_covers_every_failure(wheels):
    diagnosis = diagnose(wheels.all, package="faketorch")
    assert not diagnosis.installed and diagnosis.as_is.preload.libraries == ()
    assert _pairs(diagnosis.as_is.findings) == _torch_pairs(NOT_COVERED)
    assert diagnosis.fails
    assert sorted(diagnosis.generated.preload.libraries) == sorted(LIBRARY_PATHS[name] for name in FOREIGN)
    assert _pairs(diagnosis.generated.findings) == _torch_pairs(COVERED)
    assert not diagnosis.generated.fails


def test_patched_set_loads_as_is(wheels, patched_torch):
    diagnosis = diagnose([*wheels.nvidia.values(), patched_torch], package="faketorch")
    assert diagnosis.installed
    assert diagnosis.as_is.preload.libraries == diagnosis.generated.preload.libraries
    assert diagnosis.as_is.preload.global_ == frozenset()  # patched with an observation: nothing needs RTLD_GLOBAL
    assert diagnosis.generated.preload.global_ is None  # the ELF graph alone reads no symbol table
    assert _pairs(diagnosis.as_is.findings) == _torch_pairs(COVERED)
    assert not diagnosis.fails


def test_installed_preload_is_read_from_the_wheel(wheels, tmp_path):
    # Patched against solver+sparse only: its preload cannot know jit and blas.
    preload = plan_package_preload(
        PreloadRequest("faketorch"), [wheels.torch, wheels.nvidia["solver"], wheels.nvidia["sparse"]]
    )
    patched = patch_wheel(wheels.torch, tmp_path / "out", PatchOptions(suffix="pw.1", preload=preload)).path
    diagnosis = diagnose([*wheels.nvidia.values(), patched], package="faketorch")
    assert diagnosis.installed
    assert diagnosis.as_is.preload.libraries == (LIBRARY_PATHS["sparse"], LIBRARY_PATHS["solver"])
    assert _pairs(diagnosis.as_is.findings) == {
        (LIBRARY_PATHS["sparse"], "libjit.so.12"): NOT_COVERED,
        (LIBRARY_PATHS["solver"], "libsparse.so.12"): COVERED,
        (LIBRARY_PATHS["faketorch"], "libsolver.so.12"): COVERED,
        (LIBRARY_PATHS["faketorch"], "libblas.so.12"): NOT_COVERED,
    }
    assert diagnosis.fails and not diagnosis.generated.fails
    result = run_import(per_wheel_layout([*wheels.nvidia.values(), patched], tmp_path / "site"))
    assert result.returncode != 0 and "libjit.so.12" in result.stderr


def test_missing_dependency_is_reported_and_libraries_the_package_never_loads_do_not_fail_it(
    wheels, patched_torch, capsys
):
    subset = [wheels.nvidia["sparse"], wheels.nvidia["solver"], wheels.nvidia["blas"], patched_torch]
    diagnosis = diagnose(subset, package="faketorch")
    missing = [finding for finding in diagnosis.findings if finding.needed == "libjit.so.12"]
    assert len(missing) == 1 and missing[0].provider is None and missing[0].status == NOT_COVERED
    assert main(["doctor", "--no-cache", *map(str, subset), "--package", "faketorch"]) == 1
    out = capsys.readouterr().out
    assert (
        f"{LIBRARY_PATHS['sparse']} ({wheels.nvidia['sparse'].name}): needs libjit.so.12, found in no wheel given nor on this system"
        in out
    )
    assert (
        main(["doctor", "--no-cache", *map(str, subset), "--package", "faketorch", "--assume-system", "libjit.so.12"])
        == 0
    )
    capsys.readouterr()
    unrelated = diagnose(
        [wheels.nvidia["jit"], wheels.nvidia["sparse"], wheels.torch, wheels.nvidia["blas"]], package="faketorch"
    )
    assert _pairs(unrelated.findings)[(LIBRARY_PATHS["sparse"], "libjit.so.12")] == NOT_LOADED


def test_system_libraries_are_not_findings(wheels):
    assert {
        "libc.so.6",
        "libcuda.so.1",
    } <= system_library_names()  # libcuda: the GPU driver's, even on this GPU-less host
    diagnosis = diagnose([wheels.nvidia["jit"]], system_names=set())
    assert _pairs(diagnosis.findings) == {(LIBRARY_PATHS["jit"], "libc.so.6"): FAILS}
    assert diagnose([wheels.nvidia["jit"]]).findings == ()


def test_exit_status_follows_the_set_as_it_is(wheels, patched_torch, capsys):
    assert main(["doctor", "--no-cache", *map(str, wheels.all)]) == 1
    assert "predicted, as is: 3 libraries fail to load with one directory per wheel" in capsys.readouterr().out
    assert main(["doctor", "--no-cache", *map(str, wheels.all), "--package", "faketorch"]) == 1
    out = capsys.readouterr().out
    assert "as is: faketorch's wheel has no preload generated by patched-wheels" in out
    assert "NOT covered by the preload" in out
    assert "predicted, as is: 3 libraries fail to load with one directory per wheel" in out
    assert 'with the generated preload (preload = "elf", ELF graph only: no probe run): 4 libraries' in out
    assert "with the generated preload: every library loads with one directory per wheel" in out
    assert (
        main(["doctor", "--no-cache", *map(str, wheels.nvidia.values()), str(patched_torch), "--package", "faketorch"])
        == 0
    )
    out = capsys.readouterr().out
    assert "as is: faketorch's wheel has a generated preload of 4 libraries" in out
    assert "predicted, as is: every library loads with one directory per wheel" in out


def test_run_agrees_with_the_verdict_the_old_doctor_did_not_give(wheels, capsys):
    """The unpatched set: the planned preload (all the old doctor judged, exit 0) covers everything, yet the import fails."""
    assert not diagnose(wheels.all, package="faketorch").generated.fails
    assert main(["doctor", "--no-cache", *map(str, wheels.all), "--package", "faketorch", "--run"]) == 1
    out = capsys.readouterr().out
    assert "run: import faketorch (this interpreter)" in out
    flat, per_wheel = out.split("  every wheel in one site-packages (a virtual environment):\n")[1].split(
        "  one directory per wheel (python -S, 5 directories on PYTHONPATH):\n"
    )
    assert flat.startswith("    exit status: 0\n    mapped: 6 of the set's 6 libraries\n")
    assert per_wheel.startswith(
        "    exit status: 1\n"
        "    first error: OSError: libjit.so.12: cannot open shared object file: No such file or directory\n"
        "    mapped: 0 of the set's 6 libraries\n"  # the failed dlopen of libsparse unmapped it again
    )
    assert "  mapped in one site-packages, NOT with one directory per wheel:\n" in out
    assert (
        "run: fails: one directory per wheel differs from one site-packages: exit status 1, 0 in one site-packages; "
        in out
    )
    assert "6 of the set's libraries mapped in one site-packages are not mapped" in out
    assert "prediction (static, as is): fails, as the run shows" in out


def test_run_of_the_patched_set_maps_every_library(wheels, patched_torch, capsys):
    wheel_set = [*map(str, wheels.nvidia.values()), str(patched_torch)]
    code = "import faketorch; print(faketorch.answer())"
    assert main(["doctor", "--no-cache", *wheel_set, "--package", "faketorch", f"--run={code}"]) == 0
    out = capsys.readouterr().out
    assert out.count("    exit status: 0") == 2 and "    stdout: 122" in out and "first error" not in out
    assert out.count("    mapped: 6 of the set's 6 libraries") == 2
    assert all(f"    mapped: {LIBRARY_PATHS[name]} (" in out for name in LIBRARY_PATHS)
    assert "run: passes: one directory per wheel does what one site-packages does\n" in out
    assert "prediction (static, as is): loads, as the run shows" in out


def test_runtime_loaded_libraries_fail_as_is_with_a_hint(runtime, capsys):
    diagnosis = diagnose(runtime.all, package="fakejax")
    assert _pairs(diagnosis.as_is.findings) == {
        (RUNTIME_LIBRARY_PATHS["foo"], "libbar.so.1"): MAY_FAIL,
        (RUNTIME_LIBRARY_PATHS["pmix"], MISSING_SYSTEM_LIBRARY): MAY_FAIL,
    }
    assert diagnosis.generated.preload.libraries == () and diagnosis.generated.fails
    # The hint names no list of wheels (none was checked by a run): it asks for a probe.
    assert (
        diagnosis.hint is not None
        and "give a probe that makes it do so" in diagnosis.hint
        and "*" not in diagnosis.hint
    )
    assert main(["doctor", "--no-cache", *map(str, runtime.all), "--package", "fakejax", f"--run={RUNTIME_CODE}"]) == 1
    out = capsys.readouterr().out
    # With --run, the generated preload includes what `import fakejax` maps in one site-packages: no hint.
    assert "fakejax requires" not in out
    assert 'with the generated preload (preload = "auto", probe = "import fakejax"): 2 libraries' in out
    assert "first error: OSError: libbar.so.1: cannot open shared object file" in out
    assert "run: fails: one directory per wheel differs from one site-packages" in out
    assert "prediction (static, as is): fails, as the run shows" in out


def test_generated_preload_with_preload_wheels_covers_runtime_loads_and_skips_the_broken_plugin(runtime, capsys):
    diagnosis = diagnose(runtime.all, package="fakejax", preload_wheels=[RUNTIME_GLOB])
    assert diagnosis.fails and diagnosis.hint is None
    preload = diagnosis.generated.preload
    assert preload.libraries.index(RUNTIME_LIBRARY_PATHS["bar"]) < preload.libraries.index(RUNTIME_LIBRARY_PATHS["foo"])
    assert preload.optional == set(RUNTIME_LIBRARY_PATHS.values())
    assert _pairs(diagnosis.generated.findings) == {
        (RUNTIME_LIBRARY_PATHS["foo"], "libbar.so.1"): COVERED,
        (RUNTIME_LIBRARY_PATHS["pmix"], MISSING_SYSTEM_LIBRARY): SKIPPED,
    }
    assert (
        main(["doctor", "--no-cache", *map(str, runtime.all), "--package", "fakejax", "--preload-wheels", RUNTIME_GLOB])
        == 1
    )
    out = capsys.readouterr().out
    assert (
        'with the generated preload (preload = "elf", ELF graph only: no probe run, preload_wheels = ["fakert-*"]): 3 libraries'
        in out
    )
    assert (
        "with the generated preload: every library loads with one directory per wheel (1 optional library skipped by the preload)"
        in out
    )


def test_patched_runtime_set_runs_and_maps_what_it_loads(runtime, patched_runtime, capsys):
    wheel_set = [str(runtime.foo), str(runtime.bar), str(patched_runtime)]
    assert main(["doctor", "--no-cache", *wheel_set, "--package", "fakejax", f"--run={RUNTIME_CODE}"]) == 0
    out = capsys.readouterr().out
    assert (
        "predicted, as is: every library loads with one directory per wheel (1 optional library skipped by the preload)"
        in out
    )
    assert "    stdout: 41" in out
    assert out.count("    mapped: 2 of the set's 3 libraries") == 2
    assert (
        f"    mapped: {RUNTIME_LIBRARY_PATHS['bar']} (" in out
        and f"    mapped: {RUNTIME_LIBRARY_PATHS['foo']} (" in out
    )
    assert "run: passes: one directory per wheel does what one site-packages does\n" in out
    assert "prediction (static, as is): loads, as the run shows" in out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--run"], "--run needs CODE or --package"),
        (["--preload-wheels", "x-*"], "--preload-wheels needs --package"),
        (
            ["--package", "fakejax", "--preload-wheels", "nothing-*"],
            "preload wheels glob 'nothing-\\*' matches no other wheel",
        ),
    ],
)
def test_bad_requests_are_one_error_line(runtime, capsys, arguments, message):
    assert main(["doctor", "--no-cache", *map(str, runtime.all), *arguments]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert re.search(message, error), error


def test_a_wheel_given_as_code_is_an_error(runtime, capsys):
    assert main(["doctor", "--no-cache", "--package", "fakejax", "--run", str(runtime.foo), str(runtime.bar)]) == 1
    assert "a wheel, not code; put --run after the wheels or write --run=CODE" in capsys.readouterr().err


def test_a_wheel_with_an_escaping_member_is_one_error_line(wheels, tmp_path, capsys):
    wheel_set = with_escaping_library(wheels, tmp_path)
    assert main(["doctor", "--no-cache", "--package", "faketorch", *map(str, wheel_set)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"patched-wheels: error: {wheels.nvidia['jit'].name}: member '../../../../tmp/x/libjit.so.12': "
        "unsafe path (absolute, '..' or empty component)\n"
    )
