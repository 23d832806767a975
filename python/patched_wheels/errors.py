"""The one exception type the command line turns into a single error line."""


class PatchedWheelsError(Exception):
    """A failure caused by the input (a wheel, patch, lock or index), not a bug.

    ``str(error)`` must be one line that names the file, patch or member at fault:
    the CLI prints it as ``patched-wheels: error: <message>`` and exits 1, and the
    Bazel repository rules surface exactly that line to the user.
    """
