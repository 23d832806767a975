"""The `patched` module extension: `index` tags make hubs, `patched_wheel` tags say what to change.

Wheel URLs are resolved here, in the extension, rather than in the hub: the extension's result (the
hub's attributes, with every URL and sha256) is recorded in MODULE.bazel.lock by a Bazel that writes
it, so after `bazel clean --expunge` nothing is resolved again (Debian's bootstrap Bazel writes `{}`
and re-reads the index pages). The wheels always come from the repository cache by sha256.
"""

load(":helper.bzl", "prepare_helper")
load(":hub.bzl", "DEFAULT_INDEX_URL", "patched_hub", "resolve_wheels")
load(":rules_python_version.bzl", "INDEX_OPTIONS", "check_index_option")
load(":specs.bzl", "PATCHED_WHEEL_ATTRS", "hub_specs")

_INDEX_ATTRS = {
    "name": attr.string(mandatory = True, doc = "Name of the hub repository, e.g. `patched_pypi`."),
    "requirements_lock": attr.label(mandatory = True, allow_single_file = True, doc = "The hashed lock (pip-compile) to serve."),
    "index_url": attr.string(default = DEFAULT_INDEX_URL, doc = "PEP 503 index the lock's wheels are resolved from."),
    "index_option": attr.string(default = "direct", values = INDEX_OPTIONS, doc = "How the generated lock names the patched wheels: `direct` references (every rules_python release), or `index-url` / `extra-index-url` / `find-links` to the hub's index (rules_python < 2 only)."),
    "python_interpreter": attr.string(default = "python3", doc = "Interpreter whose tags select the wheels and that runs the helper."),
    "python_interpreter_target": attr.label(allow_single_file = True),
}

_PATCHED_WHEEL_TAG_ATTRS = dict(
    PATCHED_WHEEL_ATTRS,
    hub = attr.string(mandatory = True, doc = "The `index` tag (hub name) this patched wheel belongs to."),
)

def _patched_impl(module_ctx):
    indexes = []
    patched_by_hub = {}
    for module in module_ctx.modules:
        indexes.extend(module.tags.index)
        for tag in module.tags.patched_wheel:
            patched_by_hub.setdefault(tag.hub, []).append(tag)
    known = [index.name for index in indexes]
    for hub in patched_by_hub:
        if hub not in known:
            fail("rules_patched_wheels: patched_wheel(hub = \"%s\") names no patched.index(name = ...); known: %s" % (hub, known))

    for index in indexes:
        check_index_option(module_ctx, index.name, index.index_option)
        specs, patches = hub_specs(patched_by_hub.get(index.name, []))
        helper = prepare_helper(
            module_ctx,
            python_interpreter = index.python_interpreter,
            python_interpreter_target = index.python_interpreter_target,
        )
        resolved = resolve_wheels(
            module_ctx,
            helper,
            requirements_lock = index.requirements_lock,
            index_url = index.index_url,
            patched_specs = specs,
        )
        patched_hub(
            name = index.name,
            requirements_lock = index.requirements_lock,
            resolved = json.encode(resolved),
            index_url = index.index_url,
            index_option = index.index_option,
            patched = json.encode(specs),
            patches = patches,
            python_interpreter = index.python_interpreter,
            python_interpreter_target = index.python_interpreter_target,
        )

patched = module_extension(
    implementation = _patched_impl,
    tag_classes = {
        "index": tag_class(attrs = _INDEX_ATTRS),
        "patched_wheel": tag_class(attrs = _PATCHED_WHEEL_TAG_ATTRS),
    },
)
