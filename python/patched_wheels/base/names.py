"""Project names as the core metadata spec (PEP 508) allows them.

``packaging`` parses file names leniently (``parse_wheel_filename`` takes any word
character, ``parse_sdist_filename`` anything before the last ``-``), and its own
validation matches some non-ASCII letters case-insensitively.  pip refuses such
names at install time, far from the cause, so they are refused where a name enters.
The globs users write over names (archive paths, project names) are checked here too, before
``fnmatch`` compiles them, and the package names users write (``jax_plugins.xla_cuda12`` or
``jax_plugins/xla_cuda12``), which the hub's plan checks before any wheel is read.

Names are normalized here too (:func:`canonicalize_name`), not with ``packaging.utils``: that module
imports ``packaging.tags``, which imports ``logging``, ``subprocess``, ``platform`` and ``sysconfig``
(about 20 ms of every helper command's start-up, a tenth of a ``cp`` of torch's wheel), for the
platform tags only a resolver needs.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, cast

from patched_wheels.errors import UsageError

if TYPE_CHECKING:
    from packaging.utils import NormalizedName

__all__ = [
    "CONTROL_CHARACTER",
    "canonicalize_name",
    "character_problem",
    "glob_problem",
    "is_valid_project_name",
    "module_name",
    "package_path",
]

_NAME_SEPARATORS = re.compile(r"[-_.]+")
"""What PEP 503 makes one ``-`` of."""
_PROJECT_NAME = re.compile(r"[A-Z0-9](?:[A-Z0-9._-]*[A-Z0-9])?", re.IGNORECASE | re.ASCII)


def canonicalize_name(name: str) -> NormalizedName:
    """PEP 503's normalized form of a project (or extra) name: lower case, each run of ``-``, ``_`` and ``.``
    one ``-``; what ``packaging.utils.canonicalize_name`` returns (a test holds them equal)."""
    return cast("NormalizedName", _NAME_SEPARATORS.sub("-", name).lower())


def is_valid_project_name(name: str) -> bool:
    """ASCII letters and digits, with ``.``, ``_`` or ``-`` inside only."""
    return _PROJECT_NAME.fullmatch(name) is not None


MAX_GLOB = 1024
"""Longer than any archive path a glob needs to match; fnmatch's compile time grows faster than its length."""
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
"""A character no name, glob, search-path entry or file's path holds: Unicode's control characters (category Cc:
C0, DEL and C1) and lone surrogates (Cs; a test holds it to :mod:`unicodedata`'s categories). A NUL cuts a C string
(an os call raises ``ValueError``), a line break forges a line, a C1 control (CSI) drives a terminal, and a
surrogate is no UTF-8 (an os call raises ``UnicodeEncodeError``)."""


def character_problem(text: str) -> str | None:
    """Why ``text`` is no name, glob, search-path entry or path (:data:`CONTROL_CHARACTER`), naming the first
    character at fault (``holds '\\x85', a control character``); None when it holds none."""
    bad = CONTROL_CHARACTER.search(text)
    if bad is None:
        return None
    character = bad.group()
    kind = "a surrogate" if "\ud800" <= character <= "\udfff" else "a control character"
    return f"holds {character!r}, {kind}"


def glob_problem(pattern: str) -> str | None:
    """Why ``pattern`` is no glob fnmatch should get, or None.  An unclosed ``[`` makes fnmatch's translation
    quadratic in the pattern's length before it falls back to a literal, and never matches what was meant."""
    if not pattern:
        return "empty"
    if len(pattern) > MAX_GLOB:
        return f"longer than {MAX_GLOB} characters"
    if problem := character_problem(pattern):
        return problem
    at = 0
    while (at := pattern.find("[", at)) >= 0:
        end = at + 1
        end += pattern.startswith("!", end)
        end += pattern.startswith("]", end)  # a first "]" is a member of the set, as fnmatch reads it
        if (at := pattern.find("]", end)) < 0:
            return "an unclosed '[' (write [[] for a literal '[')"
    return None


def package_path(package: str, given_as: str = "package") -> str:
    """The directory of ``package`` as users write it: a dotted module name (``jax_plugins.xla_cuda12``)
    or its path (``jax_plugins/xla_cuda12``); ``given_as``: what errors call it (the option that gave it)."""
    parts = package.replace("/", ".").split(".")
    if not all(part.isidentifier() for part in parts):
        raise UsageError(
            f"{given_as} {package!r}: not a module name (write it as Python imports it, e.g. jax_plugins.xla_cuda12)"
        )
    return "/".join(parts)


_EXTENSION_TAG = re.compile(r"\.(?:cpython-\d+[^.]*|abi3|cp\d+[^.]*|pypy[^.]*)\.so$")
"""The tag an extension module's file name carries (PEP 3149): ``_C.cpython-311-x86_64-linux-gnu.so``, ``_x.abi3.so``."""


def is_tagged_extension_module(filename: str) -> bool:
    """Whether ``filename`` is tagged as a Python extension module: the module Python imports from its package
    directory, whose name and place are its import name (an untagged ``x.so`` may be one too; only its symbols
    tell: ``PyInit_x``)."""
    return _EXTENSION_TAG.search(filename) is not None


def module_name(package: str) -> str:
    """``package`` as Python imports it (``jax_plugins/xla_cuda12`` -> ``jax_plugins.xla_cuda12``)."""
    return package_path(package).replace("/", ".")
