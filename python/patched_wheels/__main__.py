"""Allow ``python -m patched_wheels``."""

from patched_wheels.cli import entry_point

entry_point()
