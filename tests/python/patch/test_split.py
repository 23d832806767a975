"""split: round trips on the gcc-built fixtures, checked by importing and by reading the ELF back."""

from __future__ import annotations

import json
import threading
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from patched_wheels.cli import main
from patched_wheels.elf import graph as elfgraph
from patched_wheels.elf import grow as elfgrow
from patched_wheels.elf.graph import read_graph
from patched_wheels.errors import ElfError, InvalidWheelError, UsageError
from patched_wheels.hub.build import PatchedWheelSpec, patch_into_index
from patched_wheels.loading.preload import PreloadRequest, plan_package_preload
from patched_wheels.loading.preloadmodule import PRELOAD_DATA, PRELOAD_MODULE, read_preload_data
from patched_wheels.patch import rewrite, surgery
from patched_wheels.patch.request import SplitRequest, rpath_edit
from patched_wheels.patch.surgery import PatchOptions, patch_wheel, split_wheel
from patched_wheels.wheelfile import WheelReader, WheelWriter
from support.fakecuda import (
    EXPECTED_ANSWER,
    LIBRARY_PATHS,
    blob_library,
    build_fake_cuda_wheels,
    build_wheel,
    flat_layout,
    per_wheel_layout,
    run_import,
)

MOVED = "faketorch_libs/lib/libfaketorch.so"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    return build_fake_cuda_wheels(tmp_path_factory.mktemp("fakecuda"))


@pytest.fixture(scope="module")
def split_pair(wheels, tmp_path_factory):
    return split_wheel(
        wheels.torch,
        tmp_path_factory.mktemp("split"),
        into="faketorch-libs",
        move=["faketorch/lib/*.so"],
        graph_wheels=list(wheels.nvidia.values()),
    )


def _dynamic(data: bytes) -> dict[str, str]:
    from io import BytesIO

    elf = ELFFile(BytesIO(data))
    tags = elf.get_section_by_name(".dynamic").iter_tags()
    return {
        tag.entry.d_tag: getattr(tag, tag.entry.d_tag[3:].lower(), None)
        for tag in tags
        if tag.entry.d_tag in ("DT_RPATH", "DT_RUNPATH", "DT_SONAME")
    }


def test_split_pair_imports_in_both_layouts(wheels, split_pair, tmp_path):
    environment = [*wheels.nvidia.values(), split_pair.path, split_pair.sibling]
    for layout in (flat_layout, per_wheel_layout):
        result = run_import(layout(environment, tmp_path / layout.__name__))
        assert result.returncode == 0 and result.stdout.strip() == str(EXPECTED_ANSWER), (
            layout.__name__,
            result.stderr,
        )


def _raw(wheel: Path, member: str) -> tuple[int, int, bytes]:
    """A member's CRC, size and compressed bytes as stored."""
    with zipfile.ZipFile(wheel) as archive:
        info = archive.getinfo(member)
        with open(wheel, "rb") as handle:
            handle.seek(info.header_offset + 26)
            name_length, extra_length = (
                int.from_bytes(handle.read(2), "little"),
                int.from_bytes(handle.read(2), "little"),
            )
            handle.seek(info.header_offset + 30 + name_length + extra_length)
            return info.CRC, info.file_size, handle.read(info.compress_size)


def test_a_moved_library_keeps_its_compressed_bytes(wheels, split_pair):
    """Copied raw, like cp: its RPATH still reaches the nvidia wheels from the same depth; the preload does the rest."""
    assert _raw(split_pair.sibling, MOVED) == _raw(wheels.torch, LIBRARY_PATHS["faketorch"])
    with WheelReader(split_pair.sibling, verify=True) as reader:
        assert reader.members()[0] == MOVED
        dynamic = _dynamic(reader.read(MOVED))
    nvidia = [f"$ORIGIN/../../fake_nvidia/{name}/lib" for name in ("jit", "sparse", "solver", "blas")]
    assert dynamic["DT_RPATH"].split(":") == [*nvidia, "$ORIGIN"]
    assert dynamic["DT_SONAME"] == "libfaketorch.so"


