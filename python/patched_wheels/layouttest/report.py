"""What a layout_test prints: both runs, the verdict (passed only when both recorded what they mapped and the
test's layout maps what one site-packages maps), and the ``patched_wheel`` a user pastes to fix it, in the
spelling of the hub's own declaration (MODULE.bazel or WORKSPACE)."""

from __future__ import annotations

import json
import os
from typing import Sequence

from patched_wheels.base.fsutil import read_regular_file
from patched_wheels.errors import PatchedWheelsError, one_line, plural, printable
from patched_wheels.layouttest.config import Config
from patched_wheels.loading.layout import FLAT, LAYOUT_TEXT
from patched_wheels.loading.mergedtree import Merged, dists, owners
from patched_wheels.loading.packages import EntryPoint, hosted_plugin, parse_entry_points
from patched_wheels.loading.probe import (
    Comparison,
    RunResult,
)


def _run_lines(title: str, result: RunResult, total: int) -> list[str]:
    lines = [f"  {title}:", f"    exit status: {result.returncode}"]
    if result.error_line:
        lines.append(f"    first error: {one_line(result.error_line)}")  # the probe's text: it forges no line
    mapped = (
        "unknown (the process ended without running its exit hooks)"
        if result.mapped is None
        else f"{len(result.mapped)} of the wheels' {plural(total, 'library')}"
    )
    lines.append(f"    mapped: {mapped}")
    return lines


#: The ``suffix`` of the ``patched_wheel`` a fix line gives: the version's PEP 440 local label (``1.0+preload.1``),
#: the user's to choose (an organisation's name and a counter, say).
FIX_SUFFIX = "preload.1"

#: What a fix line gives as ``hub`` when the test does not know it (no ``pip_closure`` of a hub).
UNKNOWN_HUB = "HUB"


def starlark_string(text: str) -> str:
    """``text`` as a Starlark string literal that parses back to it, on one printable line: quotes and
    backslashes escaped, ``\\n``/``\\r``/``\\t``, and every other character a terminal would act on as the octal
    escapes of its UTF-8 bytes (Bazel's Starlark holds a string as those bytes, so they are the character)."""
    out = []
    for character in text:
        if character in _STARLARK_ESCAPES:
            out.append(_STARLARK_ESCAPES[character])
        elif character.isprintable():
            out.append(character)
        else:  # a byte os.fsdecode could not decode is that byte again; another lone surrogate, its three bytes
            byte_error = "surrogateescape" if "\udc80" <= character <= "\udcff" else "surrogatepass"
            out += [f"\\{byte:03o}" for byte in character.encode("utf-8", byte_error)]
    return '"' + "".join(out) + '"'


_STARLARK_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def patched_wheel_line(config: Config, project: str, attributes: Sequence[tuple[str, str]]) -> str:
    """The ``patched_wheel`` of ``project`` a user pastes where the test's hub is declared, complete: its ``hub``
    and a ``suffix`` beside ``attributes``, in the spelling of that declaration (a tag in MODULE.bazel, or an
    item of ``patched_index(wheels = [...])`` in WORKSPACE); where to paste it, then the line itself, last."""
    hub = config.hub or UNKNOWN_HUB
    known = (
        f'; {UNKNOWN_HUB}: the hub of the deps, which pip_closure = "@{UNKNOWN_HUB}//:pip_closure.json" names'
        if not config.hub
        else ""
    )
    values = [("name", project), ("suffix", FIX_SUFFIX), *attributes]
    if config.tag_spelling == "bzlmod":
        values.insert(1, ("hub", hub))
        where, call = "add to MODULE.bazel", "patched.patched_wheel"
    else:
        where, call = (
            f"add to patched_index(name = {starlark_string(hub)}, wheels = [...]) in WORKSPACE",
            "patched_wheel",
        )
    rendered = ", ".join(f"{key} = {starlark_string(value)}" for key, value in values)
    return f"{where} (suffix {FIX_SUFFIX} is yours to change: a PEP 440 local label{known}): {call}({rendered})"


