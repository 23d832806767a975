"""The ELF graph of real gcc-built libraries packaged as wheels."""

from __future__ import annotations

import glob
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from patched_wheels.base.cache import CacheContext
from patched_wheels.cli import main
from patched_wheels.elf import cache as elfcache
from patched_wheels.elf import read as elfread
from patched_wheels.elf.graph import WheelRef, read_graph, scan_wheels
from patched_wheels.elf.graphtext import format_graph
from patched_wheels.elf.order import expand_origin
from patched_wheels.elf.read import parse_elf, read_library
from patched_wheels.errors import ElfError, InvalidWheelError, UsageError
from patched_wheels.loading.doctor import _finding_line, diagnose_graph
from patched_wheels.wheelfile import WheelReader
from support import wheelbuilder
from support.fakecuda import LIBRARY_PATHS, blob_library, build_fake_cuda_wheels, build_wheel, compile_shared, soname
from support.hostile import count_read_bytes, make_special_file
from support.indexfixtures import sha256_of
from support.rpathfixture import patchelf_binary

REAL_TORCH_DIR = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rules_patched_wheels" / "torch-2.1.0"
)
real_torch = pytest.mark.skipif(
    os.environ.get("RPW_REAL_TORCH") != "1", reason="set RPW_REAL_TORCH=1 (needs ~2.6 GB of wheels)"
)


def _ref(path: Path) -> WheelRef:
    """``path`` with its sha256, as the hub gives a wheel: the ELF cache's key (a wheel given by its file
    alone is read, never cached)."""
    return WheelRef(path.name, sha256_of(path), path)


def _refs(paths) -> list[WheelRef]:
    return [_ref(Path(path)) for path in paths]


def _cached(digests, caches):
    """The digests whose rows the cache's own files hold, valid (never facts laid over it)."""
    cache = elfcache.ElfCache(caches)
    return [digest for digest in digests if cache.load(digest, "", given=False) is not None]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    return build_fake_cuda_wheels(tmp_path_factory.mktemp("fakecuda"))


def _by_path(graph):
    return {library.path: library for library in graph.libraries}


def test_reads_soname_needed_and_search_paths_of_every_library(wheels):
    graph = read_graph(wheels.all)
    libraries = _by_path(graph)
    assert set(libraries) == set(LIBRARY_PATHS.values())
    for short_name, path in LIBRARY_PATHS.items():
        library = libraries[path]
        assert library.soname == soname(short_name)
        with zipfile.ZipFile(wheels.torch if path.startswith("faketorch/") else wheels.nvidia[short_name]) as archive:
            elf = ELFFile(io.BytesIO(archive.read(path)))
        tags = {tag.entry.d_tag: tag for tag in elf.get_section_by_name(".dynamic").iter_tags()}
        assert library.needed == tuple(
            tag.needed for tag in elf.get_section_by_name(".dynamic").iter_tags() if tag.entry.d_tag == "DT_NEEDED"
        )
        assert ":".join(library.runpath) == (tags["DT_RUNPATH"].runpath if "DT_RUNPATH" in tags else "")
        assert ":".join(library.rpath) == (tags["DT_RPATH"].rpath if "DT_RPATH" in tags else "")
    assert libraries[LIBRARY_PATHS["sparse"]].runpath == ("$ORIGIN", "$ORIGIN/../../jit/lib")
    assert libraries[LIBRARY_PATHS["faketorch"]].rpath[0] == "$ORIGIN/../../fake_nvidia/jit/lib"


def test_edges_resolve_by_soname_and_system_names_are_not_followed(wheels):
    graph = read_graph(wheels.all)
    libraries = _by_path(graph)

    def deps(name):
        return {library.path for library in graph.dependencies[libraries[LIBRARY_PATHS[name]]]}

    assert deps("jit") == set()
    assert deps("sparse") == {LIBRARY_PATHS["jit"]}
    assert deps("solver") == {LIBRARY_PATHS["sparse"]}
    assert deps("faketorch") == {LIBRARY_PATHS["solver"], LIBRARY_PATHS["blas"]}
    assert deps("core") == {LIBRARY_PATHS["faketorch"]}
    assert "libc.so.6" in graph.system[libraries[LIBRARY_PATHS["jit"]]]
    assert all(not name.startswith(("libjit", "libsparse")) for names in graph.system.values() for name in names)


def test_load_order_puts_every_library_after_its_dependencies_whatever_the_input_order(wheels):
    graph = read_graph(wheels.all)
    position = {library.path: index for index, library in enumerate(graph.load_order)}
    assert len(position) == len(graph.libraries)
    for library, dependencies in graph.dependencies.items():
        for dependency in dependencies:
            assert position[dependency.path] < position[library.path]
    assert position[LIBRARY_PATHS["jit"]] < position[LIBRARY_PATHS["sparse"]] < position[LIBRARY_PATHS["solver"]]
    reversed_graph = read_graph(list(reversed(wheels.all)), workers=1)
    assert [library.path for library in reversed_graph.load_order] == [library.path for library in graph.load_order]


def test_a_missing_provider_becomes_a_system_dependency(wheels):
    graph = read_graph([wheels.nvidia["sparse"], wheels.nvidia["solver"]])
    sparse = _by_path(graph)[LIBRARY_PATHS["sparse"]]
    assert "libjit.so.12" in graph.system[sparse]
    assert graph.dependencies[sparse] == ()


