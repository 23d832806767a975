"""Runs the `patched_wheels` Python helper from repository rules and module extensions.

Both `repository_ctx` and `module_ctx` offer download/execute/path/which, so every function here takes
either. The helper's own dependencies are pinned wheels fetched by Bazel's downloader (so they live in
the repository cache) and put on PYTHONPATH: nothing is assumed about the interpreter's site-packages,
which the helper does not even see (`python -S`: no `site` import, so no `.pth` file of the
interpreter's runs in each of the helper's processes, nor can break it).
Pure-Python wheels are extracted (a zip import compiles every module again in every process), and
bytecode never goes beside the helper's sources, a tree Bazel watches: PYTHONPYCACHEPREFIX names the
persistent directory `python -m patched_wheels.base.bytecode` prints (under the helper's cache root, so a
cold fetch after `bazel clean --expunge` compiles nothing; why and how it is trusted: that module), or
`_helper/pycache` when it prints none, so at least each later run in the same repository rule or
extension imports compiled modules.
"""

_PURE_WHEELS = [
    struct(
        filename = "packaging-26.2-py3-none-any.whl",
        url = "https://files.pythonhosted.org/packages/df/b2/87e62e8c3e2f4b32e5fe99e0b86d576da1312593b39f47d8ceef365e95ed/packaging-26.2-py3-none-any.whl",
        sha256 = "5fc45236b9446107ff2415ce77c807cee2862cb6fac22b8a73826d0693b0980e",
    ),
    # TOML locks (uv.lock, pylock.toml) below Python 3.11, which has no tomllib (patched_wheels/lock/formats/tomlread.py).
    struct(
        filename = "tomli-2.2.1-py3-none-any.whl",
        url = "https://files.pythonhosted.org/packages/6e/c2/61d3e0f47e2b74ef40a68b9e6ad5984f6241a942f7cd3bbfbdbd03861ea9/tomli-2.2.1-py3-none-any.whl",
        sha256 = "cb55c73c5f4408779d0cf3eef9f762b9c9f147a77de7b258bef0a5628adc85cc",
    ),
]

def _fetch_helper_wheels(ctx, prefix):
    """Extracts each pinned wheel of the helper into `PREFIX<wheel name>`; returns those directories."""
    outputs = []
    for wheel in _PURE_WHEELS:
        output = prefix + wheel.filename.removesuffix(".whl")
        ctx.download_and_extract(url = wheel.url, output = output, sha256 = wheel.sha256, type = "zip")
        outputs.append(output)
    return outputs

# Fixed timestamps inside every wheel the helper writes: same inputs, same bytes, same sha256.
_SOURCE_DATE_EPOCH = "315532800"

def _interpreter(ctx, python_interpreter, python_interpreter_target):
    if python_interpreter_target:
        return str(ctx.path(python_interpreter_target))
    if "/" in python_interpreter:
        return python_interpreter
    found = ctx.which(python_interpreter)
    if not found:
        fail("rules_patched_wheels: python interpreter '%s' not found on PATH; set python_interpreter" % python_interpreter)
    return str(found)

# Where the helper's persistent caches live (see `patched-wheels hub plan`): passed from Bazel's client
# environment (`--repo_env` included) but not declared in `environ`, since moving a cache changes no output
# and must not re-run the hub.
_CACHE_ENVIRONMENT = ["RULES_PATCHED_WHEELS_CACHE", "XDG_CACHE_HOME", "HOME"]

# Passed on the same way: the file the helper appends its per-phase times to, for the benchmarks
# (patched_wheels/base/timings.py); it changes no output either.
_PASSED_ENVIRONMENT = _CACHE_ENVIRONMENT + ["RULES_PATCHED_WHEELS_TIMINGS"]

