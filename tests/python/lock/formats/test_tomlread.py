"""TOML locks on every supported Python: tomllib (3.11+), else tomli, else one error line naming the lock.

Under Python 3.9/3.10 (tools/test runs this suite there too) the real tomli is what reads every uv.lock
and pylock.toml of test_uvlock.py, `lock --uv-lock` included; here the fallback order itself is pinned.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from patched_wheels.cli import main
from patched_wheels.errors import InvalidLockError
from patched_wheels.lock.formats.tomlread import load_toml, toml_parser

LOCK = 'version = 1\nrequires-python = ">=3.9"\n\n[[package]]\nname = "foo"\nversion = "1.0"\n'


def _real_parser():
    """tomllib where it exists, else the installed tomli (the CLI's dependency below 3.11)."""
    try:
        import tomllib

        return tomllib
    except ImportError:
        import tomli

        return tomli


def test_without_tomllib_tomli_reads_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parser = _real_parser()
    monkeypatch.setitem(sys.modules, "tomllib", None)  # as on Python < 3.11: `import tomllib` fails
    monkeypatch.setitem(sys.modules, "tomli", parser)  # tomli is tomllib's upstream: the same API
    lock = tmp_path / "uv.lock"
    lock.write_text(LOCK, encoding="utf-8")
    assert toml_parser(lock) is parser
    assert load_toml(lock)[1]["package"] == [{"name": "foo", "version": "1.0"}]
    lock.write_text("version = = 1\n", encoding="utf-8")
    with pytest.raises(InvalidLockError, match=r"uv\.lock: not TOML"):
        load_toml(lock)


def test_without_either_the_cli_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "tomllib", None)
    monkeypatch.setitem(sys.modules, "tomli", None)
    lock = tmp_path / "uv.lock"
    lock.write_text(LOCK, encoding="utf-8")
    with pytest.raises(InvalidLockError, match="needs tomli"):
        toml_parser(lock)
    (tmp_path / "index").mkdir()
    status = main(
        ["lock", "--uv-lock", str(lock), "--index", str(tmp_path / "index"), "--out", str(tmp_path / "out.txt")]
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if line]
    assert status != 0
    assert errors == [
        f"patched-wheels: error: {lock}: reading a TOML lock below Python 3.11 needs tomli (pip install tomli)"
    ]
    assert not (tmp_path / "out.txt").exists()