def test_non_elf_shared_library_is_an_error_naming_wheel_and_member(tmp_path):
    wheel = build_wheel(tmp_path, "broken", "1.0", {"broken/libfoo.so.1": b"INPUT(-lbar)\n"})
    with pytest.raises(
        ElfError, match=r"^broken-1\.0-py3-none-linux_x86_64\.whl: broken/libfoo\.so\.1: not an ELF file"
    ):
        read_graph([wheel])


@pytest.mark.parametrize("keep", [40, 0.5, -100])
def test_truncated_elf_is_an_error_naming_wheel_and_member(tmp_path, wheels, keep):
    with zipfile.ZipFile(wheels.nvidia["jit"]) as archive:
        data = archive.read(LIBRARY_PATHS["jit"])
    cut = int(len(data) * keep) if isinstance(keep, float) else keep
    wheel = build_wheel(tmp_path, "cut", "1.0", {"cut/libjit.so.12": data[:cut]})
    with pytest.raises(
        ElfError, match=r"^cut-1\.0-py3-none-linux_x86_64\.whl: cut/libjit\.so\.12: truncated or corrupt ELF"
    ):
        read_graph([wheel])


def test_unreadable_or_missing_wheels_are_clear_errors(tmp_path):
    with pytest.raises(UsageError, match="nothere.whl: no such wheel"):
        read_graph([tmp_path / "nothere.whl"])
    (tmp_path / "junk-1.0-py3-none-any.whl").write_bytes(b"not a zip")
    with pytest.raises(InvalidWheelError, match="junk-1.0-py3-none-any.whl: not a zip archive or truncated"):
        read_graph([tmp_path / "junk-1.0-py3-none-any.whl"])


def test_members_are_read_only_from_a_wheel_we_accept(tmp_path, wheels):
    """The path checks of ``patch`` hold for the graph too: an escaping member never reaches a preload."""
    with zipfile.ZipFile(wheels.nvidia["jit"]) as archive:
        data = archive.read(LIBRARY_PATHS["jit"])
    wheel = build_wheel(tmp_path, "evil", "1.0", {"evil/__init__.py": b""})
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("../../../../tmp/x/libmid.so.1", data)
    with pytest.raises(InvalidWheelError) as error:
        read_graph([wheel])
    assert (
        str(error.value)
        == f"{wheel.name}: member '../../../../tmp/x/libmid.so.1': unsafe path (absolute, '..' or empty component)"
    )


def test_a_shared_library_that_is_only_an_elf_magic_is_one_error(tmp_path):
    wheel = build_wheel(tmp_path, "magic", "1.0", {"magic/libm.so": b"\x7fELF"})
    with pytest.raises(
        ElfError, match=r"^magic-1\.0-py3-none-linux_x86_64\.whl: magic/libm\.so: truncated or corrupt ELF"
    ):
        read_graph([wheel])


def test_platlib_members_are_keyed_by_install_path_and_stored_members_are_read(tmp_path, wheels):
    with zipfile.ZipFile(wheels.nvidia["jit"]) as archive:
        data = archive.read(LIBRARY_PATHS["jit"])
    wheel = build_wheel(
        tmp_path,
        "plat",
        "1.0",
        {"plat-1.0.data/platlib/plat/libjit.so.12": data, "plat-1.0.data/scripts/libx.so": b"x"},
    )
    stored = wheelbuilder.build_wheel(
        tmp_path, "stored", "1.0", {"stored/libjit.so.12": data}, compression=zipfile.ZIP_STORED
    )
    libraries = scan_wheels([wheel, stored]).libraries
    assert [(library.path, library.soname) for library in libraries] == [
        ("plat/libjit.so.12", "libjit.so.12"),
        ("stored/libjit.so.12", "libjit.so.12"),
    ]


def _big_library(directory: Path, name: str, *, patch_rpath: bool) -> Path:
    """A library whose .dynamic lies beyond the first MiB, optionally patchelf'd (dynstr moved to the end)."""
    library = blob_library(directory, name, 3 << 20, "-Wl,-rpath,$ORIGIN", "-Wl,--no-as-needed", "-lm")
    if patch_rpath:
        long_path = ":".join(f"$ORIGIN/../../nvidia/lib{index}/lib" for index in range(40))
        subprocess.run([patchelf_binary(), "--set-rpath", long_path, str(library)], check=True)
    return library


@pytest.mark.parametrize("patch_rpath", [False, True])
def test_streamed_read_of_a_large_member_equals_a_full_parse(tmp_path, monkeypatch, patch_rpath):
    library = _big_library(tmp_path, "libbig.so", patch_rpath=patch_rpath)
    data = library.read_bytes()
    assert len(data) > 3 << 20
    wheel = build_wheel(tmp_path, "big", "1.0", {"big/libbig.so": data})
    with WheelReader(wheel) as reader:
        info = reader.info("big/libbig.so")
    passes = _count_passes(monkeypatch)
    streamed = read_library(wheel, info, "big/libbig.so")
    assert passes == [1]  # the first streamed pass alone answers
    assert streamed == parse_elf(data, wheel=wheel.name, path="big/libbig.so")
    assert "libm.so.6" in streamed.needed
    assert len(streamed.search_path) == (40 if patch_rpath else 1)


