"""patched_wheels: fix broken PyPI wheels without forking them.

One module per concern: wheel I/O, patching, ELF graph, preload, split, index, lock,
and the command line (``patched_wheels.cli``).
"""

__version__ = "0.1.0"
