"""The generated preloader, end to end: real imports in flat and per-wheel layouts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from patched_wheels.base.cache import OFF, CacheContext
from patched_wheels.cli import main
from patched_wheels.elf.graph import WheelRef, read_graph
from patched_wheels.errors import InvalidWheelError, UsageError
from patched_wheels.loading.preload import (
    ElfOnly,
    PreloadPlan,
    PreloadRequest,
    Probe,
    plan_package_preload,
    plan_preload,
)
from patched_wheels.loading.preloadfiles import add_preload_import, read_installed_preload
from patched_wheels.loading.preloadmodule import (
    DEBUG_VARIABLE,
    PRELOAD_DATA,
    PRELOAD_MODULE,
    PreloadList,
    entry_problem,
    read_preload_data,
    render_preload_data,
    render_preload_module,
)
from patched_wheels.patch.surgery import PatchOptions, patch_wheel
from support.fakecuda import (
    EXPECTED_ANSWER,
    LIBRARY_PATHS,
    MISSING_SYSTEM_LIBRARY,
    RUNTIME_ANSWER,
    RUNTIME_CODE,
    RUNTIME_GLOB,
    RUNTIME_LIBRARY_PATHS,
    RUNTIME_PACKAGE,
    build_fake_cuda_wheels,
    compile_shared,
    flat_layout,
    per_wheel_layout,
    run_import,
    with_escaping_library,
)
from support.indexfixtures import sha256_of


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    return build_fake_cuda_wheels(tmp_path_factory.mktemp("fakecuda"))


@pytest.fixture(scope="module")
def preloaded_torch(wheels, tmp_path_factory):
    preload = plan_package_preload(PreloadRequest("faketorch"), wheels.all)
    return patch_wheel(
        wheels.torch, tmp_path_factory.mktemp("patched"), PatchOptions(suffix="pw.1", preload=preload)
    ).path


def _imports(result):
    return result.returncode == 0 and result.stdout.strip() == str(EXPECTED_ANSWER)


def test_per_wheel_layout_fails_without_preload_and_works_with_it(wheels, preloaded_torch, tmp_path):
    without = run_import(per_wheel_layout(wheels.all, tmp_path / "without"))
    assert without.returncode != 0
    assert "libjit.so.12: cannot open shared object file" in without.stderr
    with_preload = run_import(per_wheel_layout([*wheels.nvidia.values(), preloaded_torch], tmp_path / "with"))
    assert _imports(with_preload), with_preload.stderr


def test_flat_layout_works_with_and_without_preload(wheels, preloaded_torch, tmp_path):
    assert _imports(run_import(flat_layout(wheels.all, tmp_path / "without")))
    result = run_import(flat_layout([*wheels.nvidia.values(), preloaded_torch], tmp_path / "with"))
    assert _imports(result), result.stderr


def test_the_failure_is_the_preload_order(tmp_path):
    fixed = build_fake_cuda_wheels(tmp_path / "wheels", broken_order=False)
    result = run_import(per_wheel_layout(fixed.all, tmp_path / "site"))
    assert _imports(result), result.stderr


def test_generated_module_loads_foreign_libraries_dependencies_first(wheels, preloaded_torch):
    with zipfile.ZipFile(preloaded_torch) as archive:
        preload = read_preload_data(archive.read(f"faketorch/{PRELOAD_DATA}"), where="test")
        init = archive.read("faketorch/__init__.py").decode()
    libraries = preload.libraries
    assert preload.optional == frozenset()  # all needed through DT_NEEDED: a failure stays an error
    assert sorted(libraries) == sorted(LIBRARY_PATHS[name] for name in ("jit", "sparse", "solver", "blas"))
    assert libraries.index(LIBRARY_PATHS["jit"]) < libraries.index(LIBRARY_PATHS["sparse"])
    assert libraries.index(LIBRARY_PATHS["sparse"]) < libraries.index(LIBRARY_PATHS["solver"])
    docstring_end = init.index('"""', 3) + 3
    assert init[docstring_end:].lstrip("\n").startswith(f"from . import {PRELOAD_MODULE}")