def test_a_moved_library_without_soname_gets_one_and_keeps_its_search_path(wheels, tmp_path):
    pair = split_wheel(wheels.torch, tmp_path, into="faketorch-libs", move=["faketorch/_core.so"])
    with WheelReader(pair.sibling, verify=True) as reader:
        dynamic = _dynamic(reader.read("faketorch_libs/_core.so"))
    assert dynamic["DT_SONAME"] == "_core.so" and dynamic["DT_RPATH"] == "$ORIGIN/lib"
    again = split_wheel(wheels.torch, tmp_path / "again", into="faketorch-libs", move=["faketorch/_core.so"])
    assert again.sibling.read_bytes() == pair.sibling.read_bytes()


def test_outputs_have_same_version_and_tags_valid_record_requirement_and_preload(wheels, split_pair):
    assert split_pair.path.name == wheels.torch.name
    assert split_pair.sibling.name == "faketorch_libs-2.1.0-py3-none-linux_x86_64.whl"
    assert (split_pair.requirement, split_pair.sibling_requirement) == ("faketorch==2.1.0", "faketorch-libs==2.1.0")
    with WheelReader(split_pair.sibling, verify=True) as sibling:
        assert "Tag: py3-none-linux_x86_64" in sibling.read(f"{sibling.dist_info}/WHEEL").decode()
        assert b"Name: faketorch-libs\nVersion: 2.1.0\n" in sibling.metadata()
    with WheelReader(split_pair.path, verify=True) as main_wheel:
        assert LIBRARY_PATHS["faketorch"] not in main_wheel.members()
        assert "Requires-Dist: faketorch-libs==2.1.0" in main_wheel.metadata().decode().splitlines()
        preload = read_preload_data(main_wheel.read(f"faketorch/{PRELOAD_DATA}"), where="test").libraries
    assert preload[-1] == MOVED
    assert (
        preload.index(LIBRARY_PATHS["jit"])
        < preload.index(LIBRARY_PATHS["sparse"])
        < preload.index(LIBRARY_PATHS["solver"])
    )


def test_split_is_reproducible(wheels, split_pair, tmp_path):
    again = split_wheel(
        wheels.torch,
        tmp_path,
        into="faketorch-libs",
        move=["faketorch/lib/*.so"],
        graph_wheels=list(wheels.nvidia.values()),
    )
    assert again.path.read_bytes() == split_pair.path.read_bytes()
    assert again.sibling.read_bytes() == split_pair.sibling.read_bytes()


def test_without_graph_wheels_the_pair_works_flat(wheels, tmp_path):
    pair = split_wheel(wheels.torch, tmp_path / "out", into="faketorch-libs", move=["faketorch/lib/libfaketorch.so"])
    result = run_import(flat_layout([*wheels.nvidia.values(), pair.path, pair.sibling], tmp_path / "flat"))
    assert result.returncode == 0 and result.stdout.strip() == str(EXPECTED_ANSWER), result.stderr


def test_split_extends_an_existing_preload(wheels, tmp_path):
    patched = patch_wheel(
        wheels.torch,
        tmp_path / "patched",
        PatchOptions(suffix="pw.1", preload=plan_package_preload(PreloadRequest("faketorch"), wheels.all)),
    ).path
    pair = split_wheel(patched, tmp_path / "out", into="faketorch-libs", move=["faketorch/lib/*.so"])
    with zipfile.ZipFile(pair.path) as archive:
        preload = read_preload_data(archive.read(f"faketorch/{PRELOAD_DATA}"), where="test").libraries
        init = archive.read("faketorch/__init__.py").decode()
    assert preload[:-1] == tuple(LIBRARY_PATHS[name] for name in ("blas", "jit", "sparse", "solver"))
    assert preload[-1] == MOVED
    assert init.count(f"from . import {PRELOAD_MODULE}") == 1
    result = run_import(per_wheel_layout([*wheels.nvidia.values(), pair.path, pair.sibling], tmp_path / "site"))
    assert result.returncode == 0 and result.stdout.strip() == str(EXPECTED_ANSWER), result.stderr


