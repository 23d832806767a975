"""A layout_test's config: the files ``python/private/layout_test.bzl`` writes beside the test's main (their
suffixes are this side of the contract ``tests/python/layouttest/test_layout_test_bzl.py`` checks), the config
read by the schema reader, the probe attribute checked before anything runs, and the runfiles root the config's
paths are under."""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from patched_wheels.base.fsutil import NotRegularFileError, read_regular_file
from patched_wheels.base.schema import read_object
from patched_wheels.errors import UsageError

# The files python/private/layout_test.bzl writes for a test NAME, beside each other in the runfiles.
MAIN_SUFFIX = "_layout_main.py"

CONFIG_SUFFIX = "_layout_test.json"

PROBE_SUFFIX = "_layout_probe"

# Linux's MAX_ARG_STRLEN (32 pages), its NUL included: the most one argument of a new program may hold.
_MAX_ARGUMENT = 32 * 4096


@dataclass(frozen=True)
class Config:
    """A test's config: what ``layout_test.bzl`` writes (every field but ``program``), and its probe program."""

    test: str
    """The test's label, as the user wrote the target."""
    probe: str
    program: Path
    """The probe program (a py_binary with the test's deps; its main runs its first argument as code)."""
    pip_closure: str = ""
    """``pip_closure``'s path under the runfiles root ("": not given)."""
    pip_closure_repository: str = ""
    """The canonical name of the repository holding ``pip_closure`` ("": none given, or the main repository's)."""
    bzlmod: bool = True
    """Whether Bazel reads the main repository's MODULE.bazel (the label of layout_test.bzl is canonical)."""

    @property
    def hub(self) -> str:
        """The hub ``pip_closure`` comes from, as its ``index`` tag or ``patched_index`` names it ("": unknown):
        the last part of a module extension's canonical name (``rules_patched_wheels~~patched~patched_pypi``,
        ``+`` since Bazel 8), or the name of a WORKSPACE's repository."""
        return re.split(r"[~+]", self.pip_closure_repository)[-1]

    @property
    def tag_spelling(self) -> str:
        """How the user declares a patched wheel of that hub: ``bzlmod`` (a tag of the module extension, which
        names its repositories with ``~`` or ``+``) or ``workspace`` (a ``patched_index`` macro)."""
        repository = self.pip_closure_repository
        if repository:
            return "bzlmod" if re.search(r"[~+]", repository) else "workspace"
        return "bzlmod" if self.bzlmod else "workspace"

    @property
    def subject(self) -> str:
        """The start of every message about the probe: the test and the attribute as the user wrote them."""
        return f"layout_test {self.test}: probe = {json.dumps(self.probe)}"


_MAX_CONFIG_BYTES = 1 << 20
"""The largest config read: layout_test.bzl writes the test's label and its probe, which a command line carries."""


def read_config(main_file: str) -> Config:
    """The test's config, found beside its main ``NAME_layout_main.py``: the JSON object of :class:`Config`'s fields
    (but ``program``, the probe program beside it) that ``layout_test.bzl`` writes, read by the schema reader;
    anything else is one error naming the file."""
    if not main_file.endswith(MAIN_SUFFIX):
        raise UsageError(f"{main_file}: not a layout_test main (expected a name ending in {MAIN_SUFFIX})")
    base = main_file[: -len(MAIN_SUFFIX)]
    path = base + CONFIG_SUFFIX
    what = f"{path}: not a layout_test config"
    try:
        value = json.loads(read_regular_file(path, max_bytes=_MAX_CONFIG_BYTES, follow_links=True).decode("utf-8"))
    except NotRegularFileError as problem:  # a FIFO is not waited on, a device not read
        raise UsageError(f"{path}: {problem}; not a layout_test config") from None
    except OSError as problem:
        raise UsageError(f"{path}: cannot read the layout_test config: {problem.strerror or problem}") from None
    except RecursionError:  # json nests a Python call per "[" or "{"
        raise UsageError(f"{what}: nested too deeply") from None
    except ValueError as problem:  # not UTF-8, not JSON
        raise UsageError(f"{what}: {problem}") from None
    try:
        return read_object(Config, value, what, given={"program": Path(base + PROBE_SUFFIX)})
    except ValueError as problem:  # not an object, or not of the config's keys
        raise UsageError(str(problem)) from None


def check_probe(test: str, probe: str) -> list[str]:
    """The modules ``probe`` imports (absolute imports, in order); a probe that does not compile, or that no
    command line can carry (each run gets it as one argument), is refused."""
    size = len(probe.encode("utf-8", "surrogatepass"))
    if size >= _MAX_ARGUMENT:
        raise UsageError(
            f"layout_test {test}: probe = {json.dumps(probe)}: {size} bytes, more than the {_MAX_ARGUMENT - 1} a command-line "
            "argument holds: put the code in a module of deps and import it"
        )
    try:
        tree = ast.parse(probe, "<probe>")
        compile(tree, "<probe>", "exec")
    except SyntaxError as error:
        where = f" (line {error.lineno})" if error.lineno else ""
        raise UsageError(
            f"layout_test {test}: probe = {json.dumps(probe)} does not compile: {error.msg}{where}"
        ) from None
    except ValueError as error:  # a NUL character
        raise UsageError(f"layout_test {test}: probe = {json.dumps(probe)} does not compile: {error}") from None
    except (RecursionError, MemoryError):  # CPython's parser: its stack (MemoryError) or the tree's depth overflows
        raise UsageError(
            f"layout_test {test}: probe = {json.dumps(probe)} does not compile: nested too deeply for Python's parser"
        ) from None
    imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    names: list[str] = []
    for node in sorted(imports, key=lambda node: (node.lineno, node.col_offset)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif node.level == 0 and node.module:
            names.append(node.module)
    if not names:
        raise UsageError(
            f"layout_test {test}: probe = {json.dumps(probe)} imports nothing: import the package whose libraries it checks"
        )
    return list(dict.fromkeys(names))


def runfiles_root(main_file: str) -> str:
    """The test's runfiles directory: $RUNFILES_DIR or $TEST_SRCDIR (Bazel's), else the ``*.runfiles`` above its main."""
    for variable in ("RUNFILES_DIR", "TEST_SRCDIR"):
        if os.environ.get(variable):
            return os.path.abspath(os.environ[variable])
    parent = os.path.dirname(os.path.abspath(main_file))
    while parent != os.path.dirname(parent) and not parent.endswith(".runfiles"):
        parent = os.path.dirname(parent)
    if not parent.endswith(".runfiles"):
        raise UsageError(f"{main_file}: not in a runfiles directory, and neither RUNFILES_DIR nor TEST_SRCDIR is set")
    return parent
