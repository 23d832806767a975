"""A hub's ``wheel_facts``: what one build read from the wheels, given back to a build whose helper cache is empty."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import pytest

from patched_wheels.cli import main
from patched_wheels.elf import graph as elfgraph
from patched_wheels.errors import UsageError
from patched_wheels.hub.facts import facts_text, read_facts, write_facts
from patched_wheels.loading import observe, probe
from support import fakecuda
from support.hostile import make_special_file
from support.hubconfig import load_config, no_user_cache, write_config  # noqa: F401  (no_user_cache: autouse)

CALL = 'patched.index(name = "test")'


@pytest.fixture(scope="module")
def fake_set(tmp_path_factory: pytest.TempPathFactory) -> fakecuda.FakeCudaWheels:
    return fakecuda.build_fake_cuda_wheels(tmp_path_factory.mktemp("fakecuda"))


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of what a build reads from the wheels: libraries inflated or read installed, and probe installs."""
    counts = {"inflated": 0, "installed reads": 0, "installs": 0, "members read again": 0}
    read_member_symbols = observe.read_member_symbols
    read_library, read_installed_library, read_library_and_symbols, installed = (
        elfgraph.read_library,
        elfgraph.read_installed_library,
        elfgraph.read_library_and_symbols,
        probe.installed,
    )

    def inflating(*args: object, **kwargs: object) -> object:
        counts["inflated"] += 1
        return read_library(*args, **kwargs)  # type: ignore[arg-type]

    def reading_installed(*args: object, **kwargs: object) -> object:
        counts["installed reads"] += 1
        return read_installed_library(*args, **kwargs)  # type: ignore[arg-type]

    def with_symbols(*args: object, installed: Path | None, budget: object) -> object:
        counts["inflated" if installed is None else "installed reads"] += 1
        return read_library_and_symbols(*args, installed=installed, budget=budget)  # type: ignore[arg-type]

    def read_again(*args: object) -> object:
        counts["members read again"] += 1
        return read_member_symbols(*args)  # type: ignore[arg-type]

    def installing(*args: object, **kwargs: object) -> object:
        counts["installs"] += 1
        return installed(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(elfgraph, "read_library", inflating)
    monkeypatch.setattr(elfgraph, "read_installed_library", reading_installed)
    monkeypatch.setattr(elfgraph, "read_library_and_symbols", with_symbols)
    monkeypatch.setattr(observe, "read_member_symbols", read_again)
    monkeypatch.setattr(probe, "installed", installing)
    return counts


def patched(fake_set: fakecuda.FakeCudaWheels) -> list[tuple[Path, dict[str, object]]]:
    return [(fake_set.torch, {"name": "faketorch", "preload": "auto", "preload_package": "faketorch"})]


def build(
    tmp_path: Path,
    name: str,
    fake_set: fakecuda.FakeCudaWheels,
    *,
    cache: str,
    wheel_facts: Path | None = None,
    labels: dict[str, str] | None = None,
) -> Path:
    """One hub build (plan, fetch, build) in ``tmp_path/name`` with the helper cache ``cache``; its directory."""
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("RULES_PATCHED_WHEELS_CACHE", cache if cache == "off" else str(tmp_path / cache))
        config = write_config(
            tmp_path / name,
            list(fake_set.nvidia.values()),
            patched(fake_set),
            index_option="direct",
            rules_python_version="2.3.2",
            wheel_facts=wheel_facts,
            labels=labels,
        )
        assert main(["hub", "build", "--config", str(config)]) == 0
    return tmp_path / name


def served(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((directory / "index").glob("*.whl"))}


def test_a_runner_with_an_empty_cache_and_the_facts_installs_and_probes_nothing(
    tmp_path: Path, fake_set: fakecuda.FakeCudaWheels, work: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    first = build(tmp_path, "first", fake_set, cache="cache-a")
    assert work["installs"] == 1 and work["installed reads"] > 0, (
        "cold: the set installed for the probe, the graph read there"
    )
    facts = json.loads((first / "wheel_facts.json").read_text(encoding="utf-8"))
    kinds = sorted({name.split("/")[0] for name in facts["entries"]})
    assert kinds == ["elfgraph", "observed"], facts["entries"].keys()
    assert sum(name.startswith("elfgraph/") for name in facts["entries"]) == len(fake_set.nvidia) + 1, (
        "one entry per wheel of the set"
    )
    given = tmp_path / "workspace" / "wheel_facts.json"
    given.parent.mkdir()
    shutil.copyfile(first / "wheel_facts.json", given)
    capsys.readouterr()

    work.update(dict.fromkeys(work, 0))
    second = build(tmp_path, "second", fake_set, cache="cache-b", wheel_facts=given)
    assert work == {
        "inflated": len(fakecuda.LIBRARY_PATHS),
        "installed reads": 0,
        "installs": 0,
        "members read again": 0,
    }, "an empty cache: nothing installed nor probed, each library read once to check its row and the observation"
    assert len(list((second / "_wheels").glob("*.whl"))) == len(fake_set.nvidia), (
        "the wheels at hand, to check the facts against"
    )
    assert served(second) == served(first), "the same patched wheels"
    assert (second / "wheel_facts.json").read_bytes() == given.read_bytes(), (
        "the facts it would write are the ones given"
    )
    assert "patched-wheels: warning" not in capsys.readouterr().err
    assert "wheel_facts.json" in load_config(second / "_hub.json").facts_out.name  # type: ignore[union-attr]


def test_facts_that_no_longer_match_are_read_again_with_one_line_saying_what_to_copy(
    tmp_path: Path, fake_set: fakecuda.FakeCudaWheels, work: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """A lock bump or another interpreter leaves entries missing; a hand edit leaves one that lies. Each is
    computed again, the output stays the same, and one warning names the file to copy."""
    first = build(tmp_path, "first", fake_set, cache="cache-a")
    entries = json.loads((first / "wheel_facts.json").read_text(encoding="utf-8"))["entries"]
    (observed,) = [name for name in entries if name.startswith("observed/")]
    torch_rows = next(
        name
        for name, rows in entries.items()
        if name.startswith("elfgraph/") and any("faketorch" in row["path"] for row in rows)
    )
    stale = dict(entries)
    del stale[observed]  # the probe's observation missing: another interpreter
    stale["elfgraph/" + "0" * 64 + ".v4.json"] = []  # a wheel the lock no longer pins
    stale[torch_rows] = [
        *entries[torch_rows],
        {**entries[torch_rows][0], "path": "faketorch/lib/libinvented.so"},
    ]  # a lie
    given = tmp_path / "given.json"
    given.write_text(facts_text(stale), encoding="utf-8")
    capsys.readouterr()

    work.update(dict.fromkeys(work, 0))
    second = build(tmp_path, "second", fake_set, cache="cache-b", wheel_facts=given)
    assert work["installs"] == 1, "the probe ran again"
    assert served(second) == served(first)
    assert (second / "wheel_facts.json").read_bytes() == (first / "wheel_facts.json").read_bytes(), (
        "what was true is recorded"
    )
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("patched-wheels: warning")]
    stale_lines = [line for line in warnings if "wheel_facts" in line]
    assert len(stale_lines) == 1, warnings
    assert (
        f'{CALL}: wheel_facts = "{given}"' in stale_lines[0]
        and f"cp {second / 'wheel_facts.json'} {given}" in stale_lines[0]
    )
    assert "2 of its" in stale_lines[0] and "1 unused" in stale_lines[0], stale_lines[0]
    (lie,) = [line for line in warnings if "cache entry ignored" in line]
    assert lie.startswith(
        f"patched-wheels: warning: {given}: entry {torch_rows}: cache entry ignored (faketorch/lib/libinvented.so: "
    ), lie


def test_with_the_cache_off_the_facts_are_read_but_not_used(
    tmp_path: Path, fake_set: fakecuda.FakeCudaWheels, work: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    first = build(tmp_path, "first", fake_set, cache="cache-a")
    capsys.readouterr()
    work.update(dict.fromkeys(work, 0))
    label = "//third_party:wheel_facts.json"  # as the user wrote it (hub.bzl's request_labels)
    second = build(
        tmp_path, "second", fake_set, cache="off", wheel_facts=first / "wheel_facts.json", labels={"wheel_facts": label}
    )
    assert work["installs"] == 1, "off reads everything again"
    assert not (second / "wheel_facts.json").exists()
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "wheel_facts" in line]
    assert (
        line.startswith(f'patched-wheels: warning: {CALL}: wheel_facts = "{label}" is not used')
        and "RULES_PATCHED_WHEELS_CACHE=off" in line
    )


def _bad_facts(kind: str, path: Path) -> str:
    """Makes ``path`` a bad facts file of ``kind``; returns what the error line says."""
    good = {"format": "rules_patched_wheels wheel facts", "schema": 1, "entries": {}}
    if kind == "not json":
        path.write_text("{ this is not json", encoding="utf-8")
        return "not JSON"
    if kind == "not utf-8":
        path.write_bytes(b'{"format": "\xff"}')
        return "not UTF-8"
    if kind == "a lock":
        path.write_text('{"version": 1, "package": []}', encoding="utf-8")
        return 'no "format": "rules_patched_wheels wheel facts"'
    if kind == "another schema":
        path.write_text(json.dumps({**good, "schema": 99}), encoding="utf-8")
        return "wheel_facts.json: schema = 99: must be one of 1"
    if kind == "a hostile entry":
        path.write_text(json.dumps({**good, "entries": {"../../etc/passwd": 1}}), encoding="utf-8")
        return "is no elfgraph or observed entry"
    if kind == "nested":
        path.write_text(json.dumps(good)[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
        return "nested too deeply"
    if kind == "huge":
        with open(path, "wb") as file:
            file.truncate(65 << 20)
        return "larger than"
    make_special_file(kind, path)
    return "not a facts file we read"


@pytest.mark.parametrize(
    "kind",
    [
        "not json",
        "not utf-8",
        "a lock",
        "another schema",
        "a hostile entry",
        "nested",
        "huge",
        "fifo",
        "directory",
        "dev-zero-link",
    ],
)
def test_a_file_that_is_no_facts_file_is_one_error_line_before_anything_is_written(
    tmp_path: Path,
    fake_set: fakecuda.FakeCudaWheels,
    kind: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bad = tmp_path / "bad.json"
    expected = _bad_facts(kind, bad)
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(tmp_path / "cache"))
    config = write_config(
        tmp_path / "hub",
        list(fake_set.nvidia.values()),
        patched(fake_set),
        index_option="direct",
        rules_python_version="2.3.2",
    )
    raw = json.loads(config.read_text(encoding="utf-8"))
    raw["attributes"]["wheel_facts"] = str(bad)
    config.write_text(json.dumps(raw), encoding="utf-8")
    capsys.readouterr()
    assert main(["hub", "build", "--config", str(config)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith(f'patched-wheels: error: {CALL}: wheel_facts = "{bad}": '), error
    assert expected in error, error
    assert not (tmp_path / "hub" / "index").exists() and not (tmp_path / "hub" / "wheel_facts.json").exists()

    # The plan reads it first, before any download.
    request = json.loads((tmp_path / "hub" / "request.json").read_text(encoding="utf-8"))
    request["attributes"]["wheel_facts"] = str(bad)
    (tmp_path / "hub" / "request.json").write_text(json.dumps(request), encoding="utf-8")
    arguments = [
        "--request",
        str(tmp_path / "hub" / "request.json"),
        "--resolved",
        str(tmp_path / "hub" / "resolved.json"),
    ]
    assert main(["hub", "plan", *arguments, "--config-out", str(tmp_path / "out.json")]) == 1
    assert capsys.readouterr().err == error and not (tmp_path / "out.json").exists()


def _edited_rows(
    entries: dict[str, object], library: str, edit: Callable[[dict[str, object]], object]
) -> dict[str, object]:
    """``entries`` with ``edit`` applied to the rows of the entry that lists ``library`` (a path ending)."""
    name = next(
        name
        for name, rows in entries.items()
        if name.startswith("elfgraph/") and any(row["path"].endswith(library) for row in rows)  # type: ignore[attr-defined, index]
    )
    return {**entries, name: edit(entries[name])}  # type: ignore[arg-type]


def _with(library: str, **fields: object) -> Callable[[list[dict[str, object]]], list[dict[str, object]]]:
    """An edit of one library's row: ``fields`` replaced, its path kept (so its wheel's zip directory agrees)."""
    return lambda rows: [{**row, **fields} if str(row["path"]).endswith(library) else row for row in rows]


def _swap_rows(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """What two libraries of one wheel say, exchanged; each keeps its own path."""
    first, second = rows
    return [{**second, "path": first["path"]}, {**first, "path": second["path"]}]


def _lies(
    entries: dict[str, object], fake_set: fakecuda.FakeCudaWheels
) -> dict[str, tuple[dict[str, object], str, int]]:
    """Edited facts, each with what the warning about it says and how many entries lie (a warning each): every
    one disagrees with a wheel the hub holds."""
    rows_of = {name: rows for name, rows in entries.items() if name.startswith("elfgraph/")}
    blas = next(name for name, rows in rows_of.items() if any("libblas" in row["path"] for row in rows))  # type: ignore[index]
    sparse = next(name for name, rows in rows_of.items() if any("libsparse" in row["path"] for row in rows))  # type: ignore[index]
    blas_rows = rows_of[blas]
    assert isinstance(blas_rows, list)
    torch = fake_set.torch.name
    return {
        # One edited path: the preload would load evil/libpwdep.so.1 from the working directory on every import.
        "evil path": (
            {**entries, blas: [{**blas_rows[0], "path": "evil/libpwdep.so.1"}, *blas_rows[1:]]},
            "evil/libpwdep.so.1: no shared library of",
            1,
        ),
        "rows empty": ({**entries, blas: []}, "but no row lists it", 1),
        "swapped digests": ({**entries, blas: entries[sparse], sparse: entries[blas]}, "no shared library of", 2),
        # Issue 41: rows whose paths are right but whose dynamic sections are not the members'.
        "needs nothing": (
            _edited_rows(entries, "libfaketorch.so", _with("libfaketorch.so", needed=[])),
            f"faketorch/lib/libfaketorch.so: the row says needed (), {torch} says ('libsolver.so.12', 'libblas.so.12')",
            1,
        ),
        "swapped rows": (
            _edited_rows(entries, "libfaketorch.so", _swap_rows),
            f"faketorch/_core.so: the row says soname 'libfaketorch.so', {torch} says None",
            1,
        ),
        "other soname": (
            _edited_rows(entries, "libsolver.so.12", _with("libsolver.so.12", soname="libblas.so.12")),
            "fake_nvidia/solver/lib/libsolver.so.12: the row says soname 'libblas.so.12', "
            "fake_nvidia_solver-12.1.0-py3-none-linux_x86_64.whl says 'libsolver.so.12'",
            1,
        ),
        "other rpath": (
            _edited_rows(entries, "libfaketorch.so", _with("libfaketorch.so", rpath=["/tmp/evil"])),
            f"faketorch/lib/libfaketorch.so: the row says rpath ('/tmp/evil',), {torch} says ('$ORIGIN/../../",
            1,
        ),
    }


@pytest.mark.parametrize(
    "lie",
    ["evil path", "rows empty", "swapped digests", "needs nothing", "swapped rows", "other soname", "other rpath"],
)
def test_facts_that_disagree_with_a_wheel_are_one_warning_naming_both_and_the_wheel_is_read(
    tmp_path: Path, fake_set: fakecuda.FakeCudaWheels, capsys: pytest.CaptureFixture[str], lie: str
) -> None:
    """Facts are claims: each row is checked against the wheel it names by sha256 (the hub holds every wheel),
    its path against the zip directory and its SONAME, DT_NEEDED, RPATH and RUNPATH against the member's
    dynamic section, so an edited file changes no preload and loads nothing outside the set; the warning
    names the file and the wheel."""
    first = build(tmp_path, "first", fake_set, cache="cache-a")
    entries = json.loads((first / "wheel_facts.json").read_text(encoding="utf-8"))["entries"]
    edited, says, lying = _lies(entries, fake_set)[lie]
    given = tmp_path / "given.json"
    given.write_text(facts_text(edited), encoding="utf-8")
    capsys.readouterr()

    second = build(tmp_path, "second", fake_set, cache="cache-b", wheel_facts=given)
    assert served(second) == served(first), "the same patched wheels, the same preload, as with no facts"
    assert (second / "wheel_facts.json").read_bytes() == (first / "wheel_facts.json").read_bytes(), (
        "what is true is recorded"
    )
    warnings = [line for line in capsys.readouterr().err.splitlines() if "cache entry ignored" in line]
    assert len(warnings) == lying and all(
        line.startswith(f"patched-wheels: warning: {given}: entry elfgraph/") for line in warnings
    ), warnings
    assert says in warnings[0] and ".whl" in warnings[0], warnings


@pytest.mark.parametrize("schema", ["true", "1.0"])
def test_the_facts_schema_is_an_integer_not_a_bool_or_a_float(
    tmp_path: Path,
    fake_set: fakecuda.FakeCudaWheels,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    schema: str,
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"format": "rules_patched_wheels wheel facts", "schema": ' + schema + ', "entries": {}}', encoding="utf-8"
    )
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(tmp_path / "cache"))
    write_config(
        tmp_path / "hub",
        list(fake_set.nvidia.values()),
        patched(fake_set),
        index_option="direct",
        rules_python_version="2.3.2",
    )
    request = json.loads((tmp_path / "hub" / "request.json").read_text(encoding="utf-8"))
    request["attributes"]["wheel_facts"] = str(bad)
    (tmp_path / "hub" / "request.json").write_text(json.dumps(request), encoding="utf-8")
    capsys.readouterr()
    arguments = [
        "--request",
        str(tmp_path / "hub" / "request.json"),
        "--resolved",
        str(tmp_path / "hub" / "resolved.json"),
    ]
    assert main(["hub", "plan", *arguments, "--config-out", str(tmp_path / "out.json")]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"(wheel_facts.json: schema = {schema}: expected an integer)" in error, error


def test_a_facts_file_reads_back_as_written_and_refuses_a_key_it_does_not_declare(tmp_path: Path) -> None:
    entries = {"elfgraph/ab.json": {"rows": [["lib/a.so", 1, None]]}, "observed/cd.json": {"schema": 3}}
    write_facts(tmp_path / "facts.json", entries)
    assert read_facts(tmp_path / "facts.json", "hub") == entries
    document = json.loads((tmp_path / "facts.json").read_text(encoding="utf-8"))
    (tmp_path / "facts.json").write_text(json.dumps({**document, "written_by": "x"}), encoding="utf-8")
    with pytest.raises(UsageError, match=r"\(wheel_facts\.json: unknown keys \['written_by'\]\); copy @<hub>"):
        read_facts(tmp_path / "facts.json", "hub")