def test_edits_need_the_package_and_something_to_preload(wheels):
    with pytest.raises(UsageError, match="nosuchpkg: no wheel in the set ships nosuchpkg/__init__.py"):
        plan_package_preload(PreloadRequest("nosuchpkg"), wheels.all)
    with pytest.raises(UsageError, match="faketorch needs no shared library from the other wheels"):
        plan_package_preload(PreloadRequest("faketorch"), [wheels.torch])


def test_generated_module_skips_absent_libraries_and_is_a_no_op_off_linux(tmp_path, wheels):
    sites = per_wheel_layout([wheels.nvidia["jit"]], tmp_path / "site")
    module = tmp_path / "probe.py"
    module.write_bytes(render_preload_module("probe", PreloadList(("no/such/libnothere.so.1", LIBRARY_PATHS["jit"]))))
    probe = (
        "import ctypes, sys\n"
        "loaded = []\n"
        "ctypes.CDLL = lambda path, mode=0: loaded.append(path)\n"
        "sys.platform = {platform!r}\n"
        "exec(compile(open({module!r}).read(), 'probe', 'exec'), {{}})\n"
        "print(loaded)\n"
    )
    for platform, expected in (("linux", [str(sites[0] / LIBRARY_PATHS["jit"])]), ("darwin", [])):
        result = subprocess.run(
            [sys.executable, "-c", probe.format(platform=platform, module=str(module))],
            env={"PYTHONPATH": str(sites[0])},
            capture_output=True,
            text=True,
            check=True,
        )
        assert result.stdout.strip() == repr(expected)


def test_import_goes_after_docstring_and_future_imports_and_only_once():
    source = b'"""Doc."""\nfrom __future__ import annotations\nimport os\n'
    edited = add_preload_import(source, where="pkg/__init__.py")
    lines = edited.decode().splitlines()
    assert lines[:2] == ['"""Doc."""', "from __future__ import annotations"]
    assert lines[2].startswith(f"from . import {PRELOAD_MODULE}")
    assert lines[3] == "import os"
    assert add_preload_import(edited, where="pkg/__init__.py") == edited
    compile(edited, "pkg/__init__.py", "exec")


def test_import_keeps_crlf_coding_cookie_and_handles_empty_files():
    source = b"# -*- coding: utf-8 -*-\r\nimport os\r\n"
    assert add_preload_import(source, where="x").split(b"\r\n")[:3] == [
        b"# -*- coding: utf-8 -*-",
        f"from . import {PRELOAD_MODULE}  # patched-wheels: load shared libraries from other wheels first".encode(),
        b"import os",
    ]
    assert add_preload_import(b"", where="x").startswith(f"from . import {PRELOAD_MODULE}".encode())


def test_import_into_broken_or_missing_init_is_an_error():
    with pytest.raises(InvalidWheelError, match="^pkg/__init__.py: cannot parse"):
        add_preload_import(b"def broken(:\n", where="pkg/__init__.py")
    with pytest.raises(InvalidWheelError, match="^pkg/__init__.py: missing"):
        add_preload_import(None, where="pkg/__init__.py")


