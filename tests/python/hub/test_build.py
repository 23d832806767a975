"""The hub build step the Bazel rule runs: patch/split with a generated preload, index, rewrite the lock."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from patched_wheels.base.fsutil import locked_directory
from patched_wheels.cli import main
from patched_wheels.elf import graph as elfgraph
from patched_wheels.errors import UsageError
from patched_wheels.hub.build import Staging, build_hub
from patched_wheels.hub.spec import PatchedWheelSpec
from patched_wheels.loading import observe, probe
from patched_wheels.loading.preloadmodule import read_preload_data
from patched_wheels.patch.request import BAZEL_NAMES, SplitRequest
from patched_wheels.patch.surgery import PatchOptions, patch_wheel
from patched_wheels.wheelfile import WheelWriter, ZipMember
from support import fakecuda
from support.hubconfig import index_attributes, load_config, no_user_cache, set_config, spec_request_json, write_config  # noqa: F401  (no_user_cache: autouse)
from support.indexfixtures import sha256_of
from support.uvfixture import run_uv, serve_over_http, uv_locks


@pytest.fixture(scope="module")
def fake_set(tmp_path_factory: pytest.TempPathFactory) -> fakecuda.FakeCudaWheels:
    return fakecuda.build_fake_cuda_wheels(tmp_path_factory.mktemp("fake"))


def hub_config(tmp_path: Path, wheels: fakecuda.FakeCudaWheels, **spec: object) -> Path:
    """hub.json for patching faketorch in the fake CUDA set (see :func:`set_config`)."""
    return set_config(tmp_path, list(wheels.nvidia.values()), wheels.torch, "faketorch", **spec)


def test_preload_auto_makes_the_per_wheel_layout_import(tmp_path: Path, fake_set: fakecuda.FakeCudaWheels) -> None:
    config = load_config(hub_config(tmp_path, fake_set, preload="auto", preload_package="faketorch"))
    assert build_hub(config) == ["faketorch==2.1.0+test.1"]

    patched = tmp_path / "index" / "faketorch-2.1.0+test.1-py3-none-linux_x86_64.whl"
    served = [*fake_set.nvidia.values()]
    broken = fakecuda.run_import(fakecuda.per_wheel_layout([*served, fake_set.torch], tmp_path / "before"))
    assert broken.returncode != 0 and "libjit.so.12" in broken.stderr
    fixed = fakecuda.run_import(fakecuda.per_wheel_layout([*served, patched], tmp_path / "after"))
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.strip() == str(fakecuda.EXPECTED_ANSWER)

    lock = (tmp_path / "requirements_lock.txt").read_text(encoding="utf-8")
    assert f"faketorch==2.1.0+test.1 \\\n    --hash=sha256:{sha256_of(patched)}\n" in lock
    assert f"--index-url={(tmp_path / 'index' / 'simple').as_uri()}\n" in lock
    assert (tmp_path / "index" / "simple" / "faketorch" / "index.html").is_file()
    assert not (tmp_path / "index" / fake_set.torch.name).exists(), (
        "the original must not be served beside the patched one"
    )


def test_split_serves_both_wheels_and_pins_the_sibling(tmp_path: Path, fake_set: fakecuda.FakeCudaWheels) -> None:
    config = hub_config(
        tmp_path,
        fake_set,
        preload="auto",
        preload_package="faketorch",
        split_into="faketorch-libs",
        split_move=["faketorch/lib/*.so"],
    )
    assert main(["hub", "build", "--config", str(config)]) == 0
    index = tmp_path / "index"
    main_wheel = index / "faketorch-2.1.0+test.1-py3-none-linux_x86_64.whl"
    sibling = index / "faketorch_libs-2.1.0+test.1-py3-none-linux_x86_64.whl"
    lock = (tmp_path / "requirements_lock.txt").read_text(encoding="utf-8")
    assert f"--hash=sha256:{sha256_of(sibling)}" in lock and "faketorch-libs==2.1.0+test.1" in lock
    result = fakecuda.run_import(
        fakecuda.per_wheel_layout([*fake_set.nvidia.values(), main_wheel, sibling], tmp_path / "split")
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(fakecuda.EXPECTED_ANSWER)


def test_the_hubs_split_copies_while_the_set_is_read_and_writes_the_bytes_of_a_graph_read_first(
    tmp_path: Path, fake_set: fakecuda.FakeCudaWheels, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub's split (``split_max_size``, no preload of its own) copies the main wheel's members that stay
    compressed while the set's libraries inflate on every core, as the ``split`` command does, and writes the
    bytes of the same split planned from a graph read first (the hub before it overlapped).  The set holds a
    bystander whose library cannot be read: listed, then left out of the lenient graph.  At the least size at
    which the graph's split moves one library, that listed path in the preload's estimate moves two: the split
    is planned again from the graph, and the bytes are still those of the graph read first."""
    broken = fakecuda.build_wheel(
        tmp_path / "broken",
        "fake-broken",
        "1.0",
        {"fake_broken/__init__.py": b"", "fake_broken/libbroken.so": b"not an ELF file"},
    )
    others = [*fake_set.nvidia.values(), broken]
    graph = elfgraph.read_graph([*others, fake_set.torch], lenient=True)

    def read_first(max_size: int, dest: Path) -> dict[str, bytes]:  # the hub's options for this spec
        split = SplitRequest("faketorch-libs", max_size=max_size, names=BAZEL_NAMES)
        result = patch_wheel(fake_set.torch, dest, PatchOptions(suffix="test.1", split=split, graph=graph))
        return {path.name: path.read_bytes() for path in (result.path, result.sibling) if path is not None}

    def moved(max_size: int) -> int:  # how many libraries move: fewer as the size grows
        try:
            written = read_first(max_size, tmp_path / "sizes")
        except UsageError as error:  # cannot fit, or fits already
            return len(graph.libraries) if "cannot fit" in str(error) else 0
        sibling = next(data for name, data in written.items() if name.startswith("faketorch_libs-"))
        with zipfile.ZipFile(io.BytesIO(sibling)) as archive:
            return sum(name.endswith(".so") for name in archive.namelist())

    def least(most_moved: int) -> int:  # the least size at which at most that many libraries move
        low, high = 1, 1 << 20
        assert moved(low) > most_moved >= moved(high)
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if moved(middle) <= most_moved else (middle, high)
        return high

    one, fits = least(1), least(0)
    assert moved(one) == 1 and moved(one - 1) == 2 and fits - one > 2

    def hub_split(max_size: int) -> dict[str, bytes]:
        config = load_config(
            set_config(
                tmp_path / f"hub-{max_size}",
                others,
                fake_set.torch,
                "faketorch",
                split_into="faketorch-libs",
                split_max_size=max_size,
            )
        )
        assert build_hub(config) == ["faketorch==2.1.0+test.1", "faketorch-libs==2.1.0+test.1"]
        return {path.name: path.read_bytes() for path in config.index_dir.glob("*+test.1-*.whl")}

    assert hub_split(one) == read_first(one, tmp_path / "first")

    # Above that size, the main wheel keeps _core.so, copied raw: before the first library is read.
    copied, first = threading.Event(), threading.Lock()
    overlapped: list[bool] = []
    real_read, real_copy = elfgraph.read_library, WheelWriter.copy_raw_members

    def waiting_read(*args: Any) -> Any:
        if first.acquire(blocking=False):
            overlapped.append(copied.wait(timeout=10))
        return real_read(*args)

    def copy(self: WheelWriter, reader: Any, members: Any) -> Any:
        members = list(members)
        copied.set()
        return real_copy(self, reader, members)

    monkeypatch.setattr(elfgraph, "read_library", waiting_read)
    monkeypatch.setattr(WheelWriter, "copy_raw_members", copy)
    above = (one + fits) // 2
    assert hub_split(above) == read_first(above, tmp_path / "first-above")
    assert overlapped == [True]