def test_split_keeps_optional_entries_optional(wheels, tmp_path):
    from support.fakecuda import RUNTIME_GLOB, RUNTIME_LIBRARY_PATHS, build_runtime_loaded_wheels

    runtime = build_runtime_loaded_wheels(tmp_path / "runtime")
    graph_wheels = [*wheels.nvidia.values(), runtime.foo, runtime.bar]
    preload = plan_package_preload(
        PreloadRequest("faketorch", preload_wheels=[RUNTIME_GLOB]), [wheels.torch, *graph_wheels]
    )
    patched = patch_wheel(wheels.torch, tmp_path / "patched", PatchOptions(suffix="pw.1", preload=preload)).path
    pair = split_wheel(
        patched, tmp_path / "out", into="faketorch-libs", move=["faketorch/lib/*.so"], graph_wheels=graph_wheels
    )
    with zipfile.ZipFile(pair.path) as archive:
        preload = read_preload_data(archive.read(f"faketorch/{PRELOAD_DATA}"), where="test")
    assert preload.optional == set(RUNTIME_LIBRARY_PATHS.values())
    assert set(preload.libraries) == {
        *RUNTIME_LIBRARY_PATHS.values(),
        *(LIBRARY_PATHS[name] for name in ("jit", "sparse", "solver", "blas")),
        MOVED,
    }
    result = run_import(per_wheel_layout([*graph_wheels, pair.path, pair.sibling], tmp_path / "site"))
    assert result.returncode == 0 and result.stdout.strip() == str(EXPECTED_ANSWER), result.stderr


@pytest.fixture(scope="module")
def sized_wheel(tmp_path_factory):
    """``bigpkg`` with three incompressible libraries of 300, 150 and 60 KiB."""
    directory = tmp_path_factory.mktemp("sized")
    files = {"bigpkg/__init__.py": b"import os\n"}
    for name, size in (("liba.so", 300 << 10), ("libb.so", 150 << 10), ("libc.so", 60 << 10)):
        files[f"bigpkg/lib/{name}"] = blob_library(directory, name, size, "-Wl,-rpath,$ORIGIN").read_bytes()
    return build_wheel(directory, "bigpkg", "1.0", files)


def test_max_size_moves_the_largest_libraries_until_the_wheel_fits(sized_wheel, tmp_path):
    limit = sized_wheel.stat().st_size - (200 << 10)
    pair = split_wheel(sized_wheel, tmp_path, into="bigpkg-libs", max_size=limit)
    assert pair.path.stat().st_size <= limit
    with zipfile.ZipFile(pair.sibling) as archive:
        assert [name for name in archive.namelist() if name.endswith(".so")] == ["bigpkg_libs/lib/liba.so"]
    assert _raw(pair.sibling, "bigpkg_libs/lib/liba.so") == _raw(sized_wheel, "bigpkg/lib/liba.so")
    tighter = split_wheel(sized_wheel, tmp_path / "tighter", into="bigpkg-libs", max_size=limit - (200 << 10))
    with zipfile.ZipFile(tighter.sibling) as archive:
        assert sorted(name for name in archive.namelist() if name.endswith(".so")) == [
            "bigpkg_libs/lib/liba.so",
            "bigpkg_libs/lib/libb.so",
        ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(move=["nothing/*"]), r"--move nothing/\* matches no member"),
        (
            dict(move=["faketorch/__init__.py"]),
            r"faketorch/__init__.py \(matched by --move faketorch/__init__.py\) is not a shared library",
        ),
        (dict(move=["faketorch/*.so"], max_size=10), "give either --move or --max-size, not both or neither"),
        (dict(), "give either --move or --max-size, not both or neither"),
        (dict(move=["faketorch/*.so"], into="bad name!"), "--into 'bad name!' is not a valid project name"),
        (dict(move=["faketorch/*.so"], into="FakeTorch"), "--into FakeTorch names the wheel being split"),
        (dict(max_size=10**9), r"already fits in --max-size 1000000000"),
        (dict(max_size=100), r"cannot fit --max-size 100"),
    ],
)
def test_bad_requests_are_one_line_errors_and_leave_nothing(wheels, tmp_path, options, message):
    options.setdefault("into", "faketorch-libs")
    with pytest.raises(UsageError, match=message) as error:
        split_wheel(wheels.torch, tmp_path / "out", **options)
    assert str(error.value).startswith(wheels.torch.name) and "\n" not in str(error.value)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_soname_the_editor_cannot_add_leaves_no_output(wheels, tmp_path, monkeypatch):
    monkeypatch.setattr(elfgrow, "_MAX_BSS", 0)  # _core.so, which has no SONAME, then cannot grow
    with pytest.raises(ElfError, match=r"faketorch/_core.so: the last PT_LOAD's .bss"):
        split_wheel(wheels.torch, tmp_path / "out", into="faketorch-libs", move=["faketorch/*.so"])
    assert not (tmp_path / "out").exists()