_DATA = "w.whl: pkg/_patched_wheels_preload.json"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"X = 1\n", "Expecting value"),
        (b'{"format": "rules_patched_wheels.preload/1", "package": "pkg", "preload": {', "Expecting"),
        (b'{"format": "\xff"}', "'utf-8' codec can't decode byte 0xff"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b" " * (17 << 20), "bytes, more than the"),
        (b"[]", "_patched_wheels_preload.json: expected an object, got []"),
        (
            json.dumps({"format": "rules_patched_wheels.preload/2", "package": "pkg", "preload": {}}).encode(),
            'format = "rules_patched_wheels.preload/2": must be one of rules_patched_wheels.preload/1',
        ),
        (
            json.dumps(
                {**json.loads(render_preload_data("pkg", PreloadList(("a/liba.so",)))), "LIBRARIES": []}
            ).encode(),
            "unknown keys ['LIBRARIES']",
        ),
        (
            render_preload_data("pkg", PreloadList(("a/liba.so",))).replace(b'"libraries": [', b'"libraries": [1, '),
            "preload: libraries = [1",
        ),
        (
            render_preload_data("pkg", PreloadList(("a/liba.so",))).replace(
                b'"optional": []', b'"optional": ["b/libb.so"]'
            ),
            "optional is not a subset of libraries",
        ),
    ],
    ids=[
        "python",
        "truncated",
        "not-utf-8",
        "nested",
        "huge",
        "a-list",
        "another-format",
        "unknown-key",
        "wrong-type",
        "optional",
    ],
)
def test_data_that_is_not_what_patched_wheels_writes_is_one_error_naming_the_member(data: bytes, reason: str):
    with pytest.raises(InvalidWheelError) as caught:
        read_preload_data(data, where=_DATA)
    message = str(caught.value)
    assert message.startswith(f"{_DATA}: not patched-wheels preload data (") and reason in message, message
    assert "\n" not in message and len(message) < 500, message


def test_a_preload_module_with_no_data_beside_it_is_refused_and_never_parsed():
    """A wheel an older release patched holds the module alone: its source is not read back as data."""
    members = {"pkg/__init__.py": b"", f"pkg/{PRELOAD_MODULE}.py": render_preload_module("pkg", PreloadList())}
    with pytest.raises(InvalidWheelError, match=rf"^w\.whl: pkg/{PRELOAD_MODULE}\.py has no {PRELOAD_DATA} beside it"):
        read_installed_preload(members.get, "pkg/__init__.py", "w.whl")
    assert read_installed_preload({"pkg/__init__.py": b""}.get, "pkg/__init__.py", "w.whl") is None


@pytest.fixture(scope="module")
def preloaded_runtime(runtime, tmp_path_factory):
    preload = plan_package_preload(PreloadRequest(RUNTIME_PACKAGE, preload_wheels=[RUNTIME_GLOB]), runtime.all)
    return patch_wheel(
        runtime.package, tmp_path_factory.mktemp("patched"), PatchOptions(suffix="pw.1", preload=preload)
    ).path


def _runs(result):
    return result.returncode == 0 and result.stdout.strip() == str(RUNTIME_ANSWER)


def test_library_loaded_at_run_time_needs_preload_wheels_per_wheel_only(runtime, preloaded_runtime, tmp_path):
    with_preload = [runtime.foo, runtime.bar, preloaded_runtime]
    without = run_import(per_wheel_layout(runtime.all, tmp_path / "without"), RUNTIME_CODE)
    assert without.returncode != 0 and "libbar.so.1: cannot open shared object file" in without.stderr
    result = run_import(per_wheel_layout(with_preload, tmp_path / "with"), RUNTIME_CODE)
    assert _runs(result) and result.stderr == "", result.stderr
    for wheel_set, name in ((runtime.all, "flat-without"), (with_preload, "flat-with")):
        result = run_import(flat_layout(wheel_set, tmp_path / name), RUNTIME_CODE)
        assert _runs(result), (name, result.stderr)


def test_preload_wheels_are_optional_and_loaded_in_graph_order(runtime, preloaded_runtime):
    with zipfile.ZipFile(preloaded_runtime) as archive:
        preload = read_preload_data(archive.read(f"fakejax/{PRELOAD_DATA}"), where="test")
    assert set(preload.libraries) == set(RUNTIME_LIBRARY_PATHS.values()) == preload.optional
    assert preload.libraries.index(RUNTIME_LIBRARY_PATHS["bar"]) < preload.libraries.index(RUNTIME_LIBRARY_PATHS["foo"])


