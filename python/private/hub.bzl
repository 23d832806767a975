"""The hub repository: fetches every wheel of a lock once, patches/splits some, serves them all from a
local PEP 503 index, and writes the lock that points rules_python's pip_parse / pip.parse at it."""

load(":helper.bzl", "prepare_helper", "run_helper")
load(":rules_python_version.bzl", "INDEX_OPTIONS", "check_index_option")
load(":specs.bzl", "normalize_name")

DEFAULT_INDEX_URL = "https://pypi.org/simple"

def project_page_url(index_url, project):
    """The URL of a project's PEP 503 page.

    A `file://` index (a local or mirrored one) has no server to map `<project>/` to its page: Bazel's
    downloader (Java's file URL handler) returns the directory's listing instead, so name `index.html`
    as pip does for `file://` indexes.
    """
    url = "%s/%s/" % (index_url.rstrip("/"), project)
    return url + "index.html" if url.startswith("file:") else url

def resolve_wheels(ctx, helper, *, requirements_lock, index_url, patched_specs):
    """Picks the wheel file (url, sha256) of every pin of the lock for the helper's interpreter.

    Works with a module_ctx (the extension resolves once; a Bazel that writes MODULE.bazel.lock keeps
    the result, so a `clean --expunge` fetches no page again) and with a repository_ctx (WORKSPACE mode).
    Wheels are fetched by sha256 in either case, so an expunge never downloads them again.
    """
    explicit = {}
    for spec in patched_specs:
        if spec["urls"]:
            explicit[normalize_name(spec["name"])] = {"urls": spec["urls"], "sha256": spec["sha256"]}
    ctx.file("_resolve/explicit.json", json.encode(explicit))
    lock = str(ctx.path(requirements_lock))
    common = ["resolve", "--requirements", lock, "--explicit", str(ctx.path("_resolve/explicit.json"))]
    projects = json.decode(run_helper(ctx, helper, common + ["--list-projects"], progress = "reading " + str(requirements_lock)))
    for project in projects:
        ctx.download(
            url = project_page_url(index_url, project),
            output = "_resolve/pages/%s.html" % project,
        )
    return json.decode(run_helper(
        ctx,
        helper,
        common + ["--pages", str(ctx.path("_resolve/pages")), "--index-url", index_url],
        progress = "choosing wheels for %d projects" % len(projects),
    ))

def _elf_cache_dir(rctx):
    """The persistent ELF cache the helper reads and fills, keyed by wheel sha256: "" for none.

    `RULES_PATCHED_WHEELS_CACHE` (e.g. `--repo_env=RULES_PATCHED_WHEELS_CACHE=/path`) names the
    directory, `off` disables it; by default it is the one the command line uses,
    `${XDG_CACHE_HOME:-~/.cache}/rules_patched_wheels/elfgraph`, so a `bazel clean --expunge` keeps it.
    Read from `rctx.os.environ`, not declared in `environ`: where the cache lives changes no output, so
    moving it must not re-run the hub. The helper treats the cache as best effort (an unwritable one
    only costs the next fetch a read).
    """
    environ = rctx.os.environ
    override = environ.get("RULES_PATCHED_WHEELS_CACHE", "")
    if override == "off":
        return ""
    if override:
        if not override.startswith("/"):
            fail("rules_patched_wheels: RULES_PATCHED_WHEELS_CACHE=%s: expected an absolute directory or off" % override)
        return override
    base = environ.get("XDG_CACHE_HOME", "")
    if not base.startswith("/"):  # unset, or relative, which the XDG spec says to ignore
        home = environ.get("HOME", "")
        if not home.startswith("/"):
            return ""
        base = home + "/.cache"
    return base + "/rules_patched_wheels/elfgraph"

