"""A package's preload in its wheel: where its module and data go, the edits that write them, and reading them back.

:mod:`patched_wheels.loading.preload` decides what a package preloads (a :class:`PackagePreload`, a value); this
module puts that value into the wheel's files, once, when the wheel is written: the generated module and its data
(:mod:`patched_wheels.loading.preloadmodule` renders both) beside each ``__init__.py``, which imports the module
first; and it reads back the data an earlier ``patch``/``split`` wrote (``split`` extends it, ``doctor`` judges it),
never the generated source.
"""

from __future__ import annotations

import ast
import codecs
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from patched_wheels.errors import InvalidWheelError
from patched_wheels.loading.preloadmodule import (
    PRELOAD_DATA,
    PRELOAD_MODULE,
    PreloadList,
    read_preload_data,
    render_preload_data,
    render_preload_module,
)
from patched_wheels.wheelfile import WheelReader

_IMPORT_LINE = f"from . import {PRELOAD_MODULE}  # patched-wheels: load shared libraries from other wheels first"
_CODING_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]")


def add_preload_import(init_source: bytes | None, *, where: str) -> bytes:
    """``__init__.py`` with the preload imported first: after the docstring and ``__future__`` imports, which must lead."""
    if init_source is None:
        raise InvalidWheelError(f"{where}: missing; the preload is imported from the package's __init__.py")
    if _IMPORT_LINE.encode() in init_source:
        return init_source
    try:
        tree = ast.parse(init_source)
    except (SyntaxError, ValueError) as error:
        raise InvalidWheelError(f"{where}: cannot parse ({error})") from error
    except (RecursionError, MemoryError):  # CPython's parser: its stack (MemoryError) or the AST's depth overflows
        raise InvalidWheelError(f"{where}: cannot parse (nested too deeply for Python's parser)") from None
    # A UTF-8 byte order mark must stay the file's first bytes: the line goes after it, not before.
    bom = codecs.BOM_UTF8 if init_source.startswith(codecs.BOM_UTF8) else b""
    lines = init_source[len(bom) :].splitlines(keepends=True)
    insert_at = 0
    for number, line in enumerate(lines[:2], start=1):
        if _CODING_COOKIE.match(line):
            insert_at = number
    for index, node in enumerate(tree.body):
        is_docstring = index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        is_future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if not (is_docstring or is_future):
            break
        insert_at = max(insert_at, node.end_lineno or 0)
    newline = b"\r\n" if lines and lines[0].endswith(b"\r\n") else b"\n"
    if insert_at and not lines[insert_at - 1].endswith((b"\n", b"\r")):
        lines[insert_at - 1] += newline
    lines.insert(insert_at, _IMPORT_LINE.encode() + newline)
    return bom + b"".join(lines)


def preload_module_member(init_member: str) -> str:
    """Archive path of the generated preload module: next to the package's ``__init__.py``."""
    return f"{init_member.rsplit('/', 1)[0]}/{PRELOAD_MODULE}.py"


def preload_data_member(init_member: str) -> str:
    """Archive path of the preload's data, beside its module: what later runs read back."""
    return f"{init_member.rsplit('/', 1)[0]}/{PRELOAD_DATA}"


def read_installed_preload(read: Callable[[str], bytes | None], init_member: str, wheel: str) -> PreloadList | None:
    """The preload an earlier ``patch``/``split`` put beside ``init_member`` of the wheel file ``wheel`` (None: no
    preload), read from its data file with ``read`` (a member's bytes, None when absent). A module with no data
    beside it was written by a release before the data file: its source is never parsed, so it is refused,
    saying to patch the original wheel again."""
    data_member = preload_data_member(init_member)
    data = read(data_member)
    if data is not None:
        return read_preload_data(data, where=f"{wheel}: {data_member}")
    module_member = preload_module_member(init_member)
    if read(module_member) is not None:
        raise InvalidWheelError(
            f"{wheel}: {module_member} has no {PRELOAD_DATA} beside it (an older patched-wheels wrote it, or not "
            "patched-wheels): patch the original wheel again"
        )
    return None


def installed_preload(package_wheel: Path, init_member: str) -> PreloadList | None:
    """The preload a previous ``patch``/``split`` put into the package's wheel, or None."""
    with WheelReader(package_wheel) as reader:
        return read_installed_preload(
            lambda member: reader.read(member) if member in reader else None, init_member, package_wheel.name
        )


@dataclass(frozen=True)
class PackagePreload:
    """A package's preload as a value: what its generated module loads, and the ``__init__.py`` members that
    import it.  :func:`~patched_wheels.loading.preload.plan_package_preload` makes it, ``patch`` carries it and a
    split extends it (:func:`patched_wheels.patch.split.plan_split`); :func:`rendered_preload_edits` turns it into
    source once, when the wheel is written, so no step reads generated code back."""

    package: str
    """The package's directory (``jax_plugins/xla_cuda12``), which the module's docstring names."""
    init_members: tuple[str, ...]
    """The ``__init__.py`` members (each portion's, for a namespace package) that import the module first; a copy
    of the module lies beside each."""
    entries: PreloadList

    @property
    def module_members(self) -> tuple[str, ...]:
        return tuple(preload_module_member(init_member) for init_member in self.init_members)

    @property
    def data_members(self) -> tuple[str, ...]:
        return tuple(preload_data_member(init_member) for init_member in self.init_members)

    @property
    def written_members(self) -> tuple[str, ...]:
        """The members :func:`rendered_preload_edits` writes: each module and its data."""
        return (*self.module_members, *self.data_members)


def rendered_preload_edits(
    preloads: Sequence[PackagePreload], wheel: str
) -> dict[str, Callable[[bytes | None], bytes]]:
    """Member edits of the wheel file ``wheel`` that write ``preloads``: each module and its data rendered once,
    beside its ``__init__.py``, which imports the module first.  A later preload's files replace an earlier one's
    at the same members (a split's extends the patch's), as :func:`patched_wheels.patch.surgery.patch_wheel`
    expects."""
    latest = {member: preload for preload in preloads for member in preload.written_members}
    rendered = {
        preload: (
            render_preload_module(preload.package, preload.entries),
            render_preload_data(preload.package, preload.entries),
        )
        for preload in dict.fromkeys(latest.values())  # each once, though it writes several members
    }
    edits: dict[str, Callable[[bytes | None], bytes]] = {}
    for member, preload in latest.items():
        module, data = rendered[preload]
        edits[member] = functools.partial(_replaced, data if member.endswith(f"/{PRELOAD_DATA}") else module)
    return {**edits, **preload_import_edits(preloads, wheel)}


def preload_import_edits(preloads: Sequence[PackagePreload], wheel: str) -> dict[str, Callable[[bytes | None], bytes]]:
    """The edits of :func:`rendered_preload_edits` that make each ``__init__.py`` import its preload module first:
    they depend on where the modules go, not on what they load (a split writes them before its graph is read)."""
    return {
        init_member: functools.partial(add_preload_import, where=f"{wheel}: {init_member}")
        for preload in preloads
        for init_member in preload.init_members
    }


def _replaced(content: bytes, _current: bytes | None) -> bytes:
    return content
