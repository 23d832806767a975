"""The one exception type the command line turns into a single error line, and the warning line beside it."""

import sys


class PatchedWheelsError(Exception):
    """A failure caused by the input (a wheel, patch, lock or index), not a bug.

    ``str(error)`` must be one line that names the file, patch or member at fault:
    the CLI prints it as ``patched-wheels: error: <message>`` and exits 1, and the
    Bazel repository rules surface exactly that line to the user.
    """


def warn(message: str) -> None:
    """Report something the user should know that is not an error, as one ``patched-wheels: warning:`` line.

    The Bazel repository rules show these lines of a successful helper run (see ``python/private/helper.bzl``).
    """
    print(f"patched-wheels: warning: {message}", file=sys.stderr)