def test_unreadable_config_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "hub.json").write_text("{not json", encoding="utf-8")
    assert main(["hub", "build", "--config", str(tmp_path / "hub.json")]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "hub.json: cannot read the hub configuration" in error


def test_config_missing_a_key_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "hub.json").write_text("{}", encoding="utf-8")
    assert main(["hub", "build", "--config", str(tmp_path / "hub.json")]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "cannot read the hub configuration: hub configuration: missing keys" in error
    assert "'attributes'" in error and "'patched'" in error


def test_unwritable_destination_is_one_error_line(
    tmp_path: Path, fake_set: fakecuda.FakeCudaWheels, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory", encoding="utf-8")
    code = main(["patch", "--wheel", str(fake_set.torch), "--dest-dir", str(blocker / "out"), "--suffix", "x.1"])
    error = capsys.readouterr().err
    assert code == 1
    assert error.startswith("patched-wheels: error: ") and error.count("\n") == 1 and "file" in error


@pytest.fixture(scope="module")
def runtime_set(tmp_path_factory: pytest.TempPathFactory) -> fakecuda.RuntimeLoadedWheels:
    return fakecuda.build_runtime_loaded_wheels(tmp_path_factory.mktemp("runtime"))


def test_preload_wheels_make_runtime_loads_work_per_wheel(
    tmp_path: Path, runtime_set: fakecuda.RuntimeLoadedWheels
) -> None:
    spec = dict(preload="auto", preload_package="fakejax", preload_wheels=[fakecuda.RUNTIME_GLOB])
    config = load_config(
        set_config(tmp_path, [runtime_set.foo, runtime_set.bar], runtime_set.package, "fakejax", **spec)
    )
    assert build_hub(config) == ["fakejax==1.0+test.1"]
    patched = tmp_path / "index" / "fakejax-1.0+test.1-py3-none-linux_x86_64.whl"
    result = fakecuda.run_import(
        fakecuda.per_wheel_layout([runtime_set.foo, runtime_set.bar, patched], tmp_path / "site"), fakecuda.RUNTIME_CODE
    )
    assert result.returncode == 0 and result.stdout.strip() == str(fakecuda.RUNTIME_ANSWER), result.stderr


def test_preload_auto_preloads_what_the_probe_maps_and_a_probe_mapping_nothing_is_a_no_op_with_a_hint(
    tmp_path: Path, runtime_set: fakecuda.RuntimeLoadedWheels, capsys: pytest.CaptureFixture[str]
) -> None:
    """fakejax needs nothing through DT_NEEDED: what `import fakejax` maps in one site-packages is preloaded (wt-cuda)."""
    config = set_config(
        tmp_path / "default",
        [runtime_set.foo, runtime_set.bar],
        runtime_set.package,
        "fakejax",
        preload="auto",
        preload_package="fakejax",
    )
    assert main(["hub", "build", "--config", str(config)]) == 0
    assert capsys.readouterr().err == ""
    with zipfile.ZipFile(tmp_path / "default" / "index" / "fakejax-1.0+test.1-py3-none-linux_x86_64.whl") as archive:
        preload = read_preload_data(archive.read("fakejax/_patched_wheels_preload.json"), where="test")
    assert (
        preload.libraries == (fakecuda.RUNTIME_LIBRARY_PATHS["bar"], fakecuda.RUNTIME_LIBRARY_PATHS["foo"])
        and preload.optional
    )
    config = set_config(
        tmp_path / "idle",
        [runtime_set.foo, runtime_set.bar],
        runtime_set.package,
        "fakejax",
        preload="auto",
        preload_package="fakejax",
        probe="pass",
    )
    assert main(["hub", "build", "--config", str(config)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "fakejax==1.0+test.1\n"
    assert (
        captured.err.startswith("patched-wheels: warning: ") and "'pass' maps none in one site-packages" in captured.err
    )
    with zipfile.ZipFile(tmp_path / "idle" / "index" / "fakejax-1.0+test.1-py3-none-linux_x86_64.whl") as archive:
        assert not [name for name in archive.namelist() if "_patched_wheels_preload" in name]


def test_a_build_that_warns_then_fails_says_only_its_error(
    tmp_path: Path, runtime_set: fakecuda.RuntimeLoadedWheels, capsys: pytest.CaptureFixture[str]
) -> None:
    """A probe that maps nothing is a warning (above); a ``delete`` glob that matches nothing then fails the
    patch, and the run says one line, its error (issue 41), as every command does."""
    config = set_config(
        tmp_path,
        [runtime_set.foo, runtime_set.bar],
        runtime_set.package,
        "fakejax",
        preload="auto",
        preload_package="fakejax",
        probe="pass",
        delete=["fakejax/no-such-member"],
    )
    assert main(["hub", "build", "--config", str(config)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "patched-wheels: error: --delete 'fakejax/no-such-member': matches no member of fakejax-1.0-py3-none-linux_x86_64.whl"
    ]


def test_spec_with_an_unknown_key_is_one_error_line(
    tmp_path: Path, fake_set: fakecuda.FakeCudaWheels, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Starlark schema and PatchedWheelSpec must agree: a key one side does not know is refused, not dropped."""
    config = hub_config(tmp_path, fake_set)
    raw = json.loads(config.read_text(encoding="utf-8"))
    raw["patched"][0]["preload_wheel"] = ["nvidia-*"]  # misspelt preload_wheels
    config.write_text(json.dumps(raw), encoding="utf-8")
    assert main(["hub", "build", "--config", str(config)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "unknown keys ['preload_wheel']" in error, error


def test_each_library_is_read_once_per_hub_and_a_rebuild_reads_and_fetches_none(
    tmp_path: Path,
    fake_set: fakecuda.FakeCudaWheels,
    runtime_set: fakecuda.RuntimeLoadedWheels,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two specs with preload = "auto" share one graph, and the persistent cache outlives the hub.

    Cold, the set is installed once for both probes, and the graph reads the installed libraries: no
    member is inflated twice (once to install, once for the graph). The rebuild is a ``bazel clean
    --expunge``: a fresh output directory, the same user cache: no probe runs, and each library at hand is
    read once more, to check the cache's row against it (a wheel not at hand would take its row unread).
    """
    others = [*fake_set.nvidia.values(), runtime_set.foo, runtime_set.bar]
    patched = [
        (fake_set.torch, {"name": "faketorch", "preload": "auto", "preload_package": "faketorch"}),
        (
            runtime_set.package,
            {
                "name": "fakejax",
                "preload": "auto",
                "preload_package": "fakejax",
                "preload_wheels": [fakecuda.RUNTIME_GLOB],
            },
        ),
    ]
    every_library = {
        (library.wheel, library.path)
        for library in elfgraph.read_graph([*others, fake_set.torch, runtime_set.package]).libraries
    }
    reads: Counter[tuple[str, str]] = Counter()
    inflated: Counter[tuple[str, str]] = Counter()
    installs: list[int] = []
    read_library, read_installed_library, read_library_and_symbols, installed = (
        elfgraph.read_library,
        elfgraph.read_installed_library,
        elfgraph.read_library_and_symbols,
        probe.installed,
    )

    def counting(wheel: Path, info: ZipMember, path: str) -> elfgraph.ElfLibrary:
        inflated[wheel.name, path] += 1
        reads[wheel.name, path] += 1
        return read_library(wheel, info, path)

    def counting_installed(file: Path, *, wheel: str, path: str) -> elfgraph.ElfLibrary | None:
        reads[wheel, path] += 1
        return read_installed_library(file, wheel=wheel, path=path)

    def counting_with_symbols(
        wheel: Path, info: ZipMember, path: str, *, installed: Path | None, budget: object
    ) -> object:
        reads[wheel.name, path] += 1
        if installed is None:
            inflated[wheel.name, path] += 1
        return read_library_and_symbols(wheel, info, path, installed=installed, budget=budget)  # type: ignore[arg-type]

    def no_second_read(*args: object) -> object:
        pytest.fail(f"a kept observation's check read a member again: {args}")

    def counting_installs(wheels: list[Path], kinds: tuple[str, ...], *, check_record: bool = True) -> object:
        installs.append((len(wheels), check_record))
        return installed(wheels, kinds, check_record=check_record)

    monkeypatch.setattr(elfgraph, "read_library", counting)
    monkeypatch.setattr(elfgraph, "read_installed_library", counting_installed)
    monkeypatch.setattr(elfgraph, "read_library_and_symbols", counting_with_symbols)
    monkeypatch.setattr(observe, "read_member_symbols", no_second_read)
    monkeypatch.setattr(probe, "installed", counting_installs)
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(tmp_path / "user-cache"))
    first = write_config(tmp_path / "first", others, patched, index_option="direct", rules_python_version="2.3.2")
    assert len(list((tmp_path / "first" / "_wheels").glob("*.whl"))) == len(others)
    assert main(["hub", "build", "--config", str(first)]) == 0
    assert reads == Counter(dict.fromkeys(every_library, 1)), "every library of the set read, each once"
    assert not inflated, "the graph read the probes' installation"
    assert installs == [(len(others) + 2, False)], "the set installed once for both probes, RECORD not hashed again"

    reads.clear()
    second = write_config(tmp_path / "second", others, patched, index_option="direct", rules_python_version="2.3.2")
    assert len(list((tmp_path / "second" / "_wheels").glob("*.whl"))) == len(others), (
        "every wheel at hand, to check the cache against"
    )
    installs.clear()
    assert main(["hub", "build", "--config", str(second)]) == 0
    assert reads == Counter(dict.fromkeys(every_library, 1)), (
        "each library read once, to check the cache's row, its symbol table with it for the kept observations' check"
    )
    assert not installs, "no probe: the observations are cached"
    for run in ("first", "second"):
        assert "_patched_wheels_preload" in str(
            zipfile.ZipFile(tmp_path / run / "index" / "faketorch-2.1.0+test.1-py3-none-linux_x86_64.whl").namelist()
        )
    served = sorted(path.name for path in (tmp_path / "first" / "index").glob("*.whl"))
    assert served == sorted(path.name for path in (tmp_path / "second" / "index").glob("*.whl")) and len(served) == 2
    for name in served:
        assert sha256_of(tmp_path / "first" / "index" / name) == sha256_of(tmp_path / "second" / "index" / name)

    # The probes' observations gone, the ELF rows kept: the probes must run on the files, so all are fetched.
    shutil.rmtree(tmp_path / "user-cache" / "observed")
    third = write_config(tmp_path / "third", others, patched, index_option="direct", rules_python_version="2.3.2")
    assert len(list((tmp_path / "third" / "_wheels").glob("*.whl"))) == len(others), (
        "every wheel fetched for the probes"
    )
    assert main(["hub", "build", "--config", str(third)]) == 0
    for name in served:
        assert sha256_of(tmp_path / "first" / "index" / name) == sha256_of(tmp_path / "third" / "index" / name)


def test_a_cache_emptied_between_plan_and_build_is_read_again_from_the_wheels(
    tmp_path: Path,
    fake_set: fakecuda.FakeCudaWheels,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The plan decides nothing from the cache (every wheel is fetched): a cache that vanished before the build
    costs a read of the wheels, never an error or another preload."""
    cache = tmp_path / "user-cache"
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(cache))
    others = list(fake_set.nvidia.values())
    patched = [(fake_set.torch, {"name": "faketorch", "preload": "auto"})]
    assert (
        main(
            [
                "hub",
                "build",
                "--config",
                str(
                    write_config(
                        tmp_path / "fill", others, patched, index_option="direct", rules_python_version="2.3.2"
                    )
                ),
            ]
        )
        == 0
    )
    config = write_config(tmp_path / "hub", others, patched, index_option="direct", rules_python_version="2.3.2")
    shutil.rmtree(cache)
    assert main(["hub", "build", "--config", str(config)]) == 0
    built = sorted((tmp_path / "hub" / "index").glob("*.whl"))
    assert [sha256_of(path) for path in built] == [
        sha256_of(tmp_path / "fill" / "index" / path.name) for path in built
    ] and built


def run_cli(*args: str) -> str:
    """``patched-wheels ARGS`` in process; its stdout (it must succeed)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(args)) == 0
    return out.getvalue()


def test_a_uv_lock_hub_writes_both_locks_and_uv_installs_from_its_uv_lock(
    tmp_path: Path, fake_set: fakecuda.FakeCudaWheels
) -> None:
    """The rule's steps on a uv.lock made by the real `uv lock`: check, resolve, plan, download (over HTTP,
    as the rule does), build; then the real uv installs the hub's uv.lock, the patched faketorch included."""
    pypi = tmp_path / "pypi"
    pypi.mkdir()
    for wheel in fake_set.all:
        shutil.copyfile(wheel, pypi / wheel.name)
    run_cli("index", str(pypi))
    repo = tmp_path / "repo"
    repo.mkdir()
    with serve_over_http(pypi) as url:
        uv_lock, _ = uv_locks(
            tmp_path / "project", url, ["faketorch==2.1.0", *(f"fake-nvidia-{name}" for name in fake_set.nvidia)]
        )
        spec = spec_request_json(PatchedWheelSpec(name="faketorch", suffix="test.1", preload="auto"))
        request = {
            "hub": "uv",
            "bzlmod": True,
            "attributes": index_attributes(uv_lock=str(uv_lock), index_url=f"{url}/simple"),
            "rules_python_version": "2.3.2",
            "labels": {},
            "repository": str(repo),
            "patched": [spec],
        }
        (tmp_path / "request.json").write_text(json.dumps(request), encoding="utf-8")
        resolution = json.loads(run_cli("hub", "plan", "--request", str(tmp_path / "request.json")))
        assert resolution["lock_args"] == ["--uv-lock", str(uv_lock)]
        (tmp_path / "explicit.json").write_text(json.dumps(resolution["explicit"]), encoding="utf-8")
        resolve = ["resolve", *resolution["lock_args"], "--explicit", str(tmp_path / "explicit.json")]
        pages = json.loads(run_cli(*resolve, "--list-projects", "--index-url", f"{url}/simple"))
        assert pages == [], "a uv.lock names its wheels: no page to fetch"
        (tmp_path / "pages").mkdir()
        resolved = run_cli(*resolve, "--pages", str(tmp_path / "pages"), "--index-url", f"{url}/simple")
        (tmp_path / "resolved.json").write_text(resolved, encoding="utf-8")
        plan = json.loads(
            run_cli(
                "hub",
                "plan",
                "--request",
                str(tmp_path / "request.json"),
                "--resolved",
                str(tmp_path / "resolved.json"),
                "--config-out",
                str(repo / "_hub.json"),
            )
        )
        for fetch in plan["fetch"]:
            (repo / fetch["output"]).parent.mkdir(parents=True, exist_ok=True)
            urllib.request.urlretrieve(fetch["urls"][0], repo / fetch["output"])
            assert sha256_of(repo / fetch["output"]) == fetch["sha256"]
        assert plan["exports"] == ["requirements_lock.txt", "pip_closure.json", "uv.lock"]
        assert run_cli("hub", "build", "--config", str(repo / "_hub.json")) == "faketorch==2.1.0+test.1\n"

        (patched,) = (repo / "index").glob("faketorch-2.1.0+test.1-*.whl")
        requirements = (repo / "requirements_lock.txt").read_text(encoding="utf-8")
        assert f"faketorch @ file://{patched} " in requirements, requirements
        written = (repo / "uv.lock").read_text(encoding="utf-8")
        assert sha256_of(patched) in written and fake_set.torch.name not in written, written
        for wheel in fake_set.nvidia.values():
            assert f"/{wheel.name}" in written and sha256_of(wheel) in written, "the unpatched packages stay as locked"
        # The real uv reads the hub's uv.lock and installs from it, checking every sha256: the patched
        # wheel from the hub's index, the others from the fake PyPI.
        project = tmp_path / "project"
        shutil.copyfile(repo / "uv.lock", project / "uv.lock")
        run_uv(project, "sync", "--frozen")
        installed = run_uv(
            project, "pip", "list", "--format", "json", "--python", str(project / ".venv" / "bin" / "python")
        ).stdout
        assert {"name": "faketorch", "version": "2.1.0+test.1"} in json.loads(installed), installed


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"attributes": {"index_option": 3}}, "hub configuration: attributes: index_option = 3: expected a string"),
        (
            {"attributes": {"index_option": "bogus"}},
            'hub configuration: attributes: index_option = "bogus": must be one of direct, extra-index-url',
        ),
        ({"attributes": {"restore_extras": None}}, "hub configuration: attributes: restore_extras = null: expected"),
        ({"attributes": {"requirements_lock": "/MISSING"}}, 'requirements_lock = "/MISSING": not a file'),
        (  # issue 52: no lock was a traceback (ValueError in IndexAttributes.lock)
            {"attributes": {"requirements_lock": None}},
            "hub configuration: attributes: give exactly one of requirements_lock, uv_lock, pylock",
        ),
        (
            {"attributes": {"uv_lock": "LOCK", "pylock": "LOCK"}},
            "hub configuration: attributes: give exactly one of requirements_lock, uv_lock, pylock, not "
            "requirements_lock and uv_lock and pylock",
        ),
        ({"patched": [{"strip": "1"}]}, 'strip = "1": expected an integer'),
        ({"patched": [{"rpath": {"a/*.so": "$ORIGIN/a\u0000b"}}]}, "holds '\\x00', a control character"),
    ],
)
def test_the_build_checks_its_configuration_before_writing_anything(
    tmp_path: Path,
    fake_set: fakecuda.FakeCudaWheels,
    capsys: pytest.CaptureFixture[str],
    change: dict[str, object],
    message: str,
) -> None:
    config = hub_config(tmp_path / "hub", fake_set)
    raw = json.loads(config.read_text(encoding="utf-8"))
    if "patched" in change:
        raw["patched"][0].update(change["patched"][0])  # type: ignore[index]
    elif "attributes" in change:
        lock = raw["attributes"]["requirements_lock"]  # a file that exists, for "LOCK"
        raw["attributes"].update(
            {key: lock if value == "LOCK" else value for key, value in change["attributes"].items()}
        )  # type: ignore[attr-defined]
    elif change.get("lock") == "MISSING":
        raw["lock"] = str(tmp_path / "MISSING")
    else:
        raw.update(change)
    config.write_text(json.dumps(raw), encoding="utf-8")
    before = sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*"))
    assert main(["hub", "build", "--config", str(config)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error and "Traceback" not in error, error
    assert sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*")) == before  # nothing written


# The libraries faketorch needs through DT_NEEDED (the ELF graph): what preload = "elf" preloads.
ELF_NEEDED = sorted(fakecuda.LIBRARY_PATHS[name] for name in ("jit", "sparse", "solver", "blas"))


def marked_torch(fake_set: fakecuda.FakeCudaWheels, dest: Path, marker: Path) -> Path:
    """faketorch whose import also appends to ``marker`` (package code ran) and opens libfoo.so.1 of
    fakert-foo by its path: a load no DT_NEEDED shows, which only a probe adds to the preload."""
    with zipfile.ZipFile(fake_set.torch) as archive:
        files = {name: archive.read(name) for name in archive.namelist() if ".dist-info/" not in name}
    files["faketorch/__init__.py"] = (
        f"open({str(marker)!r}, 'a').write('ran\\n')\n"
        "import ctypes as _ctypes, importlib.util as _util, os as _os\n"
        "_ctypes.CDLL(_os.path.join(_os.path.dirname(_util.find_spec('fakert_foo').origin), 'lib', 'libfoo.so.1'))\n"
    ).encode() + files["faketorch/__init__.py"]
    return fakecuda.build_wheel(
        dest,
        "faketorch",
        fakecuda.TORCH_VERSION,
        files,
        requires=[f"fake-nvidia-{name}=={fakecuda.NVIDIA_VERSION}" for name in fake_set.nvidia],
        executable=[fakecuda.LIBRARY_PATHS["faketorch"], fakecuda.LIBRARY_PATHS["core"]],
    )


def preloaded(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return sorted(read_preload_data(archive.read("faketorch/_patched_wheels_preload.json"), where="test").libraries)


def test_preload_elf_runs_no_package_code_and_preloads_the_elf_graph_alone(
    tmp_path: Path,
    fake_set: fakecuda.FakeCudaWheels,
    runtime_set: fakecuda.RuntimeLoadedWheels,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """preload = "auto" runs `import faketorch` (the marker is written, libfoo/libbar are preloaded too);
    "elf" runs nothing, warns nothing, and preloads exactly the DT_NEEDED libraries (issue 33)."""
    marker = tmp_path / "ran"
    torch = marked_torch(fake_set, tmp_path / "wheels", marker)
    others = [*fake_set.nvidia.values(), runtime_set.foo, runtime_set.bar]
    patched = "index/faketorch-2.1.0+test.1-py3-none-linux_x86_64.whl"

    assert (
        main(
            ["hub", "build", "--config", str(set_config(tmp_path / "auto", others, torch, "faketorch", preload="auto"))]
        )
        == 0
    )
    assert marker.read_text() == "ran\n", "the control: auto runs the package's code"
    runtime = sorted(fakecuda.RUNTIME_LIBRARY_PATHS[name] for name in ("foo", "bar"))
    assert preloaded(tmp_path / "auto" / patched) == sorted([*ELF_NEEDED, *runtime])
    marker.unlink()
    capsys.readouterr()

    assert (
        main(["hub", "build", "--config", str(set_config(tmp_path / "elf", others, torch, "faketorch", preload="elf"))])
        == 0
    )
    assert capsys.readouterr().err == "", "no probe ran, so no lazy-load warning"
    assert not marker.exists(), "preload = elf ran package code"
    assert preloaded(tmp_path / "elf" / patched) == ELF_NEEDED


def test_preload_elf_with_a_probe_is_one_error_line_before_any_download(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = {
        **spec_request_json(PatchedWheelSpec(name="faketorch", suffix="test.1")),
        "preload": "elf",
        "probe": "import faketorch",
    }
    request = {
        "hub": "test",
        "bzlmod": True,
        "attributes": index_attributes(
            requirements_lock=str(tmp_path / "lock.txt"), index_url="", index_option="index-url"
        ),
        "rules_python_version": "1.6.0",
        "labels": {},
        "repository": str(tmp_path),
        "patched": [spec],
    }
    (tmp_path / "request.json").write_text(json.dumps(request), encoding="utf-8")
    assert main(["hub", "plan", "--request", str(tmp_path / "request.json")]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    assert (
        captured.err.startswith("patched-wheels: error: ")
        and 'probe needs preload = "auto" (preload = "elf" runs no package code)' in captured.err
    )


def test_patch_no_probe_runs_no_package_code(
    tmp_path: Path,
    fake_set: fakecuda.FakeCudaWheels,
    runtime_set: fakecuda.RuntimeLoadedWheels,
    capsys: pytest.CaptureFixture[str],
) -> None:
    marker = tmp_path / "ran"
    torch = marked_torch(fake_set, tmp_path / "wheels", marker)
    others = [str(wheel) for wheel in [*fake_set.nvidia.values(), runtime_set.foo, runtime_set.bar]]
    args = [
        "patch",
        "--wheel",
        str(torch),
        "--dest-dir",
        str(tmp_path / "out"),
        "--suffix",
        "x.1",
        "--no-cache",
        "--preload-for",
        "faketorch",
        "--preload-from",
        *others,
    ]
    assert main([*args, "--no-probe"]) == 0
    assert capsys.readouterr().err == ""
    assert not marker.exists(), "patch --no-probe ran package code"
    assert preloaded(tmp_path / "out" / "faketorch-2.1.0+x.1-py3-none-linux_x86_64.whl") == ELF_NEEDED

    assert main([*args, "--no-probe", "--probe", "import faketorch"]) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "--probe and --no-probe" in captured.err, captured.err
    assert not marker.exists() and len(list((tmp_path / "out").iterdir())) == 1


def test_doctor_no_probe_and_probe_together_are_one_error_line(
    fake_set: fakecuda.FakeCudaWheels, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["doctor", *map(str, fake_set.all), "--package", "faketorch", "--probe", "import faketorch", "--no-probe"]
    )
    error = capsys.readouterr().err
    assert code == 1 and error.count("\n") == 1 and "--probe and --no-probe" in error, error


def _tree(root: Path) -> dict[str, str]:
    """Every path under ``root`` with its kind and, for a file, its sha256: what a failed build must leave as it was."""
    return {
        str(path.relative_to(root)): "dir" if path.is_dir() else sha256_of(path) for path in sorted(root.rglob("*"))
    }


def test_a_build_that_fails_at_its_last_step_leaves_the_hub_as_it_was(
    tmp_path: Path, fake_set: fakecuda.FakeCudaWheels, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lock is read last: a line it refuses (an included file) failed the build after the patched wheel and
    simple/ were in the index. Every output is staged, and nothing of it stays; a second build, of a good
    lock, then writes them all and leaves no temporary directory."""
    config = hub_config(tmp_path / "hub", fake_set, preload="auto", preload_package="faketorch")
    lock = tmp_path / "hub" / "user_lock.txt"
    good = lock.read_text(encoding="utf-8")
    lock.write_text(good + "-r more.txt\n", encoding="utf-8")
    before = _tree(tmp_path)
    assert main(["hub", "build", "--config", str(config)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "included files are not followed" in error, error
    assert _tree(tmp_path) == before
    lock.write_text(good, encoding="utf-8")
    assert main(["hub", "build", "--config", str(config)]) == 0
    written = set(_tree(tmp_path)) - set(before)
    assert (
        "hub/index/faketorch-2.1.0+test.1-py3-none-linux_x86_64.whl" in written
        and "hub/requirements_lock.txt" in written
    )
    assert not [name for name in written if ".pw-" in name], written
    index = (tmp_path / "hub" / "index").as_uri()
    assert f"--index-url={index}/simple\n" in (tmp_path / "hub" / "requirements_lock.txt").read_text(encoding="utf-8")


def test_an_output_place_taken_by_a_directory_is_refused_before_anything_is_written(
    tmp_path: Path, fake_set: fakecuda.FakeCudaWheels, capsys: pytest.CaptureFixture[str]
) -> None:
    config = hub_config(tmp_path / "hub", fake_set)
    (tmp_path / "hub" / "requirements_lock.txt").mkdir()
    before = _tree(tmp_path)
    assert main(["hub", "build", "--config", str(config)]) == 1
    error = capsys.readouterr().err
    assert (
        error
        == f"patched-wheels: error: {tmp_path / 'hub' / 'requirements_lock.txt'}: in the way of the hub's output (a link, or not a regular file)\n"
    )
    assert _tree(tmp_path) == before


def _served(hub: Path) -> dict[str, str]:
    """:func:`_tree` of a hub repository, less the index's hash cache (keyed by inode: a cache, not an output)."""
    return {path: kind for path, kind in _tree(hub).items() if not path.endswith(".patched-wheels-cache.json")}


def test_a_build_run_again_into_its_repository_gives_what_a_build_into_an_empty_one_gives(
    tmp_path: Path, fake_set: fakecuda.FakeCudaWheels
) -> None:
    """A second build by hand into one repository, with another lock and another suffix, started from what the
    first left in ``index/`` (its patched wheel, a wheel its lock had and the second's has not) and served it."""
    extra = fakecuda.build_wheel(tmp_path / "extra", "fake-extra", "1.0", {"fake_extra/__init__.py": b""})
    hub, others = tmp_path / "hub", list(fake_set.nvidia.values())

    def build(wheels: list[Path], suffix: str) -> None:
        config = set_config(hub, wheels, fake_set.torch, "faketorch", suffix=suffix)
        assert main(["hub", "build", "--config", str(config)]) == 0

    build([*others, extra], "test.1")
    assert (hub / "index" / extra.name).is_file()
    build(others, "test.2")
    again = _served(hub)
    shutil.rmtree(hub)
    build(others, "test.2")
    assert again == _served(hub)
    served = sorted(path.name for path in (hub / "index").glob("*.whl"))
    assert served == sorted([*(wheel.name for wheel in others), "faketorch-2.1.0+test.2-py3-none-linux_x86_64.whl"])


def test_a_wheel_left_in_the_index_under_the_name_of_one_the_plan_fetched_is_not_served(
    tmp_path: Path, fake_set: fakecuda.FakeCudaWheels, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another file under a fetched wheel's name (an earlier lock's, a build run by hand without fetching again): one
    error line naming it, and the hub as it was."""
    hub, others = tmp_path / "hub", list(fake_set.nvidia.values())
    config = set_config(hub, others, fake_set.torch, "faketorch")
    assert main(["hub", "build", "--config", str(config)]) == 0
    fetched = hub / "index" / others[0].name
    name, version = others[0].name.split("-")[:2]
    other = fakecuda.build_wheel(tmp_path / "other", name, version, {f"{name}/other.py": b""})
    assert other.name == fetched.name
    shutil.copyfile(other, fetched)
    before = _tree(tmp_path)
    capsys.readouterr()

    assert main(["hub", "build", "--config", str(config)]) == 1

    assert capsys.readouterr().err == (
        f"patched-wheels: error: {fetched}: sha256 {sha256_of(other)}, not the {sha256_of(others[0])} of the wheel "
        "the plan fetched there: fetch it again\n"
    )
    assert _tree(tmp_path) == before


def _start_build(config: Path) -> subprocess.Popen[str]:
    """``patched-wheels hub build`` of ``config`` in its own process."""
    command = [sys.executable, "-m", "patched_wheels", "hub", "build", "--config", str(config)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_concurrent_builds_into_one_repository_all_succeed_and_leave_no_temporary_directory(
    tmp_path: Path, fake_set: fakecuda.FakeCudaWheels
) -> None:
    """Issue 52: of eight builds run at once into one repository, one failed (``.index.pw-…tmp: Directory not
    empty``: another build's index had taken the place of its own) and left its old index behind."""
    config = hub_config(tmp_path / "hub", fake_set)
    builds = [_start_build(config) for _ in range(8)]
    results = [(build.wait(timeout=300), build.communicate()[1]) for build in builds]
    assert results == [(0, "")] * len(builds)
    assert not [path.name for path in (tmp_path / "hub").iterdir() if ".pw-" in path.name]
    assert (tmp_path / "hub" / "index" / "faketorch-2.1.0+test.1-py3-none-linux_x86_64.whl").is_file()


def _waits_for_a_lock(pid: int) -> bool:
    """Whether process ``pid`` is blocked taking a flock (Linux lists each waiter in /proc/locks as ``-> FLOCK``)."""
    lines = Path("/proc/locks").read_text(encoding="ascii").splitlines()
    return any(line.split()[1:3] == ["->", "FLOCK"] and line.split()[5] == str(pid) for line in lines)


def test_a_build_waits_while_another_build_of_the_repository_runs(
    tmp_path: Path, fake_set: fakecuda.FakeCudaWheels
) -> None:
    """A build takes its turn: while the repository is locked as a running build locks it, a second build writes
    nothing and waits; once the lock is let go, it builds."""
    config = hub_config(tmp_path / "hub", fake_set)
    before = _tree(tmp_path)
    with locked_directory(tmp_path / "hub"):
        build = _start_build(config)
        deadline = time.monotonic() + 120
        while build.poll() is None and not _waits_for_a_lock(build.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert build.poll() is None, build.communicate()
        assert _tree(tmp_path) == before
    assert build.wait(timeout=300) == 0, build.communicate()
    assert "hub/index/faketorch-2.1.0+test.1-py3-none-linux_x86_64.whl" in _tree(tmp_path)


def test_a_staging_links_the_hubs_wheels_and_places_each_output_where_it_belongs(tmp_path: Path) -> None:
    """What a build writes goes to the staging's temporary places, named by the final ones; the index starts with
    the wheels fetched there, hard-linked, and nothing else (an earlier build's wheel and ``.metadata``, simple/:
    made again), and everything is renamed into place at the end."""
    index = tmp_path / "index"
    (index / "simple").mkdir(parents=True)
    (index / "a.whl").write_bytes(b"a")
    (index / "a.whl.metadata").write_bytes(b"a's")
    (index / "old+test.1.whl").write_bytes(b"an earlier build's")
    (index / "simple" / "index.html").write_text("old", encoding="utf-8")
    lock, facts = tmp_path / "requirements_lock.txt", tmp_path / "wheel_facts.json"
    lock.write_text("old", encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    staging = Staging.of(index, [lock, facts], work, fetched=["a.whl", "missing.whl"])
    assert list(staging.outputs) == [lock, facts] and {path.parent for path in staging.outputs.values()} == {work}
    assert [entry.name for entry in staging.index_dir.iterdir()] == ["a.whl"]
    assert (staging.index_dir / "a.whl").stat().st_ino == (index / "a.whl").stat().st_ino
    (staging.index_dir / "b.whl").write_bytes(b"b")
    for final, written in staging.outputs.items():
        written.write_text(f"new {final.name}", encoding="utf-8")
    assert lock.read_text(encoding="utf-8") == "old" and not facts.exists()
    staging.place(index)
    assert sorted(entry.name for entry in index.iterdir()) == ["a.whl", "b.whl"]
    assert [path.read_text(encoding="utf-8") for path in (lock, facts)] == [
        "new requirements_lock.txt",
        "new wheel_facts.json",
    ]
