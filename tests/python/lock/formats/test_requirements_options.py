"""A requirements lock's options are read as pip reads them, with pip's own parser as the judge.

Every option of a lock, on an option line or after a requirement, is judged: what pip refuses is one error naming
the file and line, not a lock rewritten around it (issue 52: ``--evil-option`` and ``--index-urll`` were copied
into the rewritten lock, where pip says ``no such option``). Where the reader is stricter than pip, the case says
why (docs/guarantees.md lists them). The options are split as pip splits them (``shlex``), in linear time.
"""

from __future__ import annotations

import random
import re
import shlex
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version

from patched_wheels.errors import InvalidLockError
from patched_wheels.lock.formats.requirements import parse_requirements, shell_words
from support.indexfixtures import run_cli, run_pip
from support.wheelbuilder import build_wheel

DIGEST = "a" * 64
URL = "https://pypi.example/simple"


def pip_refusal(tmp_path: Path, text: str) -> str | None:
    """What pip's own requirements-file parser says of ``text`` (pip 26.3 in the tests' venv), or None when it
    reads it. Without a finder nothing is fetched; every line is parsed and its options checked."""
    from pip._internal.exceptions import PipError
    from pip._internal.network.session import PipSession
    from pip._internal.req.req_file import parse_requirements as pip_parse

    (tmp_path / "other.txt").write_text("bar==1.0\n", encoding="utf-8")  # what an include names
    path = tmp_path / "judged.txt"
    path.write_text(text, encoding="utf-8")
    try:
        list(pip_parse(str(path), session=PipSession()))
    except PipError as error:
        return str(error) or type(error).__name__
    return None


# An option line (before a pin) that pip reads as this reader does: kept, or refused (the error's words).
OPTION_LINES = [
    (f"--index-url {URL}", None),
    (f"-i {URL}", None),
    (f"-i{URL}", None),
    (f"--index-url={URL}", None),
    (f"--pypi-url {URL}", None),
    (f"--extra-index-url {URL}", None),
    ("--no-index", None),
    ("--find-links /wheels", None),
    ("-f/wheels", None),
    ("--trusted-host pypi.example", None),
    ("--pre", None),
    ("--prefer-binary", None),
    ("--only-binary :all:", None),
    ("--no-binary=foo,bar", None),
    ("--require-hashes", None),
    ("--no-require-hashes", None),
    ("--all-releases :all:", None),
    ("--only-final foo", None),
    ("--use-feature truststore", None),
    ("--pre --prefer-binary  # two flags, a comment", None),
    ("-e git+https://git.example/r.git#egg=pwu", None),
    ("-e git+https://git.example/r.git#egg=pwu -C key=value", None),
    ("--evil-option", "option '--evil-option' is not one pip reads"),
    (f"--index-urll {URL}", "option '--index-urll' is not one pip reads"),
    ("-x", "option '-x' is not one pip reads"),
    ("--pr", "option '--pr' is not one pip reads in a requirements file (write --pre or --prefer-binary in full)"),
    ("--global-option=x", "option --global-option: pip 25.3 removed it"),
    ("--install-option x", "option --install-option: pip 23.1 removed it"),
    ("--no-index=1", "option --no-index takes no value"),
    ("--index-url", "option --index-url has no value"),
    ("--only-binary --pre", "option --only-binary has no value"),
    ("--use-feature bogus", "pip knows no such feature"),
    ("--hash=md5:abc", "not a hash pip takes"),
    ("-C novalue", "pip takes it as KEY=VALUE"),
    (f"--index-url '{URL}", "No closing quotation"),
]


@pytest.mark.parametrize(("line", "error"), OPTION_LINES)
def test_an_option_line_is_refused_exactly_where_pip_refuses_it(tmp_path: Path, line: str, error: str | None) -> None:
    if line == "--no-require-hashes" and Version(metadata.version("pip")) < Version("26.3"):
        pytest.skip("pip 26.3 added --no-require-hashes; Python 3.9's last pip is 26.0.1")
    text = f"{line}\nfoo==1.0 --hash=sha256:{DIGEST}\n"
    refused = pip_refusal(tmp_path, text)
    assert (refused is not None) == (error is not None), refused
    if error is None:
        parse_requirements(text, "in.txt")
    else:
        with pytest.raises(InvalidLockError, match=re.escape("in.txt:1: ") + ".*" + re.escape(error)):
            parse_requirements(text, "in.txt")


# A requirement's options that pip reads as this reader does.
REQUIREMENT_OPTIONS = [
    (f"--hash=sha256:{DIGEST}", None),
    (f"--hash sha256:{DIGEST} --hash=sha512:{DIGEST * 2}", None),
    ("-Ck=v", None),
    ("-C k=v", None),
    ("--config-settings=k=v", None),
    ("--global-option=x", "option --global-option: pip 25.3 removed it"),
    ("--has", "option '--has' is not one pip reads in a requirements file (write --hash in full)"),
    ("--bogus=1", "option '--bogus' is not one pip reads"),
    ("--hash", "option --hash has no value"),
    ("--hash=md5:abc", '--hash "md5:abc": not a hash pip takes'),
    (f"--hash='sha256:{DIGEST}", "No closing quotation"),
    ("-C novalue", "pip takes it as KEY=VALUE"),
]


@pytest.mark.parametrize(("options", "error"), REQUIREMENT_OPTIONS)
def test_a_requirements_options_are_refused_exactly_where_pip_refuses_them(
    tmp_path: Path, options: str, error: str | None
) -> None:
    text = f"foo==1.0 {options}\n"
    refused = pip_refusal(tmp_path, text)
    assert (refused is not None) == (error is not None), refused
    if error is None:
        (pin,) = parse_requirements(text, "in.txt").lock.pins
        assert pin.hashes == tuple(re.findall(r"sha\d+:\w+", options))
    else:
        with pytest.raises(InvalidLockError, match=re.escape("in.txt:1: ") + ".*" + re.escape(error)):
            parse_requirements(text, "in.txt")


