"""The hub repository: patches/splits some wheels of a lock, serves them from a local PEP 503 index, and
writes the locks that point rules_python's pip_parse / pip.parse at them.

Starlark keeps what Bazel needs at load time (the attributes) and the I/O (downloads, running the
helper); every decision is the helper's plan (python/patched_wheels/hub/plan.py), which this file only
feeds (`hub_request`) and follows."""

load("@bazel_tools//tools/build_defs/repo:utils.bzl", "read_netrc", "read_user_netrc", "use_netrc")
load(":helper.bzl", "prepare_helper", "run_helper")
load(":rules_python_version.bzl", "INDEX_OPTIONS", "rules_python_version")

DEFAULT_INDEX_URL = "https://pypi.org/simple"

# The attributes of a hub as the user writes them: the `patched.index` tag and the WORKSPACE
# `patched_index` macro (which passes them on to `patched_hub`). Each reaches the helper as it is given
# (`hub_request`), as a field of patched_wheels.hub.documents.IndexAttributes: a new attribute is its entry here,
# its field there and the code that reads it. Exactly one lock attribute (`requirements_lock`, `uv_lock`,
# `pylock`: the helper's lock format registry) is given; the helper's plan checks it, naming them.
INDEX_ATTRS = {
    "requirements_lock": attr.label(allow_single_file = True, doc = """A hashed pip lock (pip-compile
        --generate-hashes, uv pip compile --generate-hashes, uv export). Give exactly one of
        `requirements_lock`, `uv_lock` and `pylock`."""),
    "uv_lock": attr.label(allow_single_file = [".lock"], doc = """A `uv.lock` (uv lock); the hub then also
        writes a `uv.lock` for rules_python >= 2.2's `pip.parse(uv_lock = ...)`."""),
    "pylock": attr.label(allow_single_file = [".toml"], doc = """A PEP 751 `pylock.toml` (pip lock, uv
        export --format pylock.toml)."""),
    "index_url": attr.string(default = DEFAULT_INDEX_URL, doc = """PEP 503 index whose project pages give
        the URL of each locked wheel (matched by the lock's hashes); not read for the wheels a `uv.lock` or
        `pylock.toml` names itself."""),
    "index_option": attr.string(default = "direct", values = INDEX_OPTIONS, doc = """How the generated lock
        names the patched wheels: `direct` references (every rules_python release), or `index-url` /
        `extra-index-url` / `find-links` to the hub's index (rules_python < 2 only)."""),
    "python_interpreter": attr.string(default = "python3", doc = """Interpreter (a name on `PATH` or an
        absolute path) whose tags select the wheels, that runs the helper, and that runs the `probe` of a
        `preload = "auto"` wheel; use the Python your targets run with."""),
    "python_interpreter_target": attr.label(allow_single_file = True, doc = """The interpreter as a label
        (e.g. a rules_python toolchain's `python3` file); overrides `python_interpreter`."""),
    "restore_extras": attr.bool(default = True, doc = """Make the wheels rules_python wires for a target
        what pip installs from the lock: rules_python drops the extras of a dependency edge (its issues
        #4168 and #2399), so `torch` requiring `cuda-toolkit[cudart]` would get no `nvidia-cuda-runtime` and
        `jax[cuda13]` no plugin. Each wheel whose extras pip installs is rewritten with those extras'
        requirements as plain `Requires-Dist` entries (local version `+extras`, or the `suffix` of its
        `patched_wheel`). False restores nothing; `pip_closure.json` still holds pip's closure, root
        extras inferred from the lock included. See docs/rules-python.md#extras."""),
    "extras": attr.string_list(doc = """Root requirements with extras that the lock may not record (a `uv
        pip compile` lock writes `jax==0.10.2` for `jax[cuda13]`), e.g. `["jax[cuda13]"]`, or `["jax[]"]`
        for none: pip's closure (`restore_extras`, `pip_closure.json`) then includes them beside the extras
        the lock records, and no extra is inferred for a project named here (without it, the hub infers a
        root extra from the lock's pins and says which). Each project must be pinned by the lock and provide
        the extra. See docs/rules-python.md#extras."""),
    "verified_stacks": attr.bool(default = True, doc = """Apply the row of each verified stack the lock holds
        (torch, JAX cuda12 and cuda13, TensorFlow, CuPy, onnxruntime: the table in docs/verified-stacks.md, kept
        in `patched_wheels/hub/verified_stacks.json`) where no `patched_wheel` of the row's `name` is given: its
        project's wheel gets the row's preload and probe (local version `+verified`; a row with recorded
        libraries runs no probe), and the hub says which in one line. A `patched_wheel` of that name replaces
        the row. `False`: no row applies, as before."""),
    "wheel_facts": attr.label(allow_single_file = [".json"], doc = """What an earlier build of this hub read
        from the wheels (the ELF rows of their libraries, by sha256; the `preload = "auto"` probes'
        observations, by the wheels' sha256s, probe and interpreter): a copy of the hub's own
        `@<hub>//:wheel_facts.json`, checked in beside the lock. A build with an empty helper cache (a fresh
        CI runner) then neither installs nor probes the set for what it answers; it still reads each library's
        dynamic section, to check every row against its wheel. Its entries are checked like the helper
        cache's; one that no longer matches (a lock bump, another interpreter) is read again, and the build
        says which file to copy over it. See docs/caches-and-trust.md."""),
    "netrc": attr.string(doc = """A `.netrc` file (an absolute path) whose credentials the hub's downloads
        (the index pages and the wheels) send to the hosts it names, as rules_python's `pip.parse(netrc =
        ...)` and `http_archive` do; without it, the file `$NETRC` names, else `~/.netrc`. Bazel's
        `--credential_helper` applies as well. The credentials are never written into the request, the
        lock or any generated file. See docs/credentials.md."""),
    "auth_patterns": attr.string_dict(doc = """Host -> the `Authorization` header to send it instead of basic
        auth, with `<login>` and `<password>` replaced by the netrc entry's (e.g. `{"artifactory.corp":
        "Bearer <password>"}`), as rules_python's `pip.parse(auth_patterns = ...)` and `http_archive` take
        it."""),
}

