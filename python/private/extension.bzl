"""The `patched` module extension: `index` tags make hubs, `patched_wheel` tags say what to change.

Wheel URLs are resolved here, in the extension, rather than in the hub: the extension's result (the
hub's attributes, with every URL and sha256) is recorded in MODULE.bazel.lock by a Bazel that writes
it, so after `bazel clean --expunge` nothing is resolved again. Debian's bootstrap Bazel writes `{}` and
resolves again: it downloads the index pages, and where one cannot be downloaded (no network) the helper
answers with what an earlier download of it taught (kept in its cache root). The wheels always come from
the repository cache by sha256.
"""

load(":helper.bzl", "prepare_helper")
load(":hub.bzl", "INDEX_ATTRS", "check_hub", "hub_request", "index_attributes", "index_credentials", "patched_hub", "resolve_wheels")
load(":specs.bzl", "PATCHED_WHEEL_ATTRS", "hub_specs")

_INDEX_TAG_ATTRS = dict(
    INDEX_ATTRS,
    name = attr.string(mandatory = True, doc = "Name of the hub repository, e.g. `patched_pypi`."),
)

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

    # Every hub's attributes are checked before the first hub resolves: a contradiction anywhere fails
    # before any download.
    hubs = []
    for index in indexes:
        specs, patches = hub_specs(patched_by_hub.get(index.name, []))
        attributes = index_attributes(index)
        helper = prepare_helper(
            module_ctx,
            python_interpreter = index.python_interpreter,
            python_interpreter_target = index.python_interpreter_target,
        )
        request = hub_request(module_ctx, attributes, hub = index.name, bzlmod = True, specs = specs, patches = patches)
        resolution = check_hub(module_ctx, helper, request)
        hubs.append(struct(name = index.name, attributes = attributes, specs = specs, patches = patches, helper = helper, request = request, resolution = resolution))

    pages = 0
    for hub in hubs:
        resolution = resolve_wheels(
            module_ctx,
            hub.helper,
            hub.request,
            hub.resolution,
            index_url = hub.attributes["index_url"],
            credentials = index_credentials(module_ctx, hub.attributes),
        )
        pages += resolution.pages
        patched_hub(
            name = hub.name,
            resolved = json.encode(resolution.wheels),
            patched = json.encode(hub.specs),
            patches = hub.patches,
            bzlmod = True,
            hub_name = hub.name,
            **hub.attributes
        )

    # Reproducible when no hub read an index page (every lock names its files: uv.lock, pylock.toml): the
    # result then follows from the locks and the host's python_interpreter alone, and is computed again
    # rather than recorded. A page changes: a Bazel that writes MODULE.bazel.lock records that result.
    # (Bazel 7.7.1 has no extension facts; Debian's bootstrap build writes the lock file as `{}`, so there a
    # page that cannot be fetched is answered by the helper's record of it: resolve_wheels.)
    return module_ctx.extension_metadata(reproducible = pages == 0)

patched = module_extension(
    implementation = _patched_impl,
    tag_classes = {
        "index": tag_class(attrs = _INDEX_TAG_ATTRS),
        "patched_wheel": tag_class(attrs = _PATCHED_WHEEL_TAG_ATTRS),
    },
    # The interpreter selects wheels by platform tags: the lock file keeps one resolution per OS and CPU.
    # Its Python version (the cpXY tags) matters too and cannot be declared: a lock file recorded under
    # another python_interpreter version goes stale; `bazel mod deps --lockfile_mode=refresh` redoes it.
    os_dependent = True,
    arch_dependent = True,
)
