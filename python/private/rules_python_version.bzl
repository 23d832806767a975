"""Which rules_python reads the hub's lock, and the `index_option` values of the attribute schema.

Which `index_option` a release can read is the helper's plan's decision (patched_wheels.hub.plan.index_options_for);
the rule reads the release here and passes it on.
"""

# The attribute's values; the same tuple as the helper's lock.plan.INDEX_OPTIONS (tests/python/hub/test_plan.py).
INDEX_OPTIONS = ["direct", "extra-index-url", "index-url", "find-links"]

# rules_python's own marker: `git archive` expands it to the release (features.bzl, since 0.38.0).
_VERSION_MARKER = '_VERSION_PRIVATE = "'

def rules_python_version(ctx):
    """The rules_python release in use: "0" before features.bzl existed, "" when unknown (a checkout)."""
    features = ctx.path(Label("@rules_python//python:BUILD.bazel")).dirname.get_child("features.bzl")
    return features_version(ctx.read(features)) if features.exists else "0"

def features_version(text):
    """The release named in the text of rules_python's features.bzl; "" for an unexpanded checkout."""
    start = text.find(_VERSION_MARKER)
    if start < 0:
        return ""
    version = text[start + len(_VERSION_MARKER):].partition('"')[0]
    return "" if version.startswith("$") else version
