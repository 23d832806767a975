"""Predict which shared libraries fail to load when each wheel has its own directory (as under Bazel).

The dynamic loader looks for a library's DT_NEEDED names in the directories of
its own DT_RUNPATH (or DT_RPATH when there is no RUNPATH), with ``$ORIGIN``
standing for the library's directory, then in the system directories; a name
that an already loaded library carries as its SONAME needs no search at all.
This module replays the first part over a simulated one-directory-per-wheel
layout and reports every dependency that is not found there.

With a package, it gives two verdicts.  *As is*: judged against the preload
already in the package's wheel (one a previous ``patch``/``split`` generated),
or none; the exit status follows this one, since it is what runs today.  *With
the generated preload*: judged against what ``preload = "auto"`` or ``"elf"`` (and
``preload_wheels``) would write, i.e. :func:`patched_wheels.loading.preload.plan_preload`.
Libraries a package opens itself at run time are invisible in the ELF graph: those
a probe maps in one site-packages (when one is given), of the wheels matching
``preload_wheels``, and -- for a package with no DT_NEEDED edge to other wheels --
those of the wheels it requires, count as possibly loaded.  Data-scheme libraries
are judged where rules_python puts them (:mod:`patched_wheels.loading.layout`).
Simplifications: DT_RPATH inherited from the loading object and LD_LIBRARY_PATH
are ignored, since neither reaches across wheel directories under Bazel; a preload
written by hand in the package's code is not seen.  All of this is a prediction:
``doctor --run`` (:func:`format_run`) judges by the difference from one site-packages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Collection, Iterable, Sequence

from patched_wheels.base.cache import OFF, CacheContext
from patched_wheels.base.names import module_name
from patched_wheels.elf.graph import LibraryGraph, read_graph
from patched_wheels.elf.order import expand_origin
from patched_wheels.elf.read import ElfLibrary
from patched_wheels.elf.syslibs import system_library_names
from patched_wheels.errors import UsageError, plural, printable_lines
from patched_wheels.loading.layout import FLAT, LAYOUT_TEXT, PER_WHEEL, Layout
from patched_wheels.loading.observe import observe
from patched_wheels.loading.packages import find_package, package_libraries
from patched_wheels.loading.preload import (
    check_before_probe,
    plan_preload,
    project_name,
    runtime_candidates,
    runtime_hint,
)
from patched_wheels.loading.preloadfiles import installed_preload
from patched_wheels.loading.preloadmodule import PreloadList
from patched_wheels.wheelfile.schemes import data_scheme

if TYPE_CHECKING:
    from patched_wheels.loading.probe import Comparison, Installation, RunResult

# What a dependency missing from the per-wheel layout means for the package asked about.
FAILS = "fails"  # no package given: it fails whenever the library is loaded
COVERED = "covered"  # the preload loads the provider first
NOT_COVERED = "not covered"  # the package (or its preload) loads the library, and it will fail
MAY_FAIL = "may fail"  # the package may load the library itself at run time, and it would fail
SKIPPED = "skipped"  # an optional preload entry that fails to load: the preload skips it
NOT_LOADED = "not loaded"  # nothing loads the library
_FAILING = frozenset({FAILS, NOT_COVERED, MAY_FAIL})
_STATUS_TEXT = {
    COVERED: "covered by the preload",
    NOT_COVERED: "NOT covered by the preload",
    MAY_FAIL: "fails if {package} loads it itself at run time (its wheel is required, or its own data file); NOT covered by the preload",
    SKIPPED: "skipped by the preload (optional); fails if {package} loads it itself",
    NOT_LOADED: "{package} does not load it",
}


@dataclass(frozen=True)
class Finding:
    """One DT_NEEDED name of one library that the per-wheel layout does not satisfy."""

    library: ElfLibrary
    needed: str
    provider: ElfLibrary | None
    """The library of the set with that name, or None when neither the set nor this system has it."""
    status: str
    vendored: tuple[ElfLibrary, ...] = ()
    """Without a provider: the private copies other wheels ship under that name (auditwheel's ``<name>.libs/``),
    which serve their own wheel alone."""

    @property
    def fails(self) -> bool:
        return self.status in _FAILING


@dataclass(frozen=True)
class Verdict:
    """The findings of a wheel set judged against one preload."""

    preload: PreloadList
    findings: tuple[Finding, ...]

    @property
    def fails(self) -> bool:
        return any(finding.fails for finding in self.findings)

    def libraries(self, *statuses: str) -> list[ElfLibrary]:
        """The distinct libraries with a finding of one of ``statuses``."""
        return list(dict.fromkeys(finding.library for finding in self.findings if finding.status in statuses))


@dataclass(frozen=True)
class Diagnosis:
    as_is: Verdict
    """What loads today: the exit status follows it."""
    graph: LibraryGraph = field(repr=False, compare=False)
    package: str | None = None
    installed: bool = False
    """Whether the package's wheel carries a preload generated by patched-wheels."""
    generated: Verdict | None = None
    """With the preload ``preload = "auto"`` or ``"elf"`` (and the ``preload_wheels`` given) would generate."""
    preload_wheels: tuple[str, ...] = ()
    hint: str | None = None
    """How to preload libraries the package may load at run time, when nothing asks for them yet."""
    probe: str | None = None
    """The code whose run in one site-packages the generated preload includes; None: ELF graph only."""

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self.as_is.findings

    @property
    def fails(self) -> bool:
        return self.as_is.fails


_SIMULATED = Layout(PER_WHEEL, PurePosixPath("/"))


def _layout_directory(library: ElfLibrary) -> str:
    """The directory ``library`` lands in with one directory per wheel (data-scheme ones outside site-packages)."""
    return str(_SIMULATED.target(library.wheel, library.path).parent)


def _search_directories(library: ElfLibrary) -> list[str]:
    origin = _layout_directory(library)
    return [expand_origin(entry, origin) for entry in library.search_path]


def diagnose_graph(
    graph: LibraryGraph,
    *,
    system_names: Collection[str],
    package: str | None = None,
    package_wheel: str | None = None,
    preload: PreloadList = PreloadList(),
    runtime: Iterable[ElfLibrary] = (),
) -> list[Finding]:
    """The findings for ``graph``; with ``package``, each is judged against ``preload``.

    ``runtime``: libraries the package may load itself at run time (with what they need).
    """
    # Where each file name lies, so a DT_NEEDED name is looked up once per library, not along every search directory
    # for each of its entries (a library may have thousands of both).
    directories_by_file: dict[str, set[str]] = {}
    for library in graph.libraries:
        directories_by_file.setdefault(library.filename, set()).add(_layout_directory(library))
    loaded: set[ElfLibrary] = set()
    if package is not None:
        loaded = graph.closure(package_libraries(graph, package, package_wheel or ""))
    may_load = graph.closure(runtime)
    position = {path: index for index, path in enumerate(preload.libraries)}
    findings = []
    for library in graph.libraries:
        directories = set(_search_directories(library))
        on_search_path: dict[str, bool] = {}
        for name in library.needed:
            if name not in on_search_path:
                on_search_path[name] = not directories.isdisjoint(directories_by_file.get(name, ()))
            if on_search_path[name]:
                continue
            provider = graph.providers[library].get(name)
            if provider is None and name in system_names:
                continue
            if package is None:
                status = FAILS
            elif (
                provider is not None
                and provider.path in position
                and position[provider.path] < position.get(library.path, len(position))
            ):
                status = COVERED
            elif library in loaded or (library.path in position and library.path not in preload.optional):
                status = NOT_COVERED
            elif library.path in preload.optional:
                status = SKIPPED
            elif library in may_load:
                status = MAY_FAIL
            else:
                status = NOT_LOADED
            vendored = graph.vendored_copies(name, library.wheel) if provider is None else ()
            findings.append(Finding(library, name, provider, status, vendored))
    return findings


def diagnose(
    wheels: Sequence[Path],
    *,
    package: str | None = None,
    preload_wheels: Sequence[str] = (),
    caches: CacheContext = OFF,
    system_names: Collection[str] | None = None,
    probe: str | None = None,
    installation: Installation | None = None,
) -> Diagnosis:
    """Simulate one directory per wheel for ``wheels`` and report what would not load.

    ``system_names``: the library file names the target system provides (default:
    :func:`system_library_names` of this machine).  ``preload_wheels``: globs of the
    project names whose libraries ``package`` loads at run time (see ``patch --preload-wheels``).
    ``probe``: code run with every wheel in one site-packages, whose mapped libraries the generated
    preload adds (as ``preload = "auto"`` does); None: the ELF graph alone, as ``preload = "elf"`` (nothing is run).
    ``installation``: the wheels already installed (``doctor --run``), for the probe to run in.  ``caches``:
    the ELF cache and observations read and filled.
    """
    wheels = [Path(wheel) for wheel in wheels]
    # With a package, an unreadable library fails only if the package may need it (LibraryGraph.check_problems).
    # With a probe and a cache, its kept observation is checked against the symbol tables read in the graph's pass.
    graph = read_graph(
        wheels,
        caches=caches,
        lenient=package is not None,
        symbols=probe is not None and installation is None and caches.root is not None,
    )
    names = system_library_names() if system_names is None else system_names
    if package is None:
        if preload_wheels:
            raise UsageError("preload wheels globs are judged against a package's preload: give the package")
        return Diagnosis(Verdict(PreloadList(), tuple(diagnose_graph(graph, system_names=names))), graph)
    location = find_package(package, wheels)
    package_wheel, package = location.wheel, location.path
    installed = installed_preload(package_wheel, location.init_members[0])
    own = check_before_probe(graph, package, package, package_wheel.name, preload_wheels)
    observed = None
    if probe is not None:
        observed = observe(wheels, probe, graph, caches=caches, installation=installation)
    plan = plan_preload(graph, package, package_wheel.name, preload_wheels=preload_wheels, observed=observed)
    graph.check_problems(package, package_wheel.name, [*own, *plan.libraries])
    if plan.unmatched:
        raise UsageError(f"preload wheels glob {plan.unmatched[0]!r} matches no other wheel with shared libraries")
    runtime = list(plan.optional)  # what the observation or preload_wheels names: the package loads it at run time
    # Libraries the package's wheel installs outside site-packages (CyFES's libcufes.so) are there for it to load.
    runtime += [
        library for library in graph.libraries if library.wheel == package_wheel.name and data_scheme(library.path)
    ]
    hint = None
    if not plan.required:
        candidates = runtime_candidates(graph, package_wheel)
        runtime += [
            library
            for library in graph.libraries
            if library.wheel != package_wheel.name and project_name(library.wheel) in candidates
        ]
        if candidates and not plan.optional and not (installed and installed.optional):
            hint = runtime_hint(module_name(package), candidates, observed)

    def judge(preload: PreloadList) -> Verdict:
        findings = diagnose_graph(
            graph,
            system_names=names,
            package=package,
            package_wheel=package_wheel.name,
            preload=preload,
            runtime=runtime,
        )
        return Verdict(preload, tuple(findings))

    return Diagnosis(
        as_is=judge(installed or PreloadList()),
        graph=graph,
        package=package,
        installed=installed is not None,
        generated=judge(plan.as_list()),
        preload_wheels=tuple(preload_wheels),
        hint=hint,
        probe=probe,
    )


def _finding_line(finding: Finding, package: str | None) -> str:
    library = finding.library
    search = ":".join(library.search_path) or "none"
    if finding.provider is None:
        problem = f"needs {finding.needed}, found in no wheel given nor on this system"
        if finding.vendored:
            copies = ", ".join(f"{copy.path} ({copy.wheel})" for copy in finding.vendored)
            problem = (
                f"needs {finding.needed}, which this system lacks; {copies} is a private copy (auditwheel's .libs/), "
                "which serves its own wheel alone"
            )
    else:
        problem = (
            f"needs {finding.needed} from {finding.provider.path} ({finding.provider.wheel}), "
            f"not on its {'RUNPATH' if library.runpath else 'RPATH'} ({search}) in a per-wheel layout"
        )
    suffix = "" if finding.status == FAILS else " -- " + _STATUS_TEXT[finding.status].format(package=package)
    return f"predicted: {library.path} ({library.wheel}): {problem}{suffix}"


def _preload_lines(preload: PreloadList) -> list[str]:
    return [
        f"  {index}. {path}{' (optional)' if path in preload.optional else ''}"
        for index, path in enumerate(preload.libraries, start=1)
    ]


def _summary(label: str, verdict: Verdict) -> str:
    """The verdict's line, labelled a prediction: it replays the loader's search over the ELF graph, it runs nothing."""
    label = f"predicted, {label}"
    failing = verdict.libraries(*_FAILING)
    verb = "fails" if len(failing) == 1 else "fail"
    text = (
        f"{label}: {plural(len(failing), 'library')} {verb} to load with one directory per wheel"
        if failing
        else f"{label}: every library loads with one directory per wheel"
    )
    skipped = verdict.libraries(SKIPPED)
    if skipped:
        text += f" ({plural(len(skipped), 'optional library')} skipped by the preload)"
    return text


def format_diagnosis(diagnosis: Diagnosis) -> str:
    """Both verdicts, each named, as lines of text (the ``doctor`` command's output), each line escaped
    (:func:`~patched_wheels.errors.printable_lines`): the names in them come from the wheels and the runs (member
    paths, DT_NEEDED, a run's output), and a line break or a terminal control in one must not forge a line of the
    verdict."""
    package = diagnosis.package
    if package is None or diagnosis.generated is None:
        lines = [_finding_line(finding, None) for finding in diagnosis.findings]
        return printable_lines([*lines, _summary("as is", diagnosis.as_is)])
    as_is, generated = diagnosis.as_is, diagnosis.generated
    if diagnosis.installed:
        lines = [
            f"as is: {package}'s wheel has a generated preload of {plural(len(as_is.preload.libraries), 'library')}"
        ]
        lines += _preload_lines(as_is.preload)
    else:
        lines = [f"as is: {package}'s wheel has no preload generated by patched-wheels"]
    lines += [_finding_line(finding, package) for finding in as_is.findings]
    lines.append(_summary("as is", as_is))
    # The attribute that writes this preload: a probe needs "auto"; without one it is "elf"'s.
    settings = (
        f'preload = "auto", probe = {json.dumps(diagnosis.probe)}'
        if diagnosis.probe
        else 'preload = "elf", ELF graph only: no probe run'
    )
    if diagnosis.preload_wheels:
        settings += f", preload_wheels = {json.dumps(list(diagnosis.preload_wheels))}"
    lines.append(f"with the generated preload ({settings}): {plural(len(generated.preload.libraries), 'library')}")
    lines += _preload_lines(generated.preload)
    lines += [
        _finding_line(finding, package) for finding in generated.findings if finding.status not in (COVERED, NOT_LOADED)
    ]
    lines.append(_summary("with the generated preload", generated))
    if diagnosis.hint:
        lines.append(f"hint: {diagnosis.hint}")
    return printable_lines(lines)


def _run_lines(result: RunResult, total: int) -> list[str]:
    how = (
        "a virtual environment"
        if result.layout == FLAT
        else f"python -S, {plural(result.entries, 'directory')} on PYTHONPATH"
    )
    lines = [f"  {LAYOUT_TEXT[result.layout]} ({how}):"]
    lines.append(f"    exit status: {result.returncode}")
    if result.error_line:
        lines.append(f"    first error: {result.error_line}")
    if result.mapped is None:
        lines.append("    mapped: unknown (the process ended without running its exit hooks)")
    else:
        lines.append(f"    mapped: {len(result.mapped)} of the set's {plural(total, 'library')}")
    return lines


def format_run(comparison: Comparison, diagnosis: Diagnosis) -> str:
    """What ``doctor --run`` saw in both layouts, its verdict (the difference), and whether the static
    prediction agrees with it; each line escaped as in :func:`format_diagnosis`."""
    flat, per_wheel = comparison.flat, comparison.per_wheel
    total = len(diagnosis.graph.libraries)
    lines = [f"run: {flat.code} (this interpreter)"]
    lines += _run_lines(flat, total)
    lines += _run_lines(per_wheel, total)
    lines += [f"    stdout: {line}" for line in per_wheel.stdout.splitlines()[-10:]]
    lines += [f"    mapped: {library}" for library in per_wheel.mapped or ()]
    if comparison.missing:
        lines.append("  mapped in one site-packages, NOT with one directory per wheel:")
        lines += [f"    {library}" for library in comparison.missing]
    if comparison.matches:
        verdict = "run: passes: one directory per wheel does what one site-packages does"
        if flat.returncode != 0 or flat.error_line:
            verdict += f" (same as in one site-packages, not caused by the layout: {flat.error_line or 'exit status ' + str(flat.returncode)})"
        lines.append(verdict)
    else:
        lines.append(
            "run: fails: one directory per wheel differs from one site-packages: " + "; ".join(comparison.differences)
        )
    predicted_failure = diagnosis.fails
    prediction = f"prediction (static, as is): {'fails' if predicted_failure else 'loads'}"
    if predicted_failure != comparison.matches:
        lines.append(f"{prediction}, as the run shows")
    elif predicted_failure:
        lines.append(
            f"{prediction}, unlike the run: the code preloads those libraries itself, never loads them, "
            "or they fail the same way in one site-packages"
        )
    else:
        lines.append(
            f"{prediction}, unlike the run: the difference is not a library's DT_NEEDED (a library the code opens "
            "itself at run time: see the libraries not mapped and the first error)"
        )
    return printable_lines(lines)
