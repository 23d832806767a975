"""The command list: explicit, each entry one module of ``patched_wheels.cli`` registering its parser."""

from __future__ import annotations

import argparse
import ast
import gc
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import patched_wheels.cli as cli

CLI_DIR = Path(cli.__file__).parent


def _registering_modules() -> set[str]:
    """The modules of cli/ that define ``register`` (read from the source: nothing is imported)."""
    found = set()
    for path in CLI_DIR.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, ast.FunctionDef) and node.name == "register" for node in tree.body):
            found.add(path.stem)
    return found


def test_every_command_module_is_listed_and_every_listed_command_is_a_module() -> None:
    assert set(cli.COMMANDS) == _registering_modules()
    assert len(cli.COMMANDS) == len(set(cli.COMMANDS))


def test_the_parser_offers_exactly_the_listed_commands() -> None:
    parser = cli.build_parser()
    (subparsers,) = [action for action in parser._actions if action.dest == "command"]
    assert tuple(subparsers.choices) == cli.COMMANDS


def test_a_module_in_cli_that_is_not_listed_is_no_command(tmp_path: Path) -> None:
    """A file dropped into cli/ (a shared helper, a stray module) is not imported nor offered."""
    copy = tmp_path / "patched_wheels"
    shutil.copytree(CLI_DIR.parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "cli" / "zz_not_a_command.py").write_text("raise SystemExit('imported')\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "patched_wheels", "zz_not_a_command"], capture_output=True, text=True, env=env
    )
    assert result.returncode == 1 and "invalid choice: 'zz_not_a_command'" in result.stderr


