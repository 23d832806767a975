"""The lock decision (``lock.plan.plan_lock``), table-driven: lock text and index files in memory, no pip,
no disk. What real pip makes of the rendered result is tested in test_apply.py."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.tags import parse_tag
from packaging.version import Version

from patched_wheels.errors import InvalidLockError, UsageError
from patched_wheels.index.simple import IndexedFile
from patched_wheels.lock.formats.requirements import parse_requirements
from patched_wheels.lock.model import marker_holds
from patched_wheels.lock.plan import LockOptions, plan_lock

INDEX = Path("/idx")
A, B = "a" * 64, "b" * 64


def indexed(filename: str, requires: tuple[str, ...] = ()) -> IndexedFile:
    """An index file as build_index describes it, its digest derived from its name."""
    name, version, *rest = filename[: -len(".whl")].split("-")
    tags = frozenset(parse_tag("-".join(rest[-3:])))
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    return IndexedFile(
        filename, name.lower().replace("_", "-"), Version(version), tags, sha(filename), None, metadata.encode()
    )


def sha(filename: str) -> str:
    return hashlib.sha256(filename.encode()).hexdigest()


FOO = indexed("foo-1.0+s.1-py3-none-any.whl")
FOO_LINUX = indexed("foo-1.0+s.1-cp311-cp311-manylinux_2_17_x86_64.whl")
URL = f"file:///idx/{FOO.filename}"
LINUX = 'sys_platform == "linux" and platform_machine == "x86_64"'


def plan(text: str, files=(FOO,), **options):
    return plan_lock(parse_requirements(text, "in.txt").lock, list(files), LockOptions(index_dir=INDEX, **options))


# (id, lock text, index files, options, the requirements the plan writes, in order)
CASES = [
    ("unhashed", "foo==1.0\nbar==2.0\n", (FOO,), {}, [(f"foo @ {URL}#sha256={FOO.sha256}", ())]),
    ("hashed", f"foo==1.0 --hash=sha256:{A}\n", (FOO,), {}, [(f"foo @ {URL}", (f"sha256:{FOO.sha256}",))]),
    (
        "name-as-written",
        f"Foo_==1.0 --hash=sha256:{A}\n".replace("Foo_", "FOO"),
        (FOO,),
        {},
        [(f"FOO @ {URL}", (f"sha256:{FOO.sha256}",))],
    ),
    ("extras", "foo[bar,Baz]==1.0\n", (FOO,), {}, [(f"foo[bar,Baz] @ {URL}#sha256={FOO.sha256}", ())]),
    ("extras-spaced", "foo [ bar ]==1.0\n", (FOO,), {}, [(f"foo [ bar ] @ {URL}#sha256={FOO.sha256}", ())]),
    (
        "marker-as-written",
        "foo==1.0 ; python_version >= '3.8'\n",
        (FOO,),
        {},
        [(f"foo @ {URL}#sha256={FOO.sha256} ; python_version >= '3.8'", ())],
    ),
    (
        "extras-marker-hashes",
        f"foo[bar]==1.0 ; python_version >= '3.8' --hash=sha256:{A} --hash=sha256:{B}\n",
        (FOO,),
        {},
        [(f"foo[bar] @ {URL} ; python_version >= '3.8'", (f"sha256:{FOO.sha256}",))],
    ),
    (
        "other-platforms",
        f"foo[bar]==1.0 ; python_version >= '3.8' --hash=sha256:{A} --hash=sha256:{B}\n",
        (FOO_LINUX,),
        {"replaced": {"foo": frozenset({A})}},
        [
            (
                f"foo[bar] @ file:///idx/{FOO_LINUX.filename} ; (python_version >= '3.8') and "
                f'(python_version == "3.11" and ({LINUX}))',
                (f"sha256:{FOO_LINUX.sha256}",),
            ),
            (
                "foo[bar]==1.0 ; (python_version >= '3.8') and "
                '(python_version != "3.11" or (sys_platform != "linux" or platform_machine != "x86_64"))',
                (f"sha256:{B}",),
            ),
        ],
    ),
    # The hub names the one wheel it fetched; the pin's other hash (pip-compile --generate-hashes writes the
    # sdist's) goes too: a pure wheel serves every platform, and pip never builds an sdist when a wheel fits.
    (
        "pure-replaces-the-sdist",
        f"foo==1.0 --hash=sha256:{A} --hash=sha256:{B}\n",
        (FOO,),
        {"replaced": {"foo": frozenset({A})}},
        [(f"foo @ {URL}", (f"sha256:{FOO.sha256}",))],
    ),
    (
        "direct-reference-file",
        f"foo @ file:///w/foo-1.0-py3-none-any.whl --hash=sha256:{A}\n",
        (FOO,),
        {},
        [(f"foo @ {URL}", (f"sha256:{FOO.sha256}",))],
    ),
    (
        "direct-reference-https",
        "Foo[x] @ https://h.example/foo-1.0-py3-none-any.whl ; os_name == 'posix'\n",
        (FOO,),
        {},
        [(f"Foo[x] @ {URL}#sha256={FOO.sha256} ; os_name == 'posix'", ())],
    ),
    (
        "direct-reference-index-url",
        f"foo[x] @ https://h.example/foo-1.0-py3-none-any.whl --hash=sha256:{A}\n",
        (FOO,),
        {"index_option": "index-url"},
        [("foo[x]==1.0+s.1", (f"sha256:{FOO.sha256}",))],
    ),
    (
        "direct-reference-unpatched",
        "bar @ https://h.example/bar-2.0-py3-none-any.whl\nfoo @ https://h/foo-1.0+s.1-py3-none-any.whl\n",
        (FOO,),
        {},
        [],
    ),
    (
        "every-pin-served",
        f"bar @ https://h.example/bar-2.0-py3-none-any.whl --hash=sha256:{sha('bar-2.0-py3-none-any.whl')}\n"
        f"foo==1.0 --hash=sha256:{A}\nbaz==3.0 --hash=sha256:{sha('baz-3.0-py3-none-any.whl')}\n",
        (FOO, indexed("bar-2.0-py3-none-any.whl"), indexed("baz-3.0-py3-none-any.whl")),
        {"every_pin_served": True},
        [("bar==2.0", (f"sha256:{sha('bar-2.0-py3-none-any.whl')}",)), (f"foo @ {URL}", (f"sha256:{FOO.sha256}",))],
    ),
    (
        "mirrored-original",
        f"foo==1.0 --hash=sha256:{sha('foo-1.0-py3-none-any.whl')}\n",
        (FOO, indexed("foo-1.0-py3-none-any.whl")),
        {"index_option": "extra-index-url"},
        [],
    ),
    (
        "sibling",
        "foo==1.0 ; sys_platform == 'linux'\n",
        (indexed("foo-1.0+s.1-py3-none-any.whl", ("foo-libs==1.0+s.1",)), indexed("foo_libs-1.0+s.1-py3-none-any.whl")),
        {"index_option": "find-links"},
        [("foo-libs==1.0+s.1 ; sys_platform == 'linux'", ())],
    ),
]


@pytest.mark.parametrize(
    "text, files, options, expected", [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_plan_writes(text, files, options, expected) -> None:
    result = plan(text, files, **options)
    written = [(line.requirement, line.hashes) for edit in result.edits for line in edit.lines] + [
        (line.requirement, line.hashes) for line in result.added
    ]
    assert written == expected
    for requirement, _ in written:  # every line is PEP 508 pip reads, markers included
        marker = requirement.partition(" ; ")[2]
        if marker:
            Marker(marker)


def test_split_markers_cover_every_environment_once() -> None:
    result = plan(f"foo==1.0 --hash=sha256:{A} --hash=sha256:{B}\n", (FOO_LINUX,), replaced={"foo": frozenset({A})})
    patched, rest = (Marker(line.marker) for line in result.edits[0].lines)
    for system, machine, python in [
        ("linux", "x86_64", "3.11"),
        ("linux", "x86_64", "3.12"),
        ("darwin", "arm64", "3.11"),
    ]:
        env = {"sys_platform": system, "platform_machine": machine, "python_version": python}
        assert patched.evaluate(env) != rest.evaluate(env), env


FOO_BSD = indexed("foo-1.0+s.1-cp311-cp311-freebsd_13_amd64.whl")


def test_a_wheel_of_a_platform_no_marker_names_replaces_the_whole_pin() -> None:
    """markers.py cannot say where a FreeBSD wheel installs; a one-platform lock needs no marker, so it is locked."""
    for options in ({}, {"index_option": "extra-index-url"}):
        (edit,) = plan(f"foo==1.0 --hash=sha256:{A}\n", (FOO_BSD,), **options).edits
        assert edit.kept == () and edit.version == FOO_BSD.version, options


def test_keeping_other_hashes_beside_such_a_wheel_is_one_error_naming_the_pin_and_the_wheel() -> None:
    with pytest.raises(
        InvalidLockError,
        match=rf"^in\.txt:1: {re.escape(FOO_BSD.filename)}: platform tag freebsd_13_amd64: .* 1 other hashes",
    ) as caught:
        plan(f"foo==1.0 --hash=sha256:{A} --hash=sha256:{B}\n", (FOO_BSD,), replaced={"foo": frozenset({A})})
    assert len(str(caught.value).splitlines()) == 1


# (id, options the lock names, index option, the option line added, kinds of the lines dropped)
OPTION_CASES = [
    ("direct-no-index", "--no-index\n--find-links ./orig\n", "direct", None, []),
    ("direct-upstream", "", "direct", "--index-url=https://up.example/simple", []),
    ("extra-no-index", "--no-index\n--find-links ./orig\n", "extra-index-url", "--find-links=file:///idx", []),
    (
        "index-url-no-index",
        "--no-index\n--find-links ./orig\n",
        "index-url",
        "--find-links=file:///idx",
        ["find-links"],
    ),
    ("find-links-no-index", "--no-index\n--find-links ./orig\n", "find-links", "--find-links=file:///idx", []),
    (
        "index-url",
        "-i https://pypi.example/simple\n--extra-index-url=https://x.example\n",
        "index-url",
        "--index-url=file:///idx/simple",
        ["index-url", "extra-index-url"],
    ),
    ("index-url-again", "--index-url=file:///idx/simple\n", "index-url", None, []),
    ("extra", "-i https://pypi.example/simple\n", "extra-index-url", "--extra-index-url=file:///idx/simple", []),
]


@pytest.mark.parametrize(
    "options, mode, added, dropped", [c[1:] for c in OPTION_CASES], ids=[c[0] for c in OPTION_CASES]
)
def test_plan_index_option(options: str, mode: str, added: str | None, dropped: list[str]) -> None:
    result = plan(options + "foo==1.0\n", index_option=mode, upstream_index_url="https://up.example/simple")
    assert result.option == added
    assert [option.kind for option in result.dropped] == dropped


@pytest.mark.parametrize(
    "options, added, dropped",
    [
        ("", "--index-url=file:///idx/simple", []),
        (
            "-i https://pypi.example/simple\n--extra-index-url=https://x.example\n",
            "--index-url=file:///idx/simple",
            ["index-url", "extra-index-url"],
        ),
        ("--no-index\n--find-links ./orig\n", "--find-links=file:///idx", ["find-links"]),
    ],
)
def test_every_pin_served_sends_pip_to_the_index_alone(options: str, added: str, dropped: list[str]) -> None:
    """A hub for a rules_python that installs with pip serves every pin: pip must read no other index (nor the
    upstream one the hub resolved from), so that a rebuild after `clean --expunge` reads nothing from the network."""
    result = plan(options + "foo==1.0\n", every_pin_served=True, upstream_index_url="https://up.example/simple")
    assert result.option == added
    assert [option.kind for option in result.dropped] == dropped
    with pytest.raises(UsageError, match="only in direct"):
        plan("foo==1.0\n", every_pin_served=True, index_option="extra-index-url")


@pytest.mark.parametrize(
    "value",
    [
        "https://x\n--trusted-host=evil",
        "https://x\r",
        "https://x\0",
        "https://x y",
        "https://x\u2028y",
        "",
        "https://x\\",
    ],
)
def test_values_written_into_a_lock_are_one_token(value: str) -> None:
    with pytest.raises(UsageError, match=r"^--upstream-index-url '.*': (holds|is empty|ends with)") as caught:
        plan("foo==1.0\n", upstream_index_url=value)
    assert len(str(caught.value).splitlines()) == 1
    with pytest.raises(UsageError, match=r"^--index '/i\\ndx'"):
        plan_lock(parse_requirements("foo==1.0\n", "in.txt").lock, [FOO], LockOptions(index_dir=Path("/i\ndx")))


@pytest.mark.parametrize(
    "text, files, message",
    [
        (
            "foo @ https://h.example/foo-1.0.tar.gz\n",
            (FOO,),
            r"in.txt:1: foo @ https://h.example/foo-1.0.tar.gz: names no wheel",
        ),
        ("foo>=1\n", (FOO,), r"in.txt:1: foo must be pinned with =="),
        (
            "foo==1.0\n",
            (FOO, indexed("foo-1.0+s.2-py3-none-any.whl")),
            r"in.txt:1: the index has foo 1.0\+s.1, 1.0\+s.2",
        ),
    ],
)
def test_plan_errors_name_the_pin(text: str, files, message: str) -> None:
    with pytest.raises(InvalidLockError, match=message):
        plan(text, files)


def test_unpatched_non_pins_pass_through() -> None:
    """A project the index does not have is not ours to judge: ``bar>=1`` stays as written."""
    assert plan("bar>=1\nfoo==1.0\n").edits[0].pin.name == "foo"


DEEP_MARKER = "(" * 2000 + 'python_version > "3"' + ")" * 2000
"""packaging's marker parser recurses once per parenthesis: this depth ends in RecursionError."""