def test_a_failing_optional_library_is_skipped_and_reported_when_asked(
    runtime, preloaded_runtime, tmp_path, monkeypatch
):
    sites = per_wheel_layout([runtime.foo, runtime.bar, preloaded_runtime], tmp_path)
    monkeypatch.setenv(DEBUG_VARIABLE, "1")
    result = run_import(sites, RUNTIME_CODE)
    assert _runs(result), result.stderr
    skipped = [line for line in result.stderr.splitlines() if "skipped" in line]
    assert len(skipped) == 1, result.stderr
    assert skipped[0].startswith("patched-wheels preload: skipped ") and RUNTIME_LIBRARY_PATHS["pmix"] in skipped[0]
    assert f"{MISSING_SYSTEM_LIBRARY}: cannot open shared object file" in skipped[0]
    assert f"patched-wheels preload: loaded {sites[1] / RUNTIME_LIBRARY_PATHS['bar']}" in result.stderr


def test_a_failing_required_library_stays_an_error(runtime, tmp_path):
    sites = per_wheel_layout([runtime.bar], tmp_path / "site")
    module = tmp_path / "probe.py"
    for optional, fails in ((frozenset(), True), (frozenset({RUNTIME_LIBRARY_PATHS["pmix"]}), False)):
        module.write_bytes(render_preload_module("probe", PreloadList((RUNTIME_LIBRARY_PATHS["pmix"],), optional)))
        result = subprocess.run(
            [sys.executable, str(module)],
            env={"PYTHONPATH": str(sites[0])},
            capture_output=True,
            text=True,
            check=False,
        )
        assert (result.returncode != 0) == fails, result.stderr
        assert (f"OSError: {MISSING_SYSTEM_LIBRARY}: cannot open shared object file" in result.stderr) == fails


def test_globbed_libraries_the_package_needs_anyway_stay_required(wheels):
    graph = read_graph(wheels.all)
    plain = plan_preload(graph, "faketorch", wheels.torch.name)
    globbed = plan_preload(graph, "faketorch", wheels.torch.name, preload_wheels=["fake-nvidia-*", "faketorch"])
    assert globbed == PreloadPlan(plain.libraries, frozenset(), ("faketorch",))  # its own wheel is never globbed


def test_nothing_to_preload_without_a_probe_asks_for_the_wheels_not_for_a_probe(runtime):
    # preload = "elf" / --no-probe: no package code may run, so the hint names preload_wheels, and a probe only
    # together with preload = "auto" (the hub refuses a probe with "elf").
    with pytest.raises(UsageError) as error:
        plan_package_preload(PreloadRequest(RUNTIME_PACKAGE, mode=ElfOnly()), runtime.all)
    message = str(error.value)
    assert "fakejax requires fakert-bar, fakert-foo, which ship shared libraries" in message, message
    assert "no probe ran to see which" in message and "preload_wheels, --preload-wheels" in message, message
    assert "give a probe that makes it do so" not in message, message


def test_nothing_to_preload_is_an_error_with_a_hint_for_patch_and_a_warning_for_the_hub(runtime, capsys):
    # The probe maps nothing of the other wheels (fakejax opens them only when asked): nothing to preload.
    with pytest.raises(UsageError) as error:
        plan_package_preload(PreloadRequest(RUNTIME_PACKAGE, mode=Probe("pass")), runtime.all)
    message = str(error.value)
    assert message.startswith(
        f"{runtime.package.name}: fakejax needs no shared library from the other wheels given, and 'pass' maps none in one "
        "site-packages; nothing to preload"
    )
    assert "fakejax requires fakert-bar, fakert-foo, which ship shared libraries" in message and "\n" not in message
    assert "give a probe that makes it do so" in message and "fakert-*" not in message  # no list nobody checked
    assert plan_package_preload(PreloadRequest(RUNTIME_PACKAGE, mode=Probe("pass")), runtime.all, strict=False) is None
    assert capsys.readouterr().err == f"patched-wheels: warning: {message}\n"
    # Nothing required and nothing to hint at (a pure package without the wheels it requires): no edit, and only
    # the probe's failure in one site-packages is reported.
    assert plan_package_preload(PreloadRequest(RUNTIME_PACKAGE), [runtime.package], strict=False) is None
    assert capsys.readouterr().err == (
        "patched-wheels: warning: probe 'import fakejax' exits with status 1 in one site-packages (AttributeError: "
        "'NoneType' object has no attribute 'origin'); the preload includes what it mapped until then\n"
    )
    assert (
        plan_package_preload(PreloadRequest(RUNTIME_PACKAGE, mode=Probe("pass")), [runtime.package], strict=False)
        is None
    )
    assert capsys.readouterr().err == ""