def test_corrupt_large_member_fails_from_the_streamed_pass_alone(tmp_path, monkeypatch):
    data = _big_library(tmp_path, "libbig.so", patch_rpath=False).read_bytes()
    wheel = build_wheel(tmp_path, "cut", "1.0", {"cut/libbig.so": data[: len(data) * 2 // 3]})
    with WheelReader(wheel) as reader:
        info = reader.info("cut/libbig.so")
    passes = _count_passes(monkeypatch)
    with pytest.raises(
        ElfError, match=r"^cut-1\.0-py3-none-linux_x86_64\.whl: cut/libbig\.so: truncated or corrupt ELF"
    ):
        read_library(wheel, info, "cut/libbig.so")
    assert passes == [1]  # a corrupt member is not inflated a second time


def test_a_read_behind_the_stream_and_past_the_kept_head_streams_again(tmp_path, monkeypatch):
    """With no head kept, the string table (before PT_DYNAMIC) costs a second pass; with too few passes
    allowed, the member is refused rather than held."""
    data = _big_library(tmp_path, "libbig.so", patch_rpath=False).read_bytes()  # 3 MiB: more than one inflated piece
    wheel = build_wheel(tmp_path, "big", "1.0", {"big/libbig.so": data})
    with WheelReader(wheel) as reader:
        info = reader.info("big/libbig.so")
    monkeypatch.setattr(elfread, "_HEAD_SIZE", 0)
    passes = _count_passes(monkeypatch)
    assert read_library(wheel, info, "big/libbig.so") == parse_elf(data, wheel=wheel.name, path="big/libbig.so")
    assert passes == [2]
    monkeypatch.setattr(elfread, "_MAX_PASSES", 1)
    with pytest.raises(
        ElfError, match=r"big/libbig\.so: a dynamic string is out of file order too often to be read as a stream"
    ):
        read_library(wheel, info, "big/libbig.so")


def _count_passes(monkeypatch) -> list[int]:
    """Count the streamed passes of read_library (one inflate of the member each)."""
    passes = [0]
    real = elfread.inflated_chunks

    def counting(*args):
        passes[0] += 1
        return real(*args)

    monkeypatch.setattr(elfread, "inflated_chunks", counting)
    return passes


def test_cached_rows_of_a_wheel_at_hand_are_believed_once_its_members_say_the_same(tmp_path, wheels, capsys):
    """A row is a claim about what gets loaded: with the wheel at hand it is read all the same (issue 41), and
    the entry is believed, neither warned about nor rewritten, when it says what the members do."""
    cache = tmp_path / "cache" / "elfgraph"
    first = scan_wheels(_refs(wheels.all), caches=CacheContext(cache.parent))
    assert first.inflated_bytes > 0 and first.cached_wheels == 0
    written = {entry: entry.stat().st_mtime_ns for entry in cache.iterdir()}
    second = scan_wheels(_refs(wheels.all), caches=CacheContext(cache.parent))
    assert second.libraries == first.libraries
    assert (second.inflated_bytes, second.cached_wheels) == (first.inflated_bytes, len(wheels.all))
    assert {entry: entry.stat().st_mtime_ns for entry in cache.iterdir()} == written
    assert capsys.readouterr().err == ""
    changed = tmp_path / "changed" / wheels.torch.name
    changed.parent.mkdir()
    shutil.copyfile(wheels.torch, changed)
    with zipfile.ZipFile(changed, "a") as archive:
        archive.comment = b"other bytes, same members"
    third = scan_wheels(_refs([*wheels.nvidia.values(), changed]), caches=CacheContext(cache.parent))
    assert third.cached_wheels == len(wheels.all) - 1 and third.libraries == first.libraries


def _lying_entry(tmp_path: Path, wheel: Path) -> Path:
    """A cache root whose entry for ``wheel``'s sha256 lists a library the wheel does not ship (believed, it
    would be an edge of every preload): a scan that keys ``wheel`` by its sha256 warns about it and rewrites it."""
    root = tmp_path / "cache"
    scan_wheels([_ref(wheel)], caches=CacheContext(root))
    _poison(root / "elfgraph", wheel, lambda rows: [*rows, _row(path="faketorch/lib/libevil.so", needed=[])])
    return root


def test_a_wheel_given_by_its_file_alone_is_read_and_never_cached(tmp_path, wheels, capsys):
    """Its rows would be checked against its members all the same (issue 43): a key would cost a pass over the
    file and spare nothing, so the cache is neither read (a lying entry for its sha256 goes unseen) nor written."""
    root = _lying_entry(tmp_path, wheels.torch)
    before = {entry: entry.read_bytes() for entry in (root / "elfgraph").iterdir()}
    capsys.readouterr()
    scan = scan_wheels(wheels.all, caches=CacheContext(root))
    assert scan.cached_wheels == 0 and scan.libraries == scan_wheels(wheels.all).libraries
    assert capsys.readouterr().err == ""
    assert {entry: entry.read_bytes() for entry in (root / "elfgraph").iterdir()} == before


def test_a_cache_hit_needs_no_file_and_reports_the_name_it_is_given(tmp_path, wheels):
    """Rows hold no file name: the hub names a wheel it did not fetch by its sha256, under any file name."""
    cache = tmp_path / "cache" / "elfgraph"
    first = scan_wheels(_refs(wheels.all), caches=CacheContext(cache.parent))
    renamed = "faketorch-2.1.0-py3-none-manylinux_2_17_x86_64.whl"
    refs = [WheelRef(path.name, sha256_of(path)) for path in wheels.nvidia.values()] + [
        WheelRef(renamed, sha256_of(wheels.torch))
    ]
    second = scan_wheels(refs, caches=CacheContext(cache.parent))
    assert (second.inflated_bytes, second.cached_wheels) == (0, len(wheels.all))
    torch_rows = [library for library in second.libraries if library.wheel == renamed]
    assert torch_rows == [
        replace(library, wheel=renamed) for library in first.libraries if library.wheel == wheels.torch.name
    ]
    assert _cached([sha256_of(wheels.torch), "0" * 64], CacheContext(cache.parent)) == [sha256_of(wheels.torch)]
    with pytest.raises(
        UsageError, match=rf"^{renamed}: no file given, and no ELF rows are cached for its sha256 {'0' * 64}$"
    ):
        scan_wheels([WheelRef(renamed, "0" * 64)], caches=CacheContext(cache.parent))
    with pytest.raises(UsageError, match=r"named other-1\.0-py3-none-any\.whl in the wheel set"):
        WheelRef("other-1.0-py3-none-any.whl", path=wheels.torch)


@pytest.mark.parametrize("entry", [b"{not json", b'[{"path": 1}]', b'[{"wheel": "x.whl", "path": "a.so"}]', b"{}"])
def test_a_corrupt_cache_entry_is_read_again_and_rewritten(tmp_path, wheels, entry):
    cache = tmp_path / "cache" / "elfgraph"
    first = scan_wheels([_ref(wheels.torch)], caches=CacheContext(cache.parent))
    (stored,) = cache.iterdir()
    assert stored.name == f"{sha256_of(wheels.torch)}.v{elfcache.CACHE_SCHEMA}.json"
    assert "wheel" not in json.loads(stored.read_text(encoding="utf-8"))[0]
    stored.write_bytes(entry)
    assert _cached([sha256_of(wheels.torch)], CacheContext(cache.parent)) == []
    again = scan_wheels([_ref(wheels.torch)], caches=CacheContext(cache.parent))
    assert again.cached_wheels == 0 and again.inflated_bytes > 0 and again.libraries == first.libraries
    assert scan_wheels([_ref(wheels.torch)], caches=CacheContext(cache.parent)).cached_wheels == 1, (
        "the entry was rewritten"
    )


def test_an_unwritable_cache_costs_a_read_not_the_command(tmp_path, wheels):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory", encoding="utf-8")
    assert scan_wheels(_refs(wheels.all), caches=CacheContext(blocker)).libraries == scan_wheels(wheels.all).libraries


def test_graph_command_prints_libraries_and_load_order(wheels, capsys):
    assert main(["graph", *map(str, wheels.all)]) == 0
    out = capsys.readouterr().out
    order = out.split("load order (dependencies first):\n")[1].splitlines()
    assert len(order) == len(LIBRARY_PATHS)
    names = [line.split(". ", 1)[1].split(" ")[0] for line in order]
    assert names.index(LIBRARY_PATHS["jit"]) < names.index(LIBRARY_PATHS["sparse"])
    assert "libc.so.6 (system, not followed)" in out
    assert main(["graph", "--json", *map(str, wheels.all)]) == 0
    assert '"load_order"' in capsys.readouterr().out


def test_graph_command_reports_a_bad_member_on_one_line(tmp_path, capsys):
    wheel = build_wheel(tmp_path, "broken", "1.0", {"broken/libfoo.so": b"garbage"})
    assert main(["graph", str(wheel)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "patched-wheels: error: broken-1.0-py3-none-linux_x86_64.whl: broken/libfoo.so"
    )


@real_torch
def test_real_torch_order_loads_nvjitlink_before_cusparse_and_cusolver():
    wheels = sorted(
        glob.glob(str(REAL_TORCH_DIR / "torch-2.1.0-cp311-*.whl")) + glob.glob(str(REAL_TORCH_DIR / "nvidia_*.whl"))
    )
    if len(wheels) < 13:
        pytest.skip(
            f"torch 2.1.0 + 12 nvidia wheels not in {REAL_TORCH_DIR}; run `python -m benchmarks.bench_graph` once"
        )
    graph = read_graph(wheels)
    order = [library.filename for library in graph.load_order]
    assert order.index("libnvJitLink.so.12") < order.index("libcusparse.so.12") < order.index("libcusolver.so.11")
    assert order.index("libcusolver.so.11") < order.index("libtorch_cuda_linalg.so")


@pytest.mark.parametrize(
    ("entry", "expanded"),
    [
        ("$ORIGIN", "/w/torch/lib"),
        ("$ORIGIN/../../nvidia/cublas/lib", "/w/nvidia/cublas/lib"),
        ("${ORIGIN}/../x", "/w/torch/x"),
        ("$ORIGIN.d", "/w/torch/lib.d"),
        ("/opt/$ORIGIN/x", "/opt/w/torch/lib/x"),
        ("$ORIGINAL/lib", "$ORIGINAL/lib"),
        ("$ORIGIN_2/lib", "$ORIGIN_2/lib"),
    ],
)
def test_expand_origin_follows_the_dynamic_loader(entry, expanded):
    assert expand_origin(entry, "/w/torch/lib") == expanded


# --- the cache is an input: rows validated like wheel members, checked against the wheel at hand -----


def _row(**changes):
    row = {
        "path": "pkg/lib/libx.so.1",
        "soname": "libx.so.1",
        "needed": ["libc.so.6"],
        "rpath": [],
        "runpath": ["$ORIGIN"],
    }
    row.update(changes)
    return row


@pytest.mark.parametrize(
    ("rows", "problem"),
    [
        ({"path": "a.so"}, "not a list of rows"),
        ([_row()] * 2, "row 2: a path listed twice"),
        ([_row(), {**_row(), "wheel": "x.whl"}], "row 2: not an object with exactly the keys"),
        ([{k: v for k, v in _row().items() if k != "soname"}], "row 1: not an object with exactly the keys"),
        ([["pkg/lib/libx.so.1"]], "row 1: not an object"),
        ([_row(path=7)], "row 1: path is not a string"),
        (
            [_row(path="../../../../../tmp/evil.so")],
            "row 1: path '../../../../../tmp/evil.so' is not a safe relative path",
        ),
        ([_row(path="/tmp/evil.so")], "is not a safe relative path"),
        ([_row(path="pkg\\..\\evil.so")], "is not a safe relative path"),
        ([_row(path="pkg/./libx.so")], "is not a safe relative path"),
        ([_row(path="pkg//libx.so")], "is not a safe relative path"),
        ([_row(path="pkg/lib\0x.so")], "is not a safe relative path"),
        ([_row(path="C:/evil.so")], "is not a safe relative path"),
        ([_row(path="pkg/lib/")], "is not a safe relative path"),
        ([_row(path="pkg/evil.py")], "of a shared library"),
        ([_row(path="p/" * 2100 + "x.so")], "path is not a string of at most 4096"),
        ([_row(soname="../libx.so")], "soname '../libx.so' is not a plain file name"),
        ([_row(soname="")], "soname '' is not a plain file name"),
        ([_row(soname="..")], "is not a plain file name"),
        ([_row(soname=["libx.so"])], "is not a plain file name"),
        ([_row(soname="l" * 256)], "is not a plain file name"),
        ([_row(needed="libc.so.6")], "row 1: needed is not a list"),
        ([_row(needed=["/tmp/evil.so"])], "needed '/tmp/evil.so' is not a plain file name"),
        ([_row(needed=["lib\0c.so"])], "is not a plain file name"),
        ([_row(needed=[None])], "needed None is not a plain file name"),
        ([_row(needed=["libc.so.6"] * 4097)], "needed is not a list of at most 4096 entries"),
        ([_row(rpath=[1])], "rpath entry 1 is not a search path entry"),
        ([_row(runpath=["$ORIGIN:/tmp"])], "runpath entry '$ORIGIN:/tmp' is not a search path entry"),
        ([_row(runpath=[""])], "runpath entry '' is not a search path entry"),
        ([_row(rpath={"a": 1})], "rpath is not a list"),
        (lambda: [_row(path=f"pkg/lib{index}.so") for index in range((1 << 16) + 1)], "more than 65536 rows"),
    ],
)
def test_each_kind_of_bad_row_is_named(rows, problem):
    # Too many rows are built here, not at collection: tens of megabytes held by pytest all session would
    # show in the peak RSS that test_memory_bound's subprocesses inherit from the forked parent.
    found = elfcache.rows_problem(rows() if callable(rows) else rows)
    assert found is not None and problem in found


def test_rows_as_the_cache_writes_them_pass():
    assert elfcache.rows_problem([]) is None
    assert elfcache.rows_problem([_row(), _row(path="pkg/lib/liby.so", soname=None, needed=[], runpath=[])]) is None


def _poison(cache: Path, wheel: Path, edit) -> Path:
    """The cache entry of ``wheel`` with its rows changed by ``edit`` (as an attacker with write access would)."""
    entry = cache / f"{sha256_of(wheel)}.v{elfcache.CACHE_SCHEMA}.json"
    rows = json.loads(entry.read_text(encoding="utf-8"))
    entry.write_text(json.dumps(edit(rows)), encoding="utf-8")
    return entry


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            lambda rows: [*rows, _row(path="../../../../../tmp/evil.so", soname="libevil.so", needed=[], runpath=[])],
            "is not a safe relative path",
        ),
        (lambda rows: [{**rows[0], "needed": ["../evil.so"]}, *rows[1:]], "is not a plain file name"),
        (lambda rows: "[" * 200_000, "RecursionError"),
    ],
)
def test_a_bad_row_is_a_miss_with_one_warning_and_is_rewritten(tmp_path, wheels, capsys, edit, problem):
    cache = tmp_path / "cache" / "elfgraph"
    first = scan_wheels([_ref(wheels.torch)], caches=CacheContext(cache.parent))
    capsys.readouterr()
    entry = _poison(cache, wheels.torch, edit)
    if problem == "RecursionError":
        entry.write_text("[" * 200_000, encoding="utf-8")
    assert _cached([sha256_of(wheels.torch)], CacheContext(cache.parent)) == [], (
        "--list-cached reports only valid entries"
    )
    again = scan_wheels([_ref(wheels.torch)], caches=CacheContext(cache.parent))
    assert again.cached_wheels == 0 and again.libraries == first.libraries
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 2 and all(
        line.startswith(f"patched-wheels: warning: {entry}: cache ") and problem in line for line in warnings
    )
    assert scan_wheels([_ref(wheels.torch)], caches=CacheContext(cache.parent)).cached_wheels == 1, (
        "the entry was rewritten from the wheel"
    )
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            lambda rows: [*rows, _row(path="faketorch/lib/libevil.so", soname="libevil.so", needed=[], runpath=[])],
            "faketorch/lib/libevil.so: no shared library of faketorch-2.1.0-py3-none-linux_x86_64.whl has this path",
        ),
        (lambda rows: rows[1:], ": shipped by faketorch-2.1.0-py3-none-linux_x86_64.whl, but no row lists it"),
        (lambda rows: [{**rows[0], "path": "faketorch/__init__.so"}, *rows[1:]], "no shared library of"),
        # Issue 41: the paths right, what a library says not the member's.
        (
            lambda rows: [{**row, "needed": []} for row in rows],
            "faketorch/_core.so: the row says needed (), faketorch-2.1.0-py3-none-linux_x86_64.whl says ('libfaketorch.so',)",
        ),
        (
            lambda rows: [{**rows[1], "path": rows[0]["path"]}, {**rows[0], "path": rows[1]["path"]}],
            "faketorch/_core.so: the row says soname 'libfaketorch.so', faketorch-2.1.0-py3-none-linux_x86_64.whl says None",
        ),
        (
            lambda rows: [{**rows[0], "soname": "libblas.so.12"}, *rows[1:]],
            "faketorch/_core.so: the row says soname 'libblas.so.12', faketorch-2.1.0-py3-none-linux_x86_64.whl says None",
        ),
        (
            lambda rows: [rows[0], {**rows[1], "rpath": [*rows[1]["rpath"], "/tmp/evil"]}],
            "faketorch/lib/libfaketorch.so: the row says rpath (",
        ),
        (lambda rows: [{**rows[0], "runpath": ["$ORIGIN"]}, *rows[1:]], "faketorch/_core.so: the row says runpath"),
    ],
)
def test_rows_that_do_not_describe_the_wheel_at_hand_are_read_again(tmp_path, wheels, capsys, edit, problem):
    """Valid rows, but not this wheel's (its paths, or what a member's dynamic section says): a cache hit is
    believed unread only without the wheel (the hub's unfetched wheels)."""
    cache = tmp_path / "cache" / "elfgraph"
    first = scan_wheels([_ref(wheels.torch)], caches=CacheContext(cache.parent))
    capsys.readouterr()
    entry = _poison(cache, wheels.torch, edit)
    assert _cached([sha256_of(wheels.torch)], CacheContext(cache.parent)) == [sha256_of(wheels.torch)]
    again = scan_wheels([_ref(wheels.torch)], caches=CacheContext(cache.parent))
    assert again.cached_wheels == 0 and again.libraries == first.libraries
    (warning,) = capsys.readouterr().err.splitlines()
    assert warning.startswith(f"patched-wheels: warning: {entry}: cache entry ignored (") and problem in warning
    assert warning.endswith("; read again from the wheel")
    assert scan_wheels([_ref(wheels.torch)], caches=CacheContext(cache.parent)).cached_wheels == 1


