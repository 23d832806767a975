"""Project names as the core metadata spec (PEP 508) allows them.

``packaging`` parses file names leniently (``parse_wheel_filename`` takes any word
character, ``parse_sdist_filename`` anything before the last ``-``), and its own
validation matches some non-ASCII letters case-insensitively.  pip refuses such
names at install time, far from the cause, so they are refused where a name enters.
"""

from __future__ import annotations

import re

__all__ = ["is_valid_project_name"]

_PROJECT_NAME = re.compile(r"[A-Z0-9](?:[A-Z0-9._-]*[A-Z0-9])?", re.IGNORECASE | re.ASCII)


def is_valid_project_name(name: str) -> bool:
    """ASCII letters and digits, with ``.``, ``_`` or ``-`` inside only."""
    return _PROJECT_NAME.fullmatch(name) is not None
