"""The flat-install observation behind preload = "auto": its cache, its fall-back, its RTLD decision, bad inputs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from patched_wheels.base.cache import CacheContext
from patched_wheels.cli import main
from patched_wheels.elf.graph import build_graph, read_graph
from patched_wheels.elf.read import ElfLibrary
from patched_wheels.errors import UsageError
from patched_wheels.hub.build import PatchedWheelSpec, patch_into_index
from patched_wheels.loading import observe as observe_module
from patched_wheels.loading.observe import libraries_needing_global, observe
from support import stackshapes
from support.fakecuda import RUNTIME_LIBRARY_PATHS, build_wheel, compile_shared


def test_an_observation_is_cached_by_content_and_a_bad_entry_is_a_miss(runtime, cache_root, monkeypatch, capsys):
    graph = read_graph(runtime.all)
    first = observe(runtime.all, "import fakejax", graph, caches=CacheContext.from_environment())
    assert first.mapped == {
        (runtime.foo.name, RUNTIME_LIBRARY_PATHS["foo"]),
        (runtime.bar.name, RUNTIME_LIBRARY_PATHS["bar"]),
    }
    (entry,) = cache_root.iterdir()
    assert entry.stat().st_mode & 0o777 == 0o600

    def no_run(*_args):
        raise AssertionError("ran the probe although the observation is cached")

    monkeypatch.setattr(observe_module, "_run", no_run)
    assert observe(runtime.all, "import fakejax", graph, caches=CacheContext.from_environment()) == first
    assert capsys.readouterr().err == ""
    # Another probe is another key: it runs (here: fails the test double).
    with pytest.raises(AssertionError, match="ran the probe"):
        observe(runtime.all, "import fakejax; pass", graph, caches=CacheContext.from_environment())
    monkeypatch.undo()
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(cache_root.parent))
    value = json.loads(entry.read_text())
    for lie in (
        {**value, "mapped": [["0" * 64, RUNTIME_LIBRARY_PATHS["foo"]]]},  # a wheel not in the set
        {**value, "mapped": [[value["mapped"][0][0], "../../etc/libx.so"]]},  # a library not of the set
        {**value, "global": [["x"]]},
        [1, 2],
        {**value, "mapped": [[["a digest"], RUNTIME_LIBRARY_PATHS["foo"]]]},  # an array for a digest
        {**value, "error": "e" * (10 << 20)},  # longer than any error line a run keeps
        {**value, "returncode": False},
        {**value, "returncode": 0.0},
        {**value, "schema": 2.0},
    ):  # JSON integers only
        entry.write_text(json.dumps(lie))
        assert (
            observe(runtime.all, "import fakejax", graph, caches=CacheContext.from_environment()) == first
        )  # ran again
        warning = capsys.readouterr().err
        assert warning.count("\n") == 1 and "not an observation of this wheel set" in warning, warning
    entry.write_bytes(b"\xff\xfe not json")
    assert observe(runtime.all, "import fakejax", graph, caches=CacheContext.from_environment()) == first
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
        _library("libuser.so", ["libdupb.so"]),
        _library("libdupa.so"),
        _library("libdupb.so"),
        _library("libglue.so"),
        _library("_glue.so", ["libc.so.6"]),
        _library("libjemalloc.so"),
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
    needed = libraries_needing_global(
        graph, symbols, lambda name: system.get(name, frozenset()), frozenset({"PyLong_FromLong"})
    )
    # libuser gets shared_value from libdupb (linked): libdupa stays local; malloc comes from libc: jemalloc too.
    assert needed == {glue}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["doctor", "--no-cache", "{wheels}", "--package", "fake-jax"], "package 'fake-jax': not a module name"),
        (["doctor", "--no-cache", "{wheels}", "--probe", "import x"], "--probe needs --package"),
        (
            ["doctor", "--no-cache", "{wheels}", "--package", "fakejax", "--preload-wheels", "fake[rt" + "x" * 900],
            "xxx': an unclosed '['",
        ),
        (
            ["patch", "--wheel", "{package}", "--dest-dir", "{out}", "--delete", "fakejax/[!" + "a" * 1000],
            "an unclosed '['",
        ),
        (
            ["doctor", "--no-cache", "{wheels}", "--package", "nothing.here"],
            "nothing.here: no wheel in the set ships nothing/here/__init__.py",
        ),
        (
            ["patch", "--no-cache", "--wheel", "{package}", "--dest-dir", "{out}", "--probe", "import x"],
            "--probe needs --preload-for",
        ),
        (
            [
                "patch",
                "--no-cache",
                "--wheel",
                "{package}",
                "--dest-dir",
                "{out}",
                "--preload-for",
                "fakejax",
                "--preload-from",
                "{wheels}",
                "--probe",
                "import fakejax; raise SystemExit(3",
            ],
            # judged before the set is installed for it (it was: a probe mapping nothing, then this error)
            "--probe 'import fakejax; raise SystemExit(3': not Python this interpreter runs (SyntaxError",
        ),
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


def test_a_stopped_run_leaves_no_process_behind(runtime, monkeypatch, capsys, tmp_path):
    """A run that starts a child of its own and hangs: stopping it stops the child too (it would live on,
    holding the temporary installation, after the command has returned)."""
    pid_file = tmp_path / "pid"
    code = f"import subprocess, time; open({str(pid_file)!r}, 'w').write(str(subprocess.Popen(['sleep', '60']).pid)); time.sleep(30)"
    monkeypatch.setenv("RULES_PATCHED_WHEELS_RUN_TIMEOUT", "2")
    assert main(["doctor", "--no-cache", *map(str, runtime.all), "--package", "fakejax", f"--run={code}"]) == 1
    assert "still running after 2 s" in capsys.readouterr().err
    pid = int(pid_file.read_text())
    for _ in range(50):  # the kill is sent before the command returns; the zombie is reaped by init
        if not _alive(pid):
            break
        time.sleep(0.1)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and waiting for init to reap it, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


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
    spec = PatchedWheelSpec(
        name="fakejax",
        wheel=runtime.package,
        suffix="t.1",
        preload="auto",
        preload_package="fakejax",
        probe=["import x"],
    )
    with pytest.raises(UsageError, match=r"^probe \['import x'\]: not Python code \(a string\)$"):
        patch_into_index(spec, runtime.all, tmp_path)


_CRASH = "import ctypes; ctypes.string_at(0)"  # a segfault: no exit hook runs


def test_a_crash_in_both_layouts_has_the_same_verdict_on_a_cold_and_a_warm_cache(runtime, cache_root, capsys):
    """Nothing an earlier run left (the probe's record of what it mapped) is read as the crashed run's."""
    argv = ["doctor", *map(str, runtime.all), "--package", "fakejax", f"--run={_CRASH}"]
    outputs = []
    for _ in range(2):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert (
            "run: passes: one directory per wheel does what one site-packages does (same as in one site-packages" in out
        )
        outputs.append(out)
    assert outputs[0] == outputs[1]
    assert outputs[0].count("    mapped: unknown (the process ended without running its exit hooks)") == 2


def test_a_probe_that_crashes_claims_nothing_it_did_not_record(runtime, tmp_path, capsys):
    graph = read_graph(runtime.all)
    assert observe(runtime.all, f"import fakejax; {_CRASH}", graph) is None
    warning = capsys.readouterr().err
    assert warning.count("\n") == 1 and "what it mapped cannot be known" in warning and "until then" not in warning
    # os._exit runs no exit hook either, but the probe records what it mapped on its way out.
    observation = observe(runtime.all, "import fakejax, os; os._exit(3)", graph)
    assert observation is not None and observation.returncode == 3 and len(observation.mapped) == 2
    assert "the preload includes what it mapped until then" in capsys.readouterr().err


def test_a_probe_error_cannot_forge_a_line(runtime, capsys):
    observe(
        runtime.all,
        "import fakejax; raise ValueError('x\\rpatched-wheels: error: forged\\x1b[2K')",
        read_graph(runtime.all),
    )
    warning = capsys.readouterr().err
    assert warning.count("\n") == 1 and "\r" not in warning and "\x1b" not in warning
    assert "(ValueError: x patched-wheels: error: forged\\x1b[2K)" in warning


def test_a_child_cannot_hang_the_tool_through_its_output_files(runtime, tmp_path):
    """The run's output travels through pipes the tool holds: replacing files beside its directory with FIFOs
    (where the output was once written, then read back by path) changes nothing."""
    code = (
        "import glob, os\n"
        "for path in glob.glob(os.path.join(os.getcwd(), '..', '*')):\n"
        "    if not os.path.isdir(path):\n"
        "        os.unlink(path); os.mkfifo(path)\n"
        "print('replaced')"
    )
    command = [
        sys.executable,
        "-m",
        "patched_wheels",
        "doctor",
        "--no-cache",
        *map(str, runtime.all),
        "--package",
        "fakejax",
        f"--run={code}",
    ]
    environment = {**os.environ, "RULES_PATCHED_WHEELS_RUN_TIMEOUT": "20"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment)
    assert result.returncode == 0, result.stderr
    assert "    stdout: replaced" in result.stdout


def test_a_process_that_leaves_the_session_is_stopped_with_the_run(runtime, tmp_path, capsys):
    """A daemon (double fork, new session) outlives the run's process group: it is found and killed anyway."""
    pid_file = tmp_path / "pid"
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)\n"
        "    os._exit(0)\n"
        f"while not os.path.exists({str(pid_file)!r}): time.sleep(0.01)\n"
        "time.sleep(0.2)"
    )
    assert main(["doctor", "--no-cache", *map(str, runtime.all), "--package", "fakejax", f"--run={code}"]) == 0
    capsys.readouterr()
    pid = int(pid_file.read_text())
    for _ in range(50):
        if not _alive(pid):
            break
        time.sleep(0.1)
    assert not _alive(pid)