def test_a_deeply_nested_marker_in_a_lock_is_one_error_line() -> None:
    with pytest.raises(InvalidLockError, match=r"^in\.txt:2: 'foo==1\.0 ; \(+") as caught:
        parse_requirements(f"bar==2.0\nfoo==1.0 ; {DEEP_MARKER}\n", "in.txt")
    assert len(str(caught.value).splitlines()) == 1


def test_a_deeply_nested_marker_of_a_uv_lock_or_pylock_is_one_error_line() -> None:
    with pytest.raises(InvalidLockError, match=r"^uv\.lock: foo: marker '\(+") as caught:
        marker_holds(DEEP_MARKER, None, where="uv.lock: foo")
    assert len(str(caught.value).splitlines()) == 1


@pytest.mark.parametrize(
    "marker", ["'x' in extras", "dependency_groups == 'g'", "python_version > '3' and 'x' in extras"]
)
def test_a_marker_of_pep_751_variables_is_one_error_line(marker: str) -> None:
    """packaging parses ``extras`` and ``dependency_groups`` but has no value for them outside a lock file's
    context: its KeyError was a traceback of ``lock --pylock`` (issue 52, cause 1, a new variant)."""
    with pytest.raises(
        InvalidLockError, match=r"^pylock\.toml: foo: marker .*'(extras|dependency_groups)' is"
    ) as caught:
        marker_holds(marker, None, where="pylock.toml: foo")
    assert len(str(caught.value).splitlines()) == 1


