"""A kept observation (a cache file, a facts file's entry) is a claim: what the wheels can tell is derived or
checked before it is believed, and a probe that failed is never kept."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from patched_wheels.base.cache import CacheContext
from patched_wheels.cli import main
from patched_wheels.elf.graph import read_graph
from patched_wheels.loading import observe as observe_module
from patched_wheels.loading.observe import is_observed, observe
from support import stackshapes
from support.fakecuda import RUNTIME_LIBRARY_PATHS

PROBE = "import fakejax"
FOO, BAR, PMIX = (RUNTIME_LIBRARY_PATHS[name] for name in ("foo", "bar", "pmix"))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rows(runtime, *paths: str) -> list[list[str]]:
    wheel = {FOO: runtime.foo, BAR: runtime.bar, PMIX: runtime.bar}
    return sorted([_sha256(wheel[path]), path] for path in paths)


def _lies(runtime) -> dict[str, tuple[dict[str, object], str]]:
    """Edits of the genuine entry (libfoo and libbar mapped, nothing global, no extension module), each with what
    the warning says of it."""
    return {
        "the attacker's: a library no probe maps here, mapped and global": (
            {"mapped": _rows(runtime, FOO, BAR, PMIX), "global": _rows(runtime, PMIX)},
            f"its global list ({PMIX}), the mapped libraries' symbol tables give none",
        ),
        "a library mapped without what it needs": (
            {"mapped": _rows(runtime, FOO)},
            f"it lists {FOO} ({runtime.foo.name}) as mapped but not {BAR} ({runtime.bar.name}), which the loader maps "
            "for its DT_NEEDED libbar.so.1",
        ),
        "a library made global": (
            {"global": _rows(runtime, BAR)},
            f"its global list ({BAR}), the mapped libraries' symbol tables give none",
        ),
        "a library made an extension module": (
            {"extensions": _rows(runtime, FOO)},
            f"its extensions list ({FOO}), the mapped libraries' symbol tables give none",
        ),
        "a failed probe": (
            {"returncode": 1, "error": "AssertionError: no driver yet"},
            "its probe exited with status 1 (AssertionError: no driver yet); an observation of a failed probe is "
            "never kept",
        ),
    }


LIES = [  # the keys of _lies (which needs the wheels' digests)
    "the attacker's: a library no probe maps here, mapped and global",
    "a library mapped without what it needs",
    "a library made global",
    "a library made an extension module",
    "a failed probe",
]


def _graph(runtime, monkeypatch, symbols: bool):
    """The set's graph; with ``symbols``, holding the tables read in its pass, so nothing reads a member again."""
    graph = read_graph(runtime.all, symbols=symbols)
    if symbols:
        assert len(graph.symbols) == len(graph.libraries)
        monkeypatch.setattr(observe_module, "read_member_symbols", lambda *args: pytest.fail(f"read again: {args}"))
    return graph


TABLES = pytest.mark.parametrize("symbols", [False, True], ids=["tables read by the check", "tables of the graph"])


@TABLES
@pytest.mark.parametrize("lie", LIES)
def test_a_kept_observation_the_wheels_contradict_is_one_warning_and_the_probe_runs(
    runtime, cache_root, capsys, monkeypatch, lie, symbols
):
    graph = _graph(runtime, monkeypatch, symbols)
    genuine = observe(runtime.all, PROBE, graph, caches=CacheContext.from_environment())
    assert genuine is not None and genuine.mapped == {(runtime.foo.name, FOO), (runtime.bar.name, BAR)}
    (entry,) = cache_root.iterdir()
    value = json.loads(entry.read_text())
    assert value["global"] == [] and value["extensions"] == []
    edit, says = _lies(runtime)[lie]
    entry.write_text(json.dumps({**value, **edit}))
    runs = []
    run = observe_module._run

    def counted(refs, probe, graph, installation):
        runs.extend([] if installation is not None else [probe])  # _run calls itself once it installed the set
        return run(refs, probe, graph, installation)

    monkeypatch.setattr(observe_module, "_run", counted)
    capsys.readouterr()

    again = observe(runtime.all, PROBE, graph, caches=CacheContext.from_environment())
    assert again == genuine and again.source == "", "the probe's own observation, not the entry's"
    assert runs == [PROBE], "the probe ran again"
    assert capsys.readouterr().err == (
        f"patched-wheels: warning: {entry}: cache entry ignored ({says}); running the probe again\n"
    )
    assert json.loads(entry.read_text()) == value, "what the probe maps is kept in its place"


@TABLES
def test_a_kept_observation_the_wheels_agree_with_is_believed_and_named(
    runtime, cache_root, capsys, monkeypatch, symbols
):
    """The checks hold for what a run keeps: a warm read is silent, runs nothing, and says where it came from."""
    graph = _graph(runtime, monkeypatch, symbols)
    genuine = observe(runtime.all, PROBE, graph, caches=CacheContext.from_environment())
    (entry,) = cache_root.iterdir()
    monkeypatch.setattr(observe_module, "_run", lambda *args: pytest.fail("ran the probe"))
    capsys.readouterr()
    kept = observe(runtime.all, PROBE, graph, caches=CacheContext.from_environment())
    assert kept == genuine and kept.source == str(entry)
    assert capsys.readouterr().err == ""


