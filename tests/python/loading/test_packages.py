"""Where a preload goes when the project users name is not the one shipping the package (JAX 0.7's
``jax-cuda12-plugin`` / ``jax-cuda12-pjrt`` split), and the warning when the default probe never reaches a
plugin's lazily loaded libraries: through the hub's build step (its JSON) and through ``patch``.

The fixture is :func:`stackshapes.build_split_plugin_stack`: real gcc libraries, the plugin loaded by its
host through an ``entry_points.txt`` entry."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from patched_wheels.cli import main
from patched_wheels.loading.preloadmodule import PRELOAD_DATA, PRELOAD_MODULE, read_preload_data
from support import stackshapes
from support.fakecuda import build_wheel, flat_layout, per_wheel_layout, run_import
from support.hubconfig import no_user_cache, set_config  # noqa: F401  (no_user_cache: autouse, the user's caches stay out)

PJRT_INIT = "jaxlike_plugins/xla_fake/__init__.py"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> stackshapes.Stack:
    return stackshapes.build_split_plugin_stack(tmp_path_factory.mktemp("split-plugin"))


def wheel(stack: stackshapes.Stack, project: str) -> Path:
    (found,) = [w for w in stack.wheels if w.name.startswith(project.replace("-", "_") + "-")]
    return found


def others(stack: stackshapes.Stack, project: str) -> list[Path]:
    return [w for w in stack.wheels if w != wheel(stack, project)]


def one_error(captured: pytest.CaptureResult[str]) -> str:
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("patched-wheels: error: ") and "Traceback" not in captured.err, (
        captured.err
    )
    return lines[0]


def misplaced_hub_error(stack, tmp_path, capsys, **spec) -> str:
    """The one error line of a hub that patches jaxlike-cuda-plugin, the project users guess, with ``spec``."""
    plugin = wheel(stack, "jaxlike-cuda-plugin")
    config = set_config(
        tmp_path, others(stack, "jaxlike-cuda-plugin"), plugin, "jaxlike-cuda-plugin", preload="auto", **spec
    )
    assert main(["hub", "build", "--config", str(config)]) == 1
    return one_error(capsys.readouterr())


def test_hub_names_the_project_that_ships_preload_package(stack, tmp_path, capsys):
    assert misplaced_hub_error(stack, tmp_path, capsys, preload_package="jaxlike_plugins.xla_fake") == (
        'patched-wheels: error: patched.patched_wheel(name = "jaxlike-cuda-plugin", hub = "test"): '
        'preload_package = "jaxlike_plugins.xla_fake": jaxlike_plugins.xla_fake is shipped by jaxlike-cuda-pjrt, '
        "which its entry point jaxlike_plugins:xla_fake loads, not by jaxlike-cuda-plugin: write "
        'patched.patched_wheel(name = "jaxlike-cuda-pjrt", hub = "test", preload = "auto", '
        'preload_package = "jaxlike_plugins.xla_fake", …)'
    )
    assert not list((tmp_path / "index").glob("*+test.1-*.whl"))  # no patched wheel written


def test_hub_says_which_plugin_imports_a_namespace_package_without_code(stack, tmp_path, capsys):
    """The default package of jaxlike-cuda-plugin is its namespace of libraries: the error names the plugin
    module (and its entry point) that imports it, and the stanza to write, keeping the user's probe."""
    assert misplaced_hub_error(stack, tmp_path, capsys, probe="import jaxlike") == (
        'patched-wheels: error: patched.patched_wheel(name = "jaxlike-cuda-plugin", hub = "test"): preload_package '
        '(not given: "jaxlike_cuda_plugin", from name): jaxlike_cuda_plugin is a namespace package (no __init__.py) in '
        "jaxlike-cuda-plugin: none of its code runs at import to load a preload; jaxlike_plugins.xla_fake (of "
        "jaxlike-cuda-pjrt, the plugin its entry point jaxlike_plugins:xla_fake loads) imports it: write "
        'patched.patched_wheel(name = "jaxlike-cuda-pjrt", hub = "test", preload = "auto", '
        'preload_package = "jaxlike_plugins.xla_fake", probe = "import jaxlike", …)'
    )


