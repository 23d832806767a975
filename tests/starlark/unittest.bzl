"""A small unit-test harness for pure Starlark functions, run by `bazel test` (no dependency beyond Bazel).

Each case is a function returning a list of failure messages (empty: passed); `expect_eq` builds them.
The cases run when the BUILD file is loaded and the results become a test script that prints every
failure and exits 1, so a failing case is a FAILED test with its message in test.log, not a build error.
"""

def expect_eq(actual, expected, what):
    """[] when `actual == expected`, else one message naming `what`."""
    if actual == expected:
        return []
    return ["%s: expected %r, got %r" % (what, expected, actual)]

def _starlark_unit_test_impl(ctx):
    script = ctx.actions.declare_file(ctx.label.name + ".sh")
    lines = ["#!/bin/sh"]
    for message in ctx.attr.failures:
        lines.append("echo %s" % _shell_quote("FAIL " + message))
    lines.append("echo %s" % _shell_quote("%d of %d cases passed" % (ctx.attr.cases - len(ctx.attr.failures), ctx.attr.cases)))
    lines.append("exit %d" % (1 if ctx.attr.failures else 0))
    ctx.actions.write(script, "\n".join(lines) + "\n", is_executable = True)
    return [DefaultInfo(executable = script)]

def _shell_quote(text):
    return "'" + text.replace("'", "'\\''") + "'"

_starlark_unit_test = rule(
    implementation = _starlark_unit_test_impl,
    attrs = {
        "cases": attr.int(mandatory = True),
        "failures": attr.string_list(),
    },
    test = True,
)

def starlark_unit_test(name, cases, **kwargs):
    """A test target running `cases` (dict: case name -> function returning failure messages)."""
    failures = []
    for case_name, case in cases.items():
        failures.extend(["%s: %s" % (case_name, message) for message in case()])
    _starlark_unit_test(name = name, cases = len(cases), failures = failures, **kwargs)