def test_a_failed_probe_is_used_for_its_run_and_never_kept(runtime, cache_root, tmp_path, capsys):
    graph = read_graph(runtime.all)
    context = CacheContext.from_environment().recording({}, str(tmp_path / "wheel_facts.json"))
    failed = observe(runtime.all, "import fakejax; raise SystemExit(3)", graph, caches=context)
    assert failed is not None and failed.returncode == 3 and len(failed.mapped) == 2, "this run's preload uses it"
    assert "exits with status 3" in capsys.readouterr().err
    assert not cache_root.exists() or not list(cache_root.iterdir()), "not cached"
    assert context.recorded == {}, "not recorded into the hub's facts"
    digests = [_sha256(wheel) for wheel in runtime.all]
    assert not is_observed(digests, "import fakejax; raise SystemExit(3)", context)


def test_a_cached_entry_of_a_failed_probe_is_not_taken_for_an_observation(runtime, cache_root):
    """The hub asks before it installs the set for the probe: an entry of a failed probe (written by an earlier
    release) does not spare the installation."""
    graph = read_graph(runtime.all)
    observe(runtime.all, PROBE, graph, caches=CacheContext.from_environment())
    (entry,) = cache_root.iterdir()
    digests = [_sha256(wheel) for wheel in runtime.all]
    assert is_observed(digests, PROBE, CacheContext.from_environment())
    entry.write_text(json.dumps({**json.loads(entry.read_text()), "returncode": 1}))
    assert not is_observed(digests, PROBE, CacheContext.from_environment())


def _patch(runtime, out: Path, probe: str) -> list[str]:
    return [
        "patch",
        "--wheel",
        str(runtime.package),
        "--dest-dir",
        str(out),
        "--preload-for",
        "fakejax",
        "--preload-from",
        *map(str, runtime.all),
        "--probe",
        probe,
    ]


def _preload(out: Path) -> dict[str, object]:
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return json.loads(archive.read("fakejax/_patched_wheels_preload.json"))["preload"]


def test_a_transient_failure_of_the_probe_is_no_verdict_for_the_next_run(runtime, cache_root, tmp_path, capsys):
    """No driver yet, then a driver: the second run probes again and preloads what the probe maps."""
    flag = tmp_path / "driver"
    probe = f"import os; assert os.path.exists({str(flag)!r}), 'no driver yet'; import fakejax"
    assert main(_patch(runtime, tmp_path / "a", probe)) == 1
    error = capsys.readouterr().err
    assert (
        error.count("\n") == 1
        and (
            f"and {probe!r} maps none in one site-packages before it exits with status 1 (AssertionError: no driver yet)"
        )
        in error
    ), error
    flag.touch()
    assert main(_patch(runtime, tmp_path / "b", probe)) == 0
    assert _preload(tmp_path / "b")["libraries"] == [BAR, FOO]


def test_a_verdict_from_a_kept_observation_names_its_file(runtime, cache_root, tmp_path, capsys):
    probe = "import os"  # passes, maps nothing of the set
    assert main(_patch(runtime, tmp_path / "a", probe)) == 1
    first = capsys.readouterr().err
    assert f"and {probe!r} maps none in one site-packages; nothing to preload" in first, first
    (entry,) = cache_root.iterdir()
    assert main(_patch(runtime, tmp_path / "b", probe)) == 1
    second = capsys.readouterr().err
    assert f"and {probe!r} maps none in one site-packages (read from {entry}); nothing to preload" in second, second


