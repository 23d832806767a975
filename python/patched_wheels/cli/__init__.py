"""Command line: ``patched-wheels <command> ...``.

Each command in :data:`COMMANDS` is a module of this package, named like the command, defining
``register(subparsers)``, which adds its parser and sets ``run=<callable(args) -> int>``. The list
is explicit: a helper module put in this folder does not become a command by being there. Only the
module of the command being run is imported (the others pull in concurrent executors, the lock
readers and more): start-up is most of a warm ``index`` run.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import io
import itertools
import os
import re
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Sequence

from patched_wheels.base import timings
from patched_wheels.base.gcpause import cycle_collection_paused
from patched_wheels.errors import PatchedWheelsError, UsageError, one_line, plural, warn

if TYPE_CHECKING:
    from patched_wheels.base.cache import CacheContext
    from patched_wheels.index.simple import IndexResult


COMMANDS = ("doctor", "graph", "hub", "index", "lock", "mirror", "patch", "resolve", "split")
"""The subcommands, in ``--help`` order; each is the module of this package of that name, imported only when run."""


def described(docstring: str | None) -> str:
    """A command module's docstring as its ``--help`` shows it: the reStructuredText quotes (````--wheel````) read as
    the plain quotes a terminal shows (```--wheel```)."""
    return (docstring or "").replace("``", "`")


def add_cache_option(parser: argparse.ArgumentParser) -> None:
    """``--no-cache`` for the commands that may run a probe (doctor, patch --preload-for): the wheels they are
    given by path are read whole anyway, so only the probe's observation is worth keeping."""
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="do not read or write the helper's cache of probe observations",
    )


def add_removed_cache_option(parser: argparse.ArgumentParser) -> None:
    """``--no-cache`` on ``graph`` and ``split``, which keep no cache since the last release: still accepted, hidden
    from ``--help``, so a script written for that release runs on (:func:`warn_removed_cache_option`)."""
    parser.add_argument("--no-cache", action="store_true", help=argparse.SUPPRESS)


def warn_removed_cache_option(args: argparse.Namespace) -> None:
    """The one warning a ``--no-cache`` given to ``graph`` or ``split`` earns: it does nothing now, and why."""
    if args.no_cache:
        warn(
            f"--no-cache is deprecated and does nothing: {args.command} keeps no cache (a wheel given by its file "
            "is read whole, never cached); it will be refused in a later release"
        )


def add_jobs_option(parser: argparse.ArgumentParser) -> None:
    """``--jobs N`` for the commands that read a wheel set's libraries (graph, split): the threads they inflate on,
    one per core by default (:func:`patched_wheels.elf.graph.scan_wheels`'s ``workers``)."""
    parser.add_argument(
        "--jobs",
        type=whole_number(1, "a number of threads (at least 1)"),  # 0 or -1 would mean no thread at all
        metavar="N",
        help="inflate on N threads (default: one per core)",
    )


_DIGITS = re.compile(r"[0-9]+(?:_[0-9]+)*")


def whole_number(minimum: int, what: str) -> Callable[[str], int]:
    """An option's type: a whole number of at least ``minimum``, written in ASCII digits, ``_`` between them as
    ``int()`` takes it (``300_000_000``), but no sign, blank or other digit (``int()`` also takes ``-5``, ``+5``,
    `` 5`` and ``٥``); otherwise the error says it is not ``what`` (argparse names the option)."""

    def parse(text: str) -> int:
        if not _DIGITS.fullmatch(text) or int(text) < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return int(text)

    return parse


def add_lock_input(parser: argparse.ArgumentParser) -> None:
    """``--requirements`` / ``--uv-lock`` / ``--pylock``: exactly one lock to read (``lock`` and ``resolve``)."""
    from patched_wheels.lock.formats.registry import LOCK_FORMATS

    group = parser.add_mutually_exclusive_group(required=True)
    for entry in LOCK_FORMATS:
        group.add_argument(entry.flag, type=Path, metavar="IN", help=entry.help)


def lock_input(args: argparse.Namespace) -> tuple[Path, str]:
    """The lock given and its format (one of ``lock.formats.registry.FORMATS``)."""
    from patched_wheels.lock.formats.registry import LOCK_FORMATS

    for entry in LOCK_FORMATS:
        if getattr(args, entry.name.replace("-", "_")) is not None:
            return getattr(args, entry.name.replace("-", "_")), entry.name
    raise UsageError(f"give one of {', '.join(entry.flag for entry in LOCK_FORMATS)}")