FOO_SAME = indexed("foo-1.0-py3-none-any.whl")  # patched (or split) without a suffix: the pinned version itself


@pytest.mark.parametrize("option", ["direct", "extra-index-url", "find-links", "index-url"])
def test_a_wheel_patched_under_the_pinned_version_replaces_a_pin_whose_hashes_it_does_not_match(option) -> None:
    """Rule 2: none of the pin's hashes is the index's file, so it is not the original: it replaces the pin in
    every mode (``direct``: a reference to it, as a patched version's; the others: its hashes)."""
    result = plan(f"foo==1.0 --hash=sha256:{A}\n", (FOO_SAME,), index_option=option)
    (edit,) = result.edits
    if option == "direct":
        assert [(line.requirement, line.hashes) for line in edit.lines] == [
            (f"foo @ file:///idx/{FOO_SAME.filename}", (f"sha256:{FOO_SAME.sha256}",))
        ]
    else:
        assert edit.lines == () and edit.hashes == (f"sha256:{FOO_SAME.sha256}",)
    assert result.warnings == ()


@pytest.mark.parametrize("option", ["direct", "extra-index-url"])
def test_the_original_itself_in_the_index_leaves_its_pin(option) -> None:
    """One of the pin's hashes is the index's file (a mirrored original): the pin stays as it is."""
    result = plan(f"foo==1.0 --hash=sha256:{A} --hash=sha256:{FOO_SAME.sha256}\n", (FOO_SAME,), index_option=option)
    assert result.edits == () and result.warnings == ()


