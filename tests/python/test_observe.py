"""The flat-install observation behind preload = "auto": its cache, its fall-back, its RTLD decision, bad inputs."""

from __future__ import annotations

import json
import re

import pytest

import stackshapes
from fakecuda import build_runtime_loaded_wheels, build_wheel, RUNTIME_LIBRARY_PATHS
from patched_wheels import observe as observe_module
from patched_wheels.cli import main
from patched_wheels.elfgraph import ElfLibrary, build_graph, read_graph
from patched_wheels.errors import UsageError
from patched_wheels.hub import PatchedWheelSpec, patch_into_index
from patched_wheels.observe import libraries_needing_global, observe


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    return build_runtime_loaded_wheels(tmp_path_factory.mktemp("runtime"))


@pytest.fixture()
def cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "observed"


def test_an_observation_is_cached_by_content_and_a_bad_entry_is_a_miss(runtime, cache_root, monkeypatch, capsys):
    graph = read_graph(runtime.all)
    first = observe(runtime.all, "import fakejax", graph, use_cache=True)
    assert first.mapped == {(runtime.foo.name, RUNTIME_LIBRARY_PATHS["foo"]), (runtime.bar.name, RUNTIME_LIBRARY_PATHS["bar"])}
    (entry,) = cache_root.iterdir()
    assert entry.stat().st_mode & 0o777 == 0o600

    def no_run(*_args):
        raise AssertionError("ran the probe although the observation is cached")

    monkeypatch.setattr(observe_module, "_run", no_run)
    assert observe(runtime.all, "import fakejax", graph, use_cache=True) == first
    assert capsys.readouterr().err == ""
    # Another probe is another key: it runs (here: fails the test double).
    with pytest.raises(AssertionError, match="ran the probe"):
        observe(runtime.all, "import fakejax; pass", graph, use_cache=True)
    monkeypatch.undo()
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(cache_root.parent))
    value = json.loads(entry.read_text())
    for lie in ({**value, "mapped": [["0" * 64, RUNTIME_LIBRARY_PATHS["foo"]]]},  # a wheel not in the set
                {**value, "mapped": [[value["mapped"][0][0], "../../etc/libx.so"]]},  # a library not of the set
                {**value, "global": [["x"]]}, [1, 2]):
        entry.write_text(json.dumps(lie))
        assert observe(runtime.all, "import fakejax", graph, use_cache=True) == first  # ran again
        warning = capsys.readouterr().err
        assert warning.count("\n") == 1 and "not an observation of this wheel set" in warning, warning
    entry.write_bytes(b"\xff\xfe not json")
    assert observe(runtime.all, "import fakejax", graph, use_cache=True) == first
    assert capsys.readouterr().err.count("patched-wheels: warning: ") == 1


def test_wheels_for_another_interpreter_fall_back_to_the_graph_with_one_warning(runtime, tmp_path, capsys):
    mac = build_wheel(tmp_path, "macpkg", "1.0", {"macpkg/__init__.py": b""}, tag="py3-none-macosx_11_0_arm64")
    wheels = [*runtime.all, mac]
    assert observe(wheels, "import fakejax", read_graph(wheels)) is None
    assert capsys.readouterr().err == (
        f"patched-wheels: warning: {mac.name}: its tags do not match this interpreter, so the probe cannot run here; "
        "the preload comes from the ELF graph only (libraries the package opens itself at run time are not in it)\n"
    )


def _library(name, needed=()):
    return ElfLibrary("w.whl", f"w/{name}", name, tuple(needed), (), ())