def prepare_helper(ctx, *, python_interpreter = "python3", python_interpreter_target = None):
    """Fetches the helper's dependencies into `_helper/` and says how to run it.

    Returns a struct(python, environment) for `run_helper`.
    """
    package_dir = ctx.path(Label("//python/patched_wheels:BUILD.bazel")).dirname
    if hasattr(ctx, "watch_tree"):
        # Editing the helper re-runs the hub, as editing a .bzl file would.
        ctx.watch_tree(package_dir)
    paths = [str(package_dir.dirname)] + [str(ctx.path(output)) for output in _fetch_helper_wheels(ctx, "_helper/")]
    environment = {
        "PYTHONPATH": ":".join(paths),
        "PYTHONNOUSERSITE": "1",
        "SOURCE_DATE_EPOCH": _SOURCE_DATE_EPOCH,
    }
    for name in _PASSED_ENVIRONMENT:
        if name in ctx.os.environ:
            environment[name] = ctx.os.environ[name]
    python = _interpreter(ctx, python_interpreter, python_interpreter_target)

    # Where bytecode goes, asked with no prefix (the interpreter's own compiled stdlib is used) and
    # nothing written (the few helper modules this imports compile in memory).
    found = ctx.execute(
        [python, "-S", "-m", "patched_wheels.base.bytecode"],
        environment = dict(environment, PYTHONDONTWRITEBYTECODE = "1", PYTHONPYCACHEPREFIX = ""),
        quiet = True,
    )
    _print_warnings(found.stderr, "preparing the helper")
    persistent = found.stdout.strip() if found.return_code == 0 else ""  # else the helper's first run says why
    environment["PYTHONPYCACHEPREFIX"] = persistent or str(ctx.path("_helper/pycache"))
    environment["PYTHONDONTWRITEBYTECODE"] = ""  # empty is unset: a shell's PYTHONDONTWRITEBYTECODE=1 must not undo the prefix
    return struct(python = python, environment = environment)

def _print_warnings(stderr, progress):
    """Shows the helper's warning lines (a successful run's stderr is otherwise dropped)."""
    for line in stderr.splitlines():
        if line.startswith("patched-wheels: warning:"):
            print("rules_patched_wheels: %s: %s" % (progress, line))

def run_helper(ctx, helper, args, *, progress, timeout = 3600):
    """Runs `python -m patched_wheels ARGS`; on failure, prints the helper's own error line once and fails."""
    if hasattr(ctx, "report_progress"):
        ctx.report_progress(progress)
    result = ctx.execute(
        [helper.python, "-S", "-m", "patched_wheels"] + args,
        environment = helper.environment,
        timeout = timeout,
        quiet = True,
    )
    if result.return_code != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("patched-wheels: error:")]
        message = errors[-1] if errors else "\n".join(lines[-20:])

        # Printed once, here: Bazel repeats a fail() message in up to three reports (the traceback's
        # "Error in fail", the fetch's ERROR, and each dependent target's "no such package"), so the
        # helper's line is printed and fail() only points at it.
        print("rules_patched_wheels: %s failed: %s" % (progress, message))
        fail("rules_patched_wheels: %s failed (the helper's error is the line printed above)" % progress)
    _print_warnings(result.stderr, progress)
    return result.stdout

# The repository of the helper's dependencies for code that runs in a build or test (layout_test's runner):
# the same pinned wheels, as one py_library. Labels name it `@patched_wheels_helper_deps`.
HELPER_DEPS_REPOSITORY = "patched_wheels_helper_deps"

def _helper_deps_impl(repository_ctx):
    outputs = _fetch_helper_wheels(repository_ctx, "")
    repository_ctx.file("BUILD.bazel", """load("@rules_python//python:defs.bzl", "py_library")

py_library(
    name = "helper_deps",
    srcs = glob(["**/*.py"]),
    data = glob(["**/*"], exclude = ["**/*.py", "BUILD.bazel", "WORKSPACE", "REPO.bazel"]),
    imports = {imports},
    visibility = ["//visibility:public"],
)
""".format(imports = json.encode(outputs)))

helper_deps_repository = repository_rule(
    implementation = _helper_deps_impl,
    doc = "The helper's pinned pure-Python dependencies (packaging, tomli) as `//:helper_deps`.",
)

def _helper_deps_extension_impl(module_ctx):
    helper_deps_repository(name = HELPER_DEPS_REPOSITORY)

helper_deps = module_extension(
    implementation = _helper_deps_extension_impl,
    doc = "Makes `@patched_wheels_helper_deps` (rules_patched_wheels' own MODULE.bazel uses it).",
)
