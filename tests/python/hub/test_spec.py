"""The hub's spec schema (``hub/spec.py``): what checking a ``patched_wheel`` may import."""

from __future__ import annotations

from support.importgraph import PACKAGE, ROOT, import_graph, reached

# What checking a spec needs: names and globs, the probe's code compiled, the version rule, the patch's requests
# (RPATH edits, the split), each checked without a wheel, and the JSON schema's reader (which imports nothing of
# the project's).
NEEDED = {"errors", "base.fsutil", "base.names", "base.usercode", "patch.request", "patch.version", "base.schema"}


def test_checking_a_spec_imports_none_of_the_patching_loading_or_elf_modules() -> None:
    """The plan checks every ``patched_wheel`` before anything is downloaded: those checks must not drag in
    the split planner, the preload and its probe, the ELF editor or the library graph (through the spec's
    imports they once did: 35 modules for a schema check)."""
    spec = f"{PACKAGE}.hub.spec"
    assert reached(import_graph(ROOT, PACKAGE), spec) - {spec} <= {f"{PACKAGE}.{name}" for name in NEEDED}
