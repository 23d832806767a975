"""The library graph as ``patched-wheels graph`` prints it: a listing to read, and JSON for tools.

:mod:`patched_wheels.elf.graph` reads and builds the graph; this module only renders one.
"""

from __future__ import annotations

from dataclasses import asdict

from patched_wheels.elf.graph import LibraryGraph
from patched_wheels.errors import printable_lines


def format_graph(graph: LibraryGraph) -> str:
    """Human-readable listing: each library with its edges, then the load order; every line printable
    (:func:`~patched_wheels.errors.printable_lines`: a name's line breaks and terminal controls escaped)."""
    lines: list[str] = []
    for library in graph.libraries:
        lines.append(str(library))
        if library.soname:
            lines.append(f"  soname:  {library.soname}")
        if library.rpath:
            lines.append(f"  rpath:   {':'.join(library.rpath)}")
        if library.runpath:
            lines.append(f"  runpath: {':'.join(library.runpath)}")
        for dependency in graph.dependencies[library]:
            lines.append(f"  needs    {dependency}")
        for name in graph.system[library]:
            copies = "".join(
                f"; {copy.path} ({copy.wheel}) is that wheel's own copy"
                for copy in graph.vendored_copies(name, library.wheel)
            )
            lines.append(f"  needs    {name} (system, not followed{copies})")
    lines.append("load order (dependencies first):")
    if not graph.load_order:
        lines.append("  (none: the wheels given hold no shared library)")
    width = len(str(len(graph.load_order)))
    cycle_of = {library: number for number, members in enumerate(graph.cycles, start=1) for library in members}
    for index, library in enumerate(graph.load_order, start=1):
        mark = f"  (cycle {cycle_of[library]})" if library in cycle_of else ""
        lines.append(f"  {index:>{width}}. {library}{mark}")
    if graph.cycles:
        # Only when there are any: the listing of an acyclic set stays as it was.
        lines.append("cycles (libraries that need each other; each loads as one, first member first):")
        for number, members in enumerate(graph.cycles, start=1):
            lines.append(f"  cycle {number}: " + " <-> ".join(map(str, members)))
    # Names come from the wheels (member paths, SONAMEs, DT_NEEDED, search paths): a line break or a terminal
    # control in one must not forge a line, so each line is printed escaped (what is printable stays as it is).
    return printable_lines(lines)


def graph_as_json(graph: LibraryGraph) -> dict[str, object]:
    """The graph as plain data, for tools that consume ``patched-wheels graph --json``."""
    return {
        "libraries": [
            {
                **asdict(library),
                "dependencies": [
                    {"wheel": dependency.wheel, "path": dependency.path} for dependency in graph.dependencies[library]
                ],
                "system": list(graph.system[library]),
            }
            for library in graph.libraries
        ],
        "load_order": [{"wheel": library.wheel, "path": library.path} for library in graph.load_order],
        "cycles": [[{"wheel": library.wheel, "path": library.path} for library in members] for members in graph.cycles],
    }
