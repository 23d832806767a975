"""A run that fails says one line, its error: never the warnings given on the way to it (issue 41).

The CLI holds every ``patched-wheels: warning:`` line until the command ends, and shows them only when it
ends without an error line. Each command family that can warn gets a warning here, then an error: the ELF
commands that judge a package (``doctor``, ``patch --preload-for``) are given a bystander wheel with a library
they cannot read, and the index commands (``index``, ``lock``) a hash cache that is no JSON.  ``graph`` and
``split`` have no warning to hold: they keep no cache, and fail on any library they cannot read.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from support.fakecuda import compile_shared
from support.wheelbuilder import build_wheel

WARNING = "patched-wheels: warning: "
ERROR = "patched-wheels: error: "


def _run(env: dict[str, str], *args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "patched_wheels", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def elf_world(tmp_path: Path) -> tuple[Path, Path]:
    """A wheel holding a library, and a bystander wheel whose library is no ELF file: a command judging the
    first wheel's package warns that the bystander is left out of its library graph."""
    library = compile_shared(tmp_path, "libdemo.so", "int demo(void) { return 1; }\n", "-Wl,-soname,libdemo.so")
    wheel = build_wheel(
        tmp_path,
        "demo",
        "1.0",
        {"demo/__init__.py": b"", "demo/libdemo.so": library.read_bytes()},
        tag="py3-none-linux_x86_64",
    )
    bystander = build_wheel(tmp_path, "junk", "1.0", {"junk/libjunk.so": b"not ELF"}, tag="py3-none-linux_x86_64")
    return wheel, bystander


def _not_a_zip(directory: Path) -> Path:
    bad = directory / "bad-1.0-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    return bad


ELF_FAILURES: dict[str, Callable[[Path, Path, Path], list[object]]] = {
    "doctor": lambda wheel, bystander, tmp: [
        *("doctor", "--package", "demo", wheel, bystander, "--preload-wheels", "nothing-*"),  # matches no wheel
    ],
    "patch": lambda wheel, bystander, tmp: [
        *("patch", "--wheel", wheel, "--dest-dir", tmp, "--suffix", "s", "--no-probe"),
        *("--preload-for", "demo", "--preload-from", wheel, bystander),  # it needs no library of the wheels given
    ],
}


@pytest.mark.parametrize("command", sorted(ELF_FAILURES))
def test_an_elf_command_that_fails_after_a_warning_says_only_its_error(
    elf_world: tuple[Path, Path], tmp_path: Path, command: str
) -> None:
    wheel, bystander = elf_world

    result = _run(dict(os.environ), *ELF_FAILURES[command](wheel, bystander, tmp_path))

    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(ERROR)


def test_an_elf_command_that_succeeds_shows_its_warning(elf_world: tuple[Path, Path]) -> None:
    wheel, bystander = elf_world

    result = _run(dict(os.environ), "doctor", "--package", "demo", wheel, bystander)

    assert result.returncode == 0
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"{WARNING}{bystander.name}: junk/libjunk.so: not an ELF file")
    assert line.endswith("demo needs nothing of junk-1.0-py3-none-linux_x86_64.whl: left out of its library graph")


@pytest.fixture
def index_with_a_broken_cache(tmp_path: Path) -> Path:
    """An index directory whose hash cache is no JSON: indexing it is one warning (and hashing again)."""
    (tmp_path / "index" / "simple").mkdir(parents=True)
    (tmp_path / "index" / "simple" / ".patched-wheels-cache.json").write_text("not JSON")
    return tmp_path / "index"


def test_an_index_command_that_fails_after_a_warning_says_only_its_error(
    index_with_a_broken_cache: Path, tmp_path: Path
) -> None:
    lock = tmp_path / "uv.lock"
    lock.write_text("version = = 1\n")

    result = _run(
        dict(os.environ), "lock", "--uv-lock", lock, "--index", index_with_a_broken_cache, "--out", tmp_path / "out.txt"
    )

    assert result.returncode == 1
    assert result.stderr.splitlines() == [f"{ERROR}{lock}: not TOML: Invalid value (at line 1, column 11)"]
    assert not (tmp_path / "out.txt").exists()

    (index_with_a_broken_cache / "simple" / ".patched-wheels-cache.json").write_text("not JSON")
    _not_a_zip(index_with_a_broken_cache)
    result = _run(dict(os.environ), "index", index_with_a_broken_cache)

    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"{ERROR}{index_with_a_broken_cache / 'bad-1.0-py3-none-any.whl'}: not a zip")


def test_an_index_command_that_succeeds_shows_its_warning(index_with_a_broken_cache: Path) -> None:
    result = _run(dict(os.environ), "index", index_with_a_broken_cache)

    assert result.returncode == 0
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"{WARNING}{index_with_a_broken_cache / 'simple' / '.patched-wheels-cache.json'}")
