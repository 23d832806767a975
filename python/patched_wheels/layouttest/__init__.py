"""``layout_test``'s runner: the probe in the test's own runfiles, and again with those wheels in one site-packages.

Bazel runs :func:`patched_wheels.layouttest.main.main` from the test's main (``python/private/layout_test.bzl``
writes the files :mod:`~patched_wheels.layouttest.config` names beside it).  The *probe program* is a
``py_binary`` with the test's ``deps`` whose main runs its first argument as code, so rules_python launches it
exactly as it launches a ``py_test`` with those deps: one directory per
wheel, or rules_python 2.x's one site-packages when the user's flags say so.

1. The probe program reports its ``sys.path`` (one short run).
2. Every entry holding a ``*.dist-info`` directory is installed wheels (rules_python's ``site-packages``
   directories, whose ``data``/``bin``/``include`` siblings are the other schemes).  Their files are
   linked (symbolic links to the real files, inside real directories, so that ``$ORIGIN/..`` stays in the
   merged tree) into one site-packages of a virtual environment made at test time, where pip would put
   them (:mod:`patched_wheels.loading.mergedtree`); the other entries stay on ``PYTHONPATH`` where they were.
   The environment is made first: a wheel installing where it keeps its interpreter is refused, never run.
3. The probe runs in both at once, each with doctor --run's child (:func:`patched_wheels.loading.probe.run_child`),
   and the verdict is doctor --run's :class:`~patched_wheels.loading.probe.Comparison`: the test fails when its
   own layout maps fewer of the wheels' libraries, exits otherwise or fails with another first error -- and
   when either run ended without recording what it mapped (a crash, a kill): then nothing was compared.

Every child (the sys.path report too) runs under :func:`~patched_wheels.base.supervise.supervise`: bounded
output, its processes killed at its end, a deadline inside Bazel's own (``$TEST_TIMEOUT``), so a probe that
never ends is one error line naming it rather than Bazel's kill; when Bazel (or Ctrl-C) stops the test first,
the runs are killed before the runner exits, never left running without it.

The modules, one concern each: :mod:`~patched_wheels.layouttest.config` (the files the .bzl writes, the
config, the probe attribute), :mod:`~patched_wheels.layouttest.runs` (both runs, the deadline, the signals),
:mod:`~patched_wheels.layouttest.closurecheck` (deps against pip's closure), :mod:`~patched_wheels.layouttest.report`
(the verdict and the fix line), :mod:`~patched_wheels.layouttest.main` (the entry point).
"""
