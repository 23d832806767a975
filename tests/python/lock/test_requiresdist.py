"""One wheel's Requires-Dist edges: each marker evaluated here, its extra clauses resolved, a bad entry one warning."""

from __future__ import annotations

import pytest

from patched_wheels.lock.requiresdist import read_dist
from support.closures import LINUX, dist


def test_an_extra_keeps_the_rest_of_its_marker_and_drops_what_does_not_hold_here() -> None:
    toolkit = dist(
        "toolkit",
        [
            'tk-rt==1.0; extra == "rt"',
            'tk-linux; extra == "rt" and sys_platform == "linux"',
            'tk-win; sys_platform == "win32" and extra == "rt"',
            'tk-either; python_version >= "3.9" and (extra == "rt" or extra == "all")',
            'tk-base; sys_platform == "linux"',
            "tk-always",
        ],
        ["rt", "all"],
    )
    assert [e.project for e in toolkit.requires] == ["tk-base", "tk-always"]  # type: ignore[attr-defined]
    assert [e.restored for e in toolkit.extras["rt"]] == [  # type: ignore[attr-defined]
        "tk-rt==1.0",
        'tk-linux ; sys_platform == "linux"',
        'tk-either ; python_version >= "3.9"',
    ]
    assert [e.project for e in toolkit.extras["all"]] == ["tk-either"]  # type: ignore[attr-defined]


def test_a_requirement_no_parser_reads_is_one_warning_and_left_out(capsys: pytest.CaptureFixture[str]) -> None:
    """A third party's wheel the user cannot fix must not stop the hub: one warning naming the wheel and the line."""
    toolkit = read_dist(
        "toolkit",
        "1.0",
        ["tk-base", "tk ((>= 1", 'tk-rt; extra == "rt"'],
        ["rt"],
        origin="toolkit-1.0.whl: METADATA",
        environment=LINUX,
    )
    assert [e.project for e in toolkit.requires] == ["tk-base"] and [e.project for e in toolkit.extras["rt"]] == [
        "tk-rt"
    ]
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("patched-wheels: warning: toolkit-1.0.whl: METADATA: Requires-Dist 'tk ((>= 1' ignored: "), (
        line
    )


@pytest.mark.parametrize(
    "marker",
    [
        'extra == "y" and implementation_name ~= "1"',
        'extra ~= "1.0"',
        'extra === "y"',
        '"1.0" ~= extra',
        'platform_machine ~= "1"',
        '"y" in extras',  # PEP 751's variables: packaging has no value for them in a wheel (a KeyError)
        'extra == "y" and dependency_groups == "g"',
    ],
)
def test_a_marker_that_cannot_be_evaluated_leaves_its_requirement_out_with_one_warning(
    marker: str, capsys: pytest.CaptureFixture[str]
) -> None:
    a = dist("a", [f"c; {marker}", 'd; extra == "y"', "e"], ["y"])
    assert [e.project for e in a.requires] == ["e"]  # type: ignore[attr-defined]
    assert {x: [e.project for e in v] for x, v in a.extras.items()} == {"y": ["d"]}  # type: ignore[attr-defined]
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"patched-wheels: warning: a: Requires-Dist {f'c; {marker}'!r} ignored: its marker cannot be evaluated ("
    )


@pytest.mark.parametrize(
    ("text", "restored"),
    [
        # packaging reads "\\" as one backslash; written back between bare quotes it was "\", which never closes
        (
            'tk-rt; os_name == "a\\\\" and extra == "rt" or sys_platform == "linux"',
            'tk-rt ; os_name == "a\\\\" or sys_platform == "linux"',
        ),
        (
            'tk-rt; os_name == "a\\nb" and extra == "rt" or sys_platform == "linux"',
            'tk-rt ; os_name == "a\\nb" or sys_platform == "linux"',
        ),
        (
            "tk-rt; os_name == 'say \"x\"' and extra == 'rt' or sys_platform == 'linux'",
            'tk-rt ; os_name == \'say "x"\' or sys_platform == "linux"',
        ),
    ],
    ids=["backslash", "escaped-line-break", "double-quotes"],
)
def test_an_extra_s_marker_is_written_back_as_marker_text_that_parses_to_it(text: str, restored: str) -> None:
    """What a wheel's METADATA may hold (a traceback out of the hub and ``lock``, SyntaxError: unterminated string)."""
    from packaging.markers import Marker

    (edge,) = read_dist("toolkit", "1.0", [text], ["rt"], origin="w", environment=LINUX).extras["rt"]
    assert edge.restored == restored
    marker = restored.partition(" ; ")[2]
    original = text.partition(";")[2].replace(' and extra == "rt"', "").replace(" and extra == 'rt'", "")
    assert Marker(marker) == Marker(original)


@pytest.mark.parametrize(
    "line",
    [
        'six==1.17.0 ; sys_platform == "\\"',
        'six==1.17.0 ; sys_platform == "a\0"',
        "-e git+https://g.example/x#egg=six;os_name=='\\'",
    ],
    ids=["lone-backslash", "nul", "egg-marker"],
)
def test_a_lock_line_whose_marker_packaging_cannot_read_is_one_error(tmp_path, line: str) -> None:
    """packaging hands a quoted value to ast.literal_eval: SyntaxError, which the readers let through (a traceback
    out of lock, resolve and mirror)."""
    from patched_wheels.errors import InvalidLockError
    from patched_wheels.lock.formats.registry import read_lock

    lock = tmp_path / "requirements.txt"
    lock.write_text(line + "\n")
    with pytest.raises(InvalidLockError, match=rf"^{lock}:1: "):
        read_lock(lock).pins


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("foo==1.0\nFoo==2.0\n", True),
        ('foo==1.0 ; os_name == "posix"\nfoo==2.0 ; os_name == "posix"\n', True),
        ('foo==1.0 ; python_version < "3.10"\nfoo==2.0 ; python_version >= "3.10"\n', False),  # uv's --universal
        ("foo==1.0\nfoo==1.0\n", False),
    ],
    ids=["no-marker", "same-marker", "markers-differ", "same-version"],
)
def test_two_versions_of_one_project_for_the_same_environments_are_one_error(
    tmp_path, text: str, refused: bool
) -> None:
    """pip refuses such a lock ("Cannot install foo==1.0 and foo==2.0"); lock rewrote both pins to the patched
    version, and the conflict vanished from the lock it wrote."""
    from patched_wheels.errors import InvalidLockError
    from patched_wheels.lock.formats.registry import read_lock

    lock = tmp_path / "requirements.txt"
    lock.write_text(text)
    if not refused:
        assert len(read_lock(lock).pins) == 2
        return
    with pytest.raises(
        InvalidLockError,
        match=rf"^{lock}:2: Foo==2\.0 beside foo==1\.0 \({lock}:1\) for the same|^{lock}:2: foo==2\.0 beside",
    ):
        read_lock(lock)
