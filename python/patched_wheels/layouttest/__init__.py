"""``layout_test``'s runner: :mod:`patched_wheels.layouttest.main` (Bazel runs its ``main`` as the test's)."""
