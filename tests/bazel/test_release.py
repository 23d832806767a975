"""A workspace that knows rules_patched_wheels only as the release archive, served the way the Bazel
Central Registry serves a module: a registry (`--registry=file://…`) holding
`modules/rules_patched_wheels/VERSION/{MODULE.bazel,source.json}`, the archive behind a file:// URL with
its integrity. No `local_path_override`: what `bazel test` runs is what tools/release packed.

The same workspace runs one hub's helper under Python 3.10 (`python_interpreter`), which has no tomllib:
its `uv.lock` is read with the hub's pinned tomli.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import string
import tarfile
from pathlib import Path
from typing import Iterator

import pytest

from support.bazelworkspace import (
    REPO_ROOT,
    SUFFIX,
    TEMPLATES,
    BazelResult,
    BazelWorkspace,
    common_files,
    fakecuda,
    fixture_uv_locks,
    render,
    serve_over_http,
    summary_statuses,
)
from support.releasetool import load_release

pytestmark = pytest.mark.bazel

# The interpreter the `old` hub's helper runs under (bound into the offline launcher's root).
OLD_PYTHON_VERSION = "3.10"
OVERRIDE = 'local_path_override(module_name = "rules_patched_wheels", path = "$repo_root")\n'


def _old_python() -> Path | None:
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(root.glob(f"{OLD_PYTHON_VERSION}.*/bin/python{OLD_PYTHON_VERSION}"))
    if found:
        return found[-1]
    on_path = shutil.which(f"python{OLD_PYTHON_VERSION}")
    return Path(on_path) if on_path else None


def write_registry(registry: Path, archive: Path) -> str:
    """A registry serving ``archive`` as BCR serves a release; returns the module's version."""
    prefix = archive.name.removesuffix(".tar.gz")
    version = prefix.split("-", 1)[1]
    with tarfile.open(archive) as tar:
        member = tar.extractfile(f"{prefix}/MODULE.bazel")
        assert member is not None
        module_file = member.read()
    folder = registry / "modules" / "rules_patched_wheels" / version
    folder.mkdir(parents=True)
    (registry / "bazel_registry.json").write_text('{"mirrors": []}\n', encoding="utf-8")
    (folder.parent / "metadata.json").write_text(json.dumps({"versions": [version]}) + "\n", encoding="utf-8")
    (folder / "MODULE.bazel").write_bytes(module_file)  # BCR checks it equals the archive's
    source = {"url": archive.as_uri(), "integrity": load_release().integrity(archive), "strip_prefix": prefix}
    (folder / "source.json").write_text(json.dumps(source, indent=2) + "\n", encoding="utf-8")
    return version


def registry_flags(root: Path) -> str:
    """The .bazelrc lines that add the registry at ``root/registry`` (after the launcher's own, offline)."""
    lines = [f"common --registry={(root / 'registry').as_uri()}\n"]
    if _host_bazel():
        lines.append("common --registry=https://bcr.bazel.build/\n")
    return "".join(lines)


def _host_bazel() -> bool:
    """Whether tools/bazel runs a Bazel of the host (which then needs the BCR for rules_python) rather
    than its offline one (whose registry, in its own bazelrc, serves rules_python)."""
    mode = os.environ.get("RPW_BAZEL_MODE", "auto")
    return mode == "host" or mode == "auto" and bool(os.environ.get("BAZEL_REAL") or shutil.which("bazel"))


class Released:
    def __init__(self, workspace: BazelWorkspace, result: BazelResult, old_python: Path) -> None:
        self.workspace = workspace
        self.result = result
        self.old_python = old_python


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Released]:
    old_python = _old_python()
    if old_python is None:
        pytest.skip(f"no python{OLD_PYTHON_VERSION} here (pyenv or PATH)")
    root = tmp_path_factory.mktemp("release") / "ws"
    with serve_over_http(root / "pypi") as http_url, pytest.MonkeyPatch.context() as env:
        pypi = common_files(root)
        archive = load_release().write_release(REPO_ROOT, root / "archives")
        version = write_registry(root / "registry", archive)
        with (root / ".bazelrc").open("a", encoding="utf-8") as rc:
            rc.write(registry_flags(root))
        (root / ".bazelignore").write_text(
            (root / ".bazelignore").read_text() + "archives\nregistry\nuvproject\nuvextras\nuvcompile\n"
        )
        values = dict(repo_root=str(REPO_ROOT), index_url=pypi.index_url, suffix=SUFFIX)
        module_file = (TEMPLATES / "MODULE.bazel.tmpl").read_text(encoding="utf-8")
        assert OVERRIDE in module_file
        module_file = module_file.replace(OVERRIDE, "").replace('"0.1.0"', f'"{version}"')
        (root / "MODULE.bazel").write_text(string.Template(module_file).substitute(values), encoding="utf-8")
        fixture_uv_locks(root, pypi, http_url)
        (root / "does-not-apply.patch").write_text("", encoding="utf-8")  # the template's `bad` hub, never fetched
        with (root / "MODULE.bazel").open("a", encoding="utf-8") as out:
            out.write(
                "\n# The helper under an interpreter without tomllib, reading a uv.lock.\n"
                "patched.patched_wheel(\n"
                '    name = "faketorch",\n    hub = "old",\n    requirement = "faketorch==2.1.0",\n'
                f'    preload = "auto",\n    suffix = "{SUFFIX}",\n)\n'
                f'patched.index(name = "old", uv_lock = "//:uv.lock", python_interpreter = "{old_python}")\n'
                'use_repo(patched, "old")\n'
                'pip.parse(name = "pypi_old", requirements_lock = "@old//:requirements_lock.txt")\n'
                'use_repo(pip, "pypi_old")\n'
            )
        render("BUILD.bazel.tmpl", root / "BUILD.bazel", expected=str(fakecuda.EXPECTED_ANSWER), **values)
        with (root / "BUILD.bazel").open("a", encoding="utf-8") as out:
            out.write(
                '\nload("@pypi_old//:requirements.bzl", old_requirement = "requirement")\n\n'
                "py_test(\n"
                '    name = "old_test",\n    srcs = ["check_faketorch.py"],\n'
                f'    args = ["--expected={fakecuda.EXPECTED_ANSWER}", "--expected-version={fakecuda.TORCH_VERSION}+{SUFFIX}", "--preloaded"],\n'
                '    main = "check_faketorch.py",\n    deps = [old_requirement("faketorch")],\n)\n'
            )
        # The offline launcher binds the old interpreter's prefix into its root.
        env.setenv(
            "RPW_BIND_DIRS", " ".join(filter(None, [os.environ.get("RPW_BIND_DIRS"), str(old_python.parent.parent)]))
        )
        workspace = BazelWorkspace(root, root / "logs")
        result = workspace.run("test", "--keep_going", "//:fixed_test", "//:old_test")
        yield Released(workspace, result, old_python)
        workspace.shutdown()


