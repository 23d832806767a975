"""patched_wheels: fix broken PyPI wheels without forking them.

One subpackage per stage, in the order data flows: ``base`` (shared infrastructure), ``wheelfile``,
``elf``, ``index`` and ``loading``, ``patch``, ``lock``, ``hub``, ``cli``; ``errors`` serves them all.
"""

__version__ = "0.1.0"
