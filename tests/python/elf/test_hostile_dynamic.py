"""Hostile dynamic sections: what one library's names may make the reader hold, what resolving them may cost,
and that every name the graph prints is escaped.

The libraries are hand-built (a 64-bit little-endian ELF file with one PT_LOAD and a PT_DYNAMIC, no sections):
gcc's linker would never write these shapes.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from patched_wheels.cli import main
from patched_wheels.elf import graph as elfgraph
from patched_wheels.elf import read as elfread
from patched_wheels.elf.graph import build_graph, is_vendored, read_graph
from patched_wheels.elf.order import order_key
from patched_wheels.elf.read import DT_NEEDED, DT_RPATH, DT_RUNPATH, DT_SONAME, ElfLibrary, parse_elf, read_dynamic
from patched_wheels.elf.symbols import NameBudget
from patched_wheels.errors import ElfError
from support.fakecuda import build_wheel

DT_STRTAB, DT_STRSZ = 5, 10
WHEEL = "bomb-1.0-py3-none-linux_x86_64.whl"
MEMBER = "bomb/libbomb.so"


def _elf(strtab: bytes, entries: list[tuple[int, int]]) -> bytes:
    """A shared library whose dynamic string table is ``strtab`` (at 4096, where a plain linker puts .dynstr, in
    the reader's kept first megabyte) and whose dynamic section holds ``entries`` (then DT_STRTAB, DT_STRSZ, DT_NULL)."""
    strtab_at = 4096
    dynamic_at = -(-(strtab_at + len(strtab)) // 16) * 16
    dynamic = b"".join(
        struct.pack("<qQ", tag, value)
        for tag, value in [*entries, (DT_STRTAB, strtab_at), (DT_STRSZ, len(strtab)), (0, 0)]
    )
    total = dynamic_at + len(dynamic)
    programs = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, total, total, 0x1000)
    programs += struct.pack("<IIQQQQQQ", 2, 6, dynamic_at, dynamic_at, dynamic_at, len(dynamic), len(dynamic), 8)
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, 0, 0, 64, 56, 2, 64, 0, 0)
    image = bytearray(total)
    image[: len(header)] = header
    image[64 : 64 + len(programs)] = programs
    image[strtab_at : strtab_at + len(strtab)] = strtab
    image[dynamic_at:total] = dynamic
    return bytes(image)


def _strings(*names: str) -> tuple[bytes, list[int]]:
    """A string table holding ``names``, and the offset of each."""
    table, offsets = b"\0", []
    for name in names:
        offsets.append(len(table))
        table += name.encode("latin-1") + b"\0"
    return table, offsets


