"""PEP 440 local-label suffixing and byte-preserving METADATA edits."""

from __future__ import annotations

import pytest
from packaging.version import Version

from patched_wheels.errors import InvalidWheelError, UsageError
from patched_wheels.patch.version import with_local_suffix
from patched_wheels.wheelfile.metadata import add_requires, field_values, remove_requires, set_version

# ---------------------------------------------------------------- version


@pytest.mark.parametrize(
    ("version", "suffix", "expected"),
    [
        ("2.1.0", "stripe.5", "2.1.0+stripe.5"),
        ("2.1.2+cu118", "stripe.5", "2.1.2+cu118.stripe.5"),
        ("1.0.post1.dev2", "x1", "1.0.post1.dev2+x1"),
        ("1.0", "Stripe_5", "1.0+stripe.5"),  # normalised like pip would
        ("1.0+a-b", "c", "1.0+a.b.c"),
    ],
)
def test_local_suffix(version: str, suffix: str, expected: str) -> None:
    result = with_local_suffix(version, suffix)
    assert result == expected
    assert result.count("+") == 1
    assert Version(result).public == Version(version).public


# "\u017f" (long s) and "\u212a" (Kelvin sign) match [a-z] case-insensitively unless the pattern is ASCII-only.
@pytest.mark.parametrize(
    "suffix", ["", "a+b", "stripe..5", ".stripe", "stripe.", "ümlaut", "a b", "-x", "\u017ftripe", "\u212a1"]
)
def test_invalid_suffix_is_one_line_error(suffix: str) -> None:
    with pytest.raises(UsageError, match="not a valid PEP 440 local version label") as caught:
        with_local_suffix("1.0", suffix)
    assert "\n" not in str(caught.value)


def test_invalid_base_version() -> None:
    with pytest.raises(InvalidWheelError, match="'not-a-version' is not a valid PEP 440 version"):
        with_local_suffix("not-a-version", "x")


# ---------------------------------------------------------------- METADATA

METADATA = (
    b"Metadata-Version: 2.1\n"
    b"Name: torch\n"
    b"Version: 2.1.0\n"
    b"Summary: Tensors and Dynamic neural networks\n"
    b"License: BSD-3\n"
    b"  continued license line\n"
    b"Requires-Dist: filelock\n"
    b'Requires-Dist: triton (==2.1.0) ; platform_system == "Linux" and platform_machine == "x86_64"\n'
    b"Requires-Dist: Triton_Extra[x] >=1\n"
    b"Requires-Dist: jinja2\n"
    b"Provides-Extra: opt-einsum\n"
    b"\n"
    b"Version: 9.9 in the body is not a header\n"
    b"Requires-Dist: triton in the body either\n"
)


def test_set_version_changes_only_that_line() -> None:
    edited = set_version(METADATA, "2.1.0+stripe.5", origin="m")
    assert edited == METADATA.replace(b"Version: 2.1.0\n", b"Version: 2.1.0+stripe.5\n", 1)
    assert field_values(edited, "version") == ["2.1.0+stripe.5"]


def test_set_version_keeps_crlf_and_everything_else() -> None:
    crlf = METADATA.replace(b"\n", b"\r\n")
    edited = set_version(crlf, "3", origin="m")
    assert edited == crlf.replace(b"Version: 2.1.0\r\n", b"Version: 3\r\n", 1)


def test_set_version_requires_exactly_one_header() -> None:
    with pytest.raises(InvalidWheelError, match="^x/METADATA: expected one Version header, found 0$"):
        set_version(b"Name: a\n\nbody\n", "1", origin="x/METADATA")


def test_remove_requires_matches_normalised_names_with_markers() -> None:
    edited = remove_requires(METADATA, ["TRITON"], origin="m")
    assert edited == METADATA.replace(
        b'Requires-Dist: triton (==2.1.0) ; platform_system == "Linux" and platform_machine == "x86_64"\n', b""
    )
    assert b"triton in the body either" in edited  # the body is not touched


def test_remove_requires_normalises_separators() -> None:
    edited = remove_requires(METADATA, ["triton-extra"], origin="m")
    assert b"Triton_Extra" not in edited.split(b"\n\n")[0]
    assert field_values(edited, "Requires-Dist") == [
        "filelock",
        'triton (==2.1.0) ; platform_system == "Linux" and platform_machine == "x86_64"',
        "jinja2",
    ]


def test_remove_requires_of_unknown_project_is_an_error() -> None:
    with pytest.raises(UsageError, match="^w.whl: m: no Requires-Dist for numpy to remove$"):
        remove_requires(METADATA, ["triton", "numpy"], origin="w.whl: m")


def test_add_requires_goes_after_the_last_requires_dist() -> None:
    edited = add_requires(METADATA, ["nvidia-nvjitlink-cu12==12.1.105", "x; python_version<'4'"], origin="m")
    assert edited == METADATA.replace(
        b"Requires-Dist: jinja2\n",
        b"Requires-Dist: jinja2\nRequires-Dist: nvidia-nvjitlink-cu12==12.1.105\nRequires-Dist: x; python_version<'4'\n",
    )


def test_add_requires_without_existing_ones_appends_to_headers_with_crlf() -> None:
    metadata = b"Metadata-Version: 2.1\r\nName: a\r\nVersion: 1\r\n\r\nbody\r\n"
    assert add_requires(metadata, ["b>=2"], origin="m") == (
        b"Metadata-Version: 2.1\r\nName: a\r\nVersion: 1\r\nRequires-Dist: b>=2\r\n\r\nbody\r\n"
    )


def test_add_requires_to_metadata_without_final_newline() -> None:
    assert add_requires(b"Name: a\nVersion: 1", ["b"], origin="m") == b"Name: a\nVersion: 1\nRequires-Dist: b\n"


def test_add_invalid_requirement_is_an_error() -> None:
    with pytest.raises(UsageError, match="^m: cannot add requirement 'b>=': "):
        add_requires(METADATA, ["b>="], origin="m")


def test_continuation_lines_are_kept_with_their_field() -> None:
    assert field_values(METADATA, "license") == ["BSD-3 continued license line"]
    edited = remove_requires(METADATA, ["filelock"], origin="m")
    assert b"License: BSD-3\n  continued license line\n" in edited


def test_metadata_that_is_not_utf8_is_read_without_a_traceback() -> None:
    metadata = b"Name: demo\nVersion: 1.0\xff\nRequires-Dist: a\xe9\n"
    assert field_values(metadata, "Version") == ["1.0\ufffd"]
    assert remove_requires(metadata, ["a"], origin="M") == b"Name: demo\nVersion: 1.0\xff\n"


def test_invalid_added_requirement_is_one_line() -> None:
    with pytest.raises(UsageError) as caught:
        add_requires(b"Name: demo\n", ["foo >="], origin="M")
    assert str(caught.value).startswith("M: cannot add requirement 'foo >=': Expected ")
    assert "\n" not in str(caught.value)


def test_a_deeply_nested_added_requirement_is_one_line() -> None:
    """packaging's marker parser recurses once per parenthesis (RecursionError, not InvalidRequirement)."""
    spec = "b ; " + "(" * 2000 + 'python_version > "3"' + ")" * 2000
    with pytest.raises(UsageError, match=r"^M: cannot add requirement 'b ; \(+") as caught:
        add_requires(b"Name: demo\n", [spec], origin="M")
    assert len(str(caught.value).splitlines()) == 1
