"""The stacks of issue 17 in miniature: one site-packages vs one directory per wheel vs patched, and doctor on each."""

from __future__ import annotations

import dataclasses
import zipfile

import pytest

from patched_wheels.cli import main
from patched_wheels.elf.graph import read_graph
from patched_wheels.loading.layout import SITE_PACKAGES
from patched_wheels.loading.preload import PreloadRequest, plan_package_preload
from patched_wheels.loading.preloadmodule import (
    PRELOAD_DATA,
    PRELOAD_MODULE,
    PreloadList,
    read_preload_data,
    render_preload_module,
)
from patched_wheels.loading.probe import compare
from patched_wheels.patch.request import rpath_edit
from patched_wheels.patch.surgery import PatchOptions, patch_wheel
from support import stackshapes
from support.fakecuda import build_fake_cuda_wheels, flat_layout, per_wheel_layout, run_import
from support.rpathfixture import DATA_MEMBER, FIX, build_rpath_wheel

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


def _patched(stack, tmp_path, **options):
    """The package's wheel patched with preload = "auto" (default probe), and the set with it."""
    preload = plan_package_preload(PreloadRequest(stack.package, **options), list(stack.wheels))
    patched = patch_wheel(stack.package_wheel, tmp_path / "patched", PatchOptions(suffix="pw.1", preload=preload)).path
    return patched, [patched if wheel == stack.package_wheel else wheel for wheel in stack.wheels]


def _preload_of(wheel, member):
    with zipfile.ZipFile(wheel) as archive:
        return read_preload_data(archive.read(member), where=member)


def _works(result, stack):
    return result.returncode == 0 and result.stdout.strip() == stack.expected


@pytest.mark.parametrize("package", ["fakeplugins.xla_fake", "fakeplugins/xla_fake", "fakeplugins"])
def test_plugin_in_a_namespace_package_gets_what_one_site_packages_maps(stacks, package, tmp_path):
    stack = stacks["plugin"]
    patched, wheel_set = _patched(dataclasses.replace(stack, package=package), tmp_path)
    # fakeplugins has no __init__.py (and gets none): the preload goes into its regular package xla_fake.
    with zipfile.ZipFile(patched) as archive:
        assert "fakeplugins/__init__.py" not in archive.namelist()
    preload = _preload_of(patched, f"fakeplugins/xla_fake/{PRELOAD_DATA}")
    assert preload.libraries == (stack.libraries["cudep"], stack.libraries["cu"])  # dependencies first
    assert preload.optional == set(preload.libraries) and preload.global_ == frozenset()
    result = run_import(per_wheel_layout(wheel_set, tmp_path / "per-wheel"), stack.code)
    assert _works(result, stack) and result.stderr == "", result.stderr
    assert _works(run_import(flat_layout(wheel_set, tmp_path / "flat"), stack.code), stack)


def test_doctor_on_the_plugin_sees_the_silent_cpu_fallback_and_its_fix(stacks, tmp_path, capsys):
    stack = stacks["plugin"]
    argv = ["doctor", "--no-cache", *map(str, stack.wheels), "--package", "fakeplugins.xla_fake"]
    assert main([*argv, "--run"]) == 1
    out = capsys.readouterr().out
    assert "run: import fakeplugins.xla_fake (this interpreter)" in out  # valid Python, dotted
    assert "prediction (static, as is): fails, as the run shows" in out  # libcu may fail: its wheel is required
    assert (
        "first error 'Unable to load CUDA. Is it installed? (OSError: libcu.so.1: cannot open shared object file" in out
    )
    assert "2 of the set's libraries mapped in one site-packages are not mapped" in out
    assert 'with the generated preload (preload = "auto", probe = "import fakeplugins.xla_fake"): 2 libraries' in out
    patched, wheel_set = _patched(stack, tmp_path)
    assert (
        main(["doctor", "--no-cache", *map(str, wheel_set), "--package", "fakeplugins.xla_fake", f"--run={stack.code}"])
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "    stdout: gpu:12" in out and "run: passes: one directory per wheel does what one site-packages does\n" in out
    )