def test_a_cached_library_that_is_not_elf_in_the_wheel_is_read_again_and_refused(tmp_path, capsys):
    wheel = build_wheel(tmp_path, "textlib", "1.0", {"textlib/libx.so": b"not an ELF file at all"})
    cache = tmp_path / "cache" / "elfgraph"
    cache.mkdir(mode=0o700, parents=True)
    entry = cache / f"{sha256_of(wheel)}.v{elfcache.CACHE_SCHEMA}.json"
    entry.write_text(json.dumps([_row(path="textlib/libx.so")]), encoding="utf-8")
    with pytest.raises(ElfError, match="textlib/libx.so: not an ELF file"):
        read_graph([_ref(wheel)], caches=CacheContext(cache.parent))
    (warning,) = capsys.readouterr().err.splitlines()
    assert (
        warning
        == f"patched-wheels: warning: {entry}: cache entry ignored ({wheel.name}: textlib/libx.so: not an ELF file "
        "(starts with b'not ')); read again from the wheel"
    )


def test_a_data_scheme_file_named_like_a_library_but_not_elf_keeps_its_cache_entry(tmp_path, capsys):
    """A ``.so``-named data file outside site-packages is no library (no row): the entry still describes the wheel."""
    library = blob_library(tmp_path, "libdata.so", 4096).read_bytes()
    wheel = build_wheel(
        tmp_path,
        "datalib",
        "1.0",
        {"datalib-1.0.data/data/share/notes.so": b"plain text", "datalib-1.0.data/data/lib/libdata.so": library},
    )
    cache = tmp_path / "cache" / "elfgraph"
    first = scan_wheels([_ref(wheel)], caches=CacheContext(cache.parent))
    assert [library.path for library in first.libraries] == ["datalib-1.0.data/data/lib/libdata.so"]
    second = scan_wheels([_ref(wheel)], caches=CacheContext(cache.parent))
    assert (second.cached_wheels, second.libraries) == (1, first.libraries)
    assert capsys.readouterr().err == ""