def index_attributes(given):
    """The value of every INDEX_ATTRS attribute of `given`, a `patched.index` tag or a `patched_hub`'s `rctx.attr`:
    what `hub_request` writes and the extension passes on to `patched_hub`."""
    return {name: getattr(given, name) for name in INDEX_ATTRS}

def index_credentials(ctx, attributes):
    """The credentials of a hub's downloads, found as rules_python's pip.parse and Bazel's http_archive find
    them: the `netrc` attribute's file, else the one `$NETRC` names, else `~/.netrc`; with `auth_patterns`.
    Read once per hub; never written anywhere (`download_auth` hands them to Bazel's downloader alone)."""
    if attributes["netrc"]:
        netrc = read_netrc(ctx, attributes["netrc"])
    elif "NETRC" in ctx.os.environ:
        netrc = read_netrc(ctx, ctx.os.environ["NETRC"])
    else:
        netrc = read_user_netrc(ctx)
    return struct(netrc = netrc, patterns = attributes["auth_patterns"])

def download_auth(credentials, urls):
    """The `auth` argument of `ctx.download` for `urls` (`index_credentials`): an entry for each URL whose host
    the netrc names; the other URLs go without (Bazel's `--credential_helper` may still answer for them)."""
    return use_netrc(credentials.netrc, urls, credentials.patterns)

def url_credentials_host(url):
    """The host of `url` when the URL holds a user name or password (`scheme://user:password@host/...`), else ""."""
    _, separator, rest = url.partition("://")
    _, at, host = rest.partition("/")[0].rpartition("@")
    return host if separator and at else ""

def check_index_url(index_url, hub, bzlmod):
    """Fails on an `index_url` with a user name or password in it: such a URL would be written into the
    request, the lock and Bazel's own messages. The error names the host, never the userinfo."""
    host = url_credentials_host(index_url)
    if host:
        call = ("patched.index" if bzlmod else "patched_index") + "(name = \"%s\")" % hub
        fail("rules_patched_wheels: %s: index_url holds credentials (%s://…@%s); give the URL without them and the credentials in a netrc file (netrc = ...), or through Bazel's --credential_helper (docs/credentials.md)" % (call, index_url.partition("://")[0], host))

