"""One user workspace through every rules_python configuration we support (bzlmod): 0.22.1, 1.6.0 and
2.3.2 with one directory per wheel, and 2.3.2's one-site-packages layout.

Each configuration gets the same hubs (faketorch patched with `preload = "auto"`, and split) in the
default `index_option = "direct"`, over the fake PyPI of `file://` pages, which rules_python 2.x's
downloader cannot read (a directory listing to it): direct references spare it every page. The
same patch also comes from a `uv.lock` and a `pylock.toml` made by the real
`uv`, against the same pages served over HTTP (rules_python's uv.lock reader takes wheel URLs, not the
local paths uv records for a `file://` index): 2.3.2 reads the hub's `uv.lock`
(`pip.parse(uv_lock = ...)`), the others its `requirements_lock.txt`. Offline, tools/bazel serves the
releases from the archives in $RPW_BAZEL_MODULES (tools/test points it at ../shared/bazel-modules);
online, the registry does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from support import extrasfixture
from support.bazelworkspace import (
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
    fixture_uv_locks,
    render,
    serve_over_http,
    string_template,
    summary_statuses,
)

pytestmark = pytest.mark.bazel

# What rules_python 2.x logs when its downloader cannot use a pin and it falls back to pip.
FALLBACK = re.compile(r"Could not find a whl or an sdist|falling back to pip|fallback to pip", re.IGNORECASE)
PRELOAD_BUG = "libjit.so.12: cannot open shared object file"


@dataclass(frozen=True)
class Configuration:
    release: str
    flags: tuple[str, ...] = ()
    """`bazel test` flags: the defaults Bazel 8 flipped, or rules_python's one-site-packages layout."""

    @property
    def modern(self) -> bool:
        return self.release != "0.22.1"

    @property
    def release_2(self) -> bool:
        """rules_python 2.x: its pip.parse reads a uv.lock itself (>= 2.2) and only direct references."""
        return self.release.split(".")[0] == "2"

    @property
    def one_site_packages(self) -> bool:
        return VENV_FLAGS[-1] in self.flags


VENV_FLAGS = (
    "--@rules_python//python/config_settings:bootstrap_impl=script",
    "--@rules_python//python/config_settings:venvs_site_packages=yes",
)
# What Bazel 8 flipped, as far as Bazel 7.7.1 knows the flags (--noenable_workspace: tools/offline's
# bazelrc, in every bzlmod run), so the rules' own Starlark is held to them.
BAZEL_8_FLAGS = (
    "--incompatible_disallow_empty_glob",
    "--incompatible_use_plus_in_repo_names",
    "--incompatible_autoload_externally=",
    "--incompatible_disable_native_repo_rules",
    "--incompatible_no_implicit_file_export",
    "--nolegacy_external_runfiles",
)
# The hubs that also get a layout_test (patched_wheels.layouttest): the patched ones pass in every layout, the
# control passes in one site-packages (it only exists in that configuration).
LAYOUT_TEST_HUBS = ("fixed", "split", "original")
CONFIGURATIONS = {
    "rules_python-0.22.1": Configuration("0.22.1"),
    "rules_python-1.6.0": Configuration("1.6.0"),
    "rules_python-2.3.2": Configuration("2.3.2", BAZEL_8_FLAGS),
    "rules_python-2.3.2-venvs_site_packages": Configuration("2.3.2", VENV_FLAGS),
}


# The hubs of the extras set (tests/support/extrasfixture.py), in every configuration: no patched_wheel,
# the extra restored from each lock format; extras_plain (restore_extras = False) is wired as rules_python wires it.
EXTRAS_HUBS = ("extras", "extras_plain", "extras_uv", "extras_pylock")
# The hubs of toolkit[rt] as a root no lock records (uv pip compile): inferred and restored; restore_extras = False.
# Each gets a layout_test of requirement("toolkit") with this probe.
ROOT_EXTRA_HUBS = {"extras_root": "import toolkit, tk_rt", "extras_root_plain": "import toolkit"}


def _hubs(configuration: Configuration) -> list[str]:
    """The hubs (and so py_test targets) of a configuration: split's check looks for the sibling in its
    own sys.path entry, which one site-packages does not have; the control hub shows what that layout
    fixes on its own."""
    hubs = ["fixed"]
    hubs.append("original" if configuration.one_site_packages else "split")
    return hubs + ["uvfixed", "pylockfixed"]


