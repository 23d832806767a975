"""One description of a patched wheel, shared by the module extension and the WORKSPACE macros."""

PRELOAD_VALUES = ["auto", "off"]
RPATH_MODES = ["set", "prepend", "append"]

PATCHED_WHEEL_ATTRS = {
    "name": attr.string(mandatory = True, doc = "Project name as in the lock, e.g. `torch`."),
    "requirement": attr.string(doc = "Optional check: the pin the lock must have, e.g. `torch==2.1.0`."),
    "urls": attr.string_list(doc = "Where to fetch the original wheel; default: resolved from the index."),
    "sha256": attr.string(doc = "sha256 of the original wheel (required with `urls`)."),
    "patches": attr.label_list(allow_files = [".patch", ".diff"], doc = "Unified diffs, applied in sorted order."),
    "strip": attr.int(default = 1, doc = "Leading path components stripped from patch paths (like patch -p)."),
    "suffix": attr.string(mandatory = True, doc = "PEP 440 local label added to the version, e.g. `stripe.5`."),
    "remove_requires": attr.string_list(doc = "Requires-Dist entries to drop, by project name."),
    "add_requires": attr.string_list(doc = "Requires-Dist entries to add."),
    "delete": attr.string_list(doc = "Globs of members to delete."),
    "preload": attr.string(default = "off", values = PRELOAD_VALUES, doc = "`auto`: generate a topologically ordered preload of the libraries `preload_package` needs from the other wheels of the lock."),
    "preload_package": attr.string(doc = "Import package that gets the preload; default: the project name with `-` as `_`."),
    "preload_wheels": attr.string_list(doc = "With `preload = \"auto\"`: also preload every library of the lock's wheels whose project names match these globs (e.g. `[\"nvidia-*\"]`), for a package that loads them itself at run time; one that fails to load is skipped."),
    "split_into": attr.string(doc = "Move libraries into a sibling wheel of this name (same version and tags)."),
    "split_max_size": attr.int(doc = "With split_into: move the largest libraries until the main wheel is below this many bytes."),
    "split_move": attr.string_list(doc = "With split_into: globs of members to move."),
    "rpath": attr.string_dict(doc = "GLOB -> `:`-separated `$ORIGIN`-relative entries: the DT_RUNPATH/DT_RPATH (kind kept) of every ELF member matching GLOB, e.g. `{\"pkg/*.so\": \"$ORIGIN/../pkg.libs\"}`."),
    "rpath_mode": attr.string(default = "set", values = RPATH_MODES, doc = "`set` replaces the search path, `prepend`/`append` add the entries before/after the existing ones."),
}

def patched_wheel_spec(attrs, patch_offset):
    """The JSON-ready spec of one patched wheel and its patch labels.

    `attrs` is a tag (bzlmod) or a struct (WORKSPACE); patches are passed to the hub as one label list,
    and the spec names its own by position starting at `patch_offset`.
    """
    if attrs.urls and not attrs.sha256:
        fail("rules_patched_wheels: patched_wheel(name = \"%s\"): `urls` needs `sha256`" % attrs.name)
    if attrs.preload_wheels and attrs.preload != "auto":
        fail("rules_patched_wheels: patched_wheel(name = \"%s\"): `preload_wheels` needs `preload = \"auto\"`" % attrs.name)
    if attrs.split_into and not (attrs.split_max_size or attrs.split_move):
        fail("rules_patched_wheels: patched_wheel(name = \"%s\"): `split_into` needs `split_max_size` or `split_move`" % attrs.name)
    spec = {
        "name": attrs.name,
        "requirement": attrs.requirement,
        "urls": attrs.urls,
        "sha256": attrs.sha256,
        "patch_indices": [patch_offset + i for i in range(len(attrs.patches))],
        "strip": attrs.strip,
        "suffix": attrs.suffix,
        "remove_requires": attrs.remove_requires,
        "add_requires": attrs.add_requires,
        "delete": attrs.delete,
        "preload": attrs.preload,
        "preload_package": attrs.preload_package or attrs.name.replace("-", "_").replace(".", "_").lower(),
        "preload_wheels": attrs.preload_wheels,
        "split_into": attrs.split_into,
        "split_max_size": attrs.split_max_size,
        "split_move": attrs.split_move,
        "rpath": attrs.rpath,
        "rpath_mode": attrs.rpath_mode,
    }
    return spec, list(attrs.patches)

def normalize_name(name):
    """PEP 503 normalisation (runs of -, _ and . become one -, lower case)."""
    out = []
    for char in name.lower().elems():
        if char in "-_.":
            if not out or out[-1] != "-":
                out.append("-")
        else:
            out.append(char)
    return "".join(out)

def hub_specs(patched_wheels):
    """Specs (JSON) and the flat patch label list for a hub's patched wheels."""
    specs = []
    patches = []
    seen = {}
    for attrs in patched_wheels:
        if normalize_name(attrs.name) in seen:
            fail("rules_patched_wheels: patched_wheel(name = \"%s\") is given twice for one hub; merge them" % attrs.name)
        seen[normalize_name(attrs.name)] = True
        spec, labels = patched_wheel_spec(attrs, len(patches))
        specs.append(spec)
        patches.extend(labels)
    return specs, patches
