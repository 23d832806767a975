"""METADATA's header fields as stored: a field folded over many lines is read in one pass."""

from __future__ import annotations

from patched_wheels.wheelfile import metadata
from patched_wheels.wheelfile.metadata import field_values, set_version


def test_a_field_folded_over_many_lines_is_one_field_built_once(monkeypatch) -> None:
    """A few kB of wheel held a METADATA with a field folded over 800,000 lines: its bytes were joined again for
    each line (a minute of every command that opened it).  Each field is now built once, from where it starts."""
    built = []
    real = metadata._Field

    def counted(name: str, raw: bytes) -> metadata._Field:
        built.append(name)
        return real(name, raw)

    monkeypatch.setattr(metadata, "_Field", counted)
    folded = b"Summary: a\n" + b" b\n" * 5000 + b"\tc\r\n"
    data = b"Metadata-Version: 2.1\nName: demo\n" + folded + b"Version: 1.0\n\nbody\n"
    fields, rest = metadata._split(data)
    assert [(field.name, field.raw) for field in fields] == [
        ("metadata-version", b"Metadata-Version: 2.1\n"),
        ("name", b"Name: demo\n"),
        ("summary", folded),
        ("version", b"Version: 1.0\n"),
    ]
    assert rest == b"\nbody\n"
    assert built == ["metadata-version", "name", "summary", "version"]
    assert field_values(data, "Summary") == ["a " + "b " * 5000 + "c"]
    assert set_version(data, "1.0+x.1", origin="m") == data.replace(b"Version: 1.0\n", b"Version: 1.0+x.1\n")


def test_continuation_lines_before_any_field_and_a_missing_final_newline_are_kept() -> None:
    data = b" stray\nName: demo\n x"
    fields, rest = metadata._split(data)
    assert [(field.name, field.raw) for field in fields] == [("", b" stray\n"), ("name", b"Name: demo\n x")]
    assert rest == b""
