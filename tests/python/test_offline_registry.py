"""tools/offline/registry.py: the offline launcher's module registry, in the root every checkout shares.

Issue 49: two checkouts of one commit rewrote the shared registry under each other's running Bazel server
(the launcher's stamp held the checkout's path and the archives' times), and a build beside it failed with
``Error downloading [file:…/package_metadata-0.0.7.tar.gz] (No such file or directory)``. The launcher runs
this script on every call; these tests run it as the launcher does, from copies of tools/offline at other
paths, against a stand-in root (only the registry's part of it: nothing is provisioned).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.offlineroot import checkout_tools, module_archive, stand_in_root, status


def _launch(tools: Path, root: Path, modules: Path) -> None:
    """What tools/bazel runs on each call, under its lock."""
    command = [sys.executable, str(tools / "offline" / "registry.py"), str(root), str(modules)]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    assert (completed.returncode, completed.stderr) == (0, ""), completed.stderr


def test_the_same_content_from_two_checkouts_rewrites_nothing_and_new_content_leaves_the_old_registry(
    tmp_path: Path,
) -> None:
    root = stand_in_root(tmp_path / "root")
    modules = tmp_path / "bazel-modules"
    release = module_archive(modules, "rules_python-9.9.9", 'module(name = "rules_python")\n# first\n')
    first, second = checkout_tools(tmp_path / "clone-a"), checkout_tools(tmp_path / "clone-b")
    out = root / "opt" / "rpw-modules"

    _launch(first, root, modules)
    before = {path: status(path) for path in [out, *out.rglob("*")]}
    os.utime(release, (1, 1))  # a copy of the same archive: another time, the same bytes
    _launch(second, root, modules)
    _launch(first, root, modules)
    assert {path: status(path) for path in [out, *out.rglob("*")]} == before

    (generation,) = [path for path in out.iterdir() if path.is_dir()]
    assert (
        (out / "modules.bazelrc")
        .read_text(encoding="utf-8")
        .endswith(f"common --registry=file:///opt/rpw-modules/{generation.name}/registry\n")
    )
    assert f'"url": "file:///opt/rpw-modules/{generation.name}/archives/{release.name}"' in (
        generation / "registry/modules/rules_python/9.9.9/source.json"
    ).read_text(encoding="utf-8")
    module_archive(modules, "rules_python-9.9.9", 'module(name = "rules_python")\n# other\n')  # same name, new bytes
    os.utime(release, (1, 1))
    _launch(second, root, modules)
    (newer,) = [path for path in out.iterdir() if path.is_dir() and path != generation]
    assert (out / "modules.bazelrc").read_text(encoding="utf-8").endswith(f"/{newer.name}/registry\n")
    assert (newer / "archives" / release.name).read_bytes() == release.read_bytes()
    # The registry a running server read is still there, unchanged.
    assert {path: status(path) for path in generation.rglob("*")} == {
        path: before[path] for path in generation.rglob("*")
    }
