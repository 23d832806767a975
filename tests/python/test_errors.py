"""The one rule by which a listing quotes names from files: each line escaped, so no name forges a line."""

from __future__ import annotations

from patched_wheels.errors import printable, printable_lines


def test_printable_lines_escapes_each_line_and_joins_them_with_line_breaks() -> None:
    lines = ["lib.so", "needs libx.so\npredicted, as is: every library loads", "\x1b[2K\x85 é", ""]
    text = printable_lines(iter(lines))  # any iterable: a listing may be built lazily
    assert text.splitlines() == [
        "lib.so",
        "needs libx.so\\npredicted, as is: every library loads",
        "\\x1b[2K\\x85 é",
    ]
    assert text == "\n".join(printable(line) for line in lines)
    assert printable_lines([]) == ""