def _workspace(root: Path, configuration: Configuration, http_url: str) -> tuple[BazelWorkspace, list[str]]:
    """The workspace of ``configuration``; its ``uv.lock`` and ``pylock.toml`` are locked against ``http_url``."""
    pypi = common_files(root)
    fixture_uv_locks(root, pypi, http_url)
    hubs = _hubs(configuration)
    values = dict(index_url=pypi.index_url, suffix=SUFFIX, sibling=SPLIT_SIBLING)
    extra_hubs = {"split": "split", "original": "original", "uvfixed": "uv"}
    hub_text = "".join(
        string_template(f"matrix/{template}.MODULE.bazel.tmpl", values)
        for hub, template in extra_hubs.items()
        if hub in hubs
    ) + string_template("matrix/extras.MODULE.bazel.tmpl", values)
    hub_attr = "hub_name" if configuration.modern else "name"
    pip_args = ', python_version = "3.11", python_interpreter = "python3"' if configuration.modern else ""
    pips = []
    for hub in [*hubs[1:], *EXTRAS_HUBS, *ROOT_EXTRA_HUBS]:
        uv = hub in ("uvfixed", "extras_uv") and configuration.release_2
        lock = f'uv_lock = "@{hub}//:uv.lock"' if uv else f'requirements_lock = "@{hub}//:requirements_lock.txt"'
        pips.append(f'pip.parse({hub_attr} = "pypi_{hub}", {lock}{pip_args})\n')
    every_hub = [*hubs, *EXTRAS_HUBS, *ROOT_EXTRA_HUBS]
    pips.append(f"use_repo(patched, {', '.join(json.dumps(hub) for hub in every_hub)})\n")
    pips.append(f"use_repo(pip, {', '.join(json.dumps('pypi_' + hub) for hub in every_hub)})\n")
    render(
        "matrix/MODULE.bazel.tmpl",
        root / "MODULE.bazel",
        rules_python=configuration.release,
        repo_root=str(REPO_ROOT),
        toolchain=(TEMPLATES / "matrix" / "toolchain.tmpl").read_text(encoding="utf-8") if configuration.modern else "",
        index_url=pypi.index_url,
        suffix=SUFFIX,
        hubs=hub_text,
        hub_attr=hub_attr,
        pip_args=pip_args,
        pips="".join(pips),
    )
    tests = []
    for hub in hubs:
        args = ["--expected=%d" % fakecuda.EXPECTED_ANSWER]
        if hub != "original":
            args += [f"--expected-version={fakecuda.TORCH_VERSION}+{SUFFIX}", "--preloaded"]
        if configuration.one_site_packages:
            args.append("--one-site-packages")
        if hub == "split":
            args += [
                f"--moved-from={SPLIT_MOVED_FROM}",
                f"--moved-to={SPLIT_MOVED_TO}",
                f"--sibling-repo={SPLIT_SIBLING.replace('-', '_')}",
            ]
        tests.append(string_template("matrix/test.BUILD.bazel.tmpl", dict(hub=hub, args=json.dumps(args))))
        if hub in LAYOUT_TEST_HUBS:
            tests.append(string_template("matrix/layout_test.BUILD.bazel.tmpl", dict(hub=hub)))
    tests += [
        string_template("matrix/extras.BUILD.bazel.tmpl", dict(hub=hub, answer=str(extrasfixture.ANSWER)))
        for hub in EXTRAS_HUBS
    ]
    tests += [
        string_template("matrix/extras_root.BUILD.bazel.tmpl", dict(hub=hub, probe=probe))
        for hub, probe in ROOT_EXTRA_HUBS.items()
    ]
    render(
        "matrix/BUILD.bazel.tmpl",
        root / "BUILD.bazel",
        loads="".join(
            f'load("@pypi_{hub}//:requirements.bzl", {hub}_requirement = "requirement")\n' for hub in every_hub
        ),
        tests="".join(tests),
    )
    return BazelWorkspace(root, root / "logs"), hubs


def layout_tests(hubs: list[str]) -> list[str]:
    return [f"//:{hub}_layout_test" for hub in hubs if hub in LAYOUT_TEST_HUBS]


@dataclass(frozen=True)
class Matrix:
    configuration: Configuration
    workspace: BazelWorkspace
    hubs: list[str]
    result: BazelResult