def test_the_release_archive_from_a_registry_passes(released: Released) -> None:
    statuses = summary_statuses(released.result.output)
    assert {target: statuses.get(target) for target in ("//:fixed_test", "//:old_test")} == dict.fromkeys(
        ("//:fixed_test", "//:old_test"), "PASSED"
    ), released.result.tail()
    module_file = (released.workspace.root / "MODULE.bazel").read_text(encoding="utf-8")
    assert "_override" not in module_file
    # The module Bazel fetched is the archive's: its MODULE.bazel is the released one, no tests inside.
    external = released.workspace.output_base / "external"
    (fetched,) = [path for path in external.iterdir() if re.fullmatch(r"rules_patched_wheels[~+]?", path.name)]
    assert "written by tools/release" in (fetched / "MODULE.bazel").read_text(encoding="utf-8")
    assert not (fetched / "tests").exists()


def test_a_hub_under_python_3_10_reads_a_uv_lock(released: Released) -> None:
    assert summary_statuses(released.result.output).get("//:old_test") == "PASSED", released.result.tail()
    log = released.workspace.test_log("old_test")
    assert (
        f"faketorch version {fakecuda.TORCH_VERSION}+{SUFFIX}" in log and "faketorch ran its generated preload" in log
    ), log
    # The helper ran under that interpreter and read the lock with tomli: the bytecode it cached (by
    # interpreter tag) holds the fetched module's uvlock and the hub's tomli.
    tag = "cpython-" + OLD_PYTHON_VERSION.replace(".", "")
    compiled = sorted(str(path) for path in (released.workspace.root / "rpw-cache").rglob(f"*.{tag}.pyc"))
    assert [path for path in compiled if path.endswith(f"/python/patched_wheels/lock/formats/uvlock.{tag}.pyc")], (
        compiled[:20]
    )
    assert [path for path in compiled if f"/tomli/_parser.{tag}.pyc" in path], compiled[:20]


@pytest.fixture(scope="module")
def bcr_test_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BazelResult]:
    """.bcr/presubmit.yml's test module, as the BCR runs it: from the release archive, the module under
    test from the registry (its local_path_override, for runs inside this repository, dropped). It
    installs six from PyPI."""
    root = tmp_path_factory.mktemp("bcr")
    archive = load_release().write_release(REPO_ROOT, root / "dist")
    with tarfile.open(archive) as tar:
        tar.extractall(root / "source", filter="data")
    module = root / "source" / archive.name.removesuffix(".tar.gz") / "e2e" / "bzlmod"
    # The registry and the archive it serves lie inside the module's folder, the workspace the offline
    # launcher binds into its root.
    served = module / "archives" / archive.name
    served.parent.mkdir()
    shutil.copyfile(archive, served)
    version = write_registry(module / "registry", served)
    module_file = (module / "MODULE.bazel").read_text(encoding="utf-8")
    override = 'local_path_override(\n    module_name = "rules_patched_wheels",\n    path = "../..",\n)\n'
    assert override in module_file and 'version = "")' in module_file
    (module / "MODULE.bazel").write_text(
        module_file.replace(override, "").replace('version = "")', f'version = "{version}")')
    )
    (module / ".bazelrc").write_text(
        "startup --max_idle_secs=300\ntest --test_output=errors\n" + registry_flags(module)
    )
    (module / ".bazelignore").write_text("archives\nregistry\nlogs\n")
    (module / "logs").mkdir()
    workspace = BazelWorkspace(module, module / "logs")
    yield workspace.run("test", "//...")
    workspace.shutdown()


def test_the_bcr_test_module_passes(bcr_test_module: BazelResult) -> None:
    assert summary_statuses(bcr_test_module.output) == {"//:patched_six_test": "PASSED"}, bcr_test_module.tail()
    assert "host_javabase" not in bcr_test_module.output