def fix_stanza(config: Config, modules: Sequence[str], wheel_entries: Sequence[str]) -> str | None:
    """The ``patched_wheel`` that makes the probe's package preload what one site-packages maps; None when the
    probe's first imported package is in none of the wheels."""
    from patched_wheels.loading.preloadmodule import PRELOAD_MODULE  # only a failing test needs it

    declared = [
        (dist, point)
        for entry in wheel_entries
        for dist in dists(entry)
        for point in _declared_entry_points(os.path.join(entry, f"{dist}.dist-info", "entry_points.txt"))
    ]
    preload = [("preload", "auto"), ("probe", config.probe)]
    for module in modules:
        plugin = hosted_plugin(module, declared)
        if plugin is not None:  # the host's own preload is what fails on a GPU: name the plugin's
            dist, point = plugin
            project = dist.rsplit("-", 1)[0].replace("_", "-").lower()
            stanza = patched_wheel_line(config, project, [*preload, ("preload_package", point.module)])
            return printable(
                f"{module} loads its plugin {point.module} by entry point {point}: preload the plugin: {stanza}"
            )
        relative = module.replace(".", "/")
        for entry in wheel_entries:
            if not os.path.isdir(os.path.join(entry, relative)):
                continue
            installed = dists(entry)
            owner = owners(entry).get(f"{relative}/__init__.py") if len(installed) > 1 else installed[0]
            if owner is None:
                continue
            project = owner.split("-")[0].replace("_", "-").lower()
            package = [("preload_package", module)] if module != project.replace("-", "_").replace(".", "_") else []
            stanza = patched_wheel_line(config, project, [*preload, *package])
            if os.path.isfile(os.path.join(entry, relative, f"{PRELOAD_MODULE}.py")):
                return printable(
                    f"{module} has a generated preload that does not cover this probe: give its patched_wheel this probe: {stanza}"
                )
            return printable(f"{module} has no generated preload: patch its wheel: {stanza}")
    return None


def _declared_entry_points(path: str) -> list[EntryPoint]:
    """An installed distribution's entry points (none when its ``entry_points.txt`` is absent, not a regular
    file, or too big to be one)."""
    try:
        return parse_entry_points(read_regular_file(path, max_bytes=1 << 20, follow_links=True))
    except (OSError, PatchedWheelsError):
        return []


def unrecorded(comparison: Comparison) -> list[str]:
    """The layouts whose run ended without recording what it mapped (killed, a crash, its record descriptor
    closed): the libraries were not compared, so the test cannot pass."""
    runs = ((comparison.per_wheel, "the test's layout"), (comparison.flat, LAYOUT_TEXT[FLAT]))
    return [text for run, text in runs if run.mapped is None]


def passed(comparison: Comparison) -> bool:
    return comparison.matches and not unrecorded(comparison)


def format_verdict(
    config: Config, comparison: Comparison, merged: Merged, modules: Sequence[str], incomplete: Sequence[str] = ()
) -> str:
    """What both runs did, and the verdict: ``incomplete`` (:func:`closure_lines`: why the deps are not pip's
    closure), what the test's layout does differently, and the fix."""
    total = len(set(merged.libraries.values()))
    lines = [printable(f"layout_test {config.test}: probe: {json.dumps(config.probe)}")]
    lines += _run_lines(
        f"the test's layout ({plural(len(merged.wheel_entries), 'directory')} of wheels on sys.path)",
        comparison.per_wheel,
        total,
    )
    lines += _run_lines("every wheel in one site-packages (links, in a virtual environment)", comparison.flat, total)
    if comparison.missing:
        lines.append("  mapped in one site-packages, NOT in the test's layout:")
        lines += [f"    {one_line(str(library))}" for library in comparison.missing]
    if incomplete:
        lines += incomplete
        lines.append(
            "layout_test: fix: add the missing wheels to deps, or take deps from a hub with restore_extras (the default), "
            "which wires what pip installs (docs/rules-python.md#extras)"
        )
        return "\n".join(lines)
    if comparison.matches and unrecorded(comparison):
        lines.append(
            f"layout_test: FAILED: nothing to compare: {' and '.join(unrecorded(comparison))} ended without recording what it mapped "
            f"(exit status {comparison.per_wheel.returncode}, {comparison.flat.returncode} in one site-packages: killed, a crash, "
            "or the probe closed the descriptor it records to): a probe must end (return, exit, raise) in both"
        )
        return "\n".join(lines)
    if comparison.matches:
        verdict = "PASSED: the test's layout does what one site-packages does"
        if comparison.flat.returncode != 0 or comparison.flat.error_line:
            verdict += f" (both fail alike, not because of the layout: {comparison.flat.error_line or 'exit status ' + str(comparison.flat.returncode)})"
        lines.append(one_line(f"layout_test: {verdict}"))
        return "\n".join(lines)
    lines.append(
        one_line(
            "layout_test: FAILED: the test's layout differs from one site-packages: "
            + "; ".join(comparison.differences)
        )
    )
    fix = fix_stanza(config, modules, merged.wheel_entries) if comparison.missing else None
    if fix:
        lines.append(f"layout_test: fix: {fix}")
    return "\n".join(lines)