def test_what_only_a_run_could_contradict_is_believed(runtime, cache_root, capsys, monkeypatch):
    """A library of the set listed as mapped that the probe does not map here -- libbar_pmix needs a system library
    this machine lacks, as an observation recorded on a GPU machine lists libraries that need its driver -- is
    believed (docs/caches-and-trust.md says so): it is preloaded RTLD_LOCAL and optional, skipped where it fails."""
    graph = read_graph(runtime.all)
    observe(runtime.all, PROBE, graph, caches=CacheContext.from_environment())
    (entry,) = cache_root.iterdir()
    value = json.loads(entry.read_text())
    entry.write_text(json.dumps({**value, "mapped": _rows(runtime, FOO, BAR, PMIX)}))
    monkeypatch.setattr(observe_module, "_run", lambda *args: pytest.fail("ran the probe"))
    capsys.readouterr()
    kept = observe(runtime.all, PROBE, graph, caches=CacheContext.from_environment())
    assert kept is not None and (runtime.bar.name, PMIX) in kept.mapped and not kept.needs_global
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("builder", "probe", "field", "derived"),
    [
        (stackshapes.build_symbol_stack, "import fakedup", "global", "glue"),
        (stackshapes.build_framework_stack, "import faketf", "extensions", "extension"),
    ],
)
def test_what_the_symbol_tables_give_is_read_from_the_wheels_as_a_run_reads_it_installed(
    tmp_path, monkeypatch, capsys, builder, probe, field, derived
):
    """A run reads the installed copies; the check reads the wheels' members: the same RTLD_GLOBAL library (an
    underlinked module's provider) and extension module (``PyInit_*``), so a genuine entry is believed; with that
    row dropped it is not."""
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(tmp_path / "cache"))
    stack = builder(tmp_path / "stack")
    graph = read_graph(stack.wheels)
    genuine = observe(stack.wheels, probe, graph, caches=CacheContext.from_environment())
    listed = genuine.needs_global if field == "global" else genuine.extensions
    assert {path for _, path in listed} == {stack.libraries[derived]}
    (entry,) = (tmp_path / "cache" / "observed").iterdir()
    capsys.readouterr()
    kept = observe(stack.wheels, probe, graph, caches=CacheContext.from_environment())
    assert kept == genuine and kept.source == str(entry) and capsys.readouterr().err == ""
    value = json.loads(entry.read_text())
    entry.write_text(json.dumps({**value, field: []}))
    assert observe(stack.wheels, probe, graph, caches=CacheContext.from_environment()) == genuine
    assert capsys.readouterr().err == (
        f"patched-wheels: warning: {entry}: cache entry ignored (its {field} list none, the mapped libraries' symbol "
        f"tables give ({stack.libraries[derived]})); running the probe again\n"
    )


def test_a_mapped_set_missing_what_it_needs_is_refused_only_where_nothing_outside_the_set_can_answer(tmp_path):
    """The closure check must hold for every genuine observation: the loader may answer a name from this machine's
    system libraries, or from a directory outside site-packages that a search path names; a search path it cannot
    follow lets every name through."""
    from patched_wheels.elf.graph import build_graph
    from patched_wheels.elf.read import ElfLibrary

    outside = tmp_path / "opt" / "lib"
    outside.mkdir(parents=True)
    (outside / "libdep.so.1").write_bytes(b"")

    def closure_problem(runpath: tuple[str, ...], needed: str = "libdep.so.1") -> str | None:
        user = ElfLibrary("u.whl", "u/lib/libuser.so", "libuser.so", (needed,), (), runpath)
        dep = ElfLibrary("d.whl", "d/lib/libdep.so.1", needed, (), (), ())
        return observe_module._unclosed([user], build_graph([user, dep]))

    assert closure_problem(("$ORIGIN/../../d/lib",)) == (
        "it lists u/lib/libuser.so (u.whl) as mapped but not d/lib/libdep.so.1 (d.whl), which the loader maps for "
        "its DT_NEEDED libdep.so.1"
    )
    assert closure_problem((str(outside),)) is None, "found where its RUNPATH points, outside the set"
    assert closure_problem(("$ORIGIN/../../../..",)) is None, "a search path leaving site-packages"
    assert closure_problem(("$LIB",)) is None, "a search path this cannot follow"
    assert closure_problem((), needed="libc.so.6") is None, "the system's copy (a set shipping libc.so.6)"


def test_doctor_checks_a_kept_observation_with_the_tables_its_graph_read(runtime, cache_root, capsys, monkeypatch):
    """``doctor --probe`` with the observation cached reads the mapped libraries' symbol tables in its graph's pass:
    the check reads no member again, and the verdict is the cold run's."""
    argv = ["doctor", *map(str, runtime.all), "--package", "fakejax", "--probe", PROBE]
    cold_status = main(argv)
    cold = capsys.readouterr()
    assert list(cache_root.iterdir()), "the probe's observation kept"
    monkeypatch.setattr(observe_module, "read_member_symbols", lambda *args: pytest.fail(f"read again: {args}"))
    monkeypatch.setattr(observe_module, "_run", lambda *args: pytest.fail("ran the probe"))
    assert main(argv) == cold_status
    warm = capsys.readouterr()
    assert (warm.out, warm.err) == (cold.out, cold.err) and "generated preload" in warm.out


def test_patch_checks_a_kept_observation_with_the_tables_its_graph_read(
    runtime, cache_root, tmp_path, capsys, monkeypatch
):
    """``patch --preload-for`` likewise: the second patch takes the kept observation, reads no member again, and
    writes the first one's bytes."""
    others = [str(wheel) for wheel in runtime.all if wheel != runtime.package]
    outputs = []
    for run in ("cold", "warm"):
        if run == "warm":
            monkeypatch.setattr(observe_module, "read_member_symbols", lambda *args: pytest.fail(f"read again: {args}"))
            monkeypatch.setattr(observe_module, "_run", lambda *args: pytest.fail("ran the probe"))
        dest = tmp_path / run
        argv = ["patch", "--wheel", str(runtime.package), "--suffix", "t.1", "--dest-dir", str(dest)]
        assert main([*argv, "--preload-for", "fakejax", "--preload-from", *others, "--probe", PROBE]) == 0
        (written,) = dest.iterdir()
        outputs.append(written.read_bytes())
    assert outputs[0] == outputs[1] and "_patched_wheels_preload" in str(outputs[0])