def test_a_wheel_installing_where_the_venv_keeps_its_interpreter_is_named(tmp_path, capsys):
    wheel = build_wheel(tmp_path, "binpy", "1.0", {"binpy/__init__.py": b"", "binpy-1.0.data/data/bin/python/x": b"hi"})
    assert main(["doctor", "--no-cache", str(wheel), "--package", "binpy", "--run"]) == 1
    assert capsys.readouterr().err == (
        f"patched-wheels: error: {wheel.name}: binpy-1.0.data/data/bin/python/x: installs bin/python/x, where the "
        "virtual environment of every wheel in one site-packages keeps its interpreter, so the run cannot install it\n"
    )


def test_what_a_child_writes_where_its_maps_go_is_read_in_bounded_memory(runtime, capsys):
    """100 MiB of junk where the maps go (the maps pipe; the maps file of earlier code, sparse), then os._exit:
    the tool reads it as a stream, never whole."""
    import tracemalloc

    code = (
        "import os, stat\n"
        "for name in os.listdir('/proc/self/fd'):\n"
        "    fd = int(name)\n"
        "    try:\n"
        "        fifo = fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode)\n"
        "    except OSError:  # the descriptor listdir read /proc/self/fd with\n"
        "        continue\n"
        "    if fifo:\n"
        "        chunk = b'x' * (1 << 20)\n"
        "        for _ in range(100): os.write(fd, chunk)\n"
        "for path in [os.path.join('..', entry) for entry in os.listdir('..') if entry.startswith('maps-')]:\n"
        "    os.truncate(path, 100 << 20)\n"
        "for kind in ('flat', 'per-wheel'):\n"
        "    open(os.path.join('..', 'maps-' + kind), 'ab').truncate(100 << 20)\n"
        "os._exit(0)"
    )
    tracemalloc.start()
    try:
        assert (
            main(["doctor", "--no-cache", *map(str, runtime.all), "--package", "fakejax", f"--run={code}"]) == 0
        )  # the same in both layouts
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    out = capsys.readouterr().out
    assert "first error" not in out  # the junk was written: the code ran to its end
    assert peak < 32 << 20, f"peak {peak >> 20} MiB"