def test_rtld_global_only_where_a_library_needs_it(stacks, tmp_path):
    """libdupa (opened locally by fakedup) must stay RTLD_LOCAL; libglue (used by an underlinked module) RTLD_GLOBAL."""
    stack = stacks["symbol"]
    patched, wheel_set = _patched(stack, tmp_path)
    preload = _preload_of(patched, f"fakedup/{PRELOAD_DATA}")
    assert set(preload.libraries) == {stack.libraries[name] for name in ("dupa", "dupb", "glue")}
    assert preload.optional == {stack.libraries["dupa"], stack.libraries["glue"]}  # libdupb: libuser's DT_NEEDED
    assert preload.global_ == {stack.libraries["glue"]}
    sites = per_wheel_layout(wheel_set, tmp_path / "per-wheel")
    result = run_import(sites, stack.code)
    assert _works(result, stack), result.stderr
    # The proof that both decisions matter: the same preload with each mode flipped.
    module = sites[-1] / "fakedup" / f"{PRELOAD_MODULE}.py"
    for global_, failure in (
        (frozenset(preload.libraries), "154"),  # libdupa global: libuser binds shared_value() to it
        (frozenset(), "undefined symbol: glue_value"),  # libglue local: _glue.so cannot resolve glue_value
    ):
        module.write_bytes(render_preload_module("fakedup", dataclasses.replace(preload, global_=global_)))
        result = run_import(sites, stack.code)
        assert failure in result.stdout + result.stderr, (result.stdout, result.stderr)


def test_tensorflow_shape_never_preloads_its_own_library_or_an_extension_module(stacks, tmp_path):
    stack = stacks["framework"]
    patched, wheel_set = _patched(stack, tmp_path, preload_wheels=["fake*"])  # even when globs name them
    preload = _preload_of(patched, f"faketf/{PRELOAD_DATA}")
    assert preload.libraries == (stack.libraries["cudartx"],) and preload.global_ == frozenset()
    result = run_import(per_wheel_layout(wheel_set, tmp_path / "per-wheel"), stack.code)
    assert _works(result, stack) and result.stderr == "", result.stderr
    # What the old hint led to: the package's own library and the extension module preloaded with RTLD_GLOBAL.
    sites = per_wheel_layout(stack.wheels, tmp_path / "hinted")
    harmful = PreloadList((stack.libraries["cudartx"], stack.libraries["framework"], stack.libraries["extension"]))
    hinted = tmp_path / "hinted.py"  # run first, as a preload imported first by faketf/__init__.py would be
    hinted.write_bytes(render_preload_module("faketf", harmful))
    result = run_import(sites, f"import runpy; runpy.run_path({str(hinted)!r}); {stack.code}")
    assert result.stdout.strip() == "12:99", result.stderr  # the extension now calls the framework's helper_value


def test_provider_failing_in_both_layouts_is_not_counted_against_the_layout(stacks, tmp_path, capsys):
    stack = stacks["provider"]
    argv = ["doctor", "--no-cache", "--package", stack.package]
    assert main([*argv, *map(str, stack.wheels), "--run"]) == 1
    assert (
        "run: fails: one directory per wheel differs from one site-packages: exit status 1" in capsys.readouterr().out
    )
    patched, wheel_set = _patched(stack, tmp_path)
    assert main([*argv, *map(str, wheel_set), f"--run={stack.code}"]) == 0
    out = capsys.readouterr().out
    assert (
        "run: passes: one directory per wheel does what one site-packages does (same as in one site-packages, not caused "
        f"by the layout: EP Error: OSError: {stackshapes.MISSING_PROVIDER_LIBRARY}: cannot open shared object file"
        in out
    )
    # The static verdict stays, as a prediction, and says where it disagrees.
    assert "predicted, as is: 1 library fails to load with one directory per wheel" in out
    assert "prediction (static, as is): fails, unlike the run" in out


def test_a_package_that_preloads_its_dependencies_itself_passes_the_run(tmp_path, capsys):
    """torch >= 2.5: the static verdict predicts failures; the run shows the package's own loader fixes them."""
    wheels = build_fake_cuda_wheels(tmp_path / "wheels", broken_order=False)
    argv = ["doctor", "--no-cache", *map(str, wheels.all), "--package", "faketorch"]
    assert main([*argv, "--run=import faketorch; print(faketorch.answer())"]) == 0
    out = capsys.readouterr().out
    assert "predicted, as is: 3 libraries fail to load with one directory per wheel" in out
    assert "run: passes: one directory per wheel does what one site-packages does\n" in out
    assert "prediction (static, as is): fails, unlike the run: the code preloads those libraries itself" in out


def test_run_installs_data_files_where_pip_and_rules_python_put_them(tmp_path, capsys):
    fixed = rpathfixture_wheel = build_rpath_wheel(tmp_path / "wheels")
    entries = f"$ORIGIN:$ORIGIN/../{SITE_PACKAGES}/pkg.libs:$ORIGIN/../../site-packages/pkg.libs"
    edits = [rpath_edit("pkg/*.so", FIX), rpath_edit(DATA_MEMBER, entries)]
    fixed = patch_wheel(rpathfixture_wheel, tmp_path / "fixed", PatchOptions(suffix="fix.1", rpath_edits=edits)).path
    # pip: <prefix>/pkgdata/, site-packages at <prefix>/lib/pythonX.Y/site-packages; rules_python: <repo>/data/pkgdata/.
    code = (
        "import ctypes, os, pkg; site = os.path.dirname(os.path.dirname(pkg.__file__)); "
        "places = [os.path.join(site, '..', '..', '..', 'pkgdata', 'libdata.so'), os.path.join(site, '..', 'data', 'pkgdata', 'libdata.so')]; "
        "print(ctypes.CDLL(next(p for p in places if os.path.exists(p))).data_answer())"
    )
    for wheel, status in ((rpathfixture_wheel, 0), (fixed, 0)):
        assert main(["doctor", "--no-cache", str(wheel), "--package", "pkg", f"--run={code}"]) == status
        out = capsys.readouterr().out
        if wheel == fixed:
            assert out.count("    mapped: 3 of the set's 3 libraries") == 2 and "    stdout: 43" in out, out
        else:  # _ext.so fails to load in both layouts: the same as in one site-packages, not the layout's fault
            assert "(same as in one site-packages, not caused by the layout: OSError: libdep.so.1" in out, out