def test_global_only_for_a_symbol_nothing_linked_defines():
    user, dupa, dupb, glue, ext, jemalloc = (
        _library("libuser.so", ["libdupb.so"]), _library("libdupa.so"), _library("libdupb.so"),
        _library("libglue.so"), _library("_glue.so", ["libc.so.6"]), _library("libjemalloc.so"),
    )
    graph = build_graph([user, dupa, dupb, glue, ext, jemalloc])
    symbols = {
        user: (frozenset({"user_value"}), frozenset({"shared_value", "PyLong_FromLong"})),
        dupa: (frozenset({"shared_value", "dupa_value"}), frozenset()),
        dupb: (frozenset({"shared_value"}), frozenset()),
        glue: (frozenset({"glue_value"}), frozenset()),
        ext: (frozenset({"glue_answer"}), frozenset({"glue_value", "malloc"})),
        jemalloc: (frozenset({"malloc"}), frozenset()),
    }
    system = {"libc.so.6": frozenset({"malloc"})}
    needed = libraries_needing_global(graph, symbols, lambda name: system.get(name, frozenset()), frozenset({"PyLong_FromLong"}))
    # libuser gets shared_value from libdupb (linked): libdupa stays local; malloc comes from libc: jemalloc too.
    assert needed == {glue}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["doctor", "--no-cache", "{wheels}", "--package", "fake-jax"], "package 'fake-jax': not a module name"),
        (["doctor", "--no-cache", "{wheels}", "--probe", "import x"], "--probe needs --package"),
        (["doctor", "--no-cache", "{wheels}", "--package", "nothing.here"], "nothing.here: no wheel in the set ships nothing/here/__init__.py"),
        (["patch", "--no-cache", "--wheel", "{package}", "--dest-dir", "{out}", "--probe", "import x"], "--probe needs --preload-for"),
        (["patch", "--no-cache", "--wheel", "{package}", "--dest-dir", "{out}", "--preload-for", "fakejax", "--preload-from", "{wheels}",
          "--probe", "import fakejax; raise SystemExit(3"], "fakejax needs no shared library"),
    ],
)
def test_bad_input_is_one_error_line(runtime, tmp_path, capsys, argv, message):
    expanded = []
    for arg in argv:
        if arg == "{wheels}":
            expanded += map(str, runtime.all)
        else:
            expanded.append(arg.format(package=runtime.package, out=tmp_path / "out"))
    assert main(expanded) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 + error.count("patched-wheels: warning:") and "Traceback" not in error
    assert re.search(f"patched-wheels: error: .*{re.escape(message)}", error), error
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_a_run_that_does_not_end_is_stopped_with_one_error_line(runtime, monkeypatch, capsys):
    monkeypatch.setenv("RULES_PATCHED_WHEELS_RUN_TIMEOUT", "2")
    argv = ["doctor", "--no-cache", *map(str, runtime.all), "--package", "fakejax", "--run=import time; time.sleep(30)"]
    assert main(argv) == 1
    assert capsys.readouterr().err == (
        "patched-wheels: error: code 'import time; time.sleep(30)': still running after 2 s with every wheel in one "
        "site-packages; stopped\n"
    )
    monkeypatch.setenv("RULES_PATCHED_WHEELS_RUN_TIMEOUT", "soon")
    assert main(argv) == 1
    assert capsys.readouterr().err == (
        "patched-wheels: error: RULES_PATCHED_WHEELS_RUN_TIMEOUT='soon': not a positive whole number of seconds\n"
    )


def test_a_probe_needs_preload_auto_in_the_hub(runtime, tmp_path):
    spec = PatchedWheelSpec(name="fakejax", wheel=runtime.package, suffix="t.1", probe="import fakejax")
    with pytest.raises(UsageError, match="^patched_wheel fakejax: probe needs preload = 'auto'$"):
        patch_into_index(spec, runtime.all, tmp_path)


def test_a_namespace_package_with_no_regular_package_is_one_error_line(tmp_path, capsys):
    wheel = build_wheel(tmp_path, "nsonly", "1.0", {"nsonly/_ext.so": stackshapes.VERSION.encode()})
    assert main(["doctor", "--no-cache", str(wheel), "--package", "nsonly", "--run"]) == 1
    assert capsys.readouterr().err.startswith(
        "patched-wheels: error: nsonly: a namespace package (no __init__.py) in nsonly-1.0-py3-none-linux_x86_64.whl "
        "with no regular package inside"
    )


def test_output_of_any_size_is_kept_bounded_and_the_first_error_found(runtime, capsys):
    code = (
        "import sys; sys.stdout.write('o' * (24 << 20) + '\\nlast line\\n'); "
        "sys.stderr.write('e' * (24 << 20) + '\\n'); raise ValueError('boom')"
    )
    assert main(["doctor", "--no-cache", *map(str, runtime.all), "--package", "fakejax", f"--run={code}"]) == 0
    out = capsys.readouterr().out
    assert len(out) < 1 << 20 and "    stdout: last line" in out
    assert out.count("    first error: ValueError: boom") == 2  # the same in both layouts: not the layout's fault


def test_a_probe_that_is_not_a_string_is_one_error(runtime, tmp_path):
    spec = PatchedWheelSpec(name="fakejax", wheel=runtime.package, suffix="t.1", preload="auto", preload_package="fakejax", probe=["import x"])
    with pytest.raises(UsageError, match=r"^probe \['import x'\]: not Python code \(a string\)$"):
        patch_into_index(spec, runtime.all, tmp_path)
