"""An ``__init__.py`` nested past CPython's parser (a ``MemoryError`` from its stack, a ``RecursionError`` from
building the tree) is one error naming the wheel and the member, as a syntax error is: never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from patched_wheels.cli import main
from patched_wheels.errors import InvalidWheelError
from patched_wheels.loading.preloadfiles import add_preload_import
from support.fakecuda import build_wheel, compile_shared
from support.hostile import NESTED_PAST_THE_PARSER, skip_unless_past_the_parser

NESTED = {kind: (source + "\n").encode() for kind, source in NESTED_PAST_THE_PARSER.items()}
REASON = "cannot parse (nested too deeply for Python's parser)"


@pytest.mark.parametrize("kind", sorted(NESTED))
def test_an_init_nested_past_the_parser_is_one_error_naming_the_member(kind: str) -> None:
    source = NESTED[kind]
    skip_unless_past_the_parser(source, kind)

    with pytest.raises(InvalidWheelError) as raised:
        add_preload_import(source, where="pkg-1.0-py3-none-any.whl: pkg/__init__.py")

    assert str(raised.value) == f"pkg-1.0-py3-none-any.whl: pkg/__init__.py: {REASON}"


@pytest.mark.parametrize("kind", sorted(NESTED))
def test_split_of_a_wheel_whose_init_is_nested_past_the_parser_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    skip_unless_past_the_parser(NESTED[kind], kind)
    library = compile_shared(tmp_path, "liba.so.1", "int f(void) { return 1; }\n", "-Wl,-soname,liba.so.1")
    wheel = build_wheel(
        tmp_path, "pkg", "1.0", {"pkg/__init__.py": NESTED[kind], "pkg/lib/liba.so.1": library.read_bytes()}
    )
    out = tmp_path / "out"
    out.mkdir()

    status = main(["split", "--wheel", str(wheel), "--move", "pkg/lib/*", "--into", "pkg-libs", "--dest-dir", str(out)])

    assert status == 1
    assert capsys.readouterr().err.splitlines() == [f"patched-wheels: error: {wheel.name}: pkg/__init__.py: {REASON}"]
    assert list(out.iterdir()) == []
