"""Issue 30's real locks: libraries that need each other (legal in the graph, loaded by the preload, harmless
beside a package) and unreadable libraries in wheels the patched package does not need (one warning)."""

from __future__ import annotations

import json
import zipfile

import pytest

from patched_wheels.cli import main
from patched_wheels.elf.graph import build_graph, read_graph
from patched_wheels.elf.graphtext import format_graph
from patched_wheels.elf.read import ElfLibrary
from patched_wheels.errors import ElfError
from patched_wheels.hub.build import build_hub
from patched_wheels.loading.preload import PreloadRequest, plan_package_preload, plan_preload
from patched_wheels.loading.preloadmodule import PRELOAD_DATA, PreloadList, read_preload_data, render_preload_module
from patched_wheels.patch.surgery import PatchOptions, patch_wheel
from support.cyclefixture import (
    CYC_ANSWER,
    CYC_CODE,
    CYC_LIBRARIES,
    CYC_PACKAGE,
    PIL_ANSWER,
    PIL_CODE,
    PIL_LIBRARIES,
    build_own_cycle,
    build_pillow_shape,
)
from support.fakecuda import (
    EXPECTED_ANSWER,
    LIBRARY_PATHS,
    build_fake_cuda_wheels,
    build_wheel,
    flat_layout,
    per_wheel_layout,
    run_import,
)
from support.hubconfig import load_config, write_config


@pytest.fixture(scope="module")
def pil(tmp_path_factory):
    return build_pillow_shape(tmp_path_factory.mktemp("pil"))


@pytest.fixture(scope="module")
def cyc(tmp_path_factory):
    return build_own_cycle(tmp_path_factory.mktemp("cyc"))


@pytest.fixture(scope="module")
def torch(tmp_path_factory):
    return build_fake_cuda_wheels(tmp_path_factory.mktemp("fakecuda"))


def _paths(libraries):
    return [library.path for library in libraries]


def test_a_cycle_is_ordered_as_one_starting_with_the_member_that_loads_the_others(pil, cyc):
    graph = read_graph([*pil.all, *cyc.all])
    order = _paths(graph.load_order)
    # libcycb has $ORIGIN, libcyca does not: loading libcyca first cannot find libcycb.
    assert order.index(CYC_LIBRARIES["b"]) == order.index(CYC_LIBRARIES["a"]) - 1
    assert order.index(CYC_LIBRARIES["a"]) < order.index(CYC_LIBRARIES["core"])
    assert order.index(PIL_LIBRARIES["harfbuzz"]) == order.index(PIL_LIBRARIES["freetype"]) - 1
    assert order.index(PIL_LIBRARIES["freetype"]) < order.index(PIL_LIBRARIES["imaging"])
    assert [_paths(members) for members in graph.cycles] == [
        [CYC_LIBRARIES["b"], CYC_LIBRARIES["a"]],
        [PIL_LIBRARIES["harfbuzz"], PIL_LIBRARIES["freetype"]],
    ]
    assert _paths(read_graph([*reversed(cyc.all), *pil.all], workers=1).load_order) == order


def _library(name, *needed, runpath=(), wheel="w-1.0-py3-none-any.whl", directory="lib"):
    return ElfLibrary(wheel, f"{directory}/{name}", name, tuple(needed), (), tuple(runpath))


def test_without_a_member_that_loads_the_others_a_cycle_keeps_path_order_after_its_dependencies():
    base = _library("libbase.so")
    a = _library("liba.so", "libb.so", "libbase.so")
    b = _library("libb.so", "libc.so")
    c = _library("libc.so", "liba.so", runpath=["$ORIGIN/../../elsewhere"])  # leads nowhere in its wheel
    top = _library("libtop.so", "liba.so")
    graph = build_graph([top, c, b, a, base])
    assert graph.load_order == (base, a, b, c, top)
    assert graph.cycles == ((a, b, c),)


def test_a_graph_of_thousands_of_libraries_in_one_cycle_orders_without_recursion():
    count = 5000
    names = [f"lib{index:05d}.so" for index in range(count)]
    libraries = [_library(name, names[(index + 1) % count]) for index, name in enumerate(names)]
    libraries.append(_library("libuser.so", names[0]))
    graph = build_graph(libraries)
    assert _paths(graph.load_order) == [f"lib/{name}" for name in names] + ["lib/libuser.so"]
    assert len(graph.cycles) == 1 and len(graph.cycles[0]) == count


