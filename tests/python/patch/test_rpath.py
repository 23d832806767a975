"""RPATH edits (``patch --set-rpath/--prepend-rpath/--add-rpath``, ``rpath_edits``, the hub's ``rpath``)
on a gcc-built auditwheel-shaped wheel, checked by loading the libraries and reading them back."""

from __future__ import annotations

import subprocess
import sys
from io import BytesIO
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.sources import WheelFile as InstallerWheel

from patched_wheels.cli import main
from patched_wheels.elf import grow as elfgrow
from patched_wheels.errors import ElfError, UsageError
from patched_wheels.hub.build import PatchedWheelSpec, patch_into_index
from patched_wheels.patch.request import rpath_edit
from patched_wheels.patch.surgery import PatchOptions, patch_wheel
from patched_wheels.wheelfile import WheelReader
from support import rpathfixture
from support.fakecuda import flat_layout, per_wheel_layout, run_import
from support.indexfixtures import sha256_of
from support.rpathfixture import DATA_MEMBER, EXT_MEMBER, FIX

# The data-scheme library's way to pkg.libs: pip's prefix layout, then rules_python's repository layout.
DATA_FIX = f"$ORIGIN/../lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages/pkg.libs:$ORIGIN/../../site-packages/pkg.libs"

MISSING = "libdep.so.1: cannot open shared object file"
LAYOUTS = (flat_layout, per_wheel_layout)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The fixture wheel with ``_ext.so``'s ``$ORIGIN`` as DT_RUNPATH, as DT_RPATH, and with neither."""
    root = tmp_path_factory.mktemp("rpath")
    return {kind: rpathfixture.build_rpath_wheel(root / kind, kind=kind) for kind in rpathfixture.KINDS}


def _cli(*args: object) -> int:
    return main([str(arg) for arg in args])


def _patch(wheel: Path, dest: Path, *flags: str) -> Path:
    assert _cli("patch", "--wheel", wheel, "--dest-dir", dest, *flags) == 0
    (output,) = dest.iterdir()
    return output


def _search_tags(wheel: Path, member: str) -> dict[str, list[str]]:
    """DT_RPATH / DT_RUNPATH of ``member``, as pyelftools reads them (only the tags present)."""
    with WheelReader(wheel, verify=True) as reader:  # also checks every member against the regenerated RECORD
        elf = ELFFile(BytesIO(reader.read(member)))
    tags = elf.get_section_by_name(".dynamic").iter_tags()
    return {
        tag.entry.d_tag: getattr(tag, tag.entry.d_tag[3:].lower()).split(":")
        for tag in tags
        if tag.entry.d_tag in ("DT_RPATH", "DT_RUNPATH")
    }


def _imports(wheel: Path, root: Path) -> list[subprocess.CompletedProcess[str]]:
    return [run_import(layout([wheel], root / layout.__name__), rpathfixture.IMPORT_CODE) for layout in LAYOUTS]