def check_directory(option: str, path: Path) -> None:
    """An output directory (``--dest-dir``, ``mirror``'s DIR) that is there as something else is the option's
    error before anything is read (making it would fail with the file system's "File exists")."""
    if os.path.lexists(path) and not path.is_dir():
        what = "a link that leads to no directory (dangling, or a loop)" if path.is_symlink() else "not a directory"
        raise UsageError(f"{option} {path}: {what}")


def check_code(option: str, code: str | None) -> None:
    """Before any wheel is read or installed for it, code given to run (``--probe``, ``--run``; None: the default,
    an import) that this interpreter does not compile is the option's error, and so is a run timeout
    (:func:`~patched_wheels.loading.probe.run_timeout`) that is no number of seconds."""
    from patched_wheels.base.usercode import code_problem  # imported here: only code to run is judged
    from patched_wheels.loading.probe import run_timeout

    problem = code_problem(code) if code else None
    if problem:
        raise UsageError(f"{option} {code!r}: {problem}")
    run_timeout()


def caches(args: argparse.Namespace) -> CacheContext:
    """The caches the command reads and fills (the ELF cache, observations; see :mod:`patched_wheels.base.cache`),
    none with ``--no-cache``."""
    from patched_wheels.base.cache import CacheContext

    return CacheContext.from_environment(enabled=not args.no_cache)


# The rules' JSON files are small (a spec per patched wheel, a row per locked wheel): a bigger one is not theirs.
_MAX_JSON_BYTES = 64 * 1024 * 1024


def read_json_input(path: Path, parse: Callable[[Any], Any], what: str, *, content_errors: bool = False) -> Any:
    """``parse`` of the JSON in ``path``; any flaw (``parse`` raising ValueError, KeyError or TypeError included)
    is one error naming the file and ``what`` it should hold. The Bazel rules write these files, so a flaw
    means the Starlark and Python sides of a schema disagree. Only a regular file of bounded size is read:
    a FIFO or a device (``/dev/zero``) never is. ``content_errors``: ``parse``'s own :class:`UsageError` is about
    the file's content (resolved wheels), so it names the file too; otherwise it speaks in the user's words
    (a hub request's attributes) and goes as it is."""
    import json

    from patched_wheels.base.fsutil import read_regular_file

    try:
        return parse(json.loads(read_regular_file(path, max_bytes=_MAX_JSON_BYTES, follow_links=True).decode("utf-8")))
    except RecursionError:  # json nests a Python call per "[" or "{"
        raise UsageError(f"{path}: cannot read the {what}: nested too deeply") from None
    except UsageError as error:
        if not content_errors:
            raise
        raise UsageError(f"{path}: cannot read the {what}: {error}") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"{path}: cannot read the {what}: {error}") from None