def test_a_data_scheme_library_whose_installed_copy_is_not_elf_is_no_library(tmp_path):
    """The wheel's data-scheme member starts as ELF, its installed copy (what runs) does not: that copy is
    no library, as read_installed_library says (it was an AttributeError on the None it returns)."""
    library = blob_library(tmp_path, "libdata.so", 4096).read_bytes()
    wheel = build_wheel(
        tmp_path, "datalib", "1.0", {"datalib-1.0.data/data/lib/libdata.so": library, "datalib/libown.so": library}
    )
    plain = tmp_path / "installed-libdata.so"
    plain.write_bytes(b"plain text")
    scan = scan_wheels([wheel], installed=lambda name, path: plain if path.startswith("datalib-1.0.data/") else None)
    assert [library.path for library in scan.libraries] == ["datalib/libown.so"] and scan.problems == {}


def test_checking_cached_rows_streams_each_member_once_as_a_cold_read_does(tmp_path, monkeypatch):
    """The check reads what the cold scan reads, through the same reader: no second pass, nothing more."""
    data = blob_library(tmp_path, "libbig.so", 8 << 20).read_bytes()
    wheel = build_wheel(tmp_path, "big", "1.0", {"big/libbig.so": data})
    cache = tmp_path / "cache" / "elfgraph"
    inflated = []
    real = elfread.inflated_chunks

    def counting(path, info):
        for piece in real(path, info):
            inflated.append(len(piece))
            yield piece

    monkeypatch.setattr(elfread, "inflated_chunks", counting)
    assert scan_wheels([_ref(wheel)], caches=CacheContext(cache.parent)).cached_wheels == 0
    cold, inflated[:] = sum(inflated), []
    assert scan_wheels([_ref(wheel)], caches=CacheContext(cache.parent)).cached_wheels == 1
    assert sum(inflated) == cold == len(data)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link", "link-loop", "socket", "device", "huge", "group-writable"])