def test_hub_names_the_plugin_module_of_the_right_project_when_its_default_package_does_not_exist(
    stack, tmp_path, capsys
):
    pjrt = wheel(stack, "jaxlike-cuda-pjrt")
    config = set_config(tmp_path, others(stack, "jaxlike-cuda-pjrt"), pjrt, "jaxlike-cuda-pjrt", preload="auto")
    assert main(["hub", "build", "--config", str(config)]) == 1
    assert one_error(capsys.readouterr()) == (
        'patched-wheels: error: patched.patched_wheel(name = "jaxlike-cuda-pjrt", hub = "test"): preload_package '
        '(not given: "jaxlike_cuda_pjrt", from name): no wheel in the set ships jaxlike_cuda_pjrt/__init__.py or any '
        "file under jaxlike_cuda_pjrt/; jaxlike-cuda-pjrt ships jaxlike_plugins.xla_fake, which its entry point "
        'jaxlike_plugins:xla_fake loads: write patched.patched_wheel(name = "jaxlike-cuda-pjrt", hub = "test", '
        'preload = "auto", preload_package = "jaxlike_plugins.xla_fake", …)'
    )


def test_hub_names_the_one_package_a_project_ships_when_its_name_differs(tmp_path, capsys):
    """onnxruntime-gpu ships onnxruntime: the default package (from the project name) is not there."""
    gpu = build_wheel(
        tmp_path / "wheels", "onnxlike-gpu", "1.0", {"onnxlike/__init__.py": b"", "onnxlike/capi/__init__.py": b""}
    )
    config = set_config(tmp_path / "hub", [], gpu, "onnxlike-gpu", preload="auto")
    assert main(["hub", "build", "--config", str(config)]) == 1
    assert one_error(capsys.readouterr()).endswith(
        "no wheel in the set ships onnxlike_gpu/__init__.py or any file under onnxlike_gpu/; onnxlike-gpu ships onnxlike: "
        'write patched.patched_wheel(name = "onnxlike-gpu", hub = "test", preload = "auto", preload_package = "onnxlike", …)'
    )


def _hub_preload(stack, tmp_path, capsys, **spec):
    config = set_config(
        tmp_path, others(stack, "jaxlike-cuda-pjrt"), stack.package_wheel, "jaxlike-cuda-pjrt", preload="auto", **spec
    )
    assert main(["hub", "build", "--config", str(config)]) == 0
    (patched,) = (tmp_path / "index").glob("jaxlike_cuda_pjrt-*.whl")
    return patched, capsys.readouterr().err


def test_hub_warns_once_when_the_default_probe_never_maps_the_plugins_own_library_and_not_with_a_probe_that_does(
    stack, tmp_path, capsys
):
    # The shape itself: the plugin works in one site-packages and falls back to the "cpu" per wheel, silently.
    assert run_import(flat_layout(stack.wheels, tmp_path / "flat"), stack.code).stdout.strip() == stack.expected
    per_wheel = run_import(per_wheel_layout(stack.wheels, tmp_path / "plain"), stack.code)
    assert per_wheel.returncode == 0 and per_wheel.stdout.strip() == "['cpu']", per_wheel.stderr

    patched, err = _hub_preload(stack, tmp_path / "default", capsys, preload_package="jaxlike_plugins.xla_fake")
    (line,) = err.splitlines()
    assert line.startswith("patched-wheels: warning: jaxlike_cuda_pjrt-1.0-")
    assert (
        "'import jaxlike_plugins.xla_fake' never maps jaxlike_plugins.xla_fake's own jaxlike_plugins/xla_fake/xla_fake_plugin.so"
        in line
    )
    assert "2 libraries of fake-cudart, jaxlike-cuda-plugin stay neither mapped nor preloaded" in line
    assert (
        'probe = "import jax; jax.devices()" on patched.patched_wheel(name = "jaxlike-cuda-pjrt", hub = "test")' in line
    )
    with zipfile.ZipFile(patched) as archive:
        assert not [name for name in archive.namelist() if PRELOAD_MODULE in name]  # nothing seen, nothing preloaded

    patched, err = _hub_preload(
        stack,
        tmp_path / "probe",
        capsys,
        preload_package="jaxlike_plugins.xla_fake",
        probe=stackshapes.SPLIT_PLUGIN_PROBE,
    )
    assert err == ""
    with zipfile.ZipFile(patched) as archive:
        preload = read_preload_data(archive.read(f"jaxlike_plugins/xla_fake/{PRELOAD_DATA}"), where="test")
    assert preload.libraries == (stack.libraries["cudart"],)
    wheel_set = [patched, *others(stack, "jaxlike-cuda-pjrt")]
    result = run_import(per_wheel_layout(wheel_set, tmp_path / "per-wheel"), stack.code)
    assert result.stdout.strip() == stack.expected, result.stderr


