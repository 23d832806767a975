"""Python code the user gives the helper to run (a ``probe``, ``doctor --run``), checked where it is given.

A probe runs after every wheel of the set is installed for it: minutes for a CUDA stack. Code this interpreter
does not compile would then be a probe that "failed", its preload made from what it mapped until then
(nothing), with a warning; checked first, it is the option's or attribute's error before any download.
"""

from __future__ import annotations

__all__ = ["code_problem"]


def code_problem(code: str) -> str | None:
    """Why ``code`` cannot run here: this interpreter does not compile it (compiling runs nothing); None when it
    compiles."""
    try:
        compile(code, "<probe>", "exec", dont_inherit=True)
    except SyntaxError as error:  # IndentationError and TabError too
        return f"not Python this interpreter runs ({type(error).__name__}: {error.msg}, line {error.lineno})"
    except (ValueError, RecursionError, MemoryError) as error:  # a NUL byte; nesting deeper than the parser goes
        return f"not Python this interpreter runs ({type(error).__name__}: {error})"
    return None
