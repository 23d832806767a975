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

# python-isal, an inflater faster than zlib for the helper's reads of large wheels (the probe's install of
# the set is most of a cold hub's CPU; patched_wheels/wheelfile/zipcontainer.py uses zlib without it). A
# binary wheel, so one per CPython version and machine, for glibc (manylinux2014); `isal_wheel` picks the
# interpreter's. Its pin is tools/requirements-test.txt's, and pyproject.toml installs python-isal with the
# command line for every row here (tests/python/test_helper_wheels.py holds them so).
ISAL_WHEELS = {
    "3.9-aarch64": struct(
        filename = "isal-1.9.1-cp39-cp39-manylinux2014_aarch64.manylinux_2_17_aarch64.manylinux_2_28_aarch64.whl",
        url = "https://files.pythonhosted.org/packages/75/18/76bd3b0caaf81330b019141d430363ca2e94682e9d7bd8559b3e665a8556/isal-1.9.1-cp39-cp39-manylinux2014_aarch64.manylinux_2_17_aarch64.manylinux_2_28_aarch64.whl",
        sha256 = "1ba167139ed85d3a6c036cf393d5ed7e6a0854cf0085bec27e7706be07ca59a4",
    ),
    "3.9-x86_64": struct(
        filename = "isal-1.9.1-cp39-cp39-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
        url = "https://files.pythonhosted.org/packages/38/ee/1a0ef4ec90107f111d76bb615bba96846da1ec6b73e1235bc6671213d8a6/isal-1.9.1-cp39-cp39-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
        sha256 = "27d7472b1fb02b8d9aa31273a735aae739a0b35349948e1630ce3e8910e4f674",
    ),
    "3.10-aarch64": struct(
        filename = "isal-1.9.1-cp310-cp310-manylinux2014_aarch64.manylinux_2_17_aarch64.manylinux_2_28_aarch64.whl",
        url = "https://files.pythonhosted.org/packages/7b/97/6e43107fca74ee42cceb770820696acf7d48b133435cfbba37134b467641/isal-1.9.1-cp310-cp310-manylinux2014_aarch64.manylinux_2_17_aarch64.manylinux_2_28_aarch64.whl",
        sha256 = "65251ba23050eeda984100fb4d34530de23639862562474c2c10c1cd5132b029",
    ),
    "3.10-x86_64": struct(
        filename = "isal-1.9.1-cp310-cp310-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
        url = "https://files.pythonhosted.org/packages/4f/15/3f82174a3c0b329eda838f6669b8713094065b539b136c14cd1cdd925e8e/isal-1.9.1-cp310-cp310-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
        sha256 = "e0bcd921fd8c573756e07a6c9fe6619b76f4ae3c29f88d7f926f08775e941be9",
    ),
    "3.11-aarch64": struct(
        filename = "isal-1.9.1-cp311-cp311-manylinux2014_aarch64.manylinux_2_17_aarch64.manylinux_2_28_aarch64.whl",
        url = "https://files.pythonhosted.org/packages/eb/2c/d1aa1b178a1499f7757438b8a812370f7e3834a5db37cb92da8c05c03755/isal-1.9.1-cp311-cp311-manylinux2014_aarch64.manylinux_2_17_aarch64.manylinux_2_28_aarch64.whl",
        sha256 = "d45e3b91209556d0575c341984a02b316200785ee9231a859979c0a81a3ab6f8",
    ),
    "3.11-x86_64": struct(
        filename = "isal-1.9.1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
        url = "https://files.pythonhosted.org/packages/3e/e2/22e725fb999badfa18cf7daa891b877e9675b1c680dae0b6b173c63fb7ee/isal-1.9.1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
        sha256 = "a5b2f93fc39b8be92c6547965143094ee4d6a5543ef2d762a0edb6f06201feb5",
    ),
    "3.12-aarch64": struct(
        filename = "isal-1.9.1-cp312-cp312-manylinux2014_aarch64.manylinux_2_17_aarch64.manylinux_2_28_aarch64.whl",
        url = "https://files.pythonhosted.org/packages/9e/b0/8042f37d4f2fea9122cd88548d133cf06abc99f1e10e45555f617d8d5e03/isal-1.9.1-cp312-cp312-manylinux2014_aarch64.manylinux_2_17_aarch64.manylinux_2_28_aarch64.whl",
        sha256 = "640565f20d258b2d04134e11ffd0da3f57bce62aa1ba87b45176186c6d61e57f",
    ),
    "3.12-x86_64": struct(
        filename = "isal-1.9.1-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
        url = "https://files.pythonhosted.org/packages/f5/89/5d88602efe6d8ca657d8097377a158cd0da9b2ce1459c6223d917e06ca57/isal-1.9.1-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
        sha256 = "98cc2ca8a16fbdb5d088df3496e3fe3fd1780635f51fe15774e6712c69b9bfe8",
    ),
    "3.13-aarch64": struct(
        filename = "isal-1.9.1-cp313-cp313-manylinux2014_aarch64.manylinux_2_17_aarch64.manylinux_2_28_aarch64.whl",
        url = "https://files.pythonhosted.org/packages/6f/2b/fea2fe177bc069f9059265af4a440b72f1f6ab47390b467925c27703061d/isal-1.9.1-cp313-cp313-manylinux2014_aarch64.manylinux_2_17_aarch64.manylinux_2_28_aarch64.whl",
        sha256 = "bfc756a47cf2bb08286ee9073a3b6b9227e1cb17c4988c2492ad550c68a4802b",
    ),
    "3.13-x86_64": struct(
        filename = "isal-1.9.1-cp313-cp313-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
        url = "https://files.pythonhosted.org/packages/22/26/3670b3d0a1920258e38928e121ad349b6610afa4f70a1e8984fd0a18b6b7/isal-1.9.1-cp313-cp313-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
        sha256 = "5ba6b5c13fb97e7c3c04677725177c40283fbd6c620c169070b231c4cb0cf4b3",
    ),
    "3.14-aarch64": struct(
        filename = "isal-1.9.1-cp314-cp314-manylinux2014_aarch64.manylinux_2_17_aarch64.manylinux_2_28_aarch64.whl",
        url = "https://files.pythonhosted.org/packages/c0/d0/68c2b19278b0a0ef6647a25fdd630c820d5c76392c98a0b3c97d43a823f9/isal-1.9.1-cp314-cp314-manylinux2014_aarch64.manylinux_2_17_aarch64.manylinux_2_28_aarch64.whl",
        sha256 = "8e320e4c1a8989f84292b6a3f27a7267f319503cbd858942f4fd2da299d78230",
    ),
    "3.14-x86_64": struct(
        filename = "isal-1.9.1-cp314-cp314-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
        url = "https://files.pythonhosted.org/packages/90/8a/6b766d343234f0b2cbc4ce6fa13d5cdc36c5283baa94874e7d57be9322a4/isal-1.9.1-cp314-cp314-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
        sha256 = "9f412f2d9f7102f09387a92217c41cbe073697431c97188b3c9b2e1fb022b18e",
    ),
}