def _request_value(ctx, value):
    if type(value) == "list":
        return [str(ctx.path(item)) if type(item) == "Label" else item for item in value]
    return str(ctx.path(value)) if type(value) == "Label" else value

def label_as_written(label):
    """`label` as a user writes it in MODULE.bazel or WORKSPACE: `//pkg:name` for the main repository (Bazel 7 prints
    it `@@//pkg:name` with bzlmod, `@//pkg:name` without), any other repository's label as Bazel prints it."""
    text = str(label)
    for main in ("@@//", "@//"):
        if text.startswith(main):
            return "//" + text[len(main):]
    return text

def request_labels(attributes):
    """Each label attribute given in `attributes` (`index_attributes`) -> its label as the user wrote it
    (`label_as_written`): the request's `labels`, which the helper's messages name it by (the request holds
    its path)."""
    return {name: label_as_written(value) for name, value in attributes.items() if type(value) == "Label"}

def request_attributes(ctx, attributes):
    """Every INDEX_ATTRS attribute's value in `attributes` (`index_attributes`) as the request holds it, by one
    rule: a label as its file's path (`ctx.path`; in a list too), any other value as Bazel gives it (an unset
    label is None: null)."""
    return {name: _request_value(ctx, attributes[name]) for name in INDEX_ATTRS}

def hub_request(ctx, attributes, *, hub, bzlmod, specs, patches, repository = ""):
    """Writes what the user declared for one hub to `_plan/<hub>.request.json` (patched_wheels.hub.documents.HubRequest reads
    it) and returns struct(hub, path).

    `attributes` maps every INDEX_ATTRS attribute to its value (`index_attributes`); `specs` are `hub_specs`
    specs, whose `patch_indices` name their labels in `patches`. Works with a module_ctx and a repository_ctx.
    """
    check_index_url(attributes["index_url"], hub, bzlmod)
    patch_paths = [str(ctx.path(label)) for label in patches]
    request = {
        "hub": hub,
        "bzlmod": bzlmod,
        "attributes": request_attributes(ctx, attributes),
        "labels": request_labels(attributes),
        "rules_python_version": rules_python_version(ctx),
        "repository": repository,
        "patched": [
            dict(
                {key: value for key, value in spec.items() if key != "patch_indices"},
                patches = [patch_paths[i] for i in spec["patch_indices"]],
            )
            for spec in specs
        ],
    }
    path = "_plan/%s.request.json" % hub
    ctx.file(path, json.encode_indent(request))
    return struct(hub = hub, path = str(ctx.path(path)))

def check_hub(ctx, helper, request):
    """The plan's first phase: the request checked (contradictory attributes fail here, before any
    download, naming them) and how to resolve its lock (the `resolution` for `resolve_wheels`)."""
    return json.decode(run_helper(ctx, helper, ["hub", "plan", "--request", request.path], progress = "checking hub %s" % request.hub))

def resolve_wheels(ctx, helper, request, resolution, *, index_url, credentials):
    """Picks the wheel file (url, sha256) of every pin of the request's lock for the helper's interpreter.

    Returns struct(wheels, pages): the helper's list of wheels, and how many index pages were asked for (none
    when the lock names every file itself: uv.lock, pylock.toml).
    Works with a module_ctx (the extension resolves once; a Bazel that writes MODULE.bazel.lock keeps
    the result) and with a repository_ctx (WORKSPACE mode). A page that cannot be downloaded (no network
    after `clean --expunge`) is answered by what an earlier download of it taught, kept in the helper's
    cache (patched_wheels.lock.resolve). Wheels are fetched by sha256 in either case, so an expunge never
    downloads them again.
    """
    folder = "_resolve/%s" % request.hub
    ctx.file(folder + "/explicit.json", json.encode(resolution["explicit"]))
    common = ["resolve"] + resolution["lock_args"] + ["--explicit", str(ctx.path(folder + "/explicit.json"))]
    common += ["--index-url", index_url]
    pages = json.decode(run_helper(ctx, helper, common + ["--list-projects"], progress = "reading " + resolution["lock_args"][1]))
    unfetched = _download_pages(ctx, pages, folder + "/pages/", credentials)
    wheels = json.decode(run_helper(
        ctx,
        helper,
        common + ["--pages", str(ctx.path(folder + "/pages"))] + ["--unfetched=" + file for file in unfetched],
        progress = "choosing wheels for %d projects" % len(pages),
    ))
    return struct(wheels = wheels, pages = len(pages))