def test_the_hub_names_the_attributes_a_bazel_user_wrote(wheels, tmp_path):
    spec = PatchedWheelSpec(
        name="faketorch",
        wheel=wheels.torch,
        suffix="t.1",
        split_into="faketorch-libs",
        split_move=["faketorch/*.so"],
        split_max_size=10,
    )
    with pytest.raises(UsageError, match=r"give either split_move or split_max_size, not both or neither"):
        patch_into_index(spec, wheels.all, tmp_path / "index")
    with pytest.raises(UsageError, match=r"split_move faketorch/nothing matches no member"):
        patch_into_index(
            replace(spec, split_move=["faketorch/nothing"], split_max_size=0), wheels.all, tmp_path / "index"
        )
    assert not (tmp_path / "index").exists() or not any((tmp_path / "index").iterdir())


def test_output_must_not_replace_the_input(wheels):
    with pytest.raises(UsageError, match="output would overwrite the input"):
        split_wheel(wheels.torch, wheels.torch.parent, into="faketorch-libs", move=["faketorch/lib/*.so"])


def test_split_command_prints_outputs_and_requirements(wheels, tmp_path, capsys):
    argv = ["split", "--wheel", str(wheels.torch), "--move", "faketorch/lib/*.so"]
    assert main([*argv, "--into", "faketorch-libs", "--dest-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        str(tmp_path / wheels.torch.name),
        str(tmp_path / "faketorch_libs-2.1.0-py3-none-linux_x86_64.whl"),
        "faketorch==2.1.0",
        "faketorch-libs==2.1.0",
    ]
    assert all(Path(path).is_file() for path in lines[:2])


def test_splitting_a_wheel_whose_preload_data_was_edited_is_one_error_and_no_output(wheels, tmp_path, capsys):
    """An earlier patched wheel's preload is read from the data beside its module: data edited out of the
    schema (here a key it does not declare) is refused, naming the wheel and member."""
    patched = patch_wheel(
        wheels.torch,
        tmp_path / "patched",
        PatchOptions(suffix="pw.1", preload=plan_package_preload(PreloadRequest("faketorch"), wheels.all)),
    ).path
    member = f"faketorch/{PRELOAD_DATA}"
    with zipfile.ZipFile(patched) as archive:
        files = {name: archive.read(name) for name in archive.namelist() if ".dist-info/" not in name}
    files[member] = json.dumps({**json.loads(files[member]), "LIBRARIES": []}).encode()
    edited = build_wheel(tmp_path / "edited", "faketorch", "2.1.0+pw.1", files)
    argv = ["split", "--wheel", str(edited), "--move", "faketorch/lib/*.so", "--into", "faketorch-libs"]
    assert main([*argv, "--dest-dir", str(tmp_path / "out")]) == 1
    captured = capsys.readouterr()
    assert captured.err == (
        f"patched-wheels: error: {edited.name}: {member}: not patched-wheels preload data "
        f"({PRELOAD_DATA}: unknown keys ['LIBRARIES'])\n"
    )
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# ---------------------------------------------------------------- patch and split in one rewrite

SPLIT = SplitRequest("faketorch-libs", move=["faketorch/lib/*.so"])


def _members(wheel: Path) -> dict[str, bytes]:
    """Every member but RECORD, and RECORD's rows as a set: the order of members is not part of what we promise."""
    with zipfile.ZipFile(wheel) as archive:
        contents = {name: archive.read(name) for name in archive.namelist()}
    record = next(name for name in contents if name.endswith(".dist-info/RECORD"))
    return {**contents, record: b"\n".join(sorted(contents[record].splitlines()))}


def test_patch_and_split_in_one_call_gives_the_wheels_of_patch_then_split(wheels, tmp_path):
    options = PatchOptions(
        suffix="pw.1",
        add_requires=["filelock>=3"],
        preload=plan_package_preload(PreloadRequest("faketorch"), wheels.all),
    )
    patched = patch_wheel(wheels.torch, tmp_path / "patched", options)
    two_steps = split_wheel(
        patched.path, tmp_path / "two", into=SPLIT.into, move=SPLIT.move, graph_wheels=list(wheels.nvidia.values())
    )
    one_call = patch_wheel(wheels.torch, tmp_path / "one", options._replace(split=SPLIT, graph=read_graph(wheels.all)))
    assert one_call.requirements == two_steps.requirements == ("faketorch==2.1.0+pw.1", "faketorch-libs==2.1.0+pw.1")
    assert one_call.path.name == two_steps.path.name and one_call.sibling.name == two_steps.sibling.name
    assert _members(one_call.path) == _members(two_steps.path)
    assert _members(one_call.sibling) == _members(two_steps.sibling)
    with WheelReader(one_call.path, verify=True) as reader:
        requires = [line for line in reader.metadata().decode().splitlines() if line.startswith("Requires-Dist")]
    assert requires[-2:] == ["Requires-Dist: filelock>=3", "Requires-Dist: faketorch-libs==2.1.0+pw.1"]
    WheelReader(one_call.sibling, verify=True).close()


def test_a_split_in_the_patch_extends_the_preload_as_a_value_and_renders_it_once(wheels, tmp_path, monkeypatch):
    from patched_wheels.loading import preloadfiles as preloading
    from patched_wheels.patch import split as splitting

    preload = plan_package_preload(PreloadRequest("faketorch"), wheels.all)
    rendered = []
    render = preloading.render_preload_module
    monkeypatch.setattr(preloading, "render_preload_module", lambda *args: rendered.append(args) or render(*args))
    monkeypatch.setattr(splitting, "read_installed_preload", lambda *_args, **_kwargs: pytest.fail("preload read back"))
    options = PatchOptions(suffix="pw.1", preload=preload, split=SPLIT, graph=read_graph(wheels.all))
    pair = patch_wheel(wheels.torch, tmp_path / "out", options)
    assert len(rendered) == 1
    with zipfile.ZipFile(pair.path) as archive:
        written = read_preload_data(archive.read(f"faketorch/{PRELOAD_DATA}"), where="test")
    assert written.libraries == (*preload.entries.libraries, MOVED)


def test_the_hub_writes_a_patched_and_split_wheel_once_from_one_scan_of_the_originals(wheels, tmp_path, monkeypatch):
    written: list[str] = []
    scanned: list[str] = []

    class CountingWriter(rewrite.WheelWriter):
        def __init__(self, dest, **kwargs):
            written.append(Path(dest).name)
            super().__init__(dest, **kwargs)

    real_read = elfgraph.read_library

    def recording_read(wheel, *args):
        scanned.append(Path(wheel).name)
        return real_read(wheel, *args)

    monkeypatch.setattr(rewrite, "WheelWriter", CountingWriter)
    monkeypatch.setattr(elfgraph, "read_library", recording_read)
    spec = PatchedWheelSpec(
        name="faketorch",
        wheel=wheels.torch,
        suffix="t.1",
        preload="auto",
        preload_package="faketorch",
        split_into=SPLIT.into,
        split_move=SPLIT.move,
    )
    assert patch_into_index(spec, wheels.all, tmp_path / "index") == [
        "faketorch==2.1.0+t.1",
        "faketorch-libs==2.1.0+t.1",
    ]
    names = ["faketorch_libs-2.1.0+t.1-py3-none-linux_x86_64.whl", "faketorch-2.1.0+t.1-py3-none-linux_x86_64.whl"]
    assert written == names  # each wheel once: no scratch copy of the main wheel
    assert sorted(path.name for path in (tmp_path / "index").iterdir()) == sorted(names)
    assert set(scanned) == {wheel.name for wheel in wheels.all}  # never a written wheel
    result = run_import(per_wheel_layout([*wheels.nvidia.values(), *(tmp_path / "index").iterdir()], tmp_path / "site"))
    assert result.returncode == 0 and result.stdout.strip() == str(EXPECTED_ANSWER), result.stderr


@pytest.mark.parametrize("mode", ["prepend", "set"])  # longer: the string table grows; shorter: overwritten in place
def test_a_library_whose_rpath_the_patch_edits_moves_with_the_edit(wheels, tmp_path, mode):
    edit = rpath_edit(LIBRARY_PATHS["faketorch"], "$ORIGIN/../extra", mode)
    result = patch_wheel(
        wheels.torch, tmp_path, PatchOptions(rpath_edits=[edit], split=SPLIT, graph=read_graph(wheels.all))
    )
    with WheelReader(result.sibling, verify=True) as reader:
        dynamic = _dynamic(reader.read(MOVED))
    nvidia = [f"$ORIGIN/../../fake_nvidia/{name}/lib" for name in ("jit", "sparse", "solver", "blas")]
    expected = ["$ORIGIN/../extra", *nvidia, "$ORIGIN"] if mode == "prepend" else ["$ORIGIN/../extra"]
    assert dynamic["DT_RPATH"].split(":") == expected
    assert "DT_RUNPATH" not in dynamic
    with zipfile.ZipFile(result.path) as archive:
        assert LIBRARY_PATHS["faketorch"] not in archive.namelist()
    result = run_import(per_wheel_layout([*wheels.nvidia.values(), result.path, result.sibling], tmp_path / "site"))
    assert result.returncode == 0 and result.stdout.strip() == str(EXPECTED_ANSWER), result.stderr


def test_a_library_the_patch_deletes_does_not_move(wheels, tmp_path):
    result = patch_wheel(
        wheels.torch,
        tmp_path / "out",
        PatchOptions(delete=["faketorch/_core.so"], split=SplitRequest("faketorch-libs", move=["faketorch/*.so"])),
    )
    with zipfile.ZipFile(result.sibling) as sibling, zipfile.ZipFile(result.path) as main_wheel:
        assert [name for name in sibling.namelist() if name.endswith(".so")] == [MOVED]
        assert not [name for name in main_wheel.namelist() if name.endswith(".so")]
    with pytest.raises(UsageError, match=r"--move faketorch/_core.so matches no member"):
        patch_wheel(
            wheels.torch,
            tmp_path / "none",
            PatchOptions(
                delete=["faketorch/_core.so"], split=SplitRequest("faketorch-libs", move=["faketorch/_core.so"])
            ),
        )


def test_a_failure_after_the_sibling_is_written_leaves_neither_wheel(wheels, tmp_path, monkeypatch):
    written: list[Path] = []
    write_wheel = surgery.write_wheel

    def recording_write_wheel(reader, path, **kwargs):
        write_wheel(reader, path, **kwargs)
        written.append(path)

    monkeypatch.setattr(surgery, "write_wheel", recording_write_wheel)
    # A member under a file's path: only the main wheel's final check refuses it, after the sibling is complete.
    under_a_file = {"faketorch/__init__.py/x.py": lambda _current: b""}
    with pytest.raises(InvalidWheelError, match=r"faketorch/__init__.py is a file, not a directory"):
        patch_wheel(wheels.torch, tmp_path / "out", PatchOptions(member_edits=under_a_file, split=SPLIT))
    assert [path.name for path in written] == ["faketorch_libs-2.1.0-py3-none-linux_x86_64.whl"]
    assert not (tmp_path / "out").exists()


def test_both_wheels_install_with_pip_uv_and_installer(wheels, split_pair, tmp_path):
    """RECORD checked by pypa installer (every hash); pip and uv install them with the nvidia-like wheels into one
    site-packages, where the package imports."""
    import subprocess
    import sys

    from installer.sources import WheelFile as InstallerWheel

    uv = pytest.importorskip("uv").find_uv_bin()
    pair = [split_pair.path, split_pair.sibling]
    everything = [*wheels.nvidia.values(), *pair]
    for wheel in pair:
        with InstallerWheel.open(wheel) as source:
            source.validate_record(validate_contents=True)
    clients = {
        "pip": [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            "--quiet",
        ],
        "uv": [uv, "pip", "install", "--no-deps", "--no-index", "--quiet", "--python", sys.executable],
    }
    for client, command in clients.items():
        target = tmp_path / client
        subprocess.run([*command, "--target", str(target), *map(str, everything)], check=True)
        assert (target / MOVED).is_file() and not (target / LIBRARY_PATHS["faketorch"]).exists(), client
        result = run_import([target])
        assert result.returncode == 0 and result.stdout.strip() == str(EXPECTED_ANSWER), (client, result.stderr)


def _split_argv(wheels, dest: Path, *more: str) -> list[str]:
    argv = ["split", "--wheel", str(wheels.torch), "--move", "faketorch/lib/*.so", "--into", "faketorch-libs"]
    return [*argv, "--graph-wheels", *map(str, wheels.nvidia.values()), "--dest-dir", str(dest), *more]


def test_split_jobs_reads_on_that_many_threads_and_writes_the_same_bytes(wheels, tmp_path, monkeypatch):
    """``split --jobs N`` inflates the libraries of the wheel and its --graph-wheels (five gcc-built wheels, six
    libraries) N at a time, as ``graph --jobs`` does; one thread or several, the outputs are the same bytes."""
    threads: list[str] = []
    together = threading.Barrier(4, timeout=30)  # the first four reads of --jobs 4 must be under way at once
    real_read = elfgraph.read_library

    def recording_read(*args):
        threads.append(threading.current_thread().name)
        if jobs == "4" and len(threads) <= 4:
            together.wait()
        return real_read(*args)

    monkeypatch.setattr(elfgraph, "read_library", recording_read)
    outputs = {}
    for jobs in ("1", "4"):
        threads.clear()
        assert main(_split_argv(wheels, tmp_path / jobs, "--jobs", jobs)) == 0
        outputs[jobs] = {path.name: path.read_bytes() for path in (tmp_path / jobs).iterdir()}
        assert len(threads) == 6 and len(set(threads)) == int(jobs)
    assert len(outputs["1"]) == 2 and outputs["1"] == outputs["4"]
    # And the same bytes as from a graph read whole before the split (the hub's way).
    graph = read_graph([wheels.torch, *wheels.nvidia.values()])
    pair = patch_wheel(wheels.torch, tmp_path / "read-first", PatchOptions(split=SPLIT, graph=graph))
    assert {pair.path.name: pair.path.read_bytes(), pair.sibling.name: pair.sibling.read_bytes()} == outputs["1"]


def test_split_copies_what_stays_compressed_while_the_libraries_inflate(wheels, tmp_path, monkeypatch):
    """The main wheel's members that need no dynamic section (here ``faketorch/_core.so``, copied raw) are written
    while the libraries are still being read: the first read waits for that copy, which would never come if
    the split read its graph first."""
    copied = threading.Event()
    overlapped: list[bool] = []
    real_read, real_copy = elfgraph.read_library, WheelWriter.copy_raw_members

    def waiting_read(*args):
        if not overlapped:
            overlapped.append(copied.wait(timeout=10))
        return real_read(*args)

    def copy(self, reader, members):
        members = list(members)
        copied.set()
        return real_copy(self, reader, members)

    monkeypatch.setattr(elfgraph, "read_library", waiting_read)
    monkeypatch.setattr(WheelWriter, "copy_raw_members", copy)
    assert main(_split_argv(wheels, tmp_path / "out", "--jobs", "1")) == 0
    assert overlapped == [True]


@pytest.mark.parametrize("command", ["split", "graph"])
@pytest.mark.parametrize("jobs", ["0", "-1", "two"])
def test_jobs_that_is_no_number_of_threads_is_one_error(wheels, tmp_path, capsys, command, jobs):
    argv = {
        "split": ["split", "--wheel", str(wheels.torch), "--move", "faketorch/lib/*.so", "--into", "faketorch-libs"],
        "graph": ["graph", str(wheels.torch)],
    }[command]
    dest = ["--dest-dir", str(tmp_path / "out")] if command == "split" else []
    assert main([*argv, *dest, f"--jobs={jobs}"]) == 1
    (error,) = capsys.readouterr().err.splitlines()
    assert error == (
        f"patched-wheels: error: {command}: argument --jobs: {jobs!r} is not a number of threads (at least 1) "
        f"(see patched-wheels {command} --help)"
    )
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def with_extension(tmp_path_factory) -> Path:
    """A wheel whose tagged extension module (the biggest library) loads a library of its own, as numpy's
    ``_umath_linalg.cpython-311-x86_64-linux-gnu.so`` does."""
    from support.fakecuda import compile_shared

    build = tmp_path_factory.mktemp("extension")
    dep = blob_library(build, "libdep.so", 60_000)
    extension = blob_library(build, "_ext.cpython-311-x86_64-linux-gnu.so", 400_000, "-L.", "-l:libdep.so")
    abi3 = compile_shared(build, "_small.abi3.so", "int small(void) { return 1; }\n")
    return build_wheel(
        build,
        "extpkg",
        "1.0",
        {
            "extpkg/__init__.py": b"",
            "extpkg/_ext.cpython-311-x86_64-linux-gnu.so": extension.read_bytes(),
            "extpkg/_small.abi3.so": abi3.read_bytes(),
            "extpkg/lib/libdep.so": dep.read_bytes(),
        },
    )


def test_a_glob_that_matches_an_extension_module_is_one_error_naming_it(with_extension, tmp_path):
    """Moved, Python could no longer import it (``extpkg._ext`` would be ``extpkg_libs/_ext…``): the module is
    gone from its package, and ``doctor --run`` called the result passing since one site-packages fails alike."""
    with pytest.raises(
        UsageError,
        match=r"extpkg/_ext\.cpython-311-x86_64-linux-gnu\.so \(matched by --move "
        r"extpkg/\*\*\.so\) is a Python extension module",
    ) as caught:
        split_wheel(with_extension, tmp_path, into="extpkg-libs", move=["extpkg/**.so"])
    assert "only the libraries it loads can move" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_max_size_moves_libraries_and_leaves_extension_modules(with_extension, tmp_path):
    """The biggest member is the extension module: it stays; the library it loads moves (and fits)."""
    size = with_extension.stat().st_size
    pair = split_wheel(with_extension, tmp_path, into="extpkg-libs", max_size=size - 30_000)
    with zipfile.ZipFile(pair.sibling) as sibling:
        assert [name for name in sibling.namelist() if name.endswith(".so")] == ["extpkg_libs/lib/libdep.so"]
    with zipfile.ZipFile(pair.path) as main:
        assert {"extpkg/_ext.cpython-311-x86_64-linux-gnu.so", "extpkg/_small.abi3.so"} <= set(main.namelist())
    with pytest.raises(
        UsageError,
        match=r"after moving every shared library that can move \(1; Python extension "
        r"modules stay\); cannot fit --max-size 200000$",
    ):
        split_wheel(with_extension, tmp_path / "small", into="extpkg-libs", max_size=200_000)