def test_only_the_command_run_is_imported() -> None:
    code = (
        "import sys; from patched_wheels.cli import build_parser; build_parser('index'); "
        "print(sorted(m for m in sys.modules if m.startswith('patched_wheels.cli.')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "['patched_wheels.cli.index']"


def test_the_command_s_modules_and_parser_are_built_with_the_cycle_collector_paused(monkeypatch) -> None:
    """Thousands of objects without a cycle (functions, classes, argparse's actions): collections there are
    start-up time thrown away.  The command itself runs with the collector as it was."""
    states = []
    build_parser = cli.build_parser

    def recording(only: str | None = None):
        states.append(gc.isenabled())
        return build_parser(only)

    monkeypatch.setattr(cli, "build_parser", recording)
    with pytest.raises(SystemExit):
        cli.main(["index", "--help"])
    assert states == [False]
    assert gc.isenabled()


def _console_script_target() -> str:
    """``module:function`` of the ``patched-wheels`` script, as pyproject.toml declares it."""
    text = (CLI_DIR.parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    (line,) = [line for line in text.splitlines() if line.startswith("patched-wheels = ")]
    return line.split("=", 1)[1].strip().strip('"')


@pytest.mark.parametrize("how", ["python -m", "console script"])
@pytest.mark.parametrize("good", [True, False])
def test_the_process_ends_with_main_s_status_and_its_objects_left_out_of_the_last_collection(
    tmp_path: Path, how: str, good: bool
) -> None:
    """Both ways in end through ``entry_point``: main's status, and what is alive then frozen, so that the
    interpreter's collection at exit does not walk it (an ``atexit`` handler, run before that collection, sees
    it frozen; without the freeze nothing is)."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import atexit, gc\natexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n", encoding="utf-8"
    )
    module, function = _console_script_target().split(":")
    start = ["-m", "patched_wheels"] if how == "python -m" else ["-c", f"from {module} import {function}; {function}()"]
    target = tmp_path if good else tmp_path / "absent"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hooks), *sys.path])}
    result = subprocess.run([sys.executable, *start, "index", str(target)], capture_output=True, text=True, env=env)
    assert result.returncode == (0 if good else 1), result.stderr
    assert result.stdout.splitlines()[-1] == "frozen True"
    assert result.stderr.startswith("patched-wheels: error: ") != good


def test_the_patch_command_and_the_wheel_reader_leave_packaging_tags_and_dataclasses_unimported(tmp_path: Path) -> None:
    """``packaging.utils`` imports ``packaging.tags`` (logging, subprocess, platform, sysconfig): a fifth of a
    command's start-up, for the tags only a resolver or an index matches.  ``dataclasses`` imports ``inspect``
    (``ast``, ``dis``, ``tokenize``) and builds each class from generated source: 10 ms, and about 1 ms a class.
    A patch of a wheel needs neither."""
    from support.wheelbuilder import build_wheel

    wheel = build_wheel(tmp_path, "demo", "1.0", {"demo/__init__.py": b"x = 1\n"})
    code = (
        "import sys; from patched_wheels.cli import main; "
        f"status = main(['patch', '--wheel', {str(wheel)!r}, '--suffix', 'x.1', '--dest-dir', {str(tmp_path / 'out')!r}]); "
        "print(status, sorted(m for m in sys.modules if m.startswith('packaging') or m == 'dataclasses'))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines()[-1] == "0 ['packaging', 'packaging.version']"


def test_a_reader_leaving_stdout_ends_the_command_quietly(tmp_path):
    """`patched-wheels graph W | head`: the reader has read what it wanted. No error line, status 0 (as uv;
    the reason is in cli.main), and no traceback from the interpreter's flush at exit."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes its one line
    try:
        result = subprocess.run(
            [sys.executable, "-m", "patched_wheels", "index", str(tmp_path)],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(write)
    assert (result.returncode, result.stderr) == (0, "")


def test_a_broken_pipe_that_is_not_stdout_stays_an_error(monkeypatch, capsys):
    """Only the reader of stdout leaving is quiet: a child process or socket gone mid-write is one error line."""

    def run(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "_parse", lambda parser, argv: SimpleNamespace(run=run, command="index"))
    assert cli.main(["index"]) == 1
    assert capsys.readouterr().err == "patched-wheels: error: Broken pipe\n"


def test_an_error_in_a_json_input_names_its_file(tmp_path: Path) -> None:
    """A parser's own error (the hub plan's ``resolved wheel 'a-…': no URL``) named no file: ``resolved.json``
    is one of the hub's files, and which one was at fault was left to guess."""
    import json

    from patched_wheels.errors import UsageError
    from patched_wheels.hub.documents import resolved_wheels

    path = tmp_path / "resolved.json"
    path.write_text(
        json.dumps([{"project": "a", "filename": "a-1.0-py3-none-any.whl", "urls": [], "sha256": "0" * 64}]),
        encoding="utf-8",
    )
    try:
        cli.read_json_input(path, resolved_wheels, "resolved wheels", content_errors=True)
    except UsageError as error:
        assert (
            str(error)
            == f"{path}: cannot read the resolved wheels: resolved wheel 'a-1.0-py3-none-any.whl': no URL to fetch it from"
        ), error
    else:
        raise AssertionError("accepted")


def test_a_removed_no_cache_is_accepted_for_a_release_with_one_warning_and_changes_nothing(
    tmp_path: Path, capsys
) -> None:
    """Issue 49: ``graph --no-cache`` and ``split --no-cache`` ended in a usage error once the two commands kept
    no cache. A script written for the release before runs on: the same output, and one line saying why the
    flag does nothing."""
    from support.fakecuda import build_fake_cuda_wheels

    wheels = build_fake_cuda_wheels(tmp_path / "wheels")
    given = [str(wheel) for wheel in wheels.all]
    split = ["split", "--wheel", str(wheels.torch), "--move", "faketorch/lib/*.so", "--into", "faketorch-libs"]
    for command, argv in (("graph", ["graph", *given]), ("split", [*split, "--graph-wheels", *given])):
        runs = []
        for options in ([], ["--no-cache"]):
            dest = ["--dest-dir", str(tmp_path / f"{command}{len(options)}")] if command == "split" else []
            assert cli.main([*argv, *dest, *options]) == 0
            runs.append(capsys.readouterr())
        assert runs[0].err == "" and runs[1].err == (
            f"patched-wheels: warning: --no-cache is deprecated and does nothing: {command} keeps no cache (a wheel "
            "given by its file is read whole, never cached); it will be refused in a later release\n"
        )
        assert runs[1].out == runs[0].out.replace(f"{command}0", f"{command}1")
    assert [path.read_bytes() for path in sorted((tmp_path / "split0").iterdir())] == [
        path.read_bytes() for path in sorted((tmp_path / "split1").iterdir())
    ]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        ([], "the following arguments are required: COMMAND (see patched-wheels --help)"),
        (["nosuch"], "argument COMMAND: invalid choice: 'nosuch' (choose from "),
        (
            ["patch"],
            "patch: the following arguments are required: --wheel, --dest-dir (see patched-wheels patch --help)",
        ),
        (
            ["patch", "--wheel", "w.whl", "--dest-dir", "d", "--suffxi", "a"],
            "patch: unrecognized arguments: --suffxi a (see",
        ),
        (
            ["patch", "--wheel", "w.whl", "--dest-dir", "d", "--strip", "x"],
            "patch: argument --strip: 'x' is not a number of path components (0 or more)",
        ),
        (["graph", "--jobs", "0", "w.whl"], "graph: argument --jobs: '0' is not a number of threads (at least 1)"),
        (["index", "a", "b"], "index: unrecognized arguments: b (see patched-wheels index --help)"),
    ],
    ids=["no-command", "unknown-command", "missing-options", "typo", "bad-int", "bad-jobs", "extra-argument"],
)
def test_a_command_line_argparse_refuses_is_one_error_line_naming_the_command(capsys, argv, line) -> None:
    """Like every bad input: one line, status 1, no usage block (argparse's default: a usage block and status 2)."""
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"patched-wheels: error: {line}") and captured.err.count("\n") == 1