@pytest.mark.parametrize(
    ("text", "option", "warned"),
    [
        ("foo==1.0\n", "direct", "foo==1.0"),
        ("foo==1.0\n", "extra-index-url", "foo==1.0"),
        (
            "foo @ https://h.example/foo-1.0-py3-none-any.whl\n",
            "direct",
            "foo @ https://h.example/foo-1.0-py3-none-any.whl",
        ),
        ("foo==1.0\n", "index-url", None),  # pip then reads the index alone: whichever it is, it is the index's
        # a reference whose fragment names the index's file: the lock's own output, locked again
        (f"foo @ file:///idx/foo-1.0-py3-none-any.whl#sha256={FOO_SAME.sha256}\n", "direct", None),
    ],
)
def test_an_unhashed_pin_of_a_version_the_index_holds_stays_with_a_warning(text, option, warned) -> None:
    """Without a hash the lock cannot tell a wheel patched under the same version from the original."""
    result = plan(text, (FOO_SAME,), index_option=option)
    assert result.edits == ()
    if warned is None:
        assert result.warnings == ()
    else:
        (warning,) = result.warnings
        assert warning.startswith(f"in.txt: {warned}: the index holds this version too") and "--suffix" in warning


def test_a_project_nothing_the_lock_pins_requires_is_not_added_and_is_named() -> None:
    """A split sibling is added (its parent requires it); a wheel left over in the index is not."""
    parent = indexed("foo-1.0+s.1-py3-none-any.whl", ("foo-libs==1.0+s.1",))
    files = (parent, indexed("foo_libs-1.0+s.1-py3-none-any.whl"), indexed("stale-2.0-py3-none-any.whl"))
    result = plan("foo==1.0\n", files)
    assert [line.requirement.partition(" @ ")[0] for line in result.added] == ["foo-libs"]
    (warning,) = result.warnings
    assert warning.startswith("in.txt: not added: stale 2.0, which the index holds but the lock does not pin")
    assert plan("bar==1.0\n", files).added == ()  # the parent not pinned: neither is required by the lock


