"""The hub build step the Bazel rule runs: patch/split with a generated preload, index, rewrite the lock."""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from collections import Counter
from pathlib import Path

import pytest

import fakecuda
from patched_wheels import elfgraph
from patched_wheels.cli import main
from patched_wheels.errors import UsageError
from patched_wheels.hub import HubConfig, build_hub
from patched_wheels.preload import read_preload_module


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def fake_set(tmp_path_factory: pytest.TempPathFactory) -> fakecuda.FakeCudaWheels:
    return fakecuda.build_fake_cuda_wheels(tmp_path_factory.mktemp("fake"))


def hub_config(tmp_path: Path, wheels: fakecuda.FakeCudaWheels, **spec: object) -> Path:
    """hub.json for patching faketorch in the fake CUDA set (see :func:`set_config`)."""
    return set_config(tmp_path, list(wheels.nvidia.values()), wheels.torch, "faketorch", **spec)


def set_config(tmp_path: Path, others: list[Path], original: Path, name: str, **spec: object) -> Path:
    """Lay the wheels out as the repository rule does (the patched original apart) and write hub.json."""
    return write_config(tmp_path, others, [(original, {"name": name, **spec})])


def write_config(
    tmp_path: Path,
    others: list[Path],
    patched: list[tuple[Path, dict[str, object]]],
    *,
    index_option: str = "index-url",
    elf_cache: Path | None = None,
    fetched: bool = True,
) -> Path:
    """hub.json for patching each ``(original, spec)`` of ``patched``, the ``others`` served as they are.

    ``direct``: the others are fetched only for the graph, into ``_graph/`` (none if not ``fetched``:
    the rule skips the wheels whose ELF rows ``elf_cache`` holds), as the repository rule does.
    """
    index_dir, originals = tmp_path / "index", tmp_path / "originals"
    index_dir.mkdir(parents=True)
    originals.mkdir()
    folder = index_dir if index_option != "direct" else tmp_path / "_graph"
    folder.mkdir(exist_ok=True)
    wheels = []
    for source in others:
        entry = {"filename": source.name, "sha256": sha256(source)}
        if fetched:
            shutil.copyfile(source, folder / source.name)
            entry["path"] = str(folder / source.name)
        wheels.append(entry)
    specs = []
    for original, spec in patched:
        shutil.copyfile(original, originals / original.name)
        wheels.append({"filename": original.name, "sha256": sha256(original), "path": str(originals / original.name)})
        specs.append({"wheel": str(originals / original.name), "suffix": "test.1", "patches": [], **spec})
    lock = tmp_path / "requirements_lock.txt"
    lock.write_text(
        "# the user's lock\n"
        + "".join(
            f"{w.name.split('-')[0].replace('_', '-')}=={w.name.split('-')[1]} \\\n    --hash=sha256:{sha256(w)}\n"
            for w in [*others, *(original for original, _ in patched)]
        ),
        encoding="utf-8",
    )
    config = {
        "requirements": str(lock),
        "index_dir": str(index_dir),
        "out": str(tmp_path / "out_lock.txt"),
        "index_option": index_option,
        "elf_cache": str(elf_cache) if elf_cache else "",
        "wheels": wheels,
        "patched": specs,
    }
    path = tmp_path / "hub.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def test_preload_auto_makes_the_per_wheel_layout_import(tmp_path: Path, fake_set: fakecuda.FakeCudaWheels) -> None:
    config = HubConfig.load(hub_config(tmp_path, fake_set, preload="auto", preload_package="faketorch"))
    assert build_hub(config) == ["faketorch==2.1.0+test.1"]

    patched = tmp_path / "index" / "faketorch-2.1.0+test.1-py3-none-linux_x86_64.whl"
    served = [*fake_set.nvidia.values()]
    broken = fakecuda.run_import(fakecuda.per_wheel_layout([*served, fake_set.torch], tmp_path / "before"))
    assert broken.returncode != 0 and "libjit.so.12" in broken.stderr
    fixed = fakecuda.run_import(fakecuda.per_wheel_layout([*served, patched], tmp_path / "after"))
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.strip() == str(fakecuda.EXPECTED_ANSWER)

    lock = (tmp_path / "out_lock.txt").read_text(encoding="utf-8")
    assert f"faketorch==2.1.0+test.1 \\\n    --hash=sha256:{sha256(patched)}\n" in lock
    assert f"--index-url={(tmp_path / 'index' / 'simple').as_uri()}\n" in lock
    assert (tmp_path / "index" / "simple" / "faketorch" / "index.html").is_file()
    assert not (tmp_path / "index" / fake_set.torch.name).exists(), "the original must not be served beside the patched one"