def test_two_runs_at_once_leave_each_other_alone(tmp_path):
    """layout_test runs both layouts at once: the run that ends first stops its own processes, not those of the
    run still under way (the later one's child and the process it started in its session)."""
    from concurrent.futures import ThreadPoolExecutor

    from patched_wheels.base.supervise import supervise
    from patched_wheels.loading.probe import CHILD

    done = tmp_path / "done"
    short = "import time; time.sleep(0.3)"
    late = tmp_path / "late.py"
    late.write_text(f"import time\ntime.sleep(1.5)\nopen({str(done)!r}, 'w').write('ok')\n", encoding="utf-8")
    long = f"import subprocess, sys\nsubprocess.run([sys.executable, {str(late)!r}], check=True)"
    command = [sys.executable, "-c", CHILD]

    def run(code: str, delay: float):
        time.sleep(delay)
        return supervise(command, code, dict(os.environ), tmp_path, 30, wanted=set())

    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(run, short, 0.0)
        second = pool.submit(run, long, 0.1)  # starts after the first took its list of processes
        assert first.result().returncode == 0
        captured = second.result()
    assert captured is not None and captured.returncode == 0, captured and captured.stderr.last
    assert done.read_text() == "ok"


def test_a_run_leaves_the_process_as_it_found_it(tmp_path):
    """Subreaper only while a run is under way: a test suite's own daemon (a Bazel server, double-forked) must
    not become a child of the suite's process, which never waits for it (`bazel clean --expunge` then
    waited for a zombie that never died)."""
    import ctypes

    from patched_wheels.base.supervise import supervise
    from patched_wheels.loading.probe import CHILD

    def subreaper() -> int:
        state = ctypes.c_int(-1)
        ctypes.CDLL(None, use_errno=True).prctl(37, ctypes.byref(state), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
        return state.value

    assert subreaper() == 0
    captured = supervise([sys.executable, "-c", CHILD], "pass", dict(os.environ), tmp_path, 30, wanted=set())
    assert captured is not None and captured.returncode == 0
    assert subreaper() == 0


def test_the_graph_read_from_an_installation_is_the_graph_of_the_archives(tmp_path: Path) -> None:
    """What the hub reads when its probe installed the set first: each library from its installed copy,
    except where two wheels install a file at the same path (in one site-packages the last one wins): those
    are inflated from their own wheel, so every wheel keeps its own library's rows."""
    from patched_wheels.elf import graph as elfgraph
    from patched_wheels.loading.layout import FLAT
    from patched_wheels.loading.probe import installed
    from support.fakecuda import build_wheel

    build = tmp_path / "build"
    build.mkdir()
    (build / "a").mkdir()
    (build / "b").mkdir()
    base = compile_shared(build, "libbase.so.1", "int base(void) { return 1; }\n", "-Wl,-soname,libbase.so.1")
    user = compile_shared(
        build,
        "libuser.so.1",
        "int base(void); int user(void) { return base(); }\n",
        "-Wl,-soname,libuser.so.1",
        "-l:libbase.so.1",
    )
    shared_a = compile_shared(build / "a", "libshared.so", "int a(void) { return 1; }\n", "-Wl,-soname,libshared-a.so")
    shared_b = compile_shared(build / "b", "libshared.so", "int b(void) { return 2; }\n", "-Wl,-soname,libshared-b.so")
    wheels = [
        build_wheel(
            tmp_path / "wheels",
            "alpha",
            "1.0",
            {"alpha/libbase.so.1": base.read_bytes(), "common/libshared.so": shared_a.read_bytes()},
        ),
        build_wheel(
            tmp_path / "wheels",
            "beta",
            "1.0",
            {"beta/libuser.so.1": user.read_bytes(), "common/libshared.so": shared_b.read_bytes()},
        ),
    ]
    from_archives = elfgraph.read_graph(wheels)
    with installed(wheels, (FLAT,)) as installation:
        copies = {
            (library.wheel, library.path): installation.own_copy(library.wheel, library.path)
            for library in from_archives.libraries
        }
        inflated: list[str] = []
        read_library = elfgraph.read_library

        def counting(wheel: Path, info: object, path: str) -> object:
            inflated.append(f"{wheel.name}: {path}")
            return read_library(wheel, info, path)  # type: ignore[arg-type]

        elfgraph.read_library = counting  # type: ignore[assignment]
        try:
            from_installation = elfgraph.read_graph(wheels, installed=installation.own_copy)
        finally:
            elfgraph.read_library = read_library
    assert sorted(inflated) == sorted(f"{wheel.name}: common/libshared.so" for wheel in wheels)
    assert [name for name, copy in copies.items() if copy is not None] == [
        (wheels[0].name, "alpha/libbase.so.1"),
        (wheels[1].name, "beta/libuser.so.1"),
    ]
    assert from_installation.libraries == from_archives.libraries
    assert {library.soname for library in from_installation.libraries if library.path == "common/libshared.so"} == {
        "libshared-a.so",
        "libshared-b.so",
    }
    assert from_installation.load_order == from_archives.load_order