def test_a_glob_matching_no_wheel_is_an_error_for_patch_and_a_warning_for_the_hub(runtime, capsys):
    message = f"{runtime.package.name}: preload wheels glob 'nvidia-*' matches no other wheel with shared libraries"
    with pytest.raises(UsageError, match=re.escape(message)):
        plan_package_preload(PreloadRequest(RUNTIME_PACKAGE, preload_wheels=["nvidia-*"]), runtime.all)
    assert (
        plan_package_preload(
            PreloadRequest(RUNTIME_PACKAGE, mode=Probe("pass"), preload_wheels=["nvidia-*"]),
            [runtime.package],
            strict=False,
        )
        is None
    )
    assert capsys.readouterr().err == f"patched-wheels: warning: {message}\n"


def test_patch_command_takes_preload_wheels(runtime, tmp_path, capsys):
    argv = ["patch", "--no-cache", "--wheel", str(runtime.package), "--dest-dir", str(tmp_path), "--suffix", "pw.1"]
    preload_from = ["--preload-from", str(runtime.foo), str(runtime.bar)]
    assert main([*argv, "--preload-for", RUNTIME_PACKAGE, *preload_from, "--probe", "import fakert_foo"]) == 1
    assert "'import fakert_foo' maps none in one site-packages; nothing to preload" in capsys.readouterr().err
    assert main([*argv, "--preload-for", RUNTIME_PACKAGE, *preload_from, "--preload-wheels", RUNTIME_GLOB]) == 0
    patched = Path(capsys.readouterr().out.splitlines()[0])
    with zipfile.ZipFile(patched) as archive:
        assert read_preload_data(archive.read(f"fakejax/{PRELOAD_DATA}"), where="test").optional
    assert main([*argv, "--preload-wheels", RUNTIME_GLOB]) == 1
    assert "--preload-wheels needs --preload-for" in capsys.readouterr().err


@pytest.mark.parametrize(
    "entries",
    [
        ("a/lib/liba.so", "b/lib/libb.so"),
        ("it's/lib/liba.so", "caf\u00e9/\u4e2d/libb.so"),
        ("a/\u200b/\n/libc.so", "q\"u'ote/libd.so"),
    ],
    ids=["plain", "quote-and-unicode", "escaped"],
)
def test_rendered_data_reads_back_as_the_value_it_was_rendered_from(entries):
    for preload in (
        PreloadList(entries, frozenset(entries[:1]), frozenset(entries[-1:])),
        PreloadList(entries),
        PreloadList(entries, global_=frozenset()),
    ):
        assert read_preload_data(render_preload_data("pkg", preload), where="x") == preload


def test_a_wheel_with_an_escaping_member_never_reaches_the_preload(wheels, tmp_path):
    with pytest.raises(InvalidWheelError) as caught:
        plan_package_preload(PreloadRequest("faketorch"), with_escaping_library(wheels, tmp_path))
    assert str(caught.value) == (
        f"{wheels.nvidia['jit'].name}: member '../../../../tmp/x/libjit.so.12': unsafe path (absolute, '..' or empty component)"
    )