def test_a_hostile_elf_cache_file_is_a_miss_with_one_warning_and_is_replaced(
    tmp_path, wheels, capsys, monkeypatch, kind
):
    cache = tmp_path / "cache" / "elfgraph"
    first = scan_wheels([_ref(wheels.torch)], caches=CacheContext(cache.parent))
    entry = cache / f"{sha256_of(wheels.torch)}.v{elfcache.CACHE_SCHEMA}.json"
    if kind == "group-writable":
        entry.chmod(0o660)
    else:
        entry.unlink()
        if kind == "huge":
            with open(entry, "wb") as stream:
                stream.truncate(150 << 20)  # sparse
        else:
            make_special_file(kind, entry)
    read_bytes = count_read_bytes(monkeypatch)
    capsys.readouterr()
    assert _cached([sha256_of(wheels.torch)], CacheContext(cache.parent)) == []
    again = scan_wheels([_ref(wheels.torch)], caches=CacheContext(cache.parent))
    assert again.cached_wheels == 0 and again.libraries == first.libraries
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 2 and all(
        line.startswith(f"patched-wheels: warning: {entry}: cache file ignored (") for line in warnings
    )
    assert sum(read_bytes) < 1 << 20  # the 150 MB file was refused by its size, not read
    assert entry.is_file() and not entry.is_symlink() and stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert scan_wheels([_ref(wheels.torch)], caches=CacheContext(cache.parent)).cached_wheels == 1