def test_graph_command_exits_0_on_a_cycle_and_prints_it(pil, capsys):
    assert main(["graph", str(pil.package_wheel)]) == 0
    out = capsys.readouterr().out
    wheel = pil.package_wheel.name
    order = out.split("load order (dependencies first):\n")[1].splitlines()
    assert order[:3] == [
        f"  1. {PIL_LIBRARIES['harfbuzz']} ({wheel})  (cycle 1)",
        f"  2. {PIL_LIBRARIES['freetype']} ({wheel})  (cycle 1)",
        f"  3. {PIL_LIBRARIES['imaging']} ({wheel})",
    ]
    assert order[3:] == [
        "cycles (libraries that need each other; each loads as one, first member first):",
        f"  cycle 1: {PIL_LIBRARIES['harfbuzz']} ({wheel}) <-> {PIL_LIBRARIES['freetype']} ({wheel})",
    ]
    assert main(["graph", "--json", str(pil.package_wheel)]) == 0
    cycles = json.loads(capsys.readouterr().out)["cycles"]
    assert cycles == [
        [{"wheel": wheel, "path": PIL_LIBRARIES["harfbuzz"]}, {"wheel": wheel, "path": PIL_LIBRARIES["freetype"]}]
    ]


def test_graph_output_of_an_acyclic_set_names_no_cycle(torch):
    graph = read_graph(torch.all)
    text = format_graph(graph)
    assert "cycle" not in text
    # The listing ends as it always did: the load order, one numbered library per line.
    assert text.split("load order (dependencies first):\n")[1].splitlines() == [
        f"  {index}. {library}" for index, library in enumerate(graph.load_order, start=1)
    ]
    assert _paths(graph.load_order)[-2:] == [LIBRARY_PATHS["faketorch"], LIBRARY_PATHS["core"]]