# What pip reads and this reader refuses, and why.
STRICTER = [
    # optparse takes a long option's unambiguous abbreviation; the index options must be recognized to be
    # rewritten, and an abbreviation is one typo away from another option.
    (f"--index-u {URL}\nfoo==1.0\n", "write --index-url in full"),
    ("--prefer\nfoo==1.0\n", "write --prefer-binary in full"),
    (f"foo==1.0 --has=sha256:{DIGEST}\n", "write --hash in full"),
    # pip ignores every option after "--"; a --hash there would check nothing.
    (f"foo==1.0 -- --hash=sha256:{DIGEST}\n", "'--': pip ignores every option after it"),
    # pip reads a global option after a requirement and ignores it.
    ("foo==1.0 --pre\n", "option --pre is not one pip takes on a requirement line"),
    (f"foo==1.0 --index-url {URL}\n", "option --index-url is not one pip takes on a requirement line"),
    # pip takes an empty digest, which matches no file; a quoted --hash is read otherwise by the lock's writer.
    ("foo==1.0 --hash=sha256:\n", "not a hash pip takes"),
    # pip takes any digest of a strong algorithm, which then matches no file; a hub would hand it to Bazel.
    ("foo==1.0 --hash=sha256:ab\n", 'hash "sha256:ab" is not <algorithm>:<hex digest> (sha256: 64 hex digits)'),
    (f"foo==1.0 --hash=sha512:{DIGEST}\n", "is not <algorithm>:<hex digest> (sha512: 128 hex digits)"),
    (f"foo==1.0 --hash=sha256:{'g' * 64}\n", "is not <algorithm>:<hex digest> (sha256: 64 hex digits)"),
    (f'foo==1.0 --hash="sha256:{DIGEST}"\n', "write each --hash unquoted"),
    # A requirement's option on a line of its own belongs to no requirement: pip ignores it.
    (f"foo==1.0\n--hash=sha256:{DIGEST}\n", "--hash on a line of its own belongs to no requirement"),
    ("foo==1.0\n-C k=v\n", "--config-settings on a line of its own belongs to no requirement"),
    # Index lines are dropped or replaced whole when the lock is rewritten.
    (f"--pre --index-url {URL}\nfoo==1.0\n", "write an index option on a line of its own"),
    # An included file's pins would keep their hashes while the rewritten lock pins the patched wheel.
    ("-r other.txt\nfoo==1.0\n", "included files are not followed"),
]


@pytest.mark.parametrize(("text", "error"), STRICTER)
def test_what_pip_reads_and_the_reader_refuses_is_one_error_saying_why(tmp_path: Path, text: str, error: str) -> None:
    assert pip_refusal(tmp_path, text) is None
    with pytest.raises(InvalidLockError, match=r"in\.txt:\d+: .*" + re.escape(error)):
        parse_requirements(text, "in.txt")


@pytest.mark.parametrize("line", ["--evil-option", f"--index-urll {URL}", "--global-option=x"])
def test_lock_refuses_an_option_pip_does_not_know_naming_the_line_and_writes_nothing(tmp_path: Path, line: str) -> None:
    """Issue 52, cause 5: ``lock`` copied such a line into the lock it wrote, and exited 0."""
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"# header\n{line}\nfoo==1.0\n", encoding="utf-8")
    (tmp_path / "index").mkdir()
    judged = run_pip("install", "--dry-run", "--no-index", "--find-links", str(tmp_path), "-r", str(requirements))
    assert judged.returncode != 0 and "no such option" in judged.stderr, judged.stderr

    result = run_cli(
        "lock", "--requirements", requirements, "--index", tmp_path / "index", "--out", tmp_path / "out.txt"
    )

    assert result.returncode != 0
    assert result.stderr.startswith(f"patched-wheels: error: {requirements}:2: option ")
    assert result.stderr.count("\n") == 1, result.stderr
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize("between", ["", "# a comment", "   ", "  # a comment \\"])
def test_a_hash_after_a_blank_or_comment_line_is_refused_since_pip_checks_nothing_with_it(
    tmp_path: Path, between: str
) -> None:
    """Issue 52: a pin's continuation ends at a blank or comment line, so pip reads the ``--hash`` after it as an
    option line of its own and ignores it: it installs a file whose hash is not the one written."""
    (tmp_path / "wheels").mkdir()
    build_wheel(tmp_path / "wheels", "foo", "1.0", {"foo/__init__.py": b""})
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"foo==1.0 \\\n{between}\n    --hash=sha256:{'0' * 64}\n", encoding="utf-8")
    wheels = str(tmp_path / "wheels")
    judged = run_pip("install", "--dry-run", "--no-index", "--find-links", wheels, "-r", str(requirements))
    assert judged.returncode == 0 and "Would install foo-1.0" in judged.stdout, judged.stderr

    with pytest.raises(InvalidLockError, match=re.escape("in.txt:3: --hash on a line of its own")):
        parse_requirements(requirements.read_text(encoding="utf-8"), "in.txt")


def test_options_are_split_into_the_words_shlex_gives() -> None:
    """pip splits a line's options with ``shlex.split``; :func:`shell_words` must give the same words and refuse
    the same texts, on every arrangement of quotes, escapes and blanks."""
    rng = random.Random(52)
    alphabet = " \t\r\n'\"\\a=-#"
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
        try:
            expected: object = shlex.split(text)
        except ValueError as error:
            expected = str(error)
        try:
            got: object = list(shell_words(text))
        except ValueError as error:
            got = str(error)
        assert got == expected, repr(text)
