"""The hub build step the Bazel rule runs: patch/split with a generated preload, index, rewrite the lock."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

import fakecuda
from patched_wheels.cli import main
from patched_wheels.errors import PatchedWheelsError
from patched_wheels.hub import HubConfig, build_hub


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
    index_dir, originals = tmp_path / "index", tmp_path / "originals"
    index_dir.mkdir()
    originals.mkdir()
    placed = [(index_dir / w.name) for w in others]
    for source, target in zip(others, placed):
        target.write_bytes(source.read_bytes())
    patched = originals / original.name
    patched.write_bytes(original.read_bytes())
    lock = tmp_path / "requirements_lock.txt"
    lock.write_text(
        "# the user's lock\n"
        + "".join(f"{w.name.split('-')[0].replace('_', '-')}=={w.name.split('-')[1]} \\\n    --hash=sha256:{sha256(w)}\n" for w in [*others, original]),
        encoding="utf-8",
    )
    config = {
        "requirements": str(lock),
        "index_dir": str(index_dir),
        "out": str(tmp_path / "out_lock.txt"),
        "index_option": "index-url",
        "wheels": [str(p) for p in placed + [patched]],
        "patched": [{"name": name, "wheel": str(patched), "suffix": "test.1", "patches": [], **spec}],
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
    with pytest.raises(PatchedWheelsError, match=r"faketorch-2.1.0-.*\.whl is faketorch 2.1.0, which does not satisfy requirement 'faketorch==2.2.0'"):
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


def test_preload_auto_with_nothing_to_preload_is_a_no_op_with_a_hint(
    tmp_path: Path, runtime_set: fakecuda.RuntimeLoadedWheels, capsys: pytest.CaptureFixture[str]
) -> None:
    config = set_config(tmp_path, [runtime_set.foo, runtime_set.bar], runtime_set.package, "fakejax", preload="auto", preload_package="fakejax")
    assert main(["hub", "--config", str(config)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "fakejax==1.0+test.1\n"
    assert captured.err.startswith("patched-wheels: warning: ") and "preload_wheels = [\"fakert-*\"]" in captured.err
    with zipfile.ZipFile(tmp_path / "index" / "fakejax-1.0+test.1-py3-none-linux_x86_64.whl") as archive:
        assert not [name for name in archive.namelist() if "_patched_wheels_preload" in name]


def test_preload_wheels_need_preload_auto(tmp_path: Path, runtime_set: fakecuda.RuntimeLoadedWheels) -> None:
    config = HubConfig.load(set_config(tmp_path, [runtime_set.foo], runtime_set.package, "fakejax", preload_wheels=["fakert-*"]))
    with pytest.raises(PatchedWheelsError, match="patched_wheel fakejax: preload_wheels needs preload = 'auto'"):
        build_hub(config)


def test_spec_with_an_unknown_key_is_one_error_line(tmp_path: Path, fake_set: fakecuda.FakeCudaWheels, capsys: pytest.CaptureFixture[str]) -> None:
    """The Starlark schema and PatchedWheelSpec must agree: a key one side does not know is refused, not dropped."""
    config = hub_config(tmp_path, fake_set, preload_wheel=["nvidia-*"])  # misspelt preload_wheels
    assert main(["hub", "--config", str(config)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "unknown keys ['preload_wheel']" in error, error
