"""Which rules_python reads the hub's lock, and which `index_option` forms it can use.

rules_python 2.x reads a lock's `--index-url`/`--extra-index-url` and fetches the pages with Bazel's
downloader, which returns a directory listing for a `file://` index page: `index-url` then falls back
to pip for every pin (one warning each) and `extra-index-url` fails inside rules_python. Direct
references (`torch @ file:///…whl`) are fetched by URL in every release, so they are the one form
2.x gets. Checking here turns rules_python's failure into one line naming the hub.
"""

INDEX_OPTIONS = ["direct", "index-url", "extra-index-url", "find-links"]

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

def index_options_for(version):
    """The `index_option` values a rules_python `version` can read (an unknown one counts as the newest)."""
    major = version.partition(".")[0]
    if major.isdigit() and int(major) < 2:
        return INDEX_OPTIONS
    return ["direct"]

def check_index_option(ctx, hub, index_option):
    """Fails with one line when the rules_python in use cannot read the lock `index_option` writes."""
    if index_option not in INDEX_OPTIONS:
        fail("rules_patched_wheels: hub \"%s\": index_option = \"%s\" is not one of %s" % (hub, index_option, INDEX_OPTIONS))
    version = rules_python_version(ctx)
    allowed = index_options_for(version)
    if index_option not in allowed:
        fail(("rules_patched_wheels: hub \"%s\": index_option = \"%s\" cannot be read by rules_python %s, whose " +
              "pip.parse fetches index pages with Bazel's downloader (a file:// index page is a directory listing " +
              "to it); use index_option = \"direct\" (the default)") % (hub, index_option, version or "(unreleased)"))