# Printed by the helper's interpreter (`python -S -c`): what `isal_wheel` decides by, one line of
# _INTERPRETER_KEYS' values separated by tabs (an empty abiflags or libc stays a field; no JSON to fail on).
_INTERPRETER_KEYS = ["implementation", "version", "machine", "abiflags", "libc"]
_INTERPRETER_FACTS = """\
import os, platform, sys
try:
    libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
except (AttributeError, ValueError, OSError):
    libc = ""
facts = [sys.implementation.name, "%d.%d" % sys.version_info[:2], platform.machine(), getattr(sys, "abiflags", ""), libc]
print("\\t".join(fact.replace("\\t", " ").replace("\\n", " ") for fact in facts))
"""

def isal_wheel(facts):
    """The ISAL_WHEELS entry for the interpreter `facts` describe (a dict of _INTERPRETER_KEYS), or None.

    Only a regular CPython build on glibc: a free-threaded or debug build (`abiflags`) has another ABI,
    musl another libc, and every other interpreter or machine inflates with zlib.
    """
    if facts.get("implementation") != "cpython" or facts.get("abiflags") or not facts.get("libc", "").startswith("glibc "):
        return None
    return ISAL_WHEELS.get("%s-%s" % (facts.get("version"), facts.get("machine")))

def _fetch_isal(ctx, python, prefix):
    """Extracts the interpreter's python-isal wheel into `PREFIX<wheel name>` and returns that directory;
    None when it has none, or the download fails (an offline mirror without it: zlib, slower, same output)."""
    found = ctx.execute([python, "-S", "-c", _INTERPRETER_FACTS], quiet = True)
    fields = found.stdout.removesuffix("\n").split("\t")
    wheel = isal_wheel(dict(zip(_INTERPRETER_KEYS, fields))) if found.return_code == 0 and len(fields) == len(_INTERPRETER_KEYS) else None
    if not wheel:
        return None
    output = prefix + wheel.filename.removesuffix(".whl")
    fetched = ctx.download_and_extract(url = wheel.url, output = output, sha256 = wheel.sha256, type = "zip", allow_fail = True)
    return output if fetched.success else None

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

def prepare_helper(ctx, *, python_interpreter = "python3", python_interpreter_target = None, inflates_wheels = False):
    """Fetches the helper's dependencies into `_helper/` and says how to run it.

    `inflates_wheels`: the helper will read large wheels (the hub's build), so python-isal is fetched for
    its interpreter too; planning and resolving read locks and pages only, and skip that fetch.
    Returns a struct(python, environment) for `run_helper`.
    """
    package_dir = ctx.path(Label("//python/patched_wheels:BUILD.bazel")).dirname
    if hasattr(ctx, "watch_tree"):
        # Editing the helper re-runs the hub, as editing a .bzl file would.
        ctx.watch_tree(package_dir)
    python = _interpreter(ctx, python_interpreter, python_interpreter_target)
    outputs = _fetch_helper_wheels(ctx, "_helper/")
    isal = _fetch_isal(ctx, python, "_helper/") if inflates_wheels else None
    paths = [str(package_dir.dirname)] + [str(ctx.path(output)) for output in outputs + ([isal] if isal else [])]
    environment = {
        "PYTHONPATH": ":".join(paths),
        "PYTHONNOUSERSITE": "1",
        "SOURCE_DATE_EPOCH": _SOURCE_DATE_EPOCH,
    }
    for name in _PASSED_ENVIRONMENT:
        if name in ctx.os.environ:
            environment[name] = ctx.os.environ[name]

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
