"""Unit tests of the pure functions of //python/private (run by `bazel test //tests/starlark/...`)."""

load("//python:repositories.bzl", "patched_wheel")
load("//python/private:helper.bzl", "isal_wheel")
load("//python/private:hub.bzl", "INDEX_ATTRS", "request_attributes")
load("//python/private:rules_python_version.bzl", "features_version")
load("//python/private:specs.bzl", "PATCHED_WHEEL_SCHEMA", "hub_specs", "patched_wheel_problems", "patched_wheel_spec")
load(":unittest.bzl", "expect_eq", "starlark_unit_test")

def _features_version():
    return (
        expect_eq(features_version('x = 1\n_VERSION_PRIVATE = "2.3.2"\n'), "2.3.2", "a release") +
        expect_eq(features_version('_VERSION_PRIVATE = "$Format:%(describe:tags=true)$"'), "", "an unexpanded checkout") +
        expect_eq(features_version("def f(): pass\n"), "", "no marker")
    )

def _patched_wheel_defaults():
    spec, labels = patched_wheel_spec(patched_wheel(name = "Torch-CUDA.ext", suffix = "x.1"), 0)
    return (
        expect_eq(spec["preload_package"], "", "preload_package default: the helper's plan derives it") +
        expect_eq(spec["preload"], "off", "preload default") +
        expect_eq(spec["strip"], 1, "strip default") +
        expect_eq(spec["rpath_mode"], "set", "rpath_mode default") +
        expect_eq(labels, [], "no patches")
    )

def _hub_specs_number_patches():
    specs, labels = hub_specs([
        patched_wheel(name = "a", suffix = "x", patches = ["//:1.patch", "//:2.patch"]),
        patched_wheel(name = "b", suffix = "x", patches = ["//:3.patch"]),
    ])
    return (
        expect_eq(labels, ["//:1.patch", "//:2.patch", "//:3.patch"], "one flat label list") +
        expect_eq([spec["patch_indices"] for spec in specs], [[0, 1], [2]], "each spec names its own by position")
    )

def _schema_problems():
    return (
        expect_eq(patched_wheel_problems({"name": "torch", "suffix": "x"}), [], "minimal") +
        expect_eq(patched_wheel_problems({"name": "torch"}), ["`suffix` is mandatory"], "missing suffix") +
        expect_eq(patched_wheel_problems({"name": "t", "suffix": "x", "preload": "yes"}), ["`preload` must be one of [\"auto\", \"elf\", \"off\"], not \"yes\""], "a value not allowed") +
        expect_eq(patched_wheel_problems({"name": "t", "suffix": "x", "rpath_mod": "set"}), ["unknown attribute `rpath_mod`"], "a misspelt attribute")
    )

def _spec_follows_schema():
    spec, _ = patched_wheel_spec(patched_wheel(name = "t", suffix = "x"), 0)
    return expect_eq(
        sorted(spec.keys()),
        sorted([name for name in PATCHED_WHEEL_SCHEMA if name != "patches"] + ["patch_indices"]),
        "one key per attribute (patches travel by index)",
    )

def _fake_path(label):
    return "/files/" + label.name

def _request_attributes():
    given = {name: "as given" for name in INDEX_ATTRS}
    given.update(requirements_lock = Label("//:lock.txt"), uv_lock = None, restore_extras = False, extras = ["jax[cuda13]"])
    written = request_attributes(struct(path = _fake_path), given)
    return (
        expect_eq(list(written), list(INDEX_ATTRS), "every attribute of INDEX_ATTRS, in its order") +
        expect_eq(written["requirements_lock"], "/files/lock.txt", "a label: its file's path") +
        expect_eq(request_attributes(struct(path = _fake_path), dict(given, extras = [Label("//:a.txt"), "b"]))["extras"], ["/files/a.txt", "b"], "labels in a list") +
        expect_eq(written["uv_lock"], None, "an unset label: null") +
        expect_eq([written[name] for name in ("restore_extras", "extras", "index_url")], [False, ["jax[cuda13]"], "as given"], "any other value as given")
    )

def _isal_wheel():
    cpython = {"implementation": "cpython", "version": "3.11", "machine": "x86_64", "abiflags": "", "libc": "glibc 2.36"}
    picked = isal_wheel(cpython)
    return (
        expect_eq(picked.filename.split("-")[2:4] if picked else None, ["cp311", "cp311"], "CPython 3.11: its own ABI's wheel") +
        expect_eq("x86_64" in picked.filename if picked else None, True, "for its machine") +
        expect_eq((isal_wheel(dict(cpython, machine = "aarch64")) or struct(filename = "")).filename.endswith("_aarch64.whl"), True, "aarch64") +
        expect_eq(isal_wheel(dict(cpython, abiflags = "t")), None, "a free-threaded build: zlib") +
        expect_eq(isal_wheel(dict(cpython, libc = "")), None, "musl (no glibc version): zlib") +
        expect_eq(isal_wheel(dict(cpython, implementation = "pypy")), None, "PyPy: zlib") +
        expect_eq(isal_wheel(dict(cpython, version = "3.8")), None, "a version without a pinned wheel: zlib") +
        expect_eq(isal_wheel(dict(cpython, machine = "arm64")), None, "macOS: zlib")
    )

def private_test_suite(name, **kwargs):
    starlark_unit_test(
        name = name,
        cases = {
            "features_version": _features_version,
            "patched_wheel_defaults": _patched_wheel_defaults,
            "hub_specs_number_patches": _hub_specs_number_patches,
            "schema_problems": _schema_problems,
            "spec_follows_schema": _spec_follows_schema,
            "isal_wheel": _isal_wheel,
            "request_attributes": _request_attributes,
        },
        **kwargs
    )