@pytest.mark.parametrize("evil", ["../../../../../tmp/evil.so", "fakert_foo/lib/libevil.so"])
def test_a_poisoned_elf_cache_row_never_reaches_the_preload(runtime, tmp_path, capsys, monkeypatch, evil):
    """Issue 20's attack: the hub's scan fills the cache (each wheel by its sha256), a row is added to fakert-foo's
    entry, then the hub plans with the cache: the preload is what the wheels justify, and one warning names the
    cache file. An unsafe path fails the row check; a safe one that the wheel lacks fails the check against the
    wheel at hand. ``patch --preload-for``, given the files alone, never even looks at the entry."""
    caches = CacheContext(tmp_path / "cache")
    refs = [WheelRef(path.name, sha256_of(path), path) for path in runtime.all]
    read_graph(refs, caches=caches)
    (entry,) = (tmp_path / "cache" / "elfgraph").glob(f"{refs[runtime.all.index(runtime.foo)].sha256}.*.json")
    rows = json.loads(entry.read_text(encoding="utf-8"))
    poisoned_entry = json.dumps(
        [{"path": evil, "soname": "libevil.so", "needed": [], "rpath": [], "runpath": []}, *rows]
    )
    entry.write_text(poisoned_entry, encoding="utf-8")
    capsys.readouterr()

    def planned(caches: CacheContext) -> PreloadList:
        plan = plan_package_preload(
            PreloadRequest(RUNTIME_PACKAGE, ElfOnly(), wheel=runtime.package, preload_wheels=["fakert-foo"]),
            refs,
            caches=caches,
        )
        assert plan is not None
        return plan.entries

    poisoned = planned(caches)
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 1 and warnings[0].startswith(f"patched-wheels: warning: {entry}: cache entry ignored (")
    assert not any("evil" in path for path in poisoned.libraries)
    assert RUNTIME_LIBRARY_PATHS["foo"] in poisoned.libraries
    assert poisoned == planned(OFF)
    entry.write_text(poisoned_entry, encoding="utf-8")  # the plan rewrote it from the wheel

    def patched_preload(*options: str) -> PreloadList:
        dest = tmp_path / f"out{len(options)}"
        argv = ["patch", *options, "--wheel", str(runtime.package), "--dest-dir", str(dest), "--suffix", "p.1"]
        argv += ["--preload-for", RUNTIME_PACKAGE, "--preload-from", *map(str, runtime.all)]
        assert main([*argv, "--preload-wheels", "fakert-foo"]) == 0
        (wheel,) = dest.glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            return read_preload_data(archive.read(f"{RUNTIME_PACKAGE}/{PRELOAD_DATA}"), where="test")

    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(tmp_path / "cache"))
    assert patched_preload() == patched_preload("--no-cache")
    assert capsys.readouterr().err == "" and entry.read_text(encoding="utf-8") == poisoned_entry


def _announcing_library(directory: Path, name: str, says: str = "") -> Path:
    """A library whose constructor writes ``LOADED <says or name>`` on stdout: what the loader ran is visible."""
    said = says or name
    source = (
        "#include <unistd.h>\n"
        f'__attribute__((constructor)) static void announce(void) {{ write(1, "LOADED {said}\\n", {len(said) + 8}); }}\n'
    )
    directory.mkdir(parents=True, exist_ok=True)
    return compile_shared(directory, name, source, f"-Wl,-soname,{name}")


def _edited_module(package: str, entries: tuple[str, ...]) -> bytes:
    """A generated module whose LIBRARIES were edited after the fact: rendering refuses such entries itself."""
    module = render_preload_module(package, PreloadList(("placeholder/libplaceholder.so",)))
    edited = module.replace(
        b"    'placeholder/libplaceholder.so',\n", "".join(f"    {entry!r},\n" for entry in entries).encode(), 1
    )
    return edited.replace(
        b"GLOBAL = (\n    'placeholder/libplaceholder.so',\n)",
        b"GLOBAL = (\n" + b"".join(f"    {entry!r},\n".encode() for entry in entries) + b")",
    )