def test_doctor_counts_the_packages_own_data_scheme_library(tmp_path, capsys):
    """CyFES: the package loads its data-scheme library itself; doctor --package fails before the RPATH fix, not after."""
    original = build_rpath_wheel(tmp_path / "wheels")
    entries = f"$ORIGIN/../{SITE_PACKAGES}/pkg.libs:$ORIGIN/../../site-packages/pkg.libs"
    edits = [
        rpath_edit("pkg/*.so", FIX),
        rpath_edit(DATA_MEMBER, entries, "append"),
    ]  # append: auditwheel's entries stay
    fixed = patch_wheel(original, tmp_path / "fixed", PatchOptions(suffix="fix.1", rpath_edits=edits)).path
    assert main(["doctor", "--no-cache", str(original), "--package", "pkg"]) == 1
    out = capsys.readouterr().out
    assert (
        f"{DATA_MEMBER} ({original.name}): needs libdep.so.1" in out
        and "fails if pkg loads it itself at run time" in out
    )
    assert main(["doctor", "--no-cache", str(fixed), "--package", "pkg"]) == 0
    assert "predicted, as is: every library loads with one directory per wheel" in capsys.readouterr().out


@pytest.mark.parametrize("name", BUILDERS)
def test_doctor_run_fails_each_stack_as_is_and_passes_it_patched(stacks, name, tmp_path, capsys):
    """The harness's question, asked by doctor: does one directory per wheel do what one site-packages does?"""
    stack = stacks[name]
    argv = ["doctor", "--no-cache", "--package", stack.package, f"--run={stack.code}"]
    assert main([*argv, *map(str, stack.wheels)]) == 1
    out = capsys.readouterr().out
    assert "run: fails: one directory per wheel differs from one site-packages" in out
    assert "prediction (static, as is): " in out  # the static verdict stays, as a prediction
    _, wheel_set = _patched(stack, tmp_path)
    assert main([*argv, *map(str, wheel_set)]) == 0
    out = capsys.readouterr().out
    assert "run: passes: one directory per wheel does what one site-packages does" in out
    assert f"    stdout: {stack.expected}" in out
    assert _works(run_import(per_wheel_layout(wheel_set, tmp_path / "per-wheel"), stack.code), stack)


def test_a_self_preloading_package_patched_still_works(tmp_path):
    wheels = build_fake_cuda_wheels(tmp_path / "wheels", broken_order=False)
    preload = plan_package_preload(PreloadRequest("faketorch"), wheels.all)
    patched = patch_wheel(wheels.torch, tmp_path / "patched", PatchOptions(suffix="pw.1", preload=preload)).path
    for layout in (flat_layout, per_wheel_layout):
        result = run_import(layout([*wheels.nvidia.values(), patched], tmp_path / layout.__name__))
        assert result.returncode == 0 and result.stdout.strip() == "122", result.stderr


def test_a_package_searching_site_getsitepackages_is_judged_against_a_real_environment(tmp_path):
    """The one-site-packages run is a virtual environment, so cuda-pathfinder's search finds the set's
    libraries there (with PYTHONPATH it searched this interpreter's site-packages and failed in both
    layouts: doctor called that "same as in one site-packages", and the probe saw nothing to preload)."""
    stack = stackshapes.build_pathfinder_stack(tmp_path / "stack")
    graph = read_graph(list(stack.wheels))
    before = compare(list(stack.wheels), stack.code, graph)
    assert before.flat.stdout.strip() == stack.expected and before.per_wheel.stdout.strip() == "0"
    assert [library.path for library in before.missing] == [stack.libraries["fft"]]
    patched, wheel_set = _patched(stack, tmp_path)
    assert _preload_of(patched, f"fakecupy/{PRELOAD_DATA}").libraries == (stack.libraries["fft"],)
    after = compare(wheel_set, stack.code, read_graph(wheel_set))
    assert after.per_wheel.stdout.strip() == stack.expected and not after.missing, after.differences
