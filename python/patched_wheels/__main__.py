"""Allow ``python -m patched_wheels``."""

import sys

from patched_wheels.cli import main

sys.exit(main())