FOO_SAME_LINUX = indexed("foo-1.0-cp311-cp311-manylinux_2_17_x86_64.whl")


@pytest.mark.parametrize("option", ["direct", "extra-index-url"])
def test_a_pin_kept_for_other_platforms_is_no_original_of_a_wheel_patched_under_its_version(option) -> None:
    """The second line a lock for several platforms keeps (``foo==1.0 ; <elsewhere> --hash=B``) names other wheels:
    locked again, it stays (rule 2 read it as the original of the x86_64 wheel and sent other machines to it)."""
    first = plan(f"foo==1.0 --hash=sha256:{A} --hash=sha256:{B}\n", (FOO_SAME_LINUX,), replaced={"foo": frozenset({A})})
    (edit,) = first.edits
    ours, kept = edit.lines
    assert kept.hashes == (f"sha256:{B}",)
    again = "".join(f"{line.requirement} {' '.join(f'--hash={h}' for h in line.hashes)}\n" for line in (ours, kept))
    second = plan(again, (FOO_SAME_LINUX,), index_option=option)
    assert second.edits == () and second.warnings == ()


def test_a_per_platform_line_whose_marker_excludes_the_wheel_stays() -> None:
    """A hand-written lock of a line per platform: only the x86_64 Linux line stands for the patched wheel."""
    text = (
        f'foo==1.0 ; sys_platform == "darwin" --hash=sha256:{A}\n'
        f'foo==1.0 ; sys_platform == "linux" and platform_machine == "x86_64" --hash=sha256:{B}\n'
    )
    result = plan(text, (FOO_SAME_LINUX,))
    (edit,) = result.edits
    assert edit.pin.span.start == 1 and edit.lines[0].url == f"file:///idx/{FOO_SAME_LINUX.filename}"


def test_what_an_added_project_requires_is_added_too_and_a_leftover_never_stops_the_lock() -> None:
    """A patched foo requires newdep, which requires newdep2: both added (only the first was, then), with foo's
    marker; a leftover project of two versions is one warning, not the error "keep only one"."""
    files = (
        indexed("foo-1.0+s.1-py3-none-any.whl", ("newdep==1.0",)),
        indexed("newdep-1.0-py3-none-any.whl", ("newdep2==1.0",)),
        indexed("newdep2-1.0-py3-none-any.whl"),
        indexed("stale-2.0-py3-none-any.whl"),
        indexed("stale-3.0-py3-none-any.whl"),
    )
    result = plan("foo==1.0 ; sys_platform == 'linux'\n", files)
    assert [(line.head, line.marker, line.via) for line in result.added] == [
        ("newdep", "sys_platform == 'linux'", ("foo",)),
        ("newdep2", "sys_platform == 'linux'", ("newdep",)),
    ]
    (warning,) = result.warnings
    assert "not added: stale 2.0, 3.0, which the index holds" in warning
