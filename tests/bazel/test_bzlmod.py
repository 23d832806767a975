"""The bzlmod API end to end: MODULE.bazel hubs on the fake CUDA wheels, tested under `bazel test`.

One workspace (see conftest.py) holds every hub; the tests run in file order and the last one
expunges the output base, so keep it last.
"""

from __future__ import annotations

import io
import json
import platform
import re
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from patched_wheels.loading.preloadmodule import read_preload_data
from support.bazelworkspace import (
    ABSENT_DRIVER,
    CACHE_DIR,
    SUFFIX,
    BazelResult,
    BazelWorkspace,
    Setup,
    fakecuda,
    rpathfixture,
    sha256_of,
    stackshapes,
    summary_statuses,
)

pytestmark = pytest.mark.bazel

PRELOAD_BUG = "libjit.so.12: cannot open shared object file"
RUNTIME_BUG = "libbar.so.1: cannot open shared object file"
TIMINGS = "timings.jsonl"  # in the workspace, which the offline launcher binds into its root


def targets(setup: Setup) -> list[str]:
    return [
        "//:fixed_test",
        "//:original_test",
        "//:split_test",
        "//:rpath_test",
        "//:runtime_test",
        "//:runtime_original_test",
        "//:plugin_test",
    ]


@pytest.fixture(scope="module")
def first_run(bzlmod: Setup) -> BazelResult:
    """One `bazel test` of every target: the fetch, patch, pip install and test of every hub (each helper
    command appending its timings line to TIMINGS, which changes no output)."""
    timings = bzlmod.workspace.root / TIMINGS
    result = bzlmod.workspace.run(
        "test", "--keep_going", f"--repo_env=RULES_PATCHED_WHEELS_TIMINGS={timings}", *targets(bzlmod)
    )
    # 3: the build succeeded and some test failed (the control is meant to).
    assert result.returncode == 3, result.tail()
    return result


def test_patched_hub_fixes_import(bzlmod: Setup, first_run: BazelResult) -> None:
    assert summary_statuses(first_run.output).get("//:fixed_test") == "PASSED", first_run.tail()
    assert f"faketorch.answer() == {fakecuda.EXPECTED_ANSWER}" in bzlmod.workspace.test_log("fixed_test")


def test_unpatched_hub_shows_the_preload_bug(bzlmod: Setup, first_run: BazelResult) -> None:
    assert summary_statuses(first_run.output).get("//:original_test") == "FAILED", first_run.tail()
    log = bzlmod.workspace.test_log("original_test")
    assert PRELOAD_BUG in log, log[-3000:]


def test_split_hub_loads_moved_library_from_sibling_wheel(bzlmod: Setup, first_run: BazelResult) -> None:
    assert summary_statuses(first_run.output).get("//:split_test") == "PASSED", first_run.tail()
    log = bzlmod.workspace.test_log("split_test")
    # check_faketorch.py prints this only after checking where the library was found and mapped.
    assert re.search(r"libfaketorch\.so loaded from \S*pypi_split_faketorch_libs\S*/faketorch_libs/lib/", log), log