def test_the_graph_command_neither_hashes_its_wheels_nor_touches_a_cache(tmp_path, wheels):
    """``graph`` is given files: it reads their libraries and nothing more (issue 43: hashing torch's set for
    a cache key was a pass over gigabytes that spared nothing), and keeps no cache: an empty cache directory
    stays empty, and a lying entry for a wheel's sha256 is never looked at (no warning, not rewritten)."""
    with zipfile.ZipFile(wheels.nvidia["jit"]) as archive:
        library = archive.read(LIBRARY_PATHS["jit"])
    bulk = 32 << 20  # a stored member no scan inflates: more than anything else the run reads
    bulky = wheelbuilder.build_wheel(
        tmp_path,
        "bulky",
        "1.0",
        {"bulky/libjit.so.12": library, "bulky/weights.bin": bytes(bulk)},
        tag="py3-none-linux_x86_64",
        compression=zipfile.ZIP_STORED,
    )
    code = (
        "import sys; from patched_wheels.cli import main; status = main(sys.argv[1:]); "
        "print(next(line for line in open('/proc/self/io') if line.startswith('rchar:')).split()[1]); sys.exit(status)"
    )
    empty, poisoned = tmp_path / "empty", _lying_entry(tmp_path, wheels.torch)
    empty.mkdir()
    before = {entry: entry.read_bytes() for entry in poisoned.rglob("*") if entry.is_file()}
    for root in (empty, poisoned):
        result = subprocess.run(
            [sys.executable, "-c", code, "graph", str(bulky), *map(str, wheels.all)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "RULES_PATCHED_WHEELS_CACHE": str(root)},
        )
        assert (result.returncode, result.stderr) == (0, "")
        assert "faketorch/lib/libevil.so" not in result.stdout and "bulky/libjit.so.12" in result.stdout
        assert int(result.stdout.splitlines()[-1]) < bulk, "a wheel was read whole: hashed"
    assert list(empty.iterdir()) == []
    assert {entry: entry.read_bytes() for entry in poisoned.rglob("*") if entry.is_file()} == before


