"""A layout_test's main, written beside each test by //python/private:layout_test.bzl (see patched_wheels.layouttest)."""

import sys

from patched_wheels.layouttest.main import main

sys.exit(main(__file__))
