"""The exceptions the command line turns into a single error line, by concern, and the warning line beside them.

Every error caused by the input derives from :class:`PatchedWheelsError`, so the CLI catches one type;
the subclasses say *which* input is at fault, so callers (the hub, tests, a user's own script) can tell
a wheel we refuse from a patch that does not apply without reading the message.
"""

import re
import sys
from typing import Iterable

# A message quotes its input (a lock line, a patch header, a probe's error line, a cached observation), which
# may be megabytes long or hold line breaks and terminal controls that would forge another line.
MAX_LINE = 2000


UNREADABLE_REQUIREMENT = (ValueError, SyntaxError, RecursionError)
"""What ``packaging`` raises for a requirement or marker it cannot read: ``InvalidRequirement`` and ``InvalidMarker``
(both ValueErrors), SyntaxError from the ``ast.literal_eval`` of a quoted value (a lone backslash, a NUL), and
RecursionError (its parser recurses per ``(``)."""


class PatchedWheelsError(Exception):
    """A failure caused by the input (a wheel, patch, lock, library or option), not a bug.

    ``str(error)`` must be one line that names the file, patch or member at fault:
    the CLI prints it as ``patched-wheels: error: <message>`` and exits 1, and the
    Bazel repository rules surface exactly that line to the user.
    """


class InvalidWheelError(PatchedWheelsError):
    """A wheel (file name, zip container, ``.dist-info``, RECORD, METADATA) that is not one we accept."""


class PatchError(PatchedWheelsError):
    """A patch file that does not parse, or a hunk or file edit that does not apply to the wheel."""


class InvalidLockError(PatchedWheelsError):
    """A requirements lock (or a PEP 503 page read to resolve it) that cannot be read or rewritten."""


class ElfError(PatchedWheelsError):
    """A shared library that cannot be read or edited, or a library graph that cannot be ordered."""


class UsageError(PatchedWheelsError):
    """Options or a hub configuration that contradict each other or the wheels they name."""


def printable(text: str) -> str:
    """``text`` from a file (a name, a requirement, a path) as printable characters: each character a terminal
    would act on rather than show (a line break, a carriage return, ESC, a C1 control such as CSI, a bidirectional
    override, a line separator) escaped as Python writes it, and each byte that is not UTF-8 (os.fsdecode's
    surrogates) as ``\\xNN``. Printable text comes back as it was, so a message quotes it as the user wrote it."""
    return text if text.isprintable() else _NOT_PRINTABLE_ASCII.sub(_escaped, text)


def printable_lines(lines: Iterable[str]) -> str:
    """``lines`` as a listing prints them, one per line, each :func:`printable`: a line break or a terminal control
    in a name quoted in one (a member path, a SONAME, a run's output) must not forge another line."""
    return "\n".join(map(printable, lines))


# What may need escaping: printable ASCII never does (one scan at C speed); a match is kept when it is printable.
_NOT_PRINTABLE_ASCII = re.compile(r"[^\x20-\x7e]")


def _escaped(match: re.Match[str]) -> str:
    character = match.group()
    if character.isprintable():
        return character
    if "\udc80" <= character <= "\udcff":  # a byte os.fsdecode could not decode
        return f"\\x{ord(character) - 0xDC00:02x}"
    return repr(character)[1:-1]


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun`` as a message says them: ``1 library``, ``2 libraries``, ``3 files``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun[:-1]}ies" if noun.endswith("y") else f"{count} {noun}s"


def one_line(message: str) -> str:
    """``message`` as one printable line of bounded length, whatever it quotes (a third-party reason, a name with a
    newline, a 200 MB logical line): its start names what is at fault and its end says why, so the middle goes."""
    line = printable(" ".join(message.splitlines()))
    if len(line) <= MAX_LINE:
        return line
    head, tail = MAX_LINE * 2 // 3, MAX_LINE // 3
    return f"{line[:head]} [... {len(line) - head - tail} characters left out ...] {line[-tail:]}"


def warn(message: str) -> None:
    """Report something the user should know that is not an error, as one ``patched-wheels: warning:`` line.

    The command line holds them until the command ends and shows them only when it ends without an error
    line (:func:`patched_wheels.cli.main`), so a failed run says one line; the Bazel repository rules show these
    lines of a successful helper run (see ``python/private/helper.bzl``).
    """
    print(f"patched-wheels: warning: {one_line(message)}", file=sys.stderr)
