"""The Bazel hub: its spec schema, its plan (every decision, before any download) and its build."""