def test_the_generated_module_loads_nothing_outside_an_installed_wheel(tmp_path):
    """Hostile LIBRARIES entries (a module edited after the fact), links out of the sys.path entry, and a file in
    an entry that holds no installed wheel (the current directory) load nothing; a library inside the entry, and a
    tree of links to files at the same relative path (Bazel's runfiles), load."""
    outside = tmp_path / "outside"
    evil = _announcing_library(outside, "libevil.so")
    _announcing_library(tmp_path / "evil", "libpwdep.so.1")  # in the working directory: sys.path[0] of python -c
    site = tmp_path / "site"
    (site / "good-1.0.dist-info").mkdir(parents=True)
    _announcing_library(site / "good" / "lib", "libgood.so")
    _announcing_library(site / "good-1.0.data" / "data" / "lib", "libdata.so")
    (site / "filelink" / "lib").mkdir(parents=True)
    (site / "filelink" / "lib" / "libx.so").symlink_to(evil)  # a file link out of the entry
    (site / "dirlink").symlink_to(outside)  # a directory link out of the entry
    stored = _announcing_library(tmp_path / "store" / "runfiles" / "lib", "librunfiles.so")
    (site / "runfiles" / "lib").mkdir(parents=True)
    (site / "runfiles" / "lib" / "librunfiles.so").symlink_to(stored)  # the same relative path elsewhere
    hostile = (
        "../outside/libevil.so",
        str(evil),
        "good/../../outside/libevil.so",
        "good/lib/./../../../outside/libevil.so",
        "good-1.0.data/data/lib/libdata.so",
    )
    linked = ("filelink/lib/libx.so", "dirlink/libevil.so")
    entries = (*hostile, *linked, "evil/libpwdep.so.1", "good/lib/libgood.so", "runfiles/lib/librunfiles.so")
    module = site / "probe.py"
    module.write_bytes(_edited_module("probe", entries))

    result = subprocess.run(
        [sys.executable, "-s", "-c", "import probe"],
        env={"PYTHONPATH": str(site), DEBUG_VARIABLE: "1"},
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["LOADED libgood.so", "LOADED librunfiles.so"]
    refused = [line for line in result.stderr.splitlines() if "refused" in line]
    assert refused[: len(hostile)] == [
        f"patched-wheels preload: refused {entry!r}: not a relative path" for entry in hostile
    ]
    assert refused[len(hostile) : -1] == [
        f"patched-wheels preload: refused {site / entry}: a link out of {site}" for entry in linked
    ]
    assert (
        refused[-1]
        == f"patched-wheels preload: refused {os.curdir}/evil/libpwdep.so.1: {os.curdir} holds no installed wheel"
    )
    assert len(refused) == len(hostile) + len(linked) + 1, result.stderr


def test_a_file_named_like_a_dist_info_makes_no_entry_hold_installed_wheels(tmp_path):
    """Issue 52's look-alike: an empty file ``fake-1.0.dist-info`` beside a same-path library in the working
    directory (sys.path[0] of python -c) does not make it hold an installed wheel, nor does a link to such a file
    or a dangling link of that name: that library's constructor never runs, the installed one loads. A link to a
    *.dist-info directory counts, as importlib.metadata reads one through it."""
    work, site, linked = tmp_path / "work", tmp_path / "site", tmp_path / "linked"
    _announcing_library(work / "evil", "libpwdep.so.1", "attacker")
    (work / "fake-1.0.dist-info").write_bytes(b"")
    (site / "real-1.0.dist-info").mkdir(parents=True)
    _announcing_library(site / "evil", "libpwdep.so.1", "installed")
    _announcing_library(linked / "evil", "libpwdep.so.1", "linked")
    (linked / "file-1.0.dist-info").symlink_to(work / "fake-1.0.dist-info")
    (linked / "dangling-1.0.dist-info").symlink_to(tmp_path / "nowhere")
    (site / "probe.py").write_bytes(_edited_module("probe", ("evil/libpwdep.so.1",)))

    def loaded(*path: Path) -> tuple[list[str], list[str]]:
        result = subprocess.run(
            [sys.executable, "-s", "-c", "import probe"],
            env={"PYTHONPATH": os.pathsep.join(map(str, path))},
            cwd=str(work),
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines(), result.stderr.splitlines()

    stdout, stderr = loaded(linked, site)
    assert stdout == ["LOADED installed"]
    assert stderr == [
        f"patched-wheels preload: refused {os.curdir}/evil/libpwdep.so.1: {os.curdir} holds no installed wheel",
        f"patched-wheels preload: refused {linked}/evil/libpwdep.so.1: {linked} holds no installed wheel",
    ]
    (linked / "real-1.0.dist-info").symlink_to(site / "real-1.0.dist-info")
    assert loaded(linked, site) == (["LOADED linked"], stderr[:1])


def test_the_module_and_the_entry_rule_agree_on_what_a_relative_path_is():
    namespace: dict[str, object] = {}
    exec(render_preload_module("probe", PreloadList()).replace(b"\n_preload()\n", b"\n"), namespace)
    is_relative = namespace["_is_relative"]
    paths = [
        "a/b.so",
        "a",
        "../x.so",
        "a/../b.so",
        "/abs.so",
        "a\\b.so",
        "a/\0.so",
        "C:/x.so",
        "c:x.so",
        "a//b.so",
        "./a.so",
        "a/./b.so",
        "a/b/",
        "",
        ".",
        "..",
        "a:b/c.so",
        "a/b:c.so",
        "...",
        "a/..b.so",
        "top.so",
        "x-1.0.data/data/lib/a.so",
        "x-1.0.dist-info/a.so",
        "x.data",
        "a/x.data/b.so",
    ]
    library_only = "is not a shared library's name"
    assert [is_relative(path) for path in paths] == [entry_problem(path) in (None, library_only) for path in paths]
    assert is_relative("a/b.so") and not is_relative("../x.so") and not is_relative("x-1.0.data/data/lib/a.so")


@pytest.mark.parametrize(
    "entry",
    ["../../../../tmp/evil.so", "/abs/libx.so", "x-1.0.data/data/lib/libx.so", "x-1.0.dist-info/libx.so", "pkg/README"],
)
def test_a_preload_entry_that_is_no_library_path_in_site_packages_is_refused_when_rendered_and_read(entry):
    with pytest.raises(UsageError, match=rf"^probe: preload entry {re.escape(repr(entry))}: "):
        render_preload_module("probe", PreloadList(("ok/libok.so", entry)))
    with pytest.raises(UsageError, match=rf"^probe: preload entry {re.escape(repr(entry))}: "):
        render_preload_data("probe", PreloadList(("ok/libok.so", entry)))
    data = render_preload_data("probe", PreloadList(("ok/libok.so", "placeholder/libplaceholder.so")))
    edited = data.replace(b'"placeholder/libplaceholder.so"', json.dumps(entry).encode())
    with pytest.raises(InvalidWheelError, match=rf"^x: libraries entry {re.escape(repr(entry))} "):
        read_preload_data(edited, where="x")


@pytest.mark.parametrize(
    "body",
    [
        b"import os\n",
        b'"""Doc."""\nimport os\n',
        b"# -*- coding: utf-8 -*-\nimport os\n",
        b'#!/usr/bin/env python\n# coding=utf-8\n"""Doc."""\nimport os\n',
        b'"""Doc."""\nfrom __future__ import annotations\nfrom __future__ import division\nimport os\n',
        b"from __future__ import annotations\r\nimport os\r\n",
        b"",
        b'"""No newline at the end."""',
    ],
    ids=[
        "plain",
        "docstring",
        "cookie",
        "shebang-cookie-docstring",
        "future",
        "crlf-future",
        "empty",
        "no-final-newline",
    ],
)
def test_import_into_an_init_starting_with_a_utf8_bom_still_compiles(body):
    edited = add_preload_import(b"\xef\xbb\xbf" + body, where="pkg/__init__.py")
    assert edited.startswith(b"\xef\xbb\xbf") and edited.count(b"\xef\xbb\xbf") == 1
    compile(edited, "pkg/__init__.py", "exec")  # a misplaced BOM is "invalid non-printable character U+FEFF"
    assert edited[3:] == add_preload_import(body, where="pkg/__init__.py")  # the same place as without the BOM
    assert add_preload_import(edited, where="pkg/__init__.py") == edited
