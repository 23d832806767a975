"""Checks that need a GPU machine: not benchmarks and not part of the suite (CI has no GPU); see README.md."""