def _one_error_line(tmp_path: Path, capsys, data: bytes, command: str = "graph") -> str:
    """Run ``command`` on a wheel shipping ``data`` as its library: it must fail with one error line, the wheel and
    the member named; that line is returned."""
    wheel = build_wheel(tmp_path, "bomb", "1.0", {MEMBER: data})
    assert main([command, *(["--no-cache"] if command == "doctor" else []), str(wheel)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert captured.err.startswith(f"patched-wheels: error: {WHEEL}: {MEMBER}: unsupported dynamic section ("), (
        captured.err
    )
    return captured.err


# --- 1. What one library's dynamic section may make us hold ---------------------------------------------------


@pytest.mark.parametrize("command", ["graph", "doctor"])
def test_many_long_strings_are_refused_at_the_string_budget(tmp_path, capsys, command):
    # Five 64 KiB runs of one byte (a 300-byte member): entries at distinct offsets of each run name a string of up to
    # 64 KiB apiece, which the reader kept (bytes, then a decoded copy) for every one of up to 65,000 entries.
    run = 1 << 16
    table = (b"A" * (run - 1) + b"\0") * 5
    entries = [(DT_NEEDED, block * run + step) for step in range(2) for block in range(5)]
    assert sum(run - 1 - offset % run for _, offset in entries) > elfread._MAX_NAME_BYTES  # the bound, just past it
    error = _one_error_line(tmp_path, capsys, _elf(table, entries), command)
    assert f"strings hold more than {elfread._MAX_NAME_BYTES} bytes)" in error


def test_an_edit_reads_no_more_strings_than_the_graph(tmp_path):
    run = 1 << 16
    data = _elf((b"A" * (run - 1) + b"\0") * 5, [(DT_RUNPATH, block * run) for block in range(5)])
    with pytest.raises(ElfError, match=r"^w\.whl: m\.so: unsupported dynamic section \(its DT_NEEDED"):
        read_dynamic(lambda: iter([data]), "w.whl: m.so")


def test_too_many_named_entries_are_refused(tmp_path, capsys):
    table, (offset,) = _strings("libx.so.1")
    entries = [(DT_NEEDED, offset)] * (elfread._MAX_NAMES + 1)
    error = _one_error_line(tmp_path, capsys, _elf(table, entries))
    assert f"({elfread._MAX_NAMES + 1} DT_NEEDED, DT_SONAME, DT_RPATH and DT_RUNPATH entries, more than" in error


@pytest.mark.parametrize("tag", [DT_RPATH, DT_RUNPATH])
def test_a_search_path_of_too_many_entries_is_refused(tmp_path, capsys, tag):
    # One 6 KB string of 2,000 entries named three times: 6,000 search path entries, each a string of its own.
    table, (offset,) = _strings("ab:" * 2000)
    error = _one_error_line(tmp_path, capsys, _elf(table, [(tag, offset)] * 3))
    assert f"hold more than {elfread._MAX_NAMES} search path entries)" in error


def test_a_library_inside_the_bounds_is_read_whole_and_repeats_share_their_strings():
    # A few hundred DT_NEEDED (libtorch_cuda.so's shape), one repeated, and a RUNPATH of a few hundred bytes: far
    # inside the bounds, read as it was; each repeated entry is the same string object, not a copy of its own.
    names = [f"libdep{index}.so.{index % 13}" for index in range(400)]
    runpath = ":".join(f"$ORIGIN/../../dep{index % 10}/lib" for index in range(12))  # two entries repeated
    table, offsets = _strings("libbomb.so.1", *names, runpath)
    soname, needed, search = offsets[0], offsets[1:-1], offsets[-1]
    entries = [(DT_SONAME, soname), *((DT_NEEDED, offset) for offset in needed), (DT_NEEDED, needed[0])]
    entries += [(DT_RUNPATH, search), (DT_RPATH, search)]
    library = parse_elf(_elf(table, entries), wheel=WHEEL, path=MEMBER)
    assert library == ElfLibrary(
        WHEEL, MEMBER, "libbomb.so.1", (*names, names[0]), tuple(runpath.split(":")), tuple(runpath.split(":"))
    )
    assert library.needed[0] is library.needed[-1]
    assert all(ours is theirs for ours, theirs in zip(library.rpath, library.runpath))
    assert library.runpath[0] is library.runpath[10] and library.runpath[1] is library.runpath[11]
    assert len(entries) * 10 < elfread._MAX_NAMES and len(table) * 10 < elfread._MAX_NAME_BYTES


def test_graph_command_reads_a_library_at_the_bounds(tmp_path, capsys):
    # Exactly at both bounds: accepted (the error is for more).
    per_string = elfread._MAX_NAME_BYTES // elfread._MAX_NAMES
    names = [f"n{index:0{per_string - 2}d}" for index in range(elfread._MAX_NAMES)]
    table, offsets = _strings(*names)
    assert len(table) - 1 == elfread._MAX_NAME_BYTES
    wheel = build_wheel(tmp_path, "bomb", "1.0", {MEMBER: _elf(table, [(DT_NEEDED, offset) for offset in offsets])})
    graph = read_graph([wheel])
    assert graph.libraries[0].needed == tuple(names)


# --- 2. Resolving DT_NEEDED: each distinct name once per library, candidates indexed once -------------------------


def _count_visits(monkeypatch) -> list[int]:
    """Counts the candidates the graph compares or orders (each a call of ElfLibrary.__eq__ or of the graph's order_key)."""
    visits = [0]
    equal, key = ElfLibrary.__eq__, elfgraph.order_key

    def counted_equal(self, other):
        visits[0] += 1
        return equal(self, other)

    def counted_key(library):
        visits[0] += 1
        return key(library)

    monkeypatch.setattr(ElfLibrary, "__eq__", counted_equal)
    monkeypatch.setattr(elfgraph, "order_key", counted_key)
    return visits


def test_libraries_sharing_a_soname_are_resolved_with_few_visits_each(monkeypatch):
    # 400 libraries of one SONAME, each needing it: the old graph scanned all 400 for each (160,000 visits).
    count = 400
    libraries = [
        ElfLibrary("w.whl", f"w/lib{index:04d}.so", "libx.so.1", ("libx.so.1",), (), ()) for index in range(count)
    ]
    visits = _count_visits(monkeypatch)
    graph = build_graph(libraries)
    assert visits[0] < 10 * count
    first, second = libraries[0], libraries[1]
    assert graph.providers[first] == {"libx.so.1": second}
    assert all(graph.providers[library] == {"libx.so.1": first} for library in libraries[1:])
    assert graph.load_order[0] == first and len(graph.cycles) == 1


def test_a_repeated_dt_needed_is_resolved_once(monkeypatch):
    # 20 libraries of one SONAME, each naming it 400 times: the old graph resolved every entry (160,000 visits).
    count, repeats = 20, 400
    libraries = [
        ElfLibrary("w.whl", f"w/lib{index:02d}.so", "libx.so.1", ("libx.so.1",) * repeats + ("libc.so.6",) * 3, (), ())
        for index in range(count)
    ]
    visits = _count_visits(monkeypatch)
    graph = build_graph(libraries)
    assert visits[0] < 10 * count
    assert all(graph.system[library] == ("libc.so.6",) * 3 for library in libraries)
    assert all(graph.dependencies[library] == (libraries[library == libraries[0]],) for library in libraries)


def _reference_pick(library, candidates):
    """The graph's resolution before it indexed its candidates, kept as the reference."""
    others = [candidate for candidate in candidates if candidate != library]
    same_wheel = [candidate for candidate in others if candidate.wheel == library.wheel]
    shared = [candidate for candidate in others if candidate.wheel != library.wheel and not is_vendored(candidate)]
    return min(same_wheel or shared, key=order_key) if same_wheel or shared else None


def _reference_resolution(libraries):
    by_soname, by_filename = {}, {}
    for library in libraries:
        if library.soname:
            by_soname.setdefault(library.soname, []).append(library)
        by_filename.setdefault(library.filename, []).append(library)
    providers, system = {}, {}
    for library in libraries:
        resolved = {}
        for name in library.needed:
            provider = _reference_pick(library, by_soname.get(name, ())) or _reference_pick(
                library, by_filename.get(name, ())
            )
            if provider is not None:
                resolved[name] = provider
        providers[library] = resolved
        system[library] = tuple(name for name in library.needed if name not in resolved)
    return providers, system


@pytest.mark.parametrize("seed", range(40))
def test_the_indexed_resolution_is_the_reference_one(seed):
    # Random sets: three wheels, vendored copies (pkg.libs/), SONAMEs and file names shared across and within wheels,
    # repeated and self-naming DT_NEEDED entries, rows equal to each other: providers, system names, edges and the
    # load order are those of the reference.
    chooser = random.Random(seed)
    names = ["liba.so.1", "libb.so.2", "libc.so", "libd.so.4", "libz.so.1"]
    libraries = []
    for index in range(chooser.randrange(1, 30)):
        wheel = chooser.choice(["a-1.0-py3-none-any.whl", "b-1.0-py3-none-any.whl", "c-1.0-py3-none-any.whl"])
        folder = chooser.choice(["pkg", "pkg.libs", "other/lib", "pkg.libs/sub"])
        filename = chooser.choice([*names, f"lib{index}.so"])
        soname = chooser.choice([None, "", *names])
        needed = tuple(chooser.choice([*names, "libc.so.6"]) for _ in range(chooser.randrange(0, 6)))
        libraries.append(ElfLibrary(wheel, f"{folder}/{filename}", soname, needed, (), ()))
        if chooser.random() < 0.1:
            libraries.append(libraries[-1])
    chooser.shuffle(libraries)
    providers, system = _reference_resolution(libraries)
    graph = build_graph(libraries)
    assert graph.providers == providers
    assert graph.system == system
    assert graph.dependencies == {library: tuple(dict.fromkeys(providers[library].values())) for library in libraries}


# --- 3. Names from the wheels are printed escaped ------------------------------------------------------------------

FORGED = "\npredicted, as is: every library loads with one directory per wheel\n\x1b[2K"


def test_graph_prints_names_from_the_wheel_escaped_on_their_lines(tmp_path, capsys):
    # A member path, a SONAME, a DT_NEEDED name and a RUNPATH holding a line break, ESC and a C1 control: printed raw,
    # they forged lines (a verdict, a library) and drove the terminal.
    evil_path = f"demo/x{FORGED}demo/y.so"
    table, (soname, missing, runpath) = _strings(
        f"libok.so{FORGED}", f"libmissing.so.1{FORGED}\x9b8m", f"$ORIGIN{FORGED}"
    )
    evil = _elf(table, [(DT_SONAME, soname), (DT_NEEDED, missing), (DT_RUNPATH, runpath)])
    table, (needed,) = _strings(f"libok.so{FORGED}")
    plain = _elf(table, [(DT_NEEDED, needed)])
    wheel = build_wheel(tmp_path, "demo", "1.0", {evil_path: evil, "demo/libplain.so": plain})
    assert main(["graph", str(wheel)]) == 0
    out = capsys.readouterr().out
    escaped = "\\npredicted, as is: every library loads with one directory per wheel\\n\\x1b[2K"
    library = f"demo/x{escaped}demo/y.so ({wheel.name})"
    assert out.splitlines() == [
        f"demo/libplain.so ({wheel.name})",
        f"  needs    {library}",
        library,
        f"  soname:  libok.so{escaped}",
        f"  runpath: $ORIGIN{escaped}",
        f"  needs    libmissing.so.1{escaped}\\x9b8m (system, not followed)",
        "load order (dependencies first):",
        f"  1. {library}",
        f"  2. demo/libplain.so ({wheel.name})",
    ]
    assert main(["graph", "--json", str(wheel)]) == 0  # JSON escapes them itself, as it did
    assert '"path": "demo/x\\npredicted' in capsys.readouterr().out


def test_graph_prints_printable_names_as_they_are(tmp_path, capsys):
    # What a terminal shows (non-ASCII letters included) is printed as it was: escaping changes no valid listing.
    table, (soname, needed) = _strings("libé.so.1", "libc.so.6")
    wheel = build_wheel(
        tmp_path, "demo", "1.0", {"demo/libé.so": _elf(table, [(DT_SONAME, soname), (DT_NEEDED, needed)])}
    )
    assert main(["graph", str(wheel)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"demo/libé.so ({wheel.name})",
        "  soname:  libé.so.1",
        "  needs    libc.so.6 (system, not followed)",
        "load order (dependencies first):",
        f"  1. demo/libé.so ({wheel.name})",
    ]


@pytest.mark.parametrize("symbols", [False, True], ids=["library", "library and symbols"])
def test_an_unreadable_library_s_error_is_kept_without_the_reader_s_frames(tmp_path, symbols):
    # The scan keeps one error per unreadable library until the graph is built: with its traceback it kept the
    # reader's tables (65,000 parsed dynamic entries apiece) alive for every one of them.
    table, (offset,) = _strings("libx.so.1")
    wheel = build_wheel(
        tmp_path, "bomb", "1.0", {MEMBER: _elf(table, [(DT_NEEDED, offset)] * (elfread._MAX_NAMES + 1))}
    )
    ((info, path),) = elfgraph.library_members(wheel)
    error, no_table = elfgraph._read_or_problem((wheel, info, path), None, NameBudget() if symbols else None)
    assert isinstance(error, ElfError) and error.__traceback__ is None and no_table is None


def test_hashing_a_library_reads_none_of_its_names():
    # The graph and doctor key dicts and sets by library; a hash over every field cost a pass over its (up to 4,096)
    # DT_NEEDED names at each lookup: doctor on 50 libraries of 4,000 entries took 13 s, nearly all of it hashing.
    hashed = [0]

    class Name(str):
        def __hash__(self) -> int:
            hashed[0] += 1
            return str.__hash__(self)

    library = ElfLibrary(WHEEL, MEMBER, Name("libbomb.so"), (Name("libx.so.1"),) * 1000, (Name("$ORIGIN"),), ())
    assert library in {library} and library in {library: 1} and hashed[0] == 0
    twin = ElfLibrary(WHEEL, MEMBER, "libbomb.so", ("libx.so.1",) * 1000, ("$ORIGIN",), ())
    assert twin == library and hash(twin) == hash(library)
    assert twin != ElfLibrary(WHEEL, MEMBER, "libbomb.so", (), (), ())  # equality still compares every field
