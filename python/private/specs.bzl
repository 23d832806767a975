"""One description of a patched wheel, shared by the module extension and the WORKSPACE macros."""

PRELOAD_VALUES = ["auto", "elf", "off"]
RPATH_MODES = ["set", "prepend", "append"]

def _field(kind, doc, default = None, mandatory = False, values = None, allow_files = None):
    """One attribute of `patched_wheel`: its type, default, allowed values and doc, in one place."""
    if default == None:
        default = {"string": "", "int": 0, "string_list": [], "label_list": [], "string_dict": {}}[kind]
    return struct(kind = kind, doc = doc, default = default, mandatory = mandatory, values = values, allow_files = allow_files)

# The one schema of `patched_wheel`: the bzlmod tag (PATCHED_WHEEL_ATTRS), the WORKSPACE macro
# (PATCHED_WHEEL_DEFAULTS, patched_wheel_problems) and the helper's spec (patched_wheel_spec, read by
# hub.spec.PatchedWheelSpec, which refuses a missing or unknown key; tests/python/hub/test_plan.py holds the
# two to the same names, kinds, defaults and values).
PATCHED_WHEEL_SCHEMA = {
    "name": _field("string", "Project name as in the lock, e.g. `torch`.", mandatory = True),
    "requirement": _field("string", """Optional check: a requirement the locked release must satisfy, for
        the same project, e.g. `torch==2.1.0`; checked before the wheel is downloaded."""),
    "urls": _field("string_list", """Where to fetch the original wheel (with `sha256`); default: the file of
        the lock's pin that suits `python_interpreter`, from `index_url` (or the URL a `uv.lock` /
        `pylock.toml` names)."""),
    "sha256": _field("string", """sha256 of the original wheel (64 lower-case hex digits); required with
        `urls`, and only with them."""),
    "patches": _field("label_list", """Unified diffs (`git diff`, `diff -u`), applied strictly (every
        context line must match at the line the hunk names) in the order of their file names; paths are
        archive paths of the original wheel (`torch/__init__.py`,
        `torch-2.1.0.dist-info/METADATA`).""", allow_files = [".patch", ".diff"]),
    "strip": _field("int", """Leading path components stripped from patch paths (like `patch -p`; 1 for `a/`
        and `b/`).""", default = 1),
    "suffix": _field("string", """PEP 440 local label added to the version: `2.1.0` becomes
        `2.1.0+stripe.5`, `2.1.2+cu118` becomes `2.1.2+cu118.stripe.5`.""", mandatory = True),
    "remove_requires": _field("string_list", """Projects whose `Requires-Dist` entries are dropped from
        METADATA (each must have one), e.g. `["triton"]`."""),
    "add_requires": _field("string_list", """`Requires-Dist` entries (PEP 508 requirements) added after the
        existing ones."""),
    "delete": _field("string_list", """`fnmatch` globs of wheel members to delete (`*` also crosses `/`); a
        glob that matches nothing is an error."""),
    "preload": _field("string", """`auto`: inject a preload module, imported first by `preload_package`,
        that loads, dependencies first, the shared libraries the package needs from the lock's other wheels
        (DT_NEEDED) and those of other wheels that `probe` maps with every wheel in one site-packages. This
        runs the package's code at fetch time (the probe, with `python_interpreter`, outside Bazel's
        sandbox) where the wheels' tags match the interpreter. `elf`: the same preload from the ELF graph
        alone (DT_NEEDED from the lock's other wheels, plus `preload_wheels`); no package code runs at fetch
        time. `off`: no preload, no package code run.""", default = "off", values = PRELOAD_VALUES),
    "preload_package": _field("string", """With `preload = "auto"` or `"elf"`: the import package that gets
        the preload, dotted as Python imports it (`jax_plugins.xla_cuda12`; a namespace package gets it in
        each regular package under it); default: the project name, lower case, with `-` and `.` as `_`."""),
    "preload_wheels": _field("string_list", """With `preload = "auto"` or `"elf"`: also preload every
        library of the lock's wheels whose project names match these globs (e.g. `["nvidia-*"]`), for a
        package that loads them itself at run time; one that fails to load is skipped."""),
    "probe": _field("string", """With `preload = "auto"`: Python code run at fetch time, with
        `python_interpreter` and every wheel of the lock in one site-packages, outside Bazel's sandbox; the
        other wheels' libraries its process maps are preloaded too (e.g. `import jax; jax.devices()` for a
        plugin that loads lazily). Default: `import PKG` (`preload_package`). Cached by the wheels' sha256s,
        the code and the interpreter. Not with `preload = "elf"`, which runs no code."""),
    "split_into": _field("string", """Move libraries into a sibling wheel of this name (same version and
        tags, required by the main wheel, preloaded by it), e.g. to stay under a size limit; needs exactly
        one of `split_max_size` and `split_move`."""),
    "split_max_size": _field("int", """With `split_into` (and without `split_move`): move the largest
        libraries until the main wheel is below this many bytes."""),
    "split_move": _field("string_list", """With `split_into` (and without `split_max_size`): `fnmatch` globs
        of the members to move."""),
    "rpath": _field("string_dict", """GLOB -> `:`-separated entries, each starting with `$ORIGIN`: the new
        DT_RUNPATH/DT_RPATH (kind kept; DT_RUNPATH when there is none) of every ELF member matching GLOB,
        applied in glob order, e.g. `{"pkg/*.so": "$ORIGIN/../pkg.libs"}`. A glob matching no member, or a
        non-ELF member, is an error."""),
    "rpath_mode": _field("string", """`set` replaces the search path, `prepend`/`append` add the entries
        before/after the existing ones.""", default = "set", values = RPATH_MODES),
}