def _download_pages(ctx, pages, prefix, credentials):
    """Downloads each page (`--list-projects`' {url, file}) to `PREFIX<file>`, in parallel, with `credentials`
    (`index_credentials`); returns the files of those that could not be downloaded. Not an error here: the
    helper then reads what an earlier download of each recorded (`--unfetched`), and fails naming the page
    only when there is no record."""
    pending = [
        (page["file"], ctx.download(
            url = page["url"],
            output = prefix + page["file"],
            auth = download_auth(credentials, [page["url"]]),
            allow_fail = True,
            block = False,
        ))
        for page in pages
    ]
    return [file for file, download in pending if not download.wait().success]

def _patched_hub_impl(rctx):
    """Runs the plan (the helper decides), downloads what it lists, runs the build step."""
    specs = json.decode(rctx.attr.patched)
    helper = prepare_helper(
        rctx,
        python_interpreter = rctx.attr.python_interpreter,
        python_interpreter_target = rctx.attr.python_interpreter_target,
        inflates_wheels = True,
    )
    request = hub_request(
        rctx,
        index_attributes(rctx.attr),
        hub = rctx.attr.hub_name or rctx.attr.name,
        bzlmod = rctx.attr.bzlmod,
        specs = specs,
        patches = rctx.attr.patches,
        repository = str(rctx.path(".")),
    )
    credentials = index_credentials(rctx, index_attributes(rctx.attr))
    if rctx.attr.resolved:
        resolved = json.decode(rctx.attr.resolved)
    else:
        resolved = resolve_wheels(rctx, helper, request, check_hub(rctx, helper, request), index_url = rctx.attr.index_url, credentials = credentials).wheels
    rctx.file("_plan/resolved.json", json.encode_indent(resolved))
    config = str(rctx.path("_hub.json"))
    plan = json.decode(run_helper(
        rctx,
        helper,
        ["hub", "plan", "--request", request.path, "--resolved", str(rctx.path("_plan/resolved.json")), "--config-out", config],
        progress = "planning the hub",
    ))

    # Issued together, waited on once: Bazel's downloader fetches them in parallel (as rules_python's do).
    rctx.report_progress("fetching %d wheels" % len(plan["fetch"]))
    pending = [
        rctx.download(url = fetch["urls"], output = fetch["output"], sha256 = fetch["sha256"], auth = download_auth(credentials, fetch["urls"]), block = False)
        for fetch in plan["fetch"]
    ]
    for download in pending:
        download.wait()

    # The plan's specs, not the user's: a verified stack's row patches a wheel no patched_wheel names.
    patching = [spec["name"] for spec in json.decode(rctx.read(config))["patched"]]
    run_helper(rctx, helper, ["hub", "build", "--config", config], progress = "patching %s" % ", ".join(patching) if patching else "building the hub")
    for scratch in plan["scratch"]:
        rctx.delete(scratch)
    rctx.delete("_helper")  # the helper's dependencies and bytecode: only this rule runs it
    rctx.file("BUILD.bazel", """\
# Generated by rules_patched_wheels: the patched locks and the local index they point at.
exports_files(%s)

filegroup(
    name = "wheels",
    srcs = glob([%s], allow_empty = True),
    visibility = ["//visibility:public"],
)
""" % (json.encode(plan["exports"]), json.encode(plan["index_folder"] + "/*.whl")))

patched_hub = repository_rule(
    implementation = _patched_hub_impl,
    doc = "A local index + locks serving the wheels of one lock, some of them patched.",
    attrs = dict(
        INDEX_ATTRS,
        resolved = attr.string(doc = "JSON list of {project, filename, urls, sha256}; empty: resolve here."),
        patched = attr.string(default = "[]", doc = "JSON list of patched wheel specs (see specs.bzl)."),
        patches = attr.label_list(allow_files = True),
        bzlmod = attr.bool(doc = "Made by the module extension (errors then name `patched.index`)."),
        hub_name = attr.string(doc = """The hub's name as the user wrote it, for errors: under bzlmod,
            `name` is the canonical repository name."""),
    ),
)
