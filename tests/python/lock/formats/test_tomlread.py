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
from patched_wheels.lock.formats.tomlread import parse_part, split_lock, toml_parser

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
    text, head, parts = split_lock(lock, "package")
    assert head == {"version": 1, "requires-python": ">=3.9"}
    assert [parse_part(parser, lock, text, part) for part in parts] == [
        {"package": [{"name": "foo", "version": "1.0"}]}
    ]
    lock.write_text("version = = 1\n", encoding="utf-8")
    with pytest.raises(InvalidLockError, match=r"uv\.lock: not TOML"):
        split_lock(lock, "package")


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


def test_a_part_that_does_not_parse_names_the_line_the_whole_document_would(tmp_path: Path) -> None:
    """Each [[package]] table is parsed alone (a big lock's document is several times its text): a syntax error
    in the third is still reported at its line in the lock, as tomllib reports it parsing the whole."""
    lock = tmp_path / "uv.lock"
    text = LOCK + '\n[[package]]\nname = "bar"\n\n[[package]]\nname = "baz"\nversion = = "1.0"\n'
    lock.write_text(text, encoding="utf-8")
    parser = _real_parser()
    with pytest.raises(parser.TOMLDecodeError) as whole:
        parser.loads(text)
    text, _, parts = split_lock(lock, "package")
    with pytest.raises(InvalidLockError) as error:
        for part in parts:
            parse_part(parser, lock, text, part)
    assert str(error.value) == f"{lock}:11: not TOML: {whole.value}"  # the header's line, then tomllib's
    assert "line 13" in str(error.value)


def test_a_header_line_inside_a_string_does_not_cut_a_table(tmp_path: Path) -> None:
    """The part before a [[package]] line inside a multi-line string ends inside that string: refused."""
    lock = tmp_path / "uv.lock"
    lock.write_text(LOCK + 'description = """\n[[package]]\nname = "evil"\n"""\n', encoding="utf-8")
    text, _, header_parts = split_lock(lock, "package")
    parts = tuple(header_parts)
    assert len(parts) == 2
    with pytest.raises(InvalidLockError, match=r"uv\.lock:4: not TOML: Unterminated string"):
        parse_part(_real_parser(), lock, text, parts[0])


def test_packages_written_in_the_head_of_a_uv_lock_are_refused(tmp_path: Path) -> None:
    """uv writes each package under its header, and its writer rewrites those blocks; a pylock.toml's inline
    array is read (test_pylock_inline.py)."""
    lock = tmp_path / "pylock.toml"
    lock.write_text('lock-version = "1.0"\npackages = [{ name = "foo" }]\n', encoding="utf-8")
    with pytest.raises(InvalidLockError, match=r"pylock\.toml: its packages are not written each under its own"):
        split_lock(lock, "packages")


HASH = "1" * 64


@pytest.mark.parametrize(
    ("flag", "name", "text", "line"),
    [
        (
            "--pylock",
            "pylock.toml",
            'lock-version = "1.0"\ncreated-by = "x"\n[[packages]]\nname = "six"\nversion = "1.0"\nx = '
            + "9" * 4400
            + f'\nwheels = [{{ url = "https://x/six-1.0-py3-none-any.whl", hashes = {{ sha256 = "{HASH}" }} }}]\n',
            3,
        ),
        ("--uv-lock", "uv.lock", 'version = 1\nrequires-python = ">=3.8"\nx = ' + "9" * 4400 + "\n", None),
    ],
)
def test_an_integer_past_python_s_digits_is_one_error_naming_the_lock(
    tmp_path: Path, capsys, flag: str, name: str, text: str, line: int | None
) -> None:
    """tomllib raises a ValueError of int(), not a TOMLDecodeError, for an integer of more than 4,300 digits."""
    lock = tmp_path / name
    lock.write_text(text, encoding="utf-8")
    status = main(["resolve", flag, str(lock), "--pages", str(tmp_path), "--index-url", "https://x/simple"])
    err = capsys.readouterr().err
    where = f"{lock}:{line}" if line else str(lock)
    assert status == 1 and err.startswith(f"patched-wheels: error: {where}: not TOML we read: Exceeds the limit"), err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("flag", "name", "text", "where"),
    [
        (
            "--pylock",
            "pylock.toml",
            'lock-version = "1.0"\ncreated-by = "x"\n[[packages]]\nname = "six"\nversion = "1.0"\n'
            + f'wheels = [{{ path = "a\\u0000b/six-1.0-py3-none-any.whl", hashes = {{ sha256 = "{HASH}" }} }}]\n',
            "3: package 'six': wheel",
        ),
        (
            "--uv-lock",
            "uv.lock",
            'version = 1\nrequires-python = ">=3.8"\n\n[[package]]\nname = "six"\nversion = "1.0"\n'
            + 'source = { path = "a\\u0000b/six-1.0-py3-none-any.whl" }\n',
            "4: package 'six'",
        ),
    ],
)
def test_a_path_holding_a_nul_is_one_error_naming_the_lock(
    tmp_path: Path, capsys, flag: str, name: str, text: str, where: str
) -> None:
    lock = tmp_path / name
    lock.write_text(text, encoding="utf-8")
    status = main(["resolve", flag, str(lock), "--pages", str(tmp_path), "--index-url", "https://x/simple"])
    err = capsys.readouterr().err
    assert (status, err) == (
        1,
        f"patched-wheels: error: {lock}:{where}: path 'a\\x00b/six-1.0-py3-none-any.whl': a path holding a NUL byte\n",
    )