def test_a_cycle_beside_the_patched_package_changes_nothing(pil, torch, tmp_path, capsys):
    """The pillow 13 shape: faketorch needs neither bundled library; patching it works, silently."""
    alone = plan_package_preload(PreloadRequest("faketorch"), torch.all)
    beside = plan_package_preload(PreloadRequest("faketorch"), [*torch.all, *pil.all])
    assert beside == alone
    code = main(
        [
            "patch",
            "--no-cache",
            "--wheel",
            str(torch.torch),
            "--dest-dir",
            str(tmp_path / "out"),
            "--suffix",
            "pw.1",
            "--preload-for",
            "faketorch",
            "--preload-from",
            *map(str, [*torch.all, *pil.all]),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "patched-wheels:" not in captured.err
    (patched,) = (tmp_path / "out").glob("faketorch-*.whl")
    result = run_import(per_wheel_layout([*torch.nvidia.values(), patched, *pil.all], tmp_path / "site"))
    assert result.stdout.strip() == str(EXPECTED_ANSWER), result.stderr
    # doctor's verdict on faketorch is the one without the bystander (which it only lists as not loaded).
    verdicts = []
    for wheels in (torch.all, [*torch.all, *pil.all]):
        code = main(["doctor", "--no-cache", "--package", "faketorch", *map(str, wheels)])
        captured = capsys.readouterr()
        assert captured.err == ""
        verdicts.append((code, [line for line in captured.out.splitlines() if "fakepil" not in line]))
    assert verdicts[0] == verdicts[1]


def test_the_bystander_itself_works_in_both_layouts(pil, tmp_path):
    for layout in (flat_layout, per_wheel_layout):
        result = run_import(layout(pil.all, tmp_path / layout.__name__), PIL_CODE)
        assert result.stdout.strip() == str(PIL_ANSWER), result.stderr


def test_a_cycle_the_package_needs_is_preloaded_and_imports_with_one_directory_per_wheel(cyc, tmp_path, capsys):
    without = run_import(per_wheel_layout(cyc.all, tmp_path / "without"), CYC_CODE)
    assert "libcyca.so.1: cannot open shared object file" in without.stderr
    assert run_import(flat_layout(cyc.all, tmp_path / "flat"), CYC_CODE).stdout.strip() == str(CYC_ANSWER)

    preload = plan_package_preload(PreloadRequest(CYC_PACKAGE), cyc.all)
    patched = patch_wheel(cyc.package_wheel, tmp_path / "patched", PatchOptions(suffix="pw.1", preload=preload)).path
    with zipfile.ZipFile(patched) as archive:
        preload = read_preload_data(archive.read(f"{CYC_PACKAGE}/{PRELOAD_DATA}"), where=patched.name)
    assert preload.libraries == (CYC_LIBRARIES["b"], CYC_LIBRARIES["a"])
    for layout in (per_wheel_layout, flat_layout):
        result = run_import(layout([cyc.libraries_wheel, patched], tmp_path / f"with-{layout.__name__}"), CYC_CODE)
        assert result.stdout.strip() == str(CYC_ANSWER), result.stderr
    # doctor predicts as much: the cycle's first member finds the other through its own $ORIGIN.
    assert main(["doctor", "--no-cache", "--package", CYC_PACKAGE, *map(str, cyc.all)]) == 1  # as is, it fails
    assert "every library loads with one directory per wheel" in capsys.readouterr().out


def test_the_cycle_order_is_what_makes_the_preload_load(cyc, tmp_path):
    """The same two libraries in path order (libcyca first) fail: the order inside the cycle matters."""
    sites = per_wheel_layout([cyc.libraries_wheel], tmp_path / "site")
    module = tmp_path / "path_order.py"
    module.write_bytes(render_preload_module("x", PreloadList((CYC_LIBRARIES["a"], CYC_LIBRARIES["b"]))))
    code = f"exec(compile(open({str(module)!r}).read(), 'path_order', 'exec'), {{}})"
    result = run_import(sites, code)
    assert result.returncode != 0 and "libcycb.so.1: cannot open shared object file" in result.stderr


def test_a_plan_holds_a_whole_cycle(cyc):
    graph = read_graph(cyc.all)
    plan = plan_preload(graph, CYC_PACKAGE, cyc.package_wheel.name)
    assert _paths(plan.libraries) == [CYC_LIBRARIES["b"], CYC_LIBRARIES["a"]]
    assert plan.optional == frozenset()


# An unreadable library (a linker script named like a library, as some wheels ship) in a wheel of its own.
_JUNK = {"junk/__init__.py": b"", "junk/libjunk.so.1": b"INPUT(-lbar)\n"}


@pytest.fixture(scope="module")
def junk(tmp_path_factory):
    return build_wheel(tmp_path_factory.mktemp("junk"), "junk", "1.0", _JUNK)


def _warnings(err):
    return [line for line in err.splitlines() if line.startswith("patched-wheels: warning:")]


def test_an_unreadable_library_the_package_does_not_need_is_one_warning(torch, junk, tmp_path, capsys):
    alone = plan_package_preload(PreloadRequest("faketorch"), torch.all)
    capsys.readouterr()
    beside = plan_package_preload(PreloadRequest("faketorch"), [*torch.all, junk])
    assert beside == alone
    (warning,) = _warnings(capsys.readouterr().err)
    assert warning.startswith(f"patched-wheels: warning: {junk.name}: junk/libjunk.so.1: not an ELF file")
    assert warning.endswith(f"faketorch needs nothing of {junk.name}: left out of its library graph")

    args = ["--wheel", str(torch.torch), "--dest-dir", str(tmp_path / "out"), "--preload-for", "faketorch"]
    for run in range(2):  # the second run reads the ELF cache: the wheel with a problem was not stored
        assert main(["patch", *args, "--preload-from", *map(str, [*torch.all, junk])]) == 0
        err = capsys.readouterr().err
        assert _warnings(err) == [warning] and "error" not in err, (run, err)
    code = main(["doctor", "--no-cache", "--package", "faketorch", *map(str, [*torch.all, junk])])
    captured = capsys.readouterr()
    assert code == main(["doctor", "--no-cache", "--package", "faketorch", *map(str, torch.all)])
    assert _warnings(captured.err) == [warning] and "error" not in captured.err


def test_a_graph_warns_about_each_wheel_once(torch, junk, capsys):
    graph = read_graph([*torch.all, junk], lenient=True)
    assert set(graph.problems) == {junk.name}
    for _ in range(2):  # the hub checks one graph for each of its specs
        graph.check_problems("faketorch", torch.torch.name, [])
    assert len(_warnings(capsys.readouterr().err)) == 1


def test_an_unreadable_library_the_package_may_need_is_one_error(torch, tmp_path, capsys):
    # The same wheel as a needed library: its unreadable sibling may be what that library opens.
    jit = torch.nvidia["jit"]
    with zipfile.ZipFile(jit) as archive:
        files = {name: archive.read(name) for name in archive.namelist() if ".dist-info/" not in name}
    broken_jit = build_wheel(
        tmp_path / "jit", "fake-nvidia-jit", "12.1.0", {**files, "fake_nvidia/jit/lib/libextra.so.1": b"junk"}
    )
    wheels = [*(wheel for wheel in torch.all if wheel != jit), broken_jit]
    with pytest.raises(ElfError, match=r"fake_nvidia/jit/lib/libextra\.so\.1: not an ELF file"):
        plan_package_preload(PreloadRequest("faketorch"), wheels)
    # A library the package needs by name, unreadable: blas's wheel ships nothing else.
    broken_blas = build_wheel(tmp_path / "blas", "fake-nvidia-blas", "12.1.0", {LIBRARY_PATHS["blas"]: b"junk"})
    wheels = [*(wheel for wheel in torch.all if wheel != torch.nvidia["blas"]), broken_blas]
    assert (
        main(
            [
                "patch",
                "--no-cache",
                "--wheel",
                str(torch.torch),
                "--dest-dir",
                str(tmp_path / "out"),
                "--preload-for",
                "faketorch",
                "--preload-from",
                *map(str, wheels),
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"patched-wheels: error: {broken_blas.name}: {LIBRARY_PATHS['blas']}: not an ELF file"
    ), err
    # The graph command lists what it is given: a library it cannot read is still its error.
    assert main(["graph", *map(str, wheels)]) == 1
    assert capsys.readouterr().err.startswith(f"patched-wheels: error: {broken_blas.name}")


def test_a_hub_with_a_cycle_in_one_spec_and_bystanders_beside_builds_with_one_warning(
    torch, cyc, pil, junk, tmp_path, monkeypatch, capsys
):
    """Two specs read one graph: fakecyc needs a cycle, faketorch sits beside fakepil's and junk's wheels."""
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", "off")
    specs = [
        (torch.torch, {"name": "faketorch", "preload": "auto", "preload_package": "faketorch"}),
        (cyc.package_wheel, {"name": "fakecyc", "preload": "auto", "preload_package": CYC_PACKAGE}),
    ]
    config = write_config(tmp_path, [*torch.nvidia.values(), cyc.libraries_wheel, *pil.all, junk], specs)
    capsys.readouterr()
    assert sorted(build_hub(load_config(config))) == ["fakecyc==1.0+test.1", "faketorch==2.1.0+test.1"]
    warnings = _warnings(capsys.readouterr().err)
    assert len(warnings) == 1 and junk.name in warnings[0], warnings
    (patched,) = (tmp_path / "index").glob("fakecyc-1.0+test.1-*.whl")
    result = run_import(per_wheel_layout([cyc.libraries_wheel, patched], tmp_path / "site"), CYC_CODE)
    assert result.stdout.strip() == str(CYC_ANSWER), result.stderr


def test_a_cycle_no_member_of_which_loads_the_others_is_optional_in_path_order_with_a_warning(tmp_path, capsys):
    cyc = build_own_cycle(tmp_path / "wheels", origin=False)
    preload = plan_package_preload(PreloadRequest(CYC_PACKAGE), cyc.all)
    (warning,) = _warnings(capsys.readouterr().err)
    libraries = cyc.libraries_wheel.name
    assert warning == (
        f"patched-wheels: warning: {cyc.package_wheel.name}: {CYC_PACKAGE} needs {CYC_LIBRARIES['a']} ({libraries}) <-> "
        f"{CYC_LIBRARIES['b']} ({libraries}), which need each other, and none finds the others inside its own wheel "
        "(RPATH/RUNPATH $ORIGIN): the preload skips them (and what needs them) where they fail to load, as they do "
        "with one directory per wheel"
    )
    assert preload is not None
    assert preload.entries.libraries == (CYC_LIBRARIES["a"], CYC_LIBRARIES["b"])
    assert preload.entries.optional == set(preload.entries.libraries)
    # What the warning says: one site-packages still works (the failing preload entries are skipped, and
    # _core.so's DT_RPATH finds both), one directory per wheel does not.
    patched = patch_wheel(cyc.package_wheel, tmp_path / "patched", PatchOptions(suffix="pw.1", preload=preload)).path
    assert run_import(flat_layout([cyc.libraries_wheel, patched], tmp_path / "flat"), CYC_CODE).stdout.strip() == str(
        CYC_ANSWER
    )
    per_wheel = run_import(per_wheel_layout([cyc.libraries_wheel, patched], tmp_path / "per-wheel"), CYC_CODE)
    assert "libcyca.so.1: cannot open shared object file" in per_wheel.stderr  # _core.so's own load fails
