"""The benchmarks' copies of the root example (benchmarks/example_workspace.py, bench_e2e.py) load.

The benchmarks run for an hour and are not part of CI, so a copy that no longer loads is found an hour
too late: when the example started loading `layout_test` from its own `//python:defs.bzl`, every copy
(which is not the module) failed on its first `bazel test`. This checks, without Bazel, that every label
of the main repository a copy loads names a file in that copy, and that each hub's copy keeps only its hub.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# load("//pkg:file.bzl", ...) and use_extension("//pkg:file.bzl", ...): labels of the workspace itself.
MAIN_REPO_LABEL = re.compile(r'(?:load|use_extension)\(\s*"//([^:"]*):([^"]+)"')


@pytest.fixture(scope="module")
def bench_e2e() -> object:
    """The benchmark as a module of the ``benchmarks`` package (pyproject.toml puts the repository root on
    pytest's ``pythonpath``)."""
    from benchmarks import bench_e2e

    return bench_e2e


def test_every_workspace_label_a_copy_loads_is_in_the_copy(tmp_path: Path, bench_e2e: object) -> None:
    configs = bench_e2e.make_configs(tmp_path, control=True)  # type: ignore[attr-defined]
    assert [config.name for config in configs] == ["plain", "flat", "split", "plain-again"]
    for config in configs:
        for path in [config.root / "MODULE.bazel", *config.root.rglob("BUILD.bazel")]:
            for package, name in MAIN_REPO_LABEL.findall(path.read_text(encoding="utf-8")):
                assert (config.root / package / name).is_file(), (
                    f"{config.name}: {path.relative_to(config.root)} loads //{package}:{name}"
                )


def test_each_hubs_copy_keeps_only_its_hub(tmp_path: Path, bench_e2e: object) -> None:
    configs = {config.name: config for config in bench_e2e.make_configs(tmp_path, control=False)}  # type: ignore[attr-defined]
    flat = (configs["flat"].root / "calculator" / "BUILD.bazel").read_text(encoding="utf-8")
    split = (configs["split"].root / "calculator" / "BUILD.bazel").read_text(encoding="utf-8")
    assert "calc_test" in flat and "torch_layout_test" in flat and "pypi_split" not in flat
    assert "calc_split_test" in split and "torch_split_layout_test" in split and '"@pypi//' not in split
    assert "patched_pypi_split" not in (configs["flat"].root / "MODULE.bazel").read_text(encoding="utf-8")


LOCK = "# a lock\njax==0.7.2 \\\n    --hash=sha256:" + "0" * 64 + "\n"


def test_jax_workspaces_differ_only_in_the_hub(tmp_path: Path, bench_e2e: object) -> None:
    configs = bench_e2e.make_jax_configs(tmp_path, control=True, lock=LOCK)  # type: ignore[attr-defined]
    assert [(config.name, config.patched_hub, config.pip_hub) for config in configs] == [
        ("plain", None, "pypi_jax"),
        ("patched", "patched", "pypi_jax"),
        ("plain-again", None, "pypi_jax"),
    ]
    assert len({config.output_base for config in configs}) == 3 and all(
        config.target == "//:jax_test" for config in configs
    )
    for name in ("BUILD.bazel", "jax_test.py", "requirements_lock.txt", ".bazelrc"):
        assert len({(config.root / name).read_text(encoding="utf-8") for config in configs}) == 1, name
    assert (configs[0].root / "requirements_lock.txt").read_text(encoding="utf-8") == LOCK
    assert "all_requirements" in (configs[0].root / "BUILD.bazel").read_text(
        encoding="utf-8"
    )  # requirement("jax") leaves the plugin out
    assert "import jax; jax.devices()" in (configs[0].root / "jax_test.py").read_text(encoding="utf-8")
    plain, patched, again = ((config.root / "MODULE.bazel").read_text(encoding="utf-8") for config in configs)
    assert "rules_patched_wheels" not in plain and 'requirements_lock = "//:requirements_lock.txt"' in plain
    assert 'version = "2.3.2"' in plain and 'python_version = "3.11"' in plain
    assert again == plain.replace("plain", "plain-again").replace(
        "rpw_bench_jax_plain-again", "rpw_bench_jax_plain_again"
    )
    # The hub: exactly the stack's one stanza (compat_bazel.stanza), its index of the lock, pip.parse of the hub's lock.
    stanzas = [line for line in patched.splitlines() if "patched_wheel(" in line]
    assert len(stanzas) == 1
    for attribute in (
        'name = "jax-cuda12-pjrt"',
        'preload = "auto"',
        'preload_package = "jax_plugins.xla_cuda12"',
        'probe = "import jax; jax.devices()"',
    ):
        assert attribute in stanzas[0]
    assert (
        'patched.index(\n    name = "patched",\n    requirements_lock = "//:requirements_lock.txt",\n    wheel_facts = "//:wheel_facts.json",\n)'
        in patched
    )
    assert (
        'requirements_lock = "@patched//:requirements_lock.txt"' in patched and 'use_repo(pip, "pypi_jax")' in patched
    )
    for config in configs:  # Starlark that parses as Python, and only labels the copy has
        for path in (config.root / "MODULE.bazel", config.root / "BUILD.bazel"):
            compile(path.read_text(encoding="utf-8"), str(path), "exec")
            for package, name in MAIN_REPO_LABEL.findall(path.read_text(encoding="utf-8")):
                assert (config.root / package / name).is_file()


def test_jax_lock_pins_each_wheel_by_its_sha256(tmp_path: Path, bench_e2e: object) -> None:
    import hashlib

    from benchmarks import compat_bazel

    wheels = [
        tmp_path / "jax_cuda12_pjrt-0.7.2-py3-none-manylinux_2_27_x86_64.whl",
        tmp_path / "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl",
    ]
    for number, wheel in enumerate(wheels):
        wheel.write_bytes(bytes([number]) * 10)
    lines = compat_bazel.lock_text(wheels).splitlines()[1:]
    assert lines == [
        "jax-cuda12-pjrt==0.7.2 \\",
        f"    --hash=sha256:{hashlib.sha256(bytes([0]) * 10).hexdigest()}",
        "numpy==2.4.6 \\",
        f"    --hash=sha256:{hashlib.sha256(bytes([1]) * 10).hexdigest()}",
    ]


def measurement(bench_e2e: object, cpu: float) -> object:
    return bench_e2e.Measurement(  # type: ignore[attr-defined]
        wall=cpu,
        client_cpu=0.0,
        server_cpu=cpu,
        children_cpu=0.0,
        server_kernel_cpu=0.0,
        received=0,
        output_base_disk=1,
        wheel_repos=0,
        wheel_repos_disk=0,
        hub_disk=100,
        hub_wheels=100,
        memory={},
        helper={"hub build": (1.0, 2.0, 3.0)},
    )


def test_the_jax_summary_holds_its_hub_to_the_cold_target(bench_e2e: object) -> None:
    bench = bench_e2e.BENCHES["jax"]  # type: ignore[attr-defined]
    assert (bench.rules_python, bench.targets, bench.cold_targets) == ("2.3.2", {"patched": 1.02}, {"patched": 1.25})
    assert set(bench.parts) == {"plain", "patched"}
    met = [{"plain": measurement(bench_e2e, 100.0), "patched": measurement(bench_e2e, 120.0)}]
    lines, ok = bench_e2e.summary(met, bench.cold_targets)  # type: ignore[attr-defined]
    assert ok and "patched/plain CPU 1.20 (target <= 1.25: met" in lines[0]
    assert any(line.startswith("hub patched, helper") and "hub build 1.0/2.0/3.0" in line for line in lines)
    lines, ok = bench_e2e.summary(
        [{"plain": measurement(bench_e2e, 100.0), "patched": measurement(bench_e2e, 130.0)}], bench.cold_targets
    )  # type: ignore[attr-defined]
    assert not ok and "MISSED" in lines[0]
    assert bench_e2e.ratios(met[0], list(bench.targets)).startswith("patched/plain 1.20 CPU")  # type: ignore[attr-defined]


def test_the_copy_without_facts_differs_from_flat_only_by_them(tmp_path: Path, bench_e2e: object) -> None:
    listed = bench_e2e.make_configs(tmp_path, control=False)  # type: ignore[attr-defined]
    bench_e2e.add_without_facts(listed, tmp_path)  # type: ignore[attr-defined]
    configs = {config.name: config for config in listed}
    flat = (configs["flat"].root / "MODULE.bazel").read_text(encoding="utf-8")
    without = (configs["without-facts"].root / "MODULE.bazel").read_text(encoding="utf-8")
    facts = re.findall(r'wheel_facts = "//([^:"]*):([^"]+)"', flat)
    assert facts and all((configs["flat"].root / package / name).is_file() for package, name in facts), facts
    assert "wheel_facts = " not in without
    assert [line for line in flat.splitlines() if "wheel_facts = " not in line] == without.splitlines()
    assert configs["without-facts"].target == configs["flat"].target
    assert configs["without-facts"].output_base != configs["flat"].output_base


def test_record_facts_copies_each_hubs_facts_over_the_file_its_workspace_names(
    tmp_path: Path, bench_e2e: object
) -> None:
    import dataclasses

    # Output bases under tmp_path, not beside Bazel's own: the test makes the hub repository itself.
    configs = [
        dataclasses.replace(config, output_base=tmp_path / "output_bases" / config.name)
        for config in bench_e2e.make_jax_configs(tmp_path, control=False, lock=LOCK)
    ]  # type: ignore[attr-defined]
    patched = configs[1]
    assert '"entries": {}' in (patched.root / "wheel_facts.json").read_text(encoding="utf-8"), "starts empty"
    hub = patched.output_base / "external" / f"rules_patched_wheels~~patched~{patched.patched_hub}"
    hub.mkdir(parents=True)
    (hub / "wheel_facts.json").write_text("what the warm-up's hub read", encoding="utf-8")
    bench_e2e.record_facts(configs)  # type: ignore[attr-defined]
    assert (patched.root / "wheel_facts.json").read_text(encoding="utf-8") == "what the warm-up's hub read"
    assert not (configs[0].root / "wheel_facts.json").exists(), "plain has no hub"


def test_compat_workspace_judges_requirement_alone_against_pip_closure(tmp_path: Path, bench_e2e: object) -> None:
    """compat_bazel's workspace: plain wires as rules_python does (restore_extras = False), patched names the
    root's extras; each hub has a layout_test over all_requirements and one over requirement(ROOT) alone, both
    judged against the hub's pip_closure.json."""
    from benchmarks import compat_bazel
    from benchmarks.stacks import STACKS

    from support.wheelbuilder import build_wheel

    (tmp_path / "wheels").mkdir()
    wheel = build_wheel(tmp_path / "wheels", "jax", "0.10.2", {"jax/__init__.py": b""})
    compat_bazel.write_workspace(tmp_path / "ws", STACKS["jax-0.10.2-cuda13"], [wheel])
    module = (tmp_path / "ws" / "MODULE.bazel").read_text(encoding="utf-8")
    assert 'patched.index(name = "plain", ' in module and 'extras = ["jax[cuda13]"], restore_extras = False)' in module
    assert 'patched.index(name = "patched", ' in module and 'extras = ["jax[cuda13]"])' in module
    build = (tmp_path / "ws" / "BUILD.bazel").read_text(encoding="utf-8")
    for hub in compat_bazel.HUBS:
        assert f'name = "{hub}_all_layout_test",\n    deps = {hub}_all_requirements,' in build
        assert f'name = "{hub}_requirement_layout_test",\n    deps = [{hub}_requirement("jax")],' in build
        assert f'pip_closure = "@{hub}//:pip_closure.json"' in build
    compile(build, "BUILD.bazel", "exec")
    assert compat_bazel.test_names() == [
        f"{hub}_{kind}_layout_test" for hub in compat_bazel.HUBS for kind in ("all", "requirement")
    ]


def test_compat_lock_workspace_is_patched_index_alone_beside_rules_pythons_wiring(
    tmp_path: Path, bench_e2e: object
) -> None:
    """compat_bazel's lock stage (issue 48): the user's uv-compiled lock as is; ``hub`` is patched.index(name,
    lock) with nothing but the local index, ``plain`` turns the extras and the verified rows off; each has a
    py_test of requirement(ROOT) running the stack's probe and a layout_test judged against its pip_closure."""
    from benchmarks import compat_bazel
    from benchmarks.stacks import STACKS

    from support.wheelbuilder import build_wheel

    (tmp_path / "wheels").mkdir()
    wheel = build_wheel(tmp_path / "wheels", "onnxruntime-gpu", "1.31.1", {"onnxruntime/__init__.py": b""})
    lock = tmp_path / "requirements_lock.txt"
    lock.write_text("onnxruntime-gpu==1.31.1 --hash=sha256:" + "0" * 64 + "\n", encoding="utf-8")
    stack = STACKS["onnxruntime-1.31.1"]
    compat_bazel.write_lock_workspace(tmp_path / "ws", stack, [wheel], lock)
    root = tmp_path / "ws"
    assert (root / "requirements_lock.txt").read_bytes() == lock.read_bytes()
    module = (root / "MODULE.bazel").read_text(encoding="utf-8")
    index_url = (root / "pypi" / "simple").as_uri()
    lock_attribute = f'requirements_lock = "//:requirements_lock.txt", index_url = "{index_url}"'
    assert f'patched.index(name = "hub", {lock_attribute})\n' in module
    assert f'patched.index(name = "plain", {lock_attribute}, restore_extras = False, verified_stacks = False)' in module
    assert "patched.patched_wheel(" not in module
    build = (root / "BUILD.bazel").read_text(encoding="utf-8")
    for hub in compat_bazel.LOCK_HUBS:
        assert f'name = "{hub}_probe_test",\n    srcs = ["probe_test.py"],' in build
        assert f'name = "{hub}_layout_test",\n    deps = [{hub}_requirement("onnxruntime-gpu")],' in build
        assert f'pip_closure = "@{hub}//:pip_closure.json"' in build
    assert build.count('deps = [hub_requirement("onnxruntime-gpu")]') == 2
    compile(build, "BUILD.bazel", "exec")
    probe_test = (root / "probe_test.py").read_text(encoding="utf-8")
    assert probe_test.endswith(stack.probe + "\n")
    compile(probe_test, "probe_test.py", "exec")
    assert compat_bazel.lock_test_names() == [
        f"{hub}_{kind}_test" for hub in compat_bazel.LOCK_HUBS for kind in ("probe", "layout")
    ]


@pytest.mark.parametrize(
    ("option", "root", "version", "python"),
    [("torch-2.15", "torch", "3.11", "python3"), ("jax-0.12", "jax", "3.12", "/opt/cpython-3.12/bin/python3.12")],
)
def test_lock_stack_workspaces_are_the_lock_alone_against_plain_rules_python(
    tmp_path: Path, bench_e2e: object, option: str, root: str, version: str, python: str
) -> None:
    """--stack torch-2.15 / jax-0.12 (issue 50): the hub is ``patched.index(name, lock)`` alone (no stanza, no
    wheel_facts) for the stack's CPython, its test over requirement(ROOT); plain is rules_python's pip.parse of the
    same lock, the same test over all_requirements (rules_python does not follow extras); all share one repository
    cache and are expunged once measured."""
    from benchmarks import compat_bazel

    lock = f"{root}==1.0 \\\n    --hash=sha256:" + "0" * 64 + "\n"
    configs = bench_e2e.make_lock_configs(tmp_path, control=True, stack_option=option, lock=lock, python=python)  # type: ignore[attr-defined]
    assert [(config.name, config.patched_hub, config.may_fail) for config in configs] == [
        ("plain", None, True),
        ("hub", "hub", False),
        ("plain-again", None, True),
    ]
    assert all(config.expunge_after and config.target == "//:probe_test" for config in configs)
    assert len({config.output_base for config in configs}) == 3
    for name in ("probe_test.py", "requirements_lock.txt", ".bazelrc"):
        assert len({(config.root / name).read_text(encoding="utf-8") for config in configs}) == 1, name
    assert (configs[0].root / "requirements_lock.txt").read_text(encoding="utf-8") == lock
    builds = {config.name: (config.root / "BUILD.bazel").read_text(encoding="utf-8") for config in configs}
    assert f'deps = [requirement("{root}")],' in builds["hub"] and "all_requirements" not in builds["hub"]
    assert builds["plain"] == builds["plain-again"] and "deps = all_requirements," in builds["plain"]
    for build in builds.values():
        compile(build, "BUILD.bazel", "exec")
    probe_test = (configs[0].root / "probe_test.py").read_text(encoding="utf-8")
    assert probe_test.endswith(bench_e2e.LOCK_STACKS[option].probe + "\n")  # type: ignore[attr-defined]
    compile(probe_test, "probe_test.py", "exec")
    bazelrc = (configs[0].root / ".bazelrc").read_text(encoding="utf-8")
    assert f"common --repository_cache={bench_e2e.LOCK_REPOSITORY_CACHE}\n" in bazelrc  # type: ignore[attr-defined]
    flag = f"common --@rules_python//python/config_settings:python_version={version}"
    assert (flag in bazelrc) == (version != "3.11")
    modules = {config.name: (config.root / "MODULE.bazel").read_text(encoding="utf-8") for config in configs}
    chosen = "" if python == "python3" else f', python_interpreter = "{python}"'
    assert f'patched.index(name = "hub", requirements_lock = "//:requirements_lock.txt"{chosen})\n' in modules["hub"]
    for text in modules.values():
        compile(text, "MODULE.bazel", "exec")
        assert "patched.patched_wheel(" not in text and "wheel_facts" not in text
        assert f'python_version = "{version}", python_interpreter = "{python}"' in text
        assert f'interpreter_path = "{python}"' in text
    assert 'requirements_lock = "@hub//:requirements_lock.txt"' in modules["hub"]
    for plain in ("plain", "plain-again"):
        assert "rules_patched_wheels" not in modules[plain]
        assert 'pip.parse(hub_name = "pypi_lock", requirements_lock = "//:requirements_lock.txt"' in modules[plain]
    assert compat_bazel.interpreter_attribute(python) == chosen


@pytest.mark.parametrize("release", ["0.22.1", "2.3.2"])
def test_the_adapted_module_file_names_a_module_of_its_own(release: str, bench_e2e: object) -> None:
    """The copy is a module of its own depending on the checkout, whatever the module(...) call's layout."""
    from benchmarks import example_workspace

    text = example_workspace.adapt_module((REPO / "MODULE.bazel").read_text(encoding="utf-8"), release)
    assert 'module(name = "rpw_example")' in text
    assert "module(\n" not in text  # the checkout's own module(...) call is gone
    assert 'local_path_override(module_name = "rules_patched_wheels"' in text
    assert f'bazel_dep(name = "rules_python", version = "{release}")' in text
