"""A pylock.toml whose ``packages`` is an inline array of tables is valid TOML, read as the same lock written
with one ``[[packages]]`` header per package (issue 52, cause 10: it was refused since the per-table parser)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from patched_wheels.errors import InvalidLockError
from patched_wheels.lock.formats.pylock import read_pylock
from support.indexfixtures import run_cli

try:
    import tomllib
except ImportError:  # Python < 3.11: its upstream, the CLI's dependency there
    import tomli as tomllib  # type: ignore[no-redef]

HEAD = 'lock-version = "1.0"\ncreated-by = "hand"\n'
KEYS = [
    ['name = "alpha"', 'version = "1.0"'],
    # Brackets, commas, quotes and "#" inside strings; a marker that holds; a literal string.
    ["name = 'beta'", 'version = "2.0"', "marker = \"python_version >= '3' and extra != ',]}#'\""],
]
for number, keys in enumerate(KEYS):
    name = ("alpha-1.0", "beta-2.0")[number]
    keys.append(
        f'wheels = [{{ url = "https://files.example/{name}-py3-none-any.whl", hashes = {{ sha256 = "{"ab"[number] * 64}" }} }}]'
    )
PACKAGES = ["{ " + ", ".join(keys) + " }" for keys in KEYS]
HEADERS_FORM = HEAD + "".join("\n[[packages]]\n" + "\n".join(keys) + "\n" for keys in KEYS)


@pytest.mark.parametrize(
    "text",
    [
        HEAD + f"packages = [{', '.join(PACKAGES)}]\n",
        HEAD + "packages = [  # the packages, [one] per line\n" + "".join(f"  {p},  # ]\n" for p in PACKAGES) + "]\n",
        f'packages = [\n{PACKAGES[0]},\n\n{PACKAGES[1]}\n]\n{HEAD}[tool.x]\npackages = "not these"\n',
    ],
    ids=["one-line", "commented", "before-the-head"],
)
def test_an_inline_array_of_packages_is_read_as_the_same_lock(tmp_path: Path, text: str) -> None:
    inline, headers = tmp_path / "inline.toml", tmp_path / "headers.toml"
    inline.write_text(text, encoding="utf-8")
    headers.write_text(HEADERS_FORM, encoding="utf-8")
    assert tomllib.loads(text)["packages"] == tomllib.loads(HEADERS_FORM)["packages"]  # the same TOML packages

    read, expected = read_pylock(inline, {}), read_pylock(headers, {})

    assert [(p.name, p.version, p.hashes, p.files) for p in read.pins] == [
        (p.name, p.version, p.hashes, p.files) for p in expected.pins
    ]
    lines = text.splitlines()
    assert [
        f"name = {pin.head!r}".replace("'", "") in lines[pin.span.start].replace('"', "").replace("'", "")
        for pin in read.pins
    ] == [True, True]  # errors name the element's line


def test_lock_writes_a_requirements_lock_of_an_inline_pylock(tmp_path: Path) -> None:
    lock = tmp_path / "pylock.toml"
    lock.write_text(HEAD + f"packages = [{', '.join(PACKAGES)}]\n", encoding="utf-8")
    (tmp_path / "index").mkdir()
    result = run_cli("lock", "--pylock", lock, "--index", tmp_path / "index", "--out", tmp_path / "out.txt")
    assert result.returncode == 0, result.stderr
    written = (tmp_path / "out.txt").read_text(encoding="utf-8")
    assert "alpha==1.0 \\\n" in written and "beta==2.0 \\\n" in written, written


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (HEAD + f"packages = [{PACKAGES[0]},, {PACKAGES[1]}]\n", "not TOML"),
        (HEAD + f"packages = [{PACKAGES[0]}\n", "not TOML"),
        (HEAD + 'packages = [{ name = "a\n"}]\n', "not TOML"),
        (HEAD + f"packages = [{PACKAGES[0]}, 3]\n", "must be a table"),
        (HEAD + f"packages = [{PACKAGES[0]}]\npackages = []\n", "not TOML"),
    ],
    ids=["empty-element", "unclosed", "string-with-newline", "not-a-table", "twice"],
)
def test_an_inline_array_toml_refuses_is_one_error(tmp_path: Path, text: str, message: str) -> None:
    lock = tmp_path / "pylock.toml"
    lock.write_text(text, encoding="utf-8")
    with pytest.raises(tomllib.TOMLDecodeError if message == "not TOML" else Exception):
        packages = tomllib.loads(text)["packages"]
        assert all(isinstance(package, dict) for package in packages)
    with pytest.raises(InvalidLockError, match=message):
        read_pylock(lock, {})


PIECES = [
    '{ name = "a" }',
    "{ name = 'b]', v = [1, [2, 3]] }",
    '{ name = "c\\"],#" }',
    '{ s = """x\n]"""}',
    "{ s = '''#,]'''}",
    "{ s = '''x'''''}",
    "# c ] , {\n",
    ",",
    ", ",
    "\n",
    "\r\n",
    "\r",
    "\t",
    "\x0b",
    "]",
    "[",
    "{",
    '"',
    "'",
    "3",
    "#\x01\n",
]


def test_an_inline_array_is_read_as_a_whole_parse_reads_it(tmp_path: Path) -> None:
    """The element scan against tomllib parsing the whole document, on arrays of strings holding brackets, commas
    and quotes, comments, nested arrays, line ends and characters TOML refuses: the same packages, or an error."""
    from patched_wheels.lock.formats.tomlread import parse_part, split_lock, tables

    rng = random.Random(52)
    lock = tmp_path / "pylock.toml"
    for _ in range(3000):
        body = "".join(rng.choice(PIECES) for _ in range(rng.randrange(6)))
        text = f"{HEAD}packages = [{body}]\ntail = 1\n"
        lock.write_bytes(text.encode())
        try:
            expected: object = tomllib.loads(text)["packages"]
        except tomllib.TOMLDecodeError:
            expected = "error"
        try:
            source, head, parts = split_lock(lock, "packages", inline=True)
            got: object = [p for part in parts for p in tables(parse_part(tomllib, lock, source, part), "packages", "")]
            assert head == {"lock-version": "1.0", "created-by": "hand", "tail": 1}
        except InvalidLockError:
            got = "error"
        assert (
            got == expected
            or expected != "error"
            and got == "error"
            and any(
                not isinstance(package, dict)
                for package in expected  # type: ignore[union-attr]
            )
        ), repr(text)
