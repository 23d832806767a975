"""A layout_test's probe program, written beside each test by //python/private:layout_test.bzl.

A py_binary with the test's deps, so Bazel gives it the sys.path of a py_test with those deps; it runs its
first argument as code, as `python -c CODE ARGS...` does (patched_wheels.layouttest passes doctor --run's child).
"""

import sys

_code = sys.argv.pop(1)
exec(compile(_code, "<string>", "exec"), {"__name__": "__main__"})