def _patched_hub_impl(rctx):
    check_index_option(rctx, rctx.attr.name, rctx.attr.index_option)
    specs = json.decode(rctx.attr.patched)
    helper = prepare_helper(
        rctx,
        python_interpreter = rctx.attr.python_interpreter,
        python_interpreter_target = rctx.attr.python_interpreter_target,
        needs_patchelf = any([spec["split_into"] or spec["rpath"] for spec in specs]),
    )
    if rctx.attr.resolved:
        wheels = json.decode(rctx.attr.resolved)
    else:
        wheels = resolve_wheels(
            rctx,
            helper,
            requirements_lock = rctx.attr.requirements_lock,
            index_url = rctx.attr.index_url,
            patched_specs = specs,
        )

    patched_names = {normalize_name(spec["name"]): spec for spec in specs}
    resolved_names = {wheel["project"]: True for wheel in wheels}
    for name in patched_names:
        if name not in resolved_names:
            fail("rules_patched_wheels: patched_wheel(name = \"%s\") is not pinned in %s" % (name, rctx.attr.requirements_lock))

    # Where each wheel goes: a patched original into originals/; with an index option every other wheel
    # into the hub's index, which serves them all; with direct references rules_python fetches each
    # unpatched wheel itself (by sha256, from the repository cache), so the hub fetches one into _graph/
    # only while the ELF graph needs it, and not at all when the ELF cache already holds its rows.
    direct = rctx.attr.index_option == "direct"
    needs_graph = any([spec["preload"] == "auto" or spec["split_into"] for spec in specs])
    folders = {}
    for wheel in wheels:
        if wheel["project"] in patched_names:
            folders[wheel["filename"]] = "originals"
        elif not direct:
            folders[wheel["filename"]] = "index"
        elif needs_graph:
            folders[wheel["filename"]] = "_graph"
    listed = [wheel for wheel in wheels if wheel["filename"] in folders]
    originals = {
        wheel["project"]: "originals/" + wheel["filename"]
        for wheel in listed
        if folders[wheel["filename"]] == "originals"
    }
    patch_paths = [str(rctx.path(label)) for label in rctx.attr.patches]
    config = {
        "requirements": str(rctx.path(rctx.attr.requirements_lock)),
        "index_dir": str(rctx.path("index")),
        "out": str(rctx.path("requirements_lock.txt")),
        "index_option": rctx.attr.index_option,
        "index_url": rctx.attr.index_url,
        "replaced": {wheel["project"]: [wheel["sha256"]] for wheel in listed if wheel["project"] in originals},
        "references": {wheel["project"]: [wheel["urls"][0], wheel["sha256"]] for wheel in wheels if wheel["project"] not in patched_names},
        "elf_cache": _elf_cache_dir(rctx),
        "wheels": [{"filename": wheel["filename"], "sha256": wheel["sha256"]} for wheel in listed],
        "patched": [
            dict(
                {key: value for key, value in spec.items() if key != "patch_indices"},
                wheel = str(rctx.path(originals[normalize_name(spec["name"])])),
                patches = [patch_paths[i] for i in spec["patch_indices"]],
            )
            for spec in specs
        ],
    }
    cached = {}
    if config["elf_cache"] and "_graph" in folders.values():
        # The config without paths yet: the helper says which wheels' ELF rows the cache holds.
        rctx.file("_hub.json", json.encode_indent(config))
        listing = run_helper(rctx, helper, ["hub", "--config", str(rctx.path("_hub.json")), "--list-cached"], progress = "reading the ELF cache")
        cached = {digest: True for digest in json.decode(listing)}
    for number, (wheel, entry) in enumerate(zip(listed, config["wheels"])):
        folder = folders[wheel["filename"]]
        if folder == "_graph" and wheel["sha256"] in cached:
            continue
        output = "%s/%s" % (folder, wheel["filename"])
        if hasattr(rctx, "report_progress"):
            rctx.report_progress("fetching %s (%d of %d)" % (wheel["filename"], number + 1, len(listed)))
        rctx.download(url = wheel["urls"], output = output, sha256 = wheel["sha256"])
        entry["path"] = str(rctx.path(output))

    rctx.file("_hub.json", json.encode_indent(config))
    run_helper(rctx, helper, ["hub", "--config", str(rctx.path("_hub.json"))], progress = "patching %s" % ", ".join(sorted(patched_names)))
    rctx.delete("originals")
    rctx.delete("_graph")
    rctx.file("BUILD.bazel", """\
# Generated by rules_patched_wheels: the patched lock and the local index it points at.
exports_files(["requirements_lock.txt"])

filegroup(
    name = "wheels",
    srcs = glob(["index/*.whl"]),
    visibility = ["//visibility:public"],
)
""")

patched_hub = repository_rule(
    implementation = _patched_hub_impl,
    doc = "A local index + lock serving every wheel of `requirements_lock`, some of them patched.",
    attrs = {
        "requirements_lock": attr.label(mandatory = True, allow_single_file = True),
        "resolved": attr.string(doc = "JSON list of {project, filename, urls, sha256}; empty: resolve here."),
        "index_url": attr.string(default = DEFAULT_INDEX_URL),
        "index_option": attr.string(default = "direct", values = INDEX_OPTIONS),
        "patched": attr.string(default = "[]", doc = "JSON list of patched wheel specs (see specs.bzl)."),
        "patches": attr.label_list(allow_files = True),
        "python_interpreter": attr.string(default = "python3"),
        "python_interpreter_target": attr.label(allow_single_file = True),
    },
)
