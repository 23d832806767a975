"""One user workspace through every rules_python release we support: 0.22.1, 1.6.0 and 2.3.2 (bzlmod).

Each release gets the same hubs (faketorch patched with `preload = "auto"`, and split) in the default
`index_option = "direct"`, over the fake PyPI of `file://` pages, which rules_python 2.x's downloader
cannot read (a directory listing to it): direct references spare it every page. Offline, tools/bazel
serves the releases from the archives in $RPW_BAZEL_MODULES (tools/test points it at
../shared/bazel-modules); online, the registry does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pytest

from bazelworkspace import (
    REPO_ROOT,
    SPLIT_MOVED_FROM,
    SPLIT_MOVED_TO,
    SPLIT_SIBLING,
    SUFFIX,
    TEMPLATES,
    BazelResult,
    BazelWorkspace,
    common_files,
    fakecuda,
    render,
    summary_statuses,
)

pytestmark = pytest.mark.bazel

RELEASES = ["0.22.1", "1.6.0", "2.3.2"]
# What rules_python 2.x logs when its downloader cannot use a pin and it falls back to pip.
FALLBACK = re.compile(r"Could not find a whl or an sdist|falling back to pip|fallback to pip", re.IGNORECASE)


def _workspace(root: Path, release: str) -> BazelWorkspace:
    pypi = common_files(root)
    modern = release != "0.22.1"
    render(
        "matrix/MODULE.bazel.tmpl",
        root / "MODULE.bazel",
        rules_python=release,
        repo_root=str(REPO_ROOT),
        toolchain=(TEMPLATES / "matrix" / "toolchain.tmpl").read_text(encoding="utf-8") if modern else "",
        index_url=pypi.index_url,
        suffix=SUFFIX,
        sibling=SPLIT_SIBLING,
        hub_attr="hub_name" if modern else "name",
        pip_args=', python_version = "3.11", python_interpreter = "python3"' if modern else "",
    )
    render(
        "matrix/BUILD.bazel.tmpl",
        root / "BUILD.bazel",
        expected=str(fakecuda.EXPECTED_ANSWER),
        version=f"{fakecuda.TORCH_VERSION}+{SUFFIX}",
        moved_from=SPLIT_MOVED_FROM,
        moved_to=SPLIT_MOVED_TO,
        sibling_dist=SPLIT_SIBLING.replace("-", "_"),
    )
    return BazelWorkspace(root, root / "logs")


@pytest.fixture(scope="module", params=RELEASES, ids=[f"rules_python-{r}" for r in RELEASES])
def matrix(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, BazelWorkspace, BazelResult]]:
    release = request.param
    workspace = _workspace(tmp_path_factory.mktemp(f"matrix-{release}") / "ws", release)
    result = workspace.run("test", "//:fixed_test", "//:split_test")
    yield release, workspace, result
    workspace.shutdown()


def test_patched_and_split_hubs_pass(matrix: tuple[str, BazelWorkspace, BazelResult]) -> None:
    release, workspace, result = matrix
    assert result.returncode == 0, result.tail()
    statuses = summary_statuses(result.output)
    assert statuses == {"//:fixed_test": "PASSED", "//:split_test": "PASSED"}, result.tail()
    for target in ("fixed_test", "split_test"):
        log = workspace.test_log(target)
        assert f"faketorch version {fakecuda.TORCH_VERSION}+{SUFFIX}" in log, log
        assert "faketorch ran its generated preload" in log, log
        assert f"faketorch.answer() == {fakecuda.EXPECTED_ANSWER}" in log, log
    assert "libfaketorch.so loaded from" in workspace.test_log("split_test")


def test_hub_holds_only_the_wheels_it_wrote(matrix: tuple[str, BazelWorkspace, BazelResult]) -> None:
    """Direct references: the lock names our files; the unpatched pins stay as locked, fetched by
    rules_python itself (by sha256), so the hub keeps no copy of them."""
    release, workspace, result = matrix
    assert result.returncode == 0, result.tail()
    expectations = {
        "fixed": [f"faketorch-{fakecuda.TORCH_VERSION}+{SUFFIX}-"],
        "split": [f"faketorch-{fakecuda.TORCH_VERSION}+{SUFFIX}-", f"faketorch_libs-{fakecuda.TORCH_VERSION}+{SUFFIX}-"],
    }
    for name, prefixes in expectations.items():
        hub = workspace.hub(name)
        wheels = sorted(path.name for path in (hub / "index").glob("*.whl"))
        elsewhere = [path for path in hub.rglob("*.whl") if path.parent.name not in ("index", "_helper")]
        assert elsewhere == [], elsewhere  # _helper: the helper's own pinned dependencies
        assert len(wheels) == len(prefixes) and all(w.startswith(p) for w, p in zip(wheels, prefixes)), wheels
        lock = (hub / "requirements_lock.txt").read_text(encoding="utf-8")
        for wheel in wheels:
            assert f" @ file://{hub / 'index' / wheel}" in lock, lock
        # The unpatched pins name the upstream file they were resolved to (sha256-pinned), so no index
        # page is read for them either.
        nvidia = [line for line in lock.splitlines() if line.startswith("fake-nvidia-")]
        pypi = workspace.root / "pypi"
        assert len(nvidia) == 4 and all(
            re.fullmatch(rf"fake-nvidia-[a-z]+ @ file://{pypi}/fake_nvidia_[a-z]+-{fakecuda.NVIDIA_VERSION}-\S+\.whl \\", line)
            for line in nvidia
        ), lock


def test_no_pin_falls_back_to_pip(matrix: tuple[str, BazelWorkspace, BazelResult]) -> None:
    """rules_python 2.x fetches every pin with Bazel's downloader: no warning, no pip fallback."""
    release, workspace, result = matrix
    assert result.returncode == 0, result.tail()
    fallbacks = [line for line in result.output.splitlines() if FALLBACK.search(line)]
    assert fallbacks == [], fallbacks[:5]


def test_unreadable_index_option_fails_in_our_extension(
    matrix: tuple[str, BazelWorkspace, BazelResult]
) -> None:
    """`extra-index-url` fails inside rules_python 2.x; our extension refuses it first with one line.
    Releases before 2 accept it (their pip reads a file:// index)."""
    release, workspace, _ = matrix
    if release.split(".")[0] != "2":
        pytest.skip("rules_python < 2 reads every index_option")
    module = workspace.root / "MODULE.bazel"
    original = module.read_text(encoding="utf-8")
    module.write_text(
        original.replace('patched.index(name = "fixed", ', 'patched.index(name = "fixed", index_option = "extra-index-url", '),
        encoding="utf-8",
    )
    try:
        result = workspace.run("build", "//:fixed_test")
    finally:
        module.write_text(original, encoding="utf-8")
    assert result.returncode != 0
    errors = [line for line in result.output.splitlines() if "rules_patched_wheels: hub \"fixed\"" in line]
    assert errors and 'index_option = "extra-index-url" cannot be read by rules_python 2.3.2' in errors[0], result.tail()
    assert "simpleapi_download" not in result.output, result.tail()
