"""PEP 440 local version labels for patched wheels.

A patched wheel must not be mistaken for the upstream one, yet must still satisfy
``torch==2.1.0`` style pins of its dependents.  A local label does both: ``2.1.0`` ->
``2.1.0+stripe.5``.  Versions that already carry a label (CUDA builds: ``2.1.2+cu118``)
get the suffix appended as more label segments, since PEP 440 allows only one ``+``.
"""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

from patched_wheels.errors import InvalidWheelError, UsageError

__all__ = ["with_local_suffix"]

# PEP 440: local segments are ASCII letters and digits separated by ".", "-" or "_".
# ASCII only: case-insensitive [a-z] would also take 'ſ' and the Kelvin sign.
_LOCAL_LABEL = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*", re.IGNORECASE | re.ASCII)


def with_local_suffix(version: str, suffix: str, given_as: str = "suffix") -> str:
    """Return ``version`` with ``suffix`` appended to its local label, normalised by PEP 440 (``given_as``: what
    errors call the suffix, the option or attribute that gave it).

    >>> with_local_suffix("2.1.0", "stripe.5")
    '2.1.0+stripe.5'
    >>> with_local_suffix("2.1.2+cu118", "stripe.5")
    '2.1.2+cu118.stripe.5'
    """
    if not _LOCAL_LABEL.fullmatch(suffix):
        raise UsageError(
            f"{given_as} {suffix!r} is not a valid PEP 440 local version label "
            "(letters and digits separated by '.', '-' or '_')"
        )
    try:
        parsed = Version(version)
    except InvalidVersion:
        raise InvalidWheelError(f"version {version!r} is not a valid PEP 440 version") from None
    label = f"{parsed.local}.{suffix}" if parsed.local else suffix
    return str(Version(f"{parsed.public}+{label}"))