def index_summary(result: IndexResult) -> str:
    """The line ``index`` and ``mirror`` end with: where the pages are, what they list, what was hashed this time."""
    from patched_wheels.index.simple import SIMPLE_DIR

    counts = f"{plural(len(result.files), 'file')} of {plural(len(result.projects), 'project')}"
    return f"{result.directory / SIMPLE_DIR}: {counts} ({result.hashed} hashed)"


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but a command line it refuses is one :class:`UsageError` (one error line naming the
    command, exit status 1, as every bad input) instead of a usage block and status 2.  The subcommands' parsers
    are of this class too (``add_subparsers`` makes them of their parent's)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("patched-wheels").strip()
        raise UsageError(f"{command + ': ' if command else ''}{message} (see {self.prog} --help)")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every subcommand, or only ``only`` (when it names one)."""
    from patched_wheels import __version__

    parser = _Parser(prog="patched-wheels", description="Patch, split, analyse and index Python wheels.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in [only] if only in COMMANDS else COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed; an argument no option takes is the command's error (argparse's own names no command)."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of the subcommand ``command`` (one :func:`build_parser` registered)."""
    (subparsers,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return subparsers.choices[command]


def _abbreviated(parser: argparse.ArgumentParser, command: str, argv: Sequence[str]) -> list[str]:
    """The options of ``argv`` given as abbreviations (``--suff`` for ``--suffix``), which argparse accepts: a
    later flag that shares the prefix would change what they mean, so they earn a warning."""
    known: set[str] = set()
    parsers = [parser, _command_parser(parser, command)]
    while parsers:  # the command's own subcommands too (``hub plan``)
        for action in parsers.pop()._actions:
            known.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction) and action.dest != "command":
                parsers.extend(action.choices.values())
    given = itertools.takewhile(lambda arg: arg != "--", argv)  # after "--", arguments of another program
    return [arg.partition("=")[0] for arg in given if arg.startswith("--") and arg.partition("=")[0] not in known]


SWITCH_INTERVAL = 0.0005
"""Seconds a thread that wants the interpreter lock waits before the one holding it is asked to let go (Python's
default: 0.005). The helper's threads spend their time in C calls that release the lock (a kernel copy of 8 MiB of a
large member, an inflate) and then need it for a few lines between two such calls; at the default, each of those
waits up to 5 ms for the main thread's loop over 10,600 members, and a patch's copies of torch's libraries ended
90 ms after a `cp` of the whole wheel would have."""


def main(argv: Sequence[str] | None = None) -> int:
    sys.setswitchinterval(SWITCH_INTERVAL)
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    with cycle_collection_paused():  # the command's modules and its parser: thousands of objects, no cycle
        parser = build_parser(only=command)
    try:
        args = _parse(parser, argv)
    except UsageError as error:
        sys.stderr.write(f"patched-wheels: error: {one_line(str(error))}\n")
        return 1
    held = io.StringIO()  # every warning (errors.warn, wherever it is raised), until the command ends
    error_line = None
    try:
        with contextlib.redirect_stderr(held):
            for option in _abbreviated(parser, args.command, argv):
                warn(f"{option}: an abbreviation, which a later release will refuse; write the option in full")
            status = args.run(args)
        sys.stdout.flush()  # here, not at exit, so a reader gone before the last write is seen below
        return status
    except PatchedWheelsError as error:
        error_line = one_line(str(error))
        return 1
    except OSError as error:  # a destination that cannot be written, a file that vanished, ...
        if isinstance(error, BrokenPipeError) and _stdout_closed():
            # The reader of stdout has left (`patched-wheels graph W | head`): it read what it wanted, so this
            # is no bad input. Quiet and status 0, as uv does (pip says "ERROR: Pipe to stdout was broken" and
            # exits 1; dying of SIGPIPE, 141, fails `set -o pipefail` scripts for the reader's choice). stdout
            # goes to /dev/null so the interpreter's flush at exit does not fail again with a traceback.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        where = f"{error.filename}: " if error.filename else ""
        error_line = one_line(f"{where}{error.strerror or error}")
        return 1
    except KeyboardInterrupt:
        return 130
    except Terminated:  # SIGTERM (entry_point): what was half written is removed on the way here, as on an error
        return 128 + signal.SIGTERM
    finally:
        # A run that fails says one line, its error, not the warnings on the way to it; any other end (a success,
        # an interrupt, a bug's traceback) shows them.
        sys.stderr.write(f"patched-wheels: error: {error_line}\n" if error_line else held.getvalue())
        # The words before the first option (`hub build`, `resolve`): never a path.
        words = argv[: next((i for i, arg in enumerate(argv) if arg.startswith("-")), len(argv))]
        facts = None
        if timings.enabled():
            from patched_wheels.wheelfile.zipcontainer import INFLATER_NAME  # imported only when timed

            facts = {"inflater": INFLATER_NAME}
        timings.record(words, facts)


def entry_point() -> NoReturn:
    """The process's entry (``python -m patched_wheels``, the ``patched-wheels`` script): :func:`main`, then the
    exit, without the interpreter's last search for reference cycles.

    What is alive once a command has run lives until the process ends, and Python's last collection at exit
    would walk all of it (the command's modules, a patched wheel's 10,600 member records) to free nothing the
    exit does not free anyway: 10 to 30 ms of a 0.5 s patch of torch. Frozen (:func:`gc.freeze`), the objects are
    left out of it; the exit's other work (flushing stdout, ``atexit`` handlers, removing temporary files) is
    unchanged. Not in :func:`main`, which tests call in-process, where later collections must still see them.
    """
    signal.signal(signal.SIGTERM, _terminate)
    status = main()
    gc.freeze()
    sys.exit(status)


class Terminated(BaseException):
    """The process was asked to end (SIGTERM: ``kill``, ``timeout``, a CI runner cancelling a job). Raised where
    the main thread is, like KeyboardInterrupt for SIGINT, so every cleanup on the way out runs (temporary files,
    staging directories, a child such as pip killed): Python's default for SIGTERM ends the process at once and
    leaves them behind."""


def _terminate(signum: int, frame: object) -> NoReturn:
    raise Terminated


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (a broken pipe to a child process or a socket stays an
    error like any other). poll() reports the write end of such a pipe as in error (Linux, macOS)."""
    import select

    try:
        poller = select.poll()  # not on Windows: there the error line stays
        poller.register(sys.stdout.fileno(), 0)
    except (AttributeError, ValueError, OSError):  # no poll, or stdout is no file (a test's StringIO)
        return False
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