@pytest.fixture(scope="module", params=list(CONFIGURATIONS), ids=list(CONFIGURATIONS))
def matrix(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    configuration = CONFIGURATIONS[request.param]
    root = tmp_path_factory.mktemp(request.param) / "ws"
    with serve_over_http(root / "pypi") as http_url:
        workspace, hubs = _workspace(root, configuration, http_url)
        targets = [*(f"//:{hub}_test" for hub in hubs), *layout_tests(hubs)]
        targets += [f"//:{hub}_{kind}" for hub in EXTRAS_HUBS for kind in ("test", "layout_test")]
        targets += [f"//:{hub}_layout_test" for hub in ROOT_EXTRA_HUBS]
        result = workspace.run("test", "--keep_going", *configuration.flags, *targets)
        yield Matrix(configuration, workspace, hubs, result)
        workspace.shutdown()


def test_patched_hubs_pass(matrix: Matrix) -> None:
    statuses = summary_statuses(matrix.result.output)
    patched = [hub for hub in matrix.hubs if hub != "original"]
    assert {hub: statuses.get(f"//:{hub}_test") for hub in patched} == dict.fromkeys(patched, "PASSED"), (
        matrix.result.tail()
    )
    for hub in patched:
        log = matrix.workspace.test_log(f"{hub}_test")
        assert f"faketorch version {fakecuda.TORCH_VERSION}+{SUFFIX}" in log, log
        assert "faketorch ran its generated preload" in log, log
        assert f"faketorch.answer() == {fakecuda.EXPECTED_ANSWER}" in log, log
    if "split" in matrix.hubs:
        assert "libfaketorch.so loaded from" in matrix.workspace.test_log("split_test")


def test_requirement_alone_gets_what_pip_installs_from_every_lock_format(matrix: Matrix) -> None:
    """rules_python drops the extra of app's `toolkit[rt]`: `py_test(deps = [requirement("app")])` fails on
    the plain wiring and passes through a hub with no patched_wheel, from a requirements lock, a uv.lock and a
    pylock; layout_test given the hub's pip_closure fails the plain wiring naming tk-rt and passes the hub's."""
    statuses = summary_statuses(matrix.result.output)
    restored = [hub for hub in EXTRAS_HUBS if hub != "extras_plain"]
    expected = {f"//:{hub}_{kind}": "PASSED" for hub in restored for kind in ("test", "layout_test")}
    expected.update({"//:extras_plain_test": "FAILED", "//:extras_plain_layout_test": "FAILED"})
    assert {target: statuses.get(target) for target in expected} == expected, matrix.result.tail()
    assert extrasfixture.MISSING_ERROR in matrix.workspace.test_log("extras_plain_test")
    plain = matrix.workspace.test_log("extras_plain_layout_test")
    assert (
        "layout_test: FAILED: deps lack tk-rt (toolkit requires 'tk-rt==1.0; extra == \"rt\"' <- app requires 'toolkit[rt]==1.0')"
        in plain
    ), plain[-3000:]
    for hub in restored:
        assert f"app.answer() == {extrasfixture.ANSWER}" in matrix.workspace.test_log(f"{hub}_test")


def test_a_root_extra_no_lock_records_is_inferred_and_layout_test_holds_the_layout_to_it(matrix: Matrix) -> None:
    """A uv pip compile lock of `toolkit[rt]` writes `toolkit==1.0`: the hub infers the extra from the lock's pins
    (said once), so requirement("toolkit") brings tk-rt; with restore_extras = False it does not, and layout_test
    given that hub's pip_closure fails the layout, naming tk-rt."""
    statuses = summary_statuses(matrix.result.output)
    expected = {"//:extras_root_layout_test": "PASSED", "//:extras_root_plain_layout_test": "FAILED"}
    assert {target: statuses.get(target) for target in expected} == expected, matrix.result.tail()
    plain = matrix.workspace.test_log("extras_root_plain_layout_test")
    assert "layout_test: FAILED: deps lack tk-rt (toolkit requires 'tk-rt==1.0; extra == \"rt\"')" in plain, plain[
        -3000:
    ]
    output = matrix.result.output
    assert output.count(": restores toolkit[rt], which requirements_lock = ") == 1, matrix.result.tail()
    assert output.count(": puts in pip_closure.json (restore_extras = False) toolkit[rt], which ") == 1
    # The hub patches nothing: its build's progress, which prefixes its warnings, names no empty list of wheels.
    assert "rules_patched_wheels: patching : " not in output, matrix.result.tail()
    assert "rules_patched_wheels: building the hub: patched-wheels: warning: " in output, matrix.result.tail()


def test_one_site_packages_needs_no_preload(matrix: Matrix) -> None:
    """rules_python 2.x's venvs_site_packages layout installs every wheel into one site-packages, where
    the unpatched faketorch's RUNPATHs find the other wheels' libraries: the control passes there (it
    fails with one directory per wheel, see test_bzlmod.py), and the patched hub still passes."""
    if not matrix.configuration.one_site_packages:
        pytest.skip("one directory per wheel: the control fails (test_bzlmod.py shows it)")
    assert summary_statuses(matrix.result.output).get("//:original_test") == "PASSED", matrix.result.tail()
    log = matrix.workspace.test_log("original_test")
    assert PRELOAD_BUG not in log and f"faketorch.answer() == {fakecuda.EXPECTED_ANSWER}" in log, log
    for hub in matrix.hubs:  # what check_faketorch.py checks with --one-site-packages
        assert "faketorch and fake_nvidia share one site-packages" in matrix.workspace.test_log(f"{hub}_test")


def test_layout_test_runs_in_the_configurations_layout(matrix: Matrix) -> None:
    """layout_test under each rules_python release and layout: its probe program sees what a py_test sees
    (one directory per wheel, or one site-packages), and one site-packages made of links maps the same."""
    statuses = summary_statuses(matrix.result.output)
    targets = layout_tests(matrix.hubs)
    assert {target: statuses.get(target) for target in targets} == dict.fromkeys(targets, "PASSED"), (
        matrix.result.tail()
    )
    for target in targets:
        log = matrix.workspace.test_log(target.removeprefix("//:"))
        mapped = re.findall(r"mapped: (\d+) of the wheels' (\d+) libraries", log)
        assert len(mapped) == 2 and mapped[0] == mapped[1] and int(mapped[0][0]) > 0, log[-3000:]
        entries = int(re.search(r"the test's layout \((\d+) director", log)[1])
        assert (entries == 1) == matrix.configuration.one_site_packages, log[-3000:]
        assert "layout_test: PASSED" in log, log[-3000:]


def test_hub_holds_only_the_wheels_it_wrote(matrix: Matrix) -> None:
    """Direct references: the lock names our files. Under rules_python 2.x the unpatched pins stay as locked,
    fetched by rules_python itself (by sha256), so the hub keeps no copy of them; under a release that installs
    with pip, which would fetch them by URL after every `clean --expunge`, the hub's index serves them too."""
    assert summary_statuses(matrix.result.output).get("//:fixed_test") == "PASSED", matrix.result.tail()
    expectations = {"fixed": [f"faketorch-{fakecuda.TORCH_VERSION}+{SUFFIX}-"]}
    if "split" in matrix.hubs:
        expectations["split"] = [
            f"faketorch-{fakecuda.TORCH_VERSION}+{SUFFIX}-",
            f"faketorch_libs-{fakecuda.TORCH_VERSION}+{SUFFIX}-",
        ]
    nvidia_served = not matrix.configuration.release_2
    pypi = matrix.workspace.root / "pypi"
    for name, prefixes in expectations.items():
        hub = matrix.workspace.hub(name)
        wheels = sorted(path.name for path in (hub / "index").glob("*.whl"))
        elsewhere = [path for path in hub.rglob("*.whl") if path.parent.name not in ("index", "_helper")]
        assert elsewhere == [], elsewhere  # _helper: the helper's own pinned dependencies
        patched = [wheel for wheel in wheels if not wheel.startswith("fake_nvidia_")]
        assert len(patched) == len(prefixes) and all(w.startswith(p) for w, p in zip(patched, prefixes)), wheels
        assert len(wheels) - len(patched) == (4 if nvidia_served else 0), wheels
        lock = (hub / "requirements_lock.txt").read_text(encoding="utf-8")
        for wheel in patched:
            assert f" @ file://{hub / 'index' / wheel}" in lock, lock
        nvidia = [line for line in lock.splitlines() if line.startswith("fake-nvidia-")]
        # Pip (before 2) reads the hub's index alone; 2.x fetches the upstream file each unpatched pin was
        # resolved to (sha256-pinned), so no index page is read for them either.
        served = rf"fake-nvidia-[a-z]+=={fakecuda.NVIDIA_VERSION} \\"
        upstream = rf"fake-nvidia-[a-z]+ @ file://{pypi}/fake_nvidia_[a-z]+-{fakecuda.NVIDIA_VERSION}-\S+\.whl \\"
        assert len(nvidia) == 4 and all(re.fullmatch(served if nvidia_served else upstream, line) for line in nvidia), (
            lock
        )
        assert (f"--index-url={(hub / 'index' / 'simple').as_uri()}" in lock.splitlines()) == nvidia_served, lock


def test_uv_lock_hub_writes_a_uv_lock_pointing_at_the_patched_wheel(matrix: Matrix) -> None:
    hub = matrix.workspace.hub("uvfixed")
    (patched,) = (hub / "index").glob(f"faketorch-{fakecuda.TORCH_VERSION}+{SUFFIX}-*.whl")
    text = (hub / "uv.lock").read_text(encoding="utf-8")
    assert patched.as_uri() in text or str(patched) in text, text
    user = (matrix.workspace.root / "uv.lock").read_text(encoding="utf-8")
    for line in user.splitlines():
        if "fake_nvidia_" in line:
            assert line in text, f"the unpatched {line!r} changed"
    assert {"uv.lock", "requirements_lock.txt"} <= {path.name for path in hub.iterdir()}


def test_no_pin_falls_back_to_pip(matrix: Matrix) -> None:
    """rules_python 2.x fetches every pin with Bazel's downloader: no warning, no pip fallback."""
    fallbacks = [line for line in matrix.result.output.splitlines() if FALLBACK.search(line)]
    assert fallbacks == [], fallbacks[:5]


CONTRADICTIONS = {
    "two locks": (
        'patched.index(name = "fixed", ',
        'patched.index(name = "fixed", pylock = "//:pylock.toml", ',
        'patched.index(name = "fixed"): give exactly one of requirements_lock, uv_lock, pylock, not requirements_lock and pylock',
    ),
    "split_max_size with split_move": (
        'split_move = ["faketorch/lib/*.so"],',
        'split_move = ["faketorch/lib/*.so"], split_max_size = 1000,',
        'patched.patched_wheel(name = "faketorch", hub = "split"): split_into needs exactly one of split_max_size and split_move, not both',
    ),
}


@pytest.mark.parametrize("case", list(CONTRADICTIONS))
def test_contradictory_attributes_fail_in_our_extension_before_any_download(matrix: Matrix, case: str) -> None:
    """The helper's plan checks a hub's attributes first, in the extension: one line naming them, and no
    index page or wheel is fetched (the fake PyPI is hidden from the run to prove it)."""
    if matrix.configuration != CONFIGURATIONS["rules_python-2.3.2"]:
        pytest.skip("the extension's checks do not depend on the release: one configuration is enough")
    old, new, message = CONTRADICTIONS[case]
    workspace = matrix.workspace
    module = workspace.root / "MODULE.bazel"
    original = module.read_text(encoding="utf-8")
    assert old in original
    hidden = workspace.root / "hidden-wheels"
    (workspace.root / "pypi").rename(hidden)
    module.write_text(original.replace(old, new, 1), encoding="utf-8")
    try:
        result = workspace.run("build", *matrix.configuration.flags, "//:fixed_test")
    finally:
        module.write_text(original, encoding="utf-8")
        hidden.rename(workspace.root / "pypi")
    assert result.returncode != 0
    errors = [line for line in result.output.splitlines() if "patched-wheels: error:" in line]
    assert len(errors) == 1 and errors[0].endswith(message), result.tail()


def test_unreadable_index_option_fails_in_our_extension(matrix: Matrix) -> None:
    """`extra-index-url` fails inside rules_python 2.x; our extension refuses it first with one line,
    before any download. Releases before 2 accept it (their pip reads a file:// index)."""
    if not matrix.configuration.release_2:
        pytest.skip("rules_python < 2 reads every index_option")
    if matrix.configuration.one_site_packages:
        pytest.skip("the layout changes nothing here: the other 2.3.2 configuration checks it")
    workspace = matrix.workspace
    module = workspace.root / "MODULE.bazel"
    original = module.read_text(encoding="utf-8")
    module.write_text(
        original.replace(
            'patched.index(name = "fixed", ', 'patched.index(name = "fixed", index_option = "extra-index-url", '
        ),
        encoding="utf-8",
    )
    try:
        result = workspace.run("build", *matrix.configuration.flags, "//:fixed_test")
    finally:
        module.write_text(original, encoding="utf-8")
    assert result.returncode != 0
    errors = [line for line in result.output.splitlines() if 'patched.index(name = "fixed")' in line]
    assert errors and 'index_option = "extra-index-url" cannot be read by rules_python 2.3.2' in errors[0], (
        result.tail()
    )
    assert "simpleapi_download" not in result.output, result.tail()