@pytest.mark.parametrize(
    ("key", "written"),
    [
        ("x" + ".a" * 40_000, "{key} = 1"),  # 80 KB: gigabytes in tomllib, a MemoryError traceback under a limit
        ("x" + ".a" * 40_000, "name = {{ {key} = 1 }}"),  # in an inline table: minutes
        ("x" + ".a" * 40_000, "[{key}]"),
        ('"x"' + '."a"' * 40_000, "{key} = 1"),
        ("source" + ".z.a" * 1_500, "{key} = 1"),  # 3,000 levels: a RecursionError traceback out of repr()
        ("x" + " . a" * 32, "{key} = 1"),
        ("a." * 40_000 + '"\\""', "{key} = 1"),  # an escaped quote in the last part: read backwards, it ended it
        ("a." * 40_000 + '"\\""', "[{key}]"),
        ("a." * 40_000 + '"x\\\\"', "{key} = 1"),  # an escaped backslash before the closing quote
    ],
    ids=[
        "bare",
        "inline-table",
        "table-header",
        "quoted",
        "deep-source",
        "spaced-33",
        "escaped-quote",
        "escaped-quote-header",
        "escaped-backslash",
    ],
)
@pytest.mark.parametrize("fmt", ["uv-lock", "pylock"])
def test_a_key_of_many_dotted_parts_is_one_error_before_tomllib_reads_it(tmp_path: Path, key, written, fmt) -> None:
    """tomllib keeps every prefix of a dotted key: k parts cost k² memory and time. Refused unparsed, whatever the
    format and wherever the key is, naming its line; the run stays small (a memory limit: no MemoryError)."""
    import resource
    import subprocess

    head = LOCK if fmt == "uv-lock" else 'lock-version = "1.0"\ncreated-by = "t"\n\n[[packages]]\nname = "foo"\n'
    path = tmp_path / ("uv.lock" if fmt == "uv-lock" else "pylock.toml")
    path.write_text(head + written.format(key=key) + "\n")
    flag = "--uv-lock" if fmt == "uv-lock" else "--pylock"
    (tmp_path / "index").mkdir()
    limit = 1 << 30  # far above what reading this lock needs, far below what tomllib would take

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "patched_wheels",
            "lock",
            flag,
            str(path),
            "--index",
            str(tmp_path / "index"),
            "--out",
            str(tmp_path / "out.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )
    line = head.count("\n") + 1
    assert (result.returncode, result.stderr) == (
        1,
        f"patched-wheels: error: {path}:{line}: a key of more than 32 dotted parts, which no lock has\n",
    )


def test_a_key_of_32_parts_is_read(tmp_path: Path) -> None:
    path = tmp_path / "uv.lock"
    path.write_text(LOCK + "x" + ".a" * 31 + " = 1\n")
    text, head, parts = split_lock(path, "package")
    (part,) = parts
    document = parse_part(toml_parser(path), path, text, part)
    assert document["package"][0]["x"]["a"]["a"]["a"] is not None