def test_rpath_hub_makes_the_library_find_its_companion(bzlmod: Setup, first_run: BazelResult) -> None:
    assert summary_statuses(first_run.output).get("//:rpath_test") == "PASSED", first_run.tail()
    assert f"pkg.answer() == {rpathfixture.EXPECTED_ANSWER}" in bzlmod.workspace.test_log("rpath_test")
    # What made it pass: the served wheel's _ext.so has the RUNPATH the MODULE.bazel asked for.
    (served,) = (bzlmod.workspace.hub("rpath") / "index").glob(f"pkg-1.0+{SUFFIX}-*.whl")
    with zipfile.ZipFile(served) as archive:
        dynamic = ELFFile(io.BytesIO(archive.read(rpathfixture.EXT_MEMBER))).get_section_by_name(".dynamic")
    runpaths = [tag.runpath for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_RUNPATH"]
    assert runpaths == [rpathfixture.FIX]


def test_preload_wheels_cover_libraries_loaded_at_run_time(bzlmod: Setup, first_run: BazelResult) -> None:
    statuses = summary_statuses(first_run.output)
    assert statuses.get("//:runtime_test") == "PASSED", first_run.tail()
    assert f"fakejax.answer() == {fakecuda.RUNTIME_ANSWER}" in bzlmod.workspace.test_log("runtime_test")
    assert statuses.get("//:runtime_original_test") == "FAILED", first_run.tail()
    log = bzlmod.workspace.test_log("runtime_original_test")
    assert RUNTIME_BUG in log, log[-3000:]


def test_preload_auto_alone_covers_what_a_plugin_opens_itself(bzlmod: Setup, first_run: BazelResult) -> None:
    """A JAX-shaped plugin: no DT_NEEDED edge, a namespace package; the hub's probe observed what it maps."""
    assert summary_statuses(first_run.output).get("//:plugin_test") == "PASSED", first_run.tail()
    package = bzlmod.pypi.plugin.package
    assert f"{package}.answer() == {stackshapes.PLUGIN_ANSWER}" in bzlmod.workspace.test_log("plugin_test")
    (served,) = (bzlmod.workspace.hub("plugin") / "index").glob(f"fakeplug_cuda-1.0+{SUFFIX}-*.whl")
    with zipfile.ZipFile(served) as archive:
        data = archive.read(f"{package.replace('.', '/')}/_patched_wheels_preload.json")
    preload = read_preload_data(data, where=served.name)
    assert preload.libraries == (stackshapes.PLUGIN_LIBRARIES["cudep"], stackshapes.PLUGIN_LIBRARIES["cu"])


def test_generated_lock_pins_the_patched_wheel_of_the_local_index(bzlmod: Setup, first_run: BazelResult) -> None:
    hub = bzlmod.workspace.hub("fixed")
    patched = list((hub / "index").glob(f"faketorch-2.1.0+{SUFFIX}-*.whl"))
    assert len(patched) == 1, sorted(path.name for path in (hub / "index").iterdir())
    lock = (hub / "requirements_lock.txt").read_text(encoding="utf-8")
    assert f"faketorch==2.1.0+{SUFFIX} \\\n    --hash=sha256:{sha256_of(patched[0])}\n" in lock, lock
    index_lines = [line for line in lock.splitlines() if line.startswith("--index-url=")]
    assert index_lines == [f"--index-url={(hub / 'index' / 'simple').as_uri()}"], lock
    # The other wheels are mirrored unchanged into the hub's index and keep their pins and hashes.
    for name, wheel in bzlmod.pypi.wheels.nvidia.items():
        assert sha256_of(hub / "index" / wheel.name) == sha256_of(wheel)
        assert f"fake-nvidia-{name}=={fakecuda.NVIDIA_VERSION} \\\n    --hash=sha256:{sha256_of(wheel)}\n" in lock


def test_control_hub_serves_the_originals(bzlmod: Setup, first_run: BazelResult) -> None:
    hub = bzlmod.workspace.hub("original")
    torch = bzlmod.pypi.wheels.torch
    assert sha256_of(hub / "index" / torch.name) == sha256_of(torch)
    lock = (hub / "requirements_lock.txt").read_text(encoding="utf-8")
    assert f"faketorch=={fakecuda.TORCH_VERSION} \\\n    --hash=sha256:{sha256_of(torch)}\n" in lock, lock


def test_patch_that_does_not_apply_fails_with_the_helpers_error_line(bzlmod: Setup) -> None:
    result = bzlmod.workspace.run("build", "@bad//:requirements_lock.txt")
    assert result.returncode != 0, result.tail()
    patch = bzlmod.workspace.root / "does-not-apply.patch"
    errors = [line for line in result.output.splitlines() if "patched-wheels: error:" in line]
    assert errors, result.tail()
    assert all(str(patch) in line and "faketorch/__init__.py" in line for line in errors), errors


def test_a_preload_package_of_another_project_fails_naming_the_project_to_write(bzlmod: Setup) -> None:
    result = bzlmod.workspace.run("build", "@misplaced//:requirements_lock.txt")
    assert result.returncode != 0, result.tail()
    errors = [line for line in result.output.splitlines() if "patched-wheels: error:" in line]
    assert errors, result.tail()
    expected = (
        'patched.patched_wheel(name = "jaxlike-cuda-plugin", hub = "misplaced"): preload_package = "jaxlike_plugins.xla_fake": '
        "jaxlike_plugins.xla_fake is shipped by jaxlike-cuda-pjrt, which its entry point jaxlike_plugins:xla_fake loads, "
        'not by jaxlike-cuda-plugin: write patched.patched_wheel(name = "jaxlike-cuda-pjrt", hub = "misplaced", '
        'preload = "auto", preload_package = "jaxlike_plugins.xla_fake", …)'
    )
    assert all(line.endswith(expected) for line in errors), errors


def test_a_hub_names_its_lock_attribute_by_the_label_the_user_wrote(bzlmod: Setup) -> None:
    """Not by the path Bazel resolved it to: the request holds both, and the message says what MODULE.bazel says."""
    workspace = bzlmod.workspace
    module = workspace.root / "MODULE.bazel"
    text = module.read_text(encoding="utf-8")
    declared = 'patched.index(name = "plugin", requirements_lock = "//:plugin_requirements_lock.txt",'
    assert text.count(declared) == 1, text
    module.write_text(text.replace(declared, declared + ' extras = ["notpinned[x]"],'), encoding="utf-8")
    try:
        result = workspace.run("build", "@plugin//:requirements_lock.txt")
    finally:
        module.write_text(text, encoding="utf-8")
    assert result.returncode != 0, result.tail()
    errors = [line for line in result.output.splitlines() if "patched-wheels: error:" in line]
    assert len(errors) == 1, result.tail()
    assert errors[0].endswith(
        'patched.index(name = "plugin"): extras = ["notpinned[x]"]: notpinned is not pinned in '
        'requirements_lock = "//:plugin_requirements_lock.txt"'
    ), errors


def _lockfile_records_resolution(workspace: BazelWorkspace, pypi_dir: Path) -> bool:
    """Whether MODULE.bazel.lock keeps the extension's resolved wheel URLs.

    Debian's bazel-bootstrap 7.7.1 (tools/bazel's offline path) always writes `{}`, so there the
    extension runs again after `clean --expunge` and downloads the index pages (not the wheels).
    """
    lockfile = workspace.root / "MODULE.bazel.lock"
    return lockfile.is_file() and pypi_dir.as_uri() in lockfile.read_text(encoding="utf-8")


def test_extension_hands_bazel_the_resolved_wheels(bzlmod: Setup, first_run: BazelResult) -> None:
    """What MODULE.bazel.lock records is the extension's result, the hub's attributes: they hold every
    wheel's URL and sha256, so a Bazel that writes the lock file resolves nothing again. Checked through
    `bazel mod show_repo`, since the offline Bazel writes `{}` as its lock file (where a Bazel writes a
    real one, the URLs must be in it too)."""
    shown = bzlmod.workspace.ok("mod", "show_repo", "@fixed").output
    (resolved,) = re.findall(r'^\s*resolved = "(.*)",$', shown, flags=re.M)
    entries = {entry["filename"]: entry for entry in json.loads(json.loads(f'"{resolved}"'))}
    assert any(name.startswith("faketorch-") for name in entries), sorted(entries)
    for name, entry in entries.items():
        wheel = bzlmod.pypi.directory / name
        assert (entry["urls"], entry["sha256"]) == ([wheel.as_uri()], sha256_of(wheel)), entry
    lockfile = bzlmod.workspace.root / "MODULE.bazel.lock"
    if json.loads(lockfile.read_text(encoding="utf-8")) != {}:
        assert _lockfile_records_resolution(bzlmod.workspace, bzlmod.pypi.directory), lockfile.read_text()[:3000]


def test_layout_test_fails_on_the_unpatched_plugin_and_passes_on_the_patched_one(bzlmod: Setup) -> None:
    """JAX's silent failure: per wheel the unpatched plugin logs and exits 0; layout_test fails it by what one
    site-packages maps and the test's layout does not, and passes the hub's preload = "auto" and a probe that
    fails alike in both layouts (no driver)."""
    workspace = bzlmod.workspace
    result = workspace.run(
        "test", "--keep_going", "//:plugin_layout_test", "//:plugin_original_layout_test", "//:nodriver_layout_test"
    )
    assert result.returncode == 3, result.tail()  # 3: built, and a test failed
    statuses = summary_statuses(result.output)
    assert statuses == {
        "//:plugin_layout_test": "PASSED",
        "//:plugin_original_layout_test": "FAILED",
        "//:nodriver_layout_test": "PASSED",
    }, result.tail()
    log = workspace.test_log("plugin_original_layout_test")
    assert "layout_test: FAILED" in log and "Unable to load CUDA" in log, log[-3000:]
    missing = log.split("NOT in the test's layout:", 1)[1].split("layout_test:", 1)[0]
    assert all(library in missing for library in stackshapes.PLUGIN_LIBRARIES.values()), log[-3000:]
    assert (
        "has no generated preload: patch its wheel: add to MODULE.bazel (suffix preload.1 is yours to change: a PEP 440 local "
        'label; HUB: the hub of the deps, which pip_closure = "@HUB//:pip_closure.json" names): patched.patched_wheel(name = '
        '"fakeplug-cuda", hub = "HUB", suffix = "preload.1", preload = "auto", probe = ' in log
    ), log[-3000:]
    log = workspace.test_log("plugin_layout_test")
    assert log.count("mapped: 2 of the wheels' 2 libraries") == 2 and "layout_test: PASSED" in log, log[-3000:]
    log = workspace.test_log("nodriver_layout_test")
    assert "both fail alike" in log and ABSENT_DRIVER in log, log[-3000:]


def test_layout_test_without_deps_fails_when_the_build_file_loads(bzlmod: Setup) -> None:
    package = bzlmod.workspace.root / "misuse"
    package.mkdir()
    (package / "BUILD.bazel").write_text(
        'load("@rules_patched_wheels//python:defs.bzl", "layout_test")\n'
        'layout_test(name = "empty", deps = [], probe = "import fakeplugins.xla_fake")\n',
        encoding="utf-8",
    )
    try:
        result = bzlmod.workspace.run("build", "//misuse:empty")
    finally:
        shutil.rmtree(package)
    assert result.returncode != 0
    assert 'layout_test(name = "empty"): deps is empty' in result.output, result.tail()


def test_the_hub_inflates_with_python_isal_fetched_for_its_interpreter(bzlmod: Setup, first_run: BazelResult) -> None:
    """Every hub's helper read the wheels with python-isal (its timings line says which inflater it used):
    Bazel fetched the pinned wheel of the hub's interpreter beside packaging (python/private/helper.bzl). The
    offline launcher's python3 is this interpreter's installation; another interpreter (PyPy, a
    free-threaded build, musl) gets none and inflates with zlib."""
    facts = (sys.implementation.name, getattr(sys, "abiflags", ""), platform.libc_ver()[0], platform.machine())
    if facts[:3] != ("cpython", "", "glibc") or facts[3] not in ("x86_64", "aarch64"):
        pytest.skip(f"no python-isal wheel is pinned for {facts}")
    lines = [json.loads(line) for line in (bzlmod.workspace.root / TIMINGS).read_text(encoding="utf-8").splitlines()]
    builds = [line for line in lines if line["command"] == ["hub", "build"]]
    assert len(builds) >= 5, [line["command"] for line in lines]
    assert {line["inflater"] for line in builds} == {"isal"}, [line["inflater"] for line in builds]


def test_a_runner_with_an_empty_cache_given_the_hubs_wheel_facts_probes_nothing(
    bzlmod: Setup, first_run: BazelResult
) -> None:
    """A fresh CI runner: the helper's cache root empty, the plugin hub given the wheel_facts.json its first build
    wrote. Its hub build installs nothing and runs no probe, writes the same facts back, says nothing about them,
    and the plugin still imports."""
    workspace = bzlmod.workspace
    shutil.copyfile(workspace.hub("plugin") / "wheel_facts.json", workspace.root / "plugin_facts.json")
    module = workspace.root / "MODULE.bazel"
    text = module.read_text(encoding="utf-8")
    declared = 'patched.index(name = "plugin", requirements_lock = "//:plugin_requirements_lock.txt",'
    assert text.count(declared) == 1, text
    module.write_text(text.replace(declared, declared + ' wheel_facts = "//:plugin_facts.json",'), encoding="utf-8")
    timings = workspace.root / "facts-timings.jsonl"
    try:
        result = workspace.run(
            "test",
            f"--repo_env=RULES_PATCHED_WHEELS_CACHE={workspace.root / CACHE_DIR / 'fresh-runner'}",
            f"--repo_env=RULES_PATCHED_WHEELS_TIMINGS={timings}",
            "//:plugin_test",
        )
    finally:
        module.write_text(text, encoding="utf-8")
    assert result.returncode == 0, result.tail()
    builds = [
        line
        for line in map(json.loads, timings.read_text(encoding="utf-8").splitlines())
        if line["command"] == ["hub", "build"]
    ]
    assert len(builds) == 1, builds
    assert not {"probe: install", "probe: run"} & set(builds[0]["phases"]), builds[0]["phases"]
    assert (workspace.hub("plugin") / "wheel_facts.json").read_bytes() == (
        workspace.root / "plugin_facts.json"
    ).read_bytes()
    assert "wheel_facts" not in result.output, result.tail()


def test_rebuild_after_clean_expunge_is_identical_and_fetches_no_wheel(bzlmod: Setup, first_run: BazelResult) -> None:
    """Runs last: it expunges the output base. The fake PyPI's wheels are hidden during the rebuild,
    so any wheel not served from the repository cache fails the build."""
    workspace = bzlmod.workspace
    hubs = ["fixed", "split", "rpath", "runtime", "plugin"]
    before = {
        (hub, path.name): sha256_of(path) for hub in hubs for path in (workspace.hub(hub) / "index").glob("*.whl")
    }
    assert any("+" + SUFFIX in name for _, name in before), before

    # The helper's bytecode outlives the output base (bytecode.py): the rebuild compiles nothing again.
    compiled = _bytecode_stamps(workspace.root / CACHE_DIR / "bytecode")
    assert any(path.parent.name == "hub" and path.name.startswith("plan.") for path in compiled), sorted(compiled)[:10]

    workspace.ok("clean", "--expunge")
    assert not any((workspace.output_base / "external").glob("*fixed")), "clean --expunge left the hub behind"
    hidden = workspace.root / "hidden-wheels"
    hidden.mkdir()
    wheels = list(bzlmod.pypi.directory.glob("*.whl"))
    for wheel in wheels:
        shutil.move(wheel, hidden / wheel.name)
    try:
        flags = (
            ["--repository_disable_download"] if _lockfile_records_resolution(workspace, bzlmod.pypi.directory) else []
        )
        passing = [target for target in targets(bzlmod) if not target.endswith("original_test")]
        rebuilt = workspace.run("test", *flags, *passing)
    finally:
        for wheel in wheels:
            shutil.move(hidden / wheel.name, wheel)
    assert rebuilt.returncode == 0, rebuilt.tail()
    after = {(hub, path.name): sha256_of(path) for hub in hubs for path in (workspace.hub(hub) / "index").glob("*.whl")}
    assert after == before
    recompiled = sorted(
        str(path)
        for path, stamp in _bytecode_stamps(workspace.root / CACHE_DIR / "bytecode").items()
        if compiled.get(path) != stamp
    )
    assert not recompiled, recompiled[:10]


def _bytecode_stamps(directory: Path) -> dict[Path, int]:
    """Every .pyc under the helper's persistent bytecode directory, with its mtime."""
    return {path: path.stat().st_mtime_ns for path in directory.rglob("*.pyc")}