def _attr(field):
    if field.kind == "string":
        if field.values:
            return attr.string(default = field.default, mandatory = field.mandatory, values = field.values, doc = field.doc)
        return attr.string(default = field.default, mandatory = field.mandatory, doc = field.doc)
    if field.kind == "int":
        return attr.int(default = field.default, mandatory = field.mandatory, doc = field.doc)
    if field.kind == "string_list":
        return attr.string_list(default = field.default, mandatory = field.mandatory, doc = field.doc)
    if field.kind == "label_list":
        return attr.label_list(allow_files = field.allow_files, mandatory = field.mandatory, doc = field.doc)
    if field.kind == "string_dict":
        return attr.string_dict(default = field.default, mandatory = field.mandatory, doc = field.doc)
    fail("rules_patched_wheels: unknown attribute kind %s" % field.kind)

PATCHED_WHEEL_ATTRS = {name: _attr(field) for name, field in PATCHED_WHEEL_SCHEMA.items()}

PATCHED_WHEEL_DEFAULTS = {name: field.default for name, field in PATCHED_WHEEL_SCHEMA.items() if not field.mandatory}

def patched_wheel_problems(kwargs):
    """What is wrong with `patched_wheel(**kwargs)` as the schema sees it (the bzlmod tag's attrs check
    the same): unknown or missing attributes, values not allowed. Empty when nothing is."""
    problems = ["unknown attribute `%s`" % key for key in sorted(kwargs) if key not in PATCHED_WHEEL_SCHEMA]
    for name, field in PATCHED_WHEEL_SCHEMA.items():
        if field.mandatory and name not in kwargs:
            problems.append("`%s` is mandatory" % name)
        elif field.values and name in kwargs and kwargs[name] not in field.values:
            problems.append("`%s` must be one of %s, not %r" % (name, field.values, kwargs[name]))
    return problems

def patched_wheel_spec(attrs, patch_offset):
    """The JSON-ready spec of one patched wheel and its patch labels.

    `attrs` is a tag (bzlmod) or a struct (WORKSPACE); patches are passed to the hub as one label list,
    and the spec names its own by position starting at `patch_offset`. The spec is checked (contradictory
    attributes, defaults that depend on others) by the helper's plan, patched_wheels.hub.plan.check_request.
    """

    # Every attribute of the schema but the labels, which travel as one list beside the specs.
    spec = {name: getattr(attrs, name) for name in PATCHED_WHEEL_SCHEMA if name != "patches"}
    spec["patch_indices"] = [patch_offset + i for i in range(len(attrs.patches))]
    return spec, list(attrs.patches)

def hub_specs(patched_wheels):
    """Specs (JSON) and the flat patch label list for a hub's patched wheels."""
    specs = []
    patches = []
    for attrs in patched_wheels:
        spec, labels = patched_wheel_spec(attrs, len(patches))
        specs.append(spec)
        patches.extend(labels)
    return specs, patches