@pytest.mark.parametrize(
    ("kind", "expected_tag"), [("runpath", "DT_RUNPATH"), ("rpath", "DT_RPATH"), ("none", "DT_RUNPATH")]
)
def test_set_rpath_fixes_the_import_and_keeps_the_kind(
    wheels: dict[str, Path], kind: str, expected_tag: str, tmp_path: Path
) -> None:
    for result in _imports(wheels[kind], tmp_path / "before"):
        assert result.returncode != 0 and MISSING in result.stderr, result.stderr

    patched = _patch(wheels[kind], tmp_path / "out", "--set-rpath", f"pkg/*.so={FIX}")
    assert patched.name == wheels[kind].name
    for result in _imports(patched, tmp_path / "after"):
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == str(rpathfixture.EXPECTED_ANSWER)
    assert _search_tags(patched, EXT_MEMBER) == {expected_tag: [FIX]}
    assert _search_tags(patched, DATA_MEMBER) == _search_tags(wheels[kind], DATA_MEMBER)  # not matched


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--prepend-rpath", f"pkg/*.so={FIX}"], [FIX, "$ORIGIN"]),
        (["--add-rpath", f"pkg/*.so={FIX}"], ["$ORIGIN", FIX]),
        # Edits apply in command-line order; ${ORIGIN} is the loader's other spelling.
        (
            ["--set-rpath", "pkg/_ext.so=$ORIGIN/gone", "--add-rpath", "pkg/*.so=${ORIGIN}/../pkg.libs"],
            ["$ORIGIN/gone", "${ORIGIN}/../pkg.libs"],
        ),
    ],
    ids=["prepend", "append", "in-order"],
)
def test_prepend_and_append_modes(
    wheels: dict[str, Path], flags: list[str], expected: list[str], tmp_path: Path
) -> None:
    patched = _patch(wheels["runpath"], tmp_path / "out", *flags)
    assert _search_tags(patched, EXT_MEMBER) == {"DT_RUNPATH": expected}
    for result in _imports(patched, tmp_path / "layouts"):
        assert result.returncode == 0 and result.stdout.strip() == str(rpathfixture.EXPECTED_ANSWER), result.stderr


def test_an_entry_already_there_is_kept_once_in_its_place(wheels: dict[str, Path], tmp_path: Path) -> None:
    patched = _patch(wheels["rpath"], tmp_path / "out", "--add-rpath", f"pkg/*.so=$ORIGIN:{FIX}:$ORIGIN")
    assert _search_tags(patched, EXT_MEMBER) == {"DT_RPATH": ["$ORIGIN", FIX]}


def test_data_member_for_pip_and_rules_python_layouts(wheels: dict[str, Path], tmp_path: Path) -> None:
    """The worked example of docs/rpath.md: a library under ``.data/data/`` (installed outside
    site-packages) pointed at ``<pkg>.libs`` for pip's prefix layout and rules_python's."""
    site_packages = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    entries = f"$ORIGIN:$ORIGIN/../{site_packages}/pkg.libs:$ORIGIN/../../site-packages/pkg.libs"
    # The glob names the input wheel's members, although --suffix renames the .data directory.
    patched = _patch(
        wheels["runpath"], tmp_path / "out", "--suffix", "fix.1", "--set-rpath", f"{DATA_MEMBER}={entries}"
    )
    assert patched.name == "pkg-1.0+fix.1-py3-none-linux_x86_64.whl"
    assert _search_tags(patched, "pkg-1.0+fix.1.data/data/pkgdata/libdata.so") == {"DT_RUNPATH": entries.split(":")}

    load = "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).data_answer())"
    for name, wheel in (("before", wheels["runpath"]), ("after", patched)):
        # pip into a prefix: data files land in <prefix>/, the package in <prefix>/lib/pythonX.Y/site-packages.
        prefix = tmp_path / name / "prefix"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--no-index",
                "--disable-pip-version-check",
                "--quiet",
                "--prefix",
                str(prefix),
                str(wheel),
            ],
            check=True,
        )
        assert (prefix / site_packages / "pkg.libs/libdep.so.1").is_file()
        # rules_python's whl_library installs with these schemes (0.22.1 through 1.x): data/ beside site-packages/.
        repository = tmp_path / name / "whl_library"
        schemes = {
            "purelib": "/site-packages",
            "platlib": "/site-packages",
            "headers": "/include",
            "scripts": "/bin",
            "data": "/data",
        }
        with InstallerWheel.open(wheel) as source:
            install(source, SchemeDictionaryDestination(schemes, "/dev/null", "posix", destdir=str(repository)), {})
        for library in (prefix / rpathfixture.DATA_INSTALL_PATH, repository / "data" / rpathfixture.DATA_INSTALL_PATH):
            result = subprocess.run(
                [sys.executable, "-c", load, str(library)], capture_output=True, text=True, check=False
            )
            if name == "before":
                assert result.returncode != 0 and MISSING in result.stderr, (library, result.stderr)
            else:
                assert result.returncode == 0, (library, result.stderr)
                assert result.stdout.strip() == str(rpathfixture.EXPECTED_DATA_ANSWER)


def test_doctor_and_graph_see_the_edited_rpath(
    wheels: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = wheels["runpath"]
    assert _cli("doctor", "--no-cache", original) == 1
    report = capsys.readouterr().out
    assert f"{EXT_MEMBER} ({original.name}): needs libdep.so.1 from {rpathfixture.DEP_MEMBER}" in report, report
    assert "not on its RUNPATH ($ORIGIN)" in report

    # The data-scheme library is judged where rules_python puts it (the wheel's data/, beside site-packages/).
    assert f"{DATA_MEMBER} ({original.name}): needs libdep.so.1 from {rpathfixture.DEP_MEMBER}" in report, report

    patched = _patch(original, tmp_path / "out", "--set-rpath", f"pkg/*.so={FIX}")
    capsys.readouterr()
    assert _cli("doctor", "--no-cache", patched) == 1
    assert capsys.readouterr().out.strip().splitlines() == [
        f"predicted: {DATA_MEMBER} ({patched.name}): needs libdep.so.1 from {rpathfixture.DEP_MEMBER} ({patched.name}), "
        "not on its RUNPATH ($ORIGIN) in a per-wheel layout",
        "predicted, as is: 1 library fails to load with one directory per wheel",
    ]
    both = _patch(
        original,
        tmp_path / "both",
        "--set-rpath",
        f"pkg/*.so={FIX}",
        "--set-rpath",
        f"{DATA_MEMBER}=$ORIGIN:{DATA_FIX}",
    )
    capsys.readouterr()
    assert _cli("doctor", "--no-cache", both) == 0
    assert capsys.readouterr().out.strip() == "predicted, as is: every library loads with one directory per wheel"
    assert _cli("graph", both) == 0
    assert f"{DATA_MEMBER} ({both.name})\n  runpath: $ORIGIN:{DATA_FIX}\n" in capsys.readouterr().out
    assert _cli("graph", patched) == 0
    assert f"{EXT_MEMBER} ({patched.name})\n  runpath: {FIX}\n" in capsys.readouterr().out


def test_library_api_is_reproducible_and_matches_the_cli(wheels: dict[str, Path], tmp_path: Path) -> None:
    edits = [rpath_edit("pkg/*.so", FIX, "append")]
    first = patch_wheel(wheels["rpath"], tmp_path / "one", PatchOptions(suffix="s.1", rpath_edits=edits))
    second = patch_wheel(wheels["rpath"], tmp_path / "two", PatchOptions(suffix="s.1", rpath_edits=edits))
    by_cli = _patch(wheels["rpath"], tmp_path / "cli", "--suffix", "s.1", "--add-rpath", f"pkg/*.so={FIX}")
    assert first.requirement == "pkg==1.0+s.1"
    assert sha256_of(first.path) == sha256_of(second.path) == sha256_of(by_cli)
    assert _search_tags(first.path, EXT_MEMBER) == {"DT_RPATH": ["$ORIGIN", FIX]}
    with WheelReader(wheels["rpath"]) as original, WheelReader(first.path) as patched:
        changed = [name for name in original.members() if name in patched and original.read(name) != patched.read(name)]
    assert changed == [EXT_MEMBER]  # of the members not renamed with the version (.dist-info, .data)
    with pytest.raises(UsageError, match=r"^rpath pkg/\*\.so=/usr/lib: entry '/usr/lib' must start with \$ORIGIN"):
        rpath_edit("pkg/*.so", "/usr/lib")


def test_hub_spec_applies_rpath_in_glob_order(wheels: dict[str, Path], tmp_path: Path) -> None:
    # Both globs match _ext.so; they apply in sorted glob order ("pkg/*" before "pkg/_ext.so").
    spec = PatchedWheelSpec(
        name="pkg",
        wheel=wheels["runpath"],
        suffix="test.1",
        rpath={"pkg/_ext.so": "$ORIGIN/second", "pkg/*.so": FIX},
        rpath_mode="prepend",
    )
    assert patch_into_index(spec, [wheels["runpath"]], tmp_path / "index") == ["pkg==1.0+test.1"]
    (patched,) = (tmp_path / "index").glob("*.whl")
    assert _search_tags(patched, EXT_MEMBER) == {"DT_RUNPATH": ["$ORIGIN/second", FIX, "$ORIGIN"]}

    bad = PatchedWheelSpec(
        name="pkg", wheel=wheels["runpath"], suffix="t", rpath={"pkg/*.so": FIX}, rpath_mode="replace"
    )
    with pytest.raises(UsageError, match=r"^patched_wheel pkg: rpath 'pkg/\*\.so': rpath mode must be one of"):
        patch_into_index(bad, [wheels["runpath"]], tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


BAD_EDITS = {
    "no match": (
        ["--set-rpath", "nothing/*.so=$ORIGIN"],
        "--set-rpath 'nothing/*.so=$ORIGIN': matches no member of pkg-1.0-",
    ),
    "not ELF": (
        ["--set-rpath", f"pkg/*={FIX}"],
        "pkg-1.0-py3-none-linux_x86_64.whl: pkg/__init__.py is not an ELF file",
    ),
    "absolute": (
        ["--set-rpath", "pkg/*.so=$ORIGIN:/usr/lib"],
        "entry '/usr/lib' must start with $ORIGIN: an absolute path",
    ),
    "relative": (
        ["--add-rpath", "pkg/*.so=../pkg.libs"],
        "entry '../pkg.libs' must start with $ORIGIN: a relative path",
    ),
    "other token": (["--prepend-rpath", "pkg/*.so=$ORIGINAL/x"], "entry '$ORIGINAL/x' must start with $ORIGIN"),
    "empty entry": (["--set-rpath", f"pkg/*.so=$ORIGIN::{FIX}"], "empty entry in '$ORIGIN::$ORIGIN/../pkg.libs'"),
    "no entries": (["--set-rpath", "pkg/*.so="], "--set-rpath 'pkg/*.so=': no entries"),
    "no equals": (["--set-rpath", "pkg/*.so"], "--set-rpath 'pkg/*.so': expected GLOB=ENTRIES"),
    "empty glob": (["--add-rpath", "=$ORIGIN"], "--add-rpath '=$ORIGIN': empty GLOB"),
    # Written as a C string, a NUL cut the search path: $ORIGIN/a\0b became $ORIGIN/a.
    "NUL": (["--set-rpath", "pkg/*.so=$ORIGIN/a\0b"], "entries '$ORIGIN/a\\x00b': holds '\\x00', a control character"),
    "line break": (["--set-rpath", "pkg/*.so=$ORIGIN/a\nb"], "holds '\\n', a control character"),
    "unclosed bracket": (["--set-rpath", "[" * 1000 + "=$ORIGIN"], "GLOB '[[[["),
    "long glob": (["--set-rpath", "*" * 2000 + "=$ORIGIN"], "longer than 1024 characters"),
}


@pytest.mark.parametrize("case", list(BAD_EDITS))
def test_bad_edits_are_one_error_line_and_leave_nothing(
    case: str, wheels: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags, message = BAD_EDITS[case]
    out = tmp_path / "out"
    assert _cli("patch", "--wheel", wheels["runpath"], "--dest-dir", out, *flags) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("patched-wheels: error: "), captured.err
    assert message in captured.err, captured.err
    assert case != "unclosed bracket" or "an unclosed '['" in captured.err
    assert not out.exists() or list(out.iterdir()) == []


def test_a_layout_the_editor_refuses_is_one_error_naming_the_member(
    wheels: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(elfgrow, "_MAX_BSS", 0)  # _ext.so's .bss (8 bytes) is then too big to write out
    with pytest.raises(
        ElfError, match=rf"pkg-1.0-py3-none-linux_x86_64.whl: {EXT_MEMBER}: the last PT_LOAD's .bss \(8 bytes\)"
    ):
        patch_wheel(wheels["runpath"], tmp_path / "out", PatchOptions(rpath_edits=[rpath_edit("pkg/*.so", FIX)]))
    assert not (tmp_path / "out").exists()