def test_version(capsys) -> None:
    from patched_wheels import __version__

    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out == f"patched-wheels {__version__}\n"


def test_an_abbreviated_option_works_for_a_release_with_one_warning(tmp_path: Path, capsys) -> None:
    """argparse takes ``--suff`` for ``--suffix``; a later option sharing the prefix would change what a script
    means, so it is named, and the run goes on. Arguments after ``--`` (mirror's pip's) are not ours to judge."""
    assert cli.main(["index", str(tmp_path)]) == 0
    assert "warning" not in capsys.readouterr().err
    assert cli.main(["graph", "--jso", "--jobs", "1", "--", "--not-an-option.whl"]) == 1
    (line,) = capsys.readouterr().err.splitlines()  # the error alone (warnings held): the wheel is not there
    assert line.startswith("patched-wheels: error: ") and "--not-an-option.whl" in line
    assert cli._abbreviated(cli.build_parser("graph"), "graph", ["graph", "--jso", "--jobs=1", "--", "--x"]) == [
        "--jso"
    ]
    assert cli._abbreviated(cli.build_parser("mirror"), "mirror", ["mirror", "-r", "l", "d", "--", "--only-b"]) == []
    hub = ["hub", "plan", "--request", "r", "--config-out", "c", "--req", "q"]  # a subcommand's own options
    assert cli._abbreviated(cli.build_parser("hub"), "hub", hub) == ["--req"]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["doctor", "w.whl", "--package", "p", "--probe", "import ("], "--probe 'import (': not Python this "),
        (["doctor", "w.whl", "--package", "p", "--run=import p\n  x"], "--run 'import p\\n  x': not Python this "),
        (
            [
                "patch",
                "--wheel",
                "w-1.0-py3-none-any.whl",
                "--dest-dir",
                "d",
                "--preload-for",
                "p",
                "--preload-from",
                "o-1.0-py3-none-any.whl",
                "--probe",
                "import p;;",
            ],
            "--probe 'import p;;': not Python this interpreter runs (SyntaxError: invalid syntax, line 1)",
        ),
    ],
    ids=["doctor-probe", "doctor-run", "patch-probe"],
)
def test_code_to_run_that_does_not_compile_is_the_option_s_error_before_any_wheel_is_read(capsys, argv, line) -> None:
    """A typo in a probe was a probe that "failed" once the set was installed, a warning, and a preload of what it
    mapped until then; the wheels here do not even exist: the code is judged first."""
    assert cli.main(argv) == 1
    (error,) = capsys.readouterr().err.splitlines()
    assert error.startswith(f"patched-wheels: error: {line}"), error


@pytest.mark.parametrize(
    "argv",
    [["--run=import p"], ["--package", "p", "--run"], ["--package", "p", "--probe", "import p"]],
    ids=["run-code", "run-package", "probe"],
)
def test_a_run_timeout_that_is_no_number_is_the_error_before_any_verdict(tmp_path, capsys, monkeypatch, argv) -> None:
    """doctor printed its whole static verdict, then this error: a run that fails shows its error alone."""
    from support.wheelbuilder import build_wheel

    wheel = build_wheel(tmp_path, "p", "1.0", {"p/__init__.py": b""})
    monkeypatch.setenv("RULES_PATCHED_WHEELS_RUN_TIMEOUT", "abc")
    assert cli.main(["doctor", str(wheel), *argv]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "patched-wheels: error: RULES_PATCHED_WHEELS_RUN_TIMEOUT='abc': not a positive whole number of seconds\n"
    )


@pytest.fixture
def six_like(tmp_path: Path) -> Path:
    from support.wheelbuilder import build_wheel

    (tmp_path / "in").mkdir()
    return build_wheel(tmp_path / "in", "sixlike", "1.0", {"sixlike/__init__.py": b""})