def test_no_command_caches_into_the_working_directory(tmp_path, wheels, monkeypatch, capsys):
    """Issue 22: a relative XDG_CACHE_HOME is ignored (XDG spec); a relative RULES_PATCHED_WHEELS_CACHE is one
    error of a command that keeps a cache (``doctor``'s probe observations; ``graph`` keeps none)."""
    monkeypatch.delenv("RULES_PATCHED_WHEELS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "relcache")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    doctor = ["doctor", "--package", "faketorch", "--probe", "import faketorch", *map(str, wheels.all)]
    assert main(doctor) == 1  # a report: libraries that fail as they are, none with the preload
    assert not (tmp_path / "relcache").exists()
    assert len(list((tmp_path / "home" / ".cache" / "rules_patched_wheels" / "observed").iterdir())) == 1
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", "relcache")
    capsys.readouterr()
    assert main(doctor) == 1
    assert (
        capsys.readouterr().err
        == "patched-wheels: error: RULES_PATCHED_WHEELS_CACHE=relcache: expected an absolute directory or off\n"
    )
    assert not (tmp_path / "relcache").exists()


def test_reading_libraries_uses_the_one_reader_not_pyelftools(tmp_path, wheels):
    """The graph, the edits, the split and the observation's symbols read libraries with elfread's reader
    alone: pyelftools, a second parser, is imported neither by a ``graph`` run that reads every library
    nor by reading an installed library's symbols."""
    code = (
        "import sys; from patched_wheels.cli import main; from patched_wheels.loading.observe import read_symbols; "
        "status = main(sys.argv[1:]); assert read_symbols(sys.executable)[0]; "
        "print(sorted(m for m in sys.modules if m.startswith('elftools'))); sys.exit(status)"
    )
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", code, "graph", *map(str, wheels.all)],
        capture_output=True,
        text=True,
        env=environment,
    )
    assert result.returncode == 0, result.stderr
    assert "libjit.so.12" in result.stdout and result.stdout.splitlines()[-1] == "[]"


def test_another_wheel_s_vendored_copy_never_provides_a_library(tmp_path: Path) -> None:
    """torch 2.15's cudnn needs libz.so.1; torchvision ships its auditwheel copy torchvision.libs/libz.def23b81.so.1
    (SONAME libz.so.1). One site-packages gives cudnn the system's: the graph must not, so no preload loads the copy.
    The wheel's own library still links its copy."""
    build = tmp_path / "build"
    build.mkdir()
    vendored = compile_shared(build, "libvz.def23b81.so.1", "int vz(void) { return 1; }\n", "-Wl,-soname,libvz.so.1")
    (build / "libvz.so.1").symlink_to(vendored.name)
    user = compile_shared(
        build,
        "libuser.so",
        "int vz(void);\nint user(void) { return vz(); }\n",
        "-Wl,-soname,libuser.so",
        "-l:libvz.so.1",
    )
    own = compile_shared(
        build, "libown.so", "int vz(void);\nint own(void) { return vz(); }\n", "-Wl,-soname,libown.so", "-l:libvz.so.1"
    )
    vision = build_wheel(
        tmp_path,
        "vision",
        "1.0",
        {"vision.libs/libvz.def23b81.so.1": vendored.read_bytes(), "vision/libown.so": own.read_bytes()},
    )
    cudnn = build_wheel(tmp_path, "cudnn", "1.0", {"cudnn/lib/libuser.so": user.read_bytes()})
    graph = read_graph([vision, cudnn])
    by_path = {library.path: library for library in graph.libraries}
    assert graph.providers[by_path["cudnn/lib/libuser.so"]] == {}, "the system's libvz.so.1, not vision's copy"
    assert graph.system[by_path["cudnn/lib/libuser.so"]] == ("libvz.so.1",)
    assert graph.providers[by_path["vision/libown.so"]] == {"libvz.so.1": by_path["vision.libs/libvz.def23b81.so.1"]}
    # What graph and doctor say of it: the copy named, and why it does not count (they said "no wheel has it")
    copy = by_path["vision.libs/libvz.def23b81.so.1"]
    assert graph.vendored_copies("libvz.so.1", "cudnn-1.0-py3-none-linux_x86_64.whl") == (copy,)
    assert graph.vendored_copies("libvz.so.1", copy.wheel) == ()
    listing = format_graph(graph)
    assert (
        f"  needs    libvz.so.1 (system, not followed; vision.libs/libvz.def23b81.so.1 ({copy.wheel}) is that "
        "wheel's own copy)" in listing.splitlines()
    )
    (finding,) = [
        found
        for found in diagnose_graph(graph, system_names={"libc.so.6"})
        if found.library.path == "cudnn/lib/libuser.so" and found.needed == "libvz.so.1"
    ]
    assert "needs libvz.so.1, which this system lacks; vision.libs/libvz.def23b81.so.1" in _finding_line(finding, None)


def test_a_copy_auditwheel_renamed_is_named_for_the_library_it_copies(tmp_path: Path) -> None:
    """auditwheel renames the file and the SONAME (``libvz-a1b2c3d4.so.1``); another wheel's DT_NEEDED says
    ``libvz.so.1``: the copy is found by the name with the hash taken out."""
    build = tmp_path / "build"
    build.mkdir()
    copy = compile_shared(
        build, "libvz-a1b2c3d4.so.1", "int vz(void) { return 1; }\n", "-Wl,-soname,libvz-a1b2c3d4.so.1"
    )
    plain = compile_shared(build, "libvz.so.1", "int vz(void) { return 1; }\n", "-Wl,-soname,libvz.so.1")
    user = compile_shared(
        build,
        "libuser.so",
        "int vz(void);\nint user(void) { return vz(); }\n",
        "-Wl,-soname,libuser.so",
        "-l:libvz.so.1",
    )
    assert plain.exists()
    vision = build_wheel(tmp_path, "vision", "1.0", {"vision.libs/libvz-a1b2c3d4.so.1": copy.read_bytes()})
    other = build_wheel(tmp_path, "other", "1.0", {"other/libuser.so": user.read_bytes()})
    graph = read_graph([vision, other])
    (found,) = graph.vendored_copies("libvz.so.1", other.name)
    assert found.path == "vision.libs/libvz-a1b2c3d4.so.1"
    assert graph.vendored_copies("libvz.so.2", other.name) == ()
