"""The project's benchmarks and opt-in compatibility checks: a package, run from the repository root as
``python -m benchmarks.<script>`` (README.md beside this file lists them).

One harness (:mod:`benchmarks.harness`) times every script; the fixtures some scripts share with the tests
are imported as ``tests.support``, so no script edits ``sys.path``.
"""