_MISTAKES = {
    "dest-dir-a-file": (["patch", "--wheel", "{wheel}", "--dest-dir", "{file}"], "--dest-dir {file}: not a directory"),
    "split-dest-dir-a-file": (
        ["split", "--wheel", "{wheel}", "--move", "x", "--into", "y", "--dest-dir", "{file}"],
        "--dest-dir {file}: not a directory",
    ),
    "mirror-dir-a-file": (["mirror", "-r", "{file}", "{file}"], "DIR {file}: not a directory"),
    "patch-dir-a-file": (
        ["patch", "--wheel", "{wheel}", "--dest-dir", "{out}", "--patch-dir", "{file}"],
        "--patch-dir {file}: not a directory",
    ),
    "patch-dir-missing": (
        ["patch", "--wheel", "{wheel}", "--dest-dir", "{out}", "--patch-dir", "{out}/nope"],
        "--patch-dir {out}/nope: no such directory",
    ),
    "patch-dir-without-patches": (
        ["patch", "--wheel", "{wheel}", "--dest-dir", "{out}", "--patch-dir", "{empty}"],
        "--patch-dir {empty}: holds no *.patch or *.diff file",
    ),
    "delete-bad-glob": (
        ["patch", "--wheel", "{wheel}", "--dest-dir", "{out}", "--delete", "[abc"],
        "--delete '[abc': an unclosed '['",
    ),
    "move-bad-glob": (
        ["split", "--wheel", "{wheel}", "--move", "[x", "--into", "y", "--dest-dir", "{out}"],
        "--move '[x': an unclosed '['",
    ),
    "preload-for-empty": (
        ["patch", "--wheel", "{wheel}", "--dest-dir", "{out}", "--preload-for", "", "--preload-from", "{wheel}"],
        "--preload-for '': not a module name",
    ),
    "preload-for-dot": (
        ["patch", "--wheel", "{wheel}", "--dest-dir", "{out}", "--preload-for", "six.", "--preload-from", "{wheel}"],
        "--preload-for 'six.': not a module name",
    ),
    "doctor-package-dot": (["doctor", "{wheel}", "--package", "six."], "--package 'six.': not a module name"),
    "doctor-no-probe-alone": (["doctor", "{wheel}", "--no-probe"], "--no-probe needs --package"),
    "max-size-signed": (
        ["split", "--wheel", "{wheel}", "--max-size", "+5", "--into", "y", "--dest-dir", "{out}"],
        "split: argument --max-size: '+5' is not a size in bytes (at least 1)",
    ),
    "max-size-negative": (
        ["split", "--wheel", "{wheel}", "--max-size", "-5", "--into", "y", "--dest-dir", "{out}"],
        "split: argument --max-size: '-5' is not a size in bytes (at least 1)",
    ),
    "upstream-url-elsewhere": (
        [
            "lock",
            "--requirements",
            "{file}",
            "--index",
            "{empty}",
            "--out",
            "{out}/o.txt",
            "--index-option",
            "extra-index-url",
            "--upstream-index-url",
            "https://x.example/simple",
        ],
        "--upstream-index-url needs --index-option direct",
    ),
    "missing-wheel-named-badly": (
        ["patch", "--wheel", "{out}/nosuch.whl", "--dest-dir", "{out}"],
        "{out}/nosuch.whl: cannot read (No such file or directory)",
    ),
}


@pytest.mark.parametrize(("argv", "line"), list(_MISTAKES.values()), ids=list(_MISTAKES))
def test_a_new_user_s_mistakes_are_one_line_naming_the_option(tmp_path, six_like, capsys, argv, line) -> None:
    """What a first session gets wrong, each named as the user wrote it (an output directory that is a file was
    "File exists"; a --patch-dir that is a file "does not exist"; a bad glob named no option; a negative
    --max-size was taken as a size), before anything is written."""
    places = {"wheel": six_like, "file": tmp_path / "a-file", "out": tmp_path / "out", "empty": tmp_path / "empty"}
    places["file"].write_text("torchfake==1.0\n")
    places["empty"].mkdir()
    assert cli.main([arg.format(**places) for arg in argv]) == 1
    (error,) = capsys.readouterr().err.splitlines()
    assert error.startswith(f"patched-wheels: error: {line.format(**places)}"), error
    assert not places["out"].exists()


def test_index_and_graph_say_what_a_wheel_without_libraries_holds(six_like, capsys) -> None:
    """``1 files of 1 projects``; a graph of no library printed its heading alone."""
    assert cli.main(["index", str(six_like.parent)]) == 0
    assert capsys.readouterr().out.endswith(": 1 file of 1 project (1 hashed)\n")
    assert cli.main(["graph", str(six_like)]) == 0
    assert capsys.readouterr().out == (
        "load order (dependencies first):\n  (none: the wheels given hold no shared library)\n"
    )


def test_a_size_written_with_underscores_is_read_as_int_reads_it() -> None:
    """``--max-size 300_000_000`` worked with ``type=int``: still taken (scripts write it), signs and blanks not."""
    parse = cli.whole_number(1, "a size in bytes (at least 1)")
    assert parse("300_000_000") == 300_000_000
    for text in ("_1", "1_", "1__0", " 5", "+5", "٥"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)