def test_patch_names_the_preload_from_wheel_that_ships_the_package(stack, tmp_path, capsys):
    """Was: "jaxlike_cuda_pjrt-1.0-….whl: jaxlike_plugins/xla_fake/__init__.py: missing", which is false."""
    plugin, pjrt = wheel(stack, "jaxlike-cuda-plugin"), wheel(stack, "jaxlike-cuda-pjrt")
    rest = [str(w) for w in others(stack, "jaxlike-cuda-plugin")]
    code = main(
        [
            "patch",
            "--wheel",
            str(plugin),
            "--dest-dir",
            str(tmp_path / "out"),
            "--preload-for",
            "jaxlike_plugins.xla_fake",
            "--preload-from",
            *rest,
        ]
    )
    assert code == 1
    line = one_error(capsys.readouterr())
    assert line.startswith(
        f"patched-wheels: error: --preload-for jaxlike_plugins.xla_fake: jaxlike_plugins.xla_fake is shipped by {pjrt.name}, "
        f"which its entry point jaxlike_plugins:xla_fake loads, not by {plugin.name}: write --wheel {pjrt} "
        "--preload-for jaxlike_plugins.xla_fake --preload-from "
    )
    assert str(plugin) in line and "missing" not in line
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_patch_warns_with_the_probe_flag_when_the_default_probe_never_maps_the_plugin(stack, tmp_path, capsys):
    pjrt = wheel(stack, "jaxlike-cuda-pjrt")
    rest = [str(w) for w in others(stack, "jaxlike-cuda-pjrt")]
    arguments = [
        "patch",
        "--wheel",
        str(pjrt),
        "--dest-dir",
        str(tmp_path / "out"),
        "--preload-for",
        "jaxlike_plugins.xla_fake",
        "--preload-from",
        *rest,
    ]
    assert main(arguments) == 1  # strict: nothing to preload is an error, which says why (its one line)
    captured = capsys.readouterr()
    (error,) = captured.err.splitlines()
    assert error.startswith(f"patched-wheels: error: {pjrt.name}: jaxlike_plugins.xla_fake needs no shared library")
    assert f"nothing to preload; {pjrt.name}: the probe 'import jaxlike_plugins.xla_fake' never maps" in error
    assert error.endswith("--probe 'import jax; jax.devices()' for a JAX plugin")
    assert main([*arguments, "--probe", stackshapes.SPLIT_PLUGIN_PROBE]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_wheel_the_hub_did_not_fetch_is_found_by_its_cached_libraries(stack):
    """With its ELF rows cached, the hub fetches no unpatched wheel (direct references): the package's home
    is then found by the graph's rows under the package's directory."""
    from patched_wheels.elf.graph import WheelRef, read_graph
    from patched_wheels.errors import UsageError
    from patched_wheels.loading.packages import locate_package
    from patched_wheels.phrasing import Phrasing

    plugin = wheel(stack, "jaxlike-cuda-plugin")
    graph = read_graph(stack.wheels)
    refs = [plugin, *(WheelRef(w.name) for w in others(stack, "jaxlike-cuda-plugin"))]
    with pytest.raises(
        UsageError,
        match=r"jaxlike_plugins\.xla_fake is shipped by jaxlike_cuda_pjrt-1\.0-py3-none-linux_x86_64\.whl, not by ",
    ):
        locate_package("jaxlike_plugins.xla_fake", plugin, refs, Phrasing.plain("jaxlike_plugins.xla_fake"), graph)
    with pytest.raises(UsageError, match="no wheel in the set ships jaxlike_plugins/xla_fake/__init__.py"):
        locate_package("jaxlike_plugins.xla_fake", plugin, refs, Phrasing.plain("jaxlike_plugins.xla_fake"))


def test_patch_names_the_plugin_that_imports_a_namespace_package_in_flags(stack, tmp_path, capsys):
    plugin, pjrt = wheel(stack, "jaxlike-cuda-plugin"), wheel(stack, "jaxlike-cuda-pjrt")
    rest = [str(w) for w in others(stack, "jaxlike-cuda-plugin")]
    arguments = [
        "patch",
        "--wheel",
        str(plugin),
        "--dest-dir",
        str(tmp_path / "out"),
        "--preload-for",
        "jaxlike_cuda_plugin",
    ]
    assert main([*arguments, "--preload-from", *rest, "--probe", "import jaxlike"]) == 1
    line = one_error(capsys.readouterr())
    assert line.startswith(
        f"patched-wheels: error: --preload-for jaxlike_cuda_plugin: jaxlike_cuda_plugin is a namespace package (no __init__.py) "
        f"in {plugin.name}: none of its code runs at import to load a preload; jaxlike_plugins.xla_fake (of {pjrt.name}, "
        f"the plugin its entry point jaxlike_plugins:xla_fake loads) imports it: write --wheel {pjrt} "
        "--preload-for jaxlike_plugins.xla_fake --preload-from "
    )
    assert line.endswith(" --probe 'import jaxlike' …") and str(plugin) in line


def test_a_preload_in_the_plugin_host_is_refused_naming_the_plugin(stack, tmp_path, capsys):
    """`patched_wheel(name = "jax", preload = "auto")`: mapped every library on an H100, and JAX found no GPU; the
    preload in the plugin ran there. Both look the same without a GPU, so the host's is refused, naming the plugin's."""
    host, pjrt = wheel(stack, "jaxlike"), wheel(stack, "jaxlike-cuda-pjrt")
    rest = [str(w) for w in others(stack, "jaxlike")]
    code = main(
        [
            "patch",
            "--wheel",
            str(host),
            "--dest-dir",
            str(tmp_path / "out"),
            "--preload-for",
            "jaxlike",
            "--probe",
            stackshapes.SPLIT_PLUGIN_PROBE,
            "--preload-from",
            *rest,
        ]
    )
    assert code == 1
    line = one_error(capsys.readouterr())
    assert line.startswith(
        f"patched-wheels: error: --preload-for jaxlike: jaxlike loads its plugins by entry point, and {pjrt.name} declares "
        "jaxlike_plugins:xla_fake = jaxlike_plugins.xla_fake: a preload in jaxlike loads the plugin's libraries before the "
        f"plugin does (JAX then finds no GPU); preload the plugin: write --wheel {pjrt} --preload-for jaxlike_plugins.xla_fake"
    ), line
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_the_lazy_load_warning_asks_for_a_probe_only_when_it_would_suggest_another() -> None:
    """The documented JAX stanza already has `probe = "import jax; jax.devices()"`; on a machine without a GPU the
    plugin still maps nothing, and the warning asked for the very probe it had."""
    from patched_wheels.elf.read import ElfLibrary
    from patched_wheels.loading.lazyload import JAX_PROBE, Unprobed, lazy_warning
    from patched_wheels.phrasing import Phrasing

    own = ElfLibrary(
        "jax_cuda13_pjrt-1-py3-none-any.whl", "jax_plugins/xla_cuda13/xla_cuda_plugin.so", None, (), (), ()
    )
    other = ElfLibrary("nvidia_cudart-1-py3-none-any.whl", "nvidia/cudart/lib/libcudart.so.13", None, (), (), ())
    phrasing = Phrasing.plain("jax_plugins.xla_cuda13")
    asked = lazy_warning(
        own.wheel, "jax_plugins.xla_cuda13", "import jax_plugins.xla_cuda13", Unprobed((own,), (other,)), phrasing
    )
    assert asked.endswith(f"give a probe that makes it load, e.g. {phrasing.probe(JAX_PROBE)} for a JAX plugin"), asked
    given = lazy_warning(
        own.wheel, "jax_plugins.xla_cuda13", "import jax;  jax.devices()", Unprobed((own,), (other,)), phrasing
    )
    assert "give a probe" not in given and "run layout_test on a GPU machine" in given, given


def test_a_package_whose_init_two_wheels_ship_is_refused(tmp_path, capsys):
    """pwpa/__init__.py in pwpa's wheel and in another: installed together one overwrites the other, so the
    preload written into the patched one may never run. It was accepted."""
    from support.wheelbuilder import build_wheel as build_plain_wheel

    (tmp_path / "w").mkdir()
    own = build_plain_wheel(tmp_path / "w", "pwpa", "1.0", {"pwpa/__init__.py": b"", "pwpa/core.py": b""})
    other = build_plain_wheel(tmp_path / "w", "pwpa-shadow", "1.0", {"pwpa/__init__.py": b"SHADOW = 1\n"})
    code = main(
        [
            "patch",
            "--no-cache",
            "--wheel",
            str(own),
            "--dest-dir",
            str(tmp_path / "out"),
            "--suffix",
            "s.1",
            "--preload-for",
            "pwpa",
            "--preload-from",
            str(other),
        ]
    )
    assert code == 1
    assert one_error(capsys.readouterr()) == (
        f"patched-wheels: error: --preload-for pwpa: pwpa/__init__.py is shipped by {own.name} and by {other.name}: "
        "installed together, one overwrites the other, so a preload in it may never run"
    )
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