def test_split_serves_both_wheels_and_pins_the_sibling(tmp_path: Path, fake_set: fakecuda.FakeCudaWheels) -> None:
    config = hub_config(
        tmp_path, fake_set, preload="auto", preload_package="faketorch",
        split_into="faketorch-libs", split_move=["faketorch/lib/*.so"],
    )
    assert main(["hub", "--config", str(config)]) == 0
    index = tmp_path / "index"
    main_wheel = index / "faketorch-2.1.0+test.1-py3-none-linux_x86_64.whl"
    sibling = index / "faketorch_libs-2.1.0+test.1-py3-none-linux_x86_64.whl"
    lock = (tmp_path / "out_lock.txt").read_text(encoding="utf-8")
    assert f"--hash=sha256:{sha256(sibling)}" in lock and "faketorch-libs==2.1.0+test.1" in lock
    result = fakecuda.run_import(fakecuda.per_wheel_layout([*fake_set.nvidia.values(), main_wheel, sibling], tmp_path / "split"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(fakecuda.EXPECTED_ANSWER)


def test_requirement_guard_rejects_another_release(tmp_path: Path, fake_set: fakecuda.FakeCudaWheels) -> None:
    config = HubConfig.load(hub_config(tmp_path, fake_set, requirement="faketorch==2.2.0"))
    with pytest.raises(UsageError, match=r"faketorch-2.1.0-.*\.whl is faketorch 2.1.0, which does not satisfy requirement 'faketorch==2.2.0'"):
        build_hub(config)
    assert not list((tmp_path / "index").glob("faketorch*")), "nothing is served after an error"
    assert not (tmp_path / "out_lock.txt").exists()


def test_unreadable_config_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "hub.json").write_text("{not json", encoding="utf-8")
    assert main(["hub", "--config", str(tmp_path / "hub.json")]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "hub.json: cannot read the hub configuration" in error


def test_config_missing_a_key_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "hub.json").write_text("{}", encoding="utf-8")
    assert main(["hub", "--config", str(tmp_path / "hub.json")]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "cannot read the hub configuration" in error and "requirements" in error


def test_unwritable_destination_is_one_error_line(tmp_path: Path, fake_set: fakecuda.FakeCudaWheels, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory", encoding="utf-8")
    code = main(["patch", "--wheel", str(fake_set.torch), "--dest-dir", str(blocker / "out"), "--suffix", "x.1"])
    error = capsys.readouterr().err
    assert code == 1
    assert error.startswith("patched-wheels: error: ") and error.count("\n") == 1 and "file" in error


@pytest.fixture(scope="module")
def runtime_set(tmp_path_factory: pytest.TempPathFactory) -> fakecuda.RuntimeLoadedWheels:
    return fakecuda.build_runtime_loaded_wheels(tmp_path_factory.mktemp("runtime"))


def test_preload_wheels_make_runtime_loads_work_per_wheel(tmp_path: Path, runtime_set: fakecuda.RuntimeLoadedWheels) -> None:
    spec = dict(preload="auto", preload_package="fakejax", preload_wheels=[fakecuda.RUNTIME_GLOB])
    config = HubConfig.load(set_config(tmp_path, [runtime_set.foo, runtime_set.bar], runtime_set.package, "fakejax", **spec))
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
    config = set_config(tmp_path / "default", [runtime_set.foo, runtime_set.bar], runtime_set.package, "fakejax", preload="auto", preload_package="fakejax")
    assert main(["hub", "--config", str(config)]) == 0
    assert capsys.readouterr().err == ""
    with zipfile.ZipFile(tmp_path / "default" / "index" / "fakejax-1.0+test.1-py3-none-linux_x86_64.whl") as archive:
        preload = read_preload_module(archive.read("fakejax/_patched_wheels_preload.py"), where="test")
    assert preload.libraries == (fakecuda.RUNTIME_LIBRARY_PATHS["bar"], fakecuda.RUNTIME_LIBRARY_PATHS["foo"]) and preload.optional
    config = set_config(
        tmp_path / "idle", [runtime_set.foo, runtime_set.bar], runtime_set.package, "fakejax", preload="auto", preload_package="fakejax", probe="pass"
    )
    assert main(["hub", "--config", str(config)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "fakejax==1.0+test.1\n"
    assert captured.err.startswith("patched-wheels: warning: ") and "'pass' maps none in one site-packages" in captured.err
    with zipfile.ZipFile(tmp_path / "idle" / "index" / "fakejax-1.0+test.1-py3-none-linux_x86_64.whl") as archive:
        assert not [name for name in archive.namelist() if "_patched_wheels_preload" in name]


def test_preload_wheels_need_preload_auto(tmp_path: Path, runtime_set: fakecuda.RuntimeLoadedWheels) -> None:
    config = HubConfig.load(set_config(tmp_path, [runtime_set.foo], runtime_set.package, "fakejax", preload_wheels=["fakert-*"]))
    with pytest.raises(UsageError, match="patched_wheel fakejax: preload_wheels needs preload = 'auto'"):
        build_hub(config)


def test_spec_with_an_unknown_key_is_one_error_line(tmp_path: Path, fake_set: fakecuda.FakeCudaWheels, capsys: pytest.CaptureFixture[str]) -> None:
    """The Starlark schema and PatchedWheelSpec must agree: a key one side does not know is refused, not dropped."""
    config = hub_config(tmp_path, fake_set, preload_wheel=["nvidia-*"])  # misspelt preload_wheels
    assert main(["hub", "--config", str(config)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "unknown keys ['preload_wheel']" in error, error


def test_each_library_is_read_once_per_hub_and_a_rebuild_reads_and_fetches_none(
    tmp_path: Path,
    fake_set: fakecuda.FakeCudaWheels,
    runtime_set: fakecuda.RuntimeLoadedWheels,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two specs with preload = "auto" share one graph, and the persistent cache outlives the hub.

    The rebuild is a ``bazel clean --expunge``: a fresh output directory, the same user cache, and the
    wheels only the graph reads are not fetched, because ``--list-cached`` names them all.
    """
    others = [*fake_set.nvidia.values(), runtime_set.foo, runtime_set.bar]
    patched = [
        (fake_set.torch, {"name": "faketorch", "preload": "auto", "preload_package": "faketorch"}),
        (runtime_set.package, {"name": "fakejax", "preload": "auto", "preload_package": "fakejax", "preload_wheels": [fakecuda.RUNTIME_GLOB]}),
    ]
    every_library = {(library.wheel, library.path) for library in elfgraph.read_graph([*others, fake_set.torch, runtime_set.package]).libraries}
    reads: Counter[tuple[str, str]] = Counter()
    read_library = elfgraph.read_library

    def counting(wheel: Path, info: zipfile.ZipInfo, path: str) -> elfgraph.ElfLibrary:
        reads[wheel.name, path] += 1
        return read_library(wheel, info, path)

    monkeypatch.setattr(elfgraph, "read_library", counting)
    cache = tmp_path / "user-cache"
    first = write_config(tmp_path / "first", others, patched, index_option="direct", elf_cache=cache)
    assert main(["hub", "--config", str(first)]) == 0
    assert reads == Counter(dict.fromkeys(every_library, 1)), "every library of the set read, each once"

    reads.clear()
    second = write_config(tmp_path / "second", others, patched, index_option="direct", elf_cache=cache, fetched=False)
    capsys.readouterr()
    assert main(["hub", "--config", str(second), "--list-cached"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert sorted(listed) == sorted(sha256(wheel) for wheel in [*others, fake_set.torch, runtime_set.package])
    assert main(["hub", "--config", str(second)]) == 0
    assert not reads, "nothing read again"
    for run in ("first", "second"):
        assert "_patched_wheels_preload" in str(zipfile.ZipFile(tmp_path / run / "index" / "faketorch-2.1.0+test.1-py3-none-linux_x86_64.whl").namelist())
    served = sorted(path.name for path in (tmp_path / "first" / "index").glob("*.whl"))
    assert served == sorted(path.name for path in (tmp_path / "second" / "index").glob("*.whl")) and len(served) == 2
    for name in served:
        assert sha256(tmp_path / "first" / "index" / name) == sha256(tmp_path / "second" / "index" / name)


def test_a_wheel_neither_fetched_nor_cached_is_one_error_line(
    tmp_path: Path, fake_set: fakecuda.FakeCudaWheels, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path, list(fake_set.nvidia.values()), [(fake_set.torch, {"name": "faketorch", "preload": "auto", "preload_package": "faketorch"})],
        index_option="direct", elf_cache=tmp_path / "empty-cache", fetched=False,
    )
    assert main(["hub", "--config", str(config), "--list-cached"]) == 0
    assert capsys.readouterr().out == "[]\n"
    assert main(["hub", "--config", str(config)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no file given, and no ELF rows are cached for its sha256" in error, error
