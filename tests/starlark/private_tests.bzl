"""Unit tests of the pure functions of //python/private (run by `bazel test //tests/starlark/...`)."""

load("//python:repositories.bzl", "patched_wheel")
load("//python/private:helper.bzl", "isal_wheel")
load("//python/private:hub.bzl", "INDEX_ATTRS", "download_auth", "index_credentials", "label_as_written", "request_attributes", "request_labels", "url_credentials_host")
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

def _request_labels():
    given = {name: "as given" for name in INDEX_ATTRS}
    given.update(requirements_lock = Label("//third_party:lock.txt"), wheel_facts = Label("//:wheel_facts.json"), uv_lock = None)
    return (
        expect_eq(request_labels(given), {"requirements_lock": "//third_party:lock.txt", "wheel_facts": "//:wheel_facts.json"}, "each label attribute given, as written in the main repository") +
        expect_eq(label_as_written(Label("@rules_python//python:defs.bzl")).endswith("//python:defs.bzl"), True, "another repository's label keeps its repository") +
        expect_eq(label_as_written(Label("@rules_python//python:defs.bzl")).startswith("@"), True, "and its @")
    )

def _url_credentials_host():
    return (
        expect_eq(url_credentials_host("https://ci:s3cret@artifactory.corp/simple"), "artifactory.corp", "login and password") +
        expect_eq(url_credentials_host("https://token@host:8443/simple"), "host:8443", "a login alone") +
        expect_eq(url_credentials_host("https://host/simple/a@b/"), "", "an @ in the path") +
        expect_eq(url_credentials_host("https://pypi.org/simple"), "", "none") +
        expect_eq(url_credentials_host("user@host"), "", "no scheme: not a URL")
    )

_NETRC = "machine private.corp login ci password s3cret\nmachine token.corp login x password t0ken\n"

def _fake_ctx(environ, files):
    return struct(
        os = struct(name = "linux", environ = environ),
        read = lambda path, watch = None: files[path],
        path = lambda path: struct(exists = path in files),
    )

def _credentials():
    files = {"/given": _NETRC, "/env": "default login e password env\n", "/home/u/.netrc": "default login h password home\n"}
    environ = {"NETRC": "/env", "HOME": "/home/u"}
    given = index_credentials(_fake_ctx(environ, files), {"netrc": "/given", "auth_patterns": {"token.corp": "Bearer <password>"}})
    urls = ["https://private.corp/simple/six/", "https://token.corp/a.whl", "https://files.pythonhosted.org/b.whl"]
    found = lambda environ: download_auth(index_credentials(_fake_ctx(environ, files), {"netrc": "", "auth_patterns": {}}), urls[2:])
    return (
        expect_eq(download_auth(given, urls[:1]), {urls[0]: {"type": "basic", "login": "ci", "password": "s3cret"}}, "basic auth for a host of the netrc attribute's file") +
        expect_eq(download_auth(given, urls[1:2])[urls[1]]["pattern"], "Bearer <password>", "auth_patterns: the host's header") +
        expect_eq(download_auth(given, urls[2:]), {}, "a host the file does not name: no credentials") +
        expect_eq(found(environ)[urls[2]]["password"], "env", "no attribute: $NETRC's file") +
        expect_eq(found({"HOME": "/home/u"})[urls[2]]["password"], "home", "no $NETRC: ~/.netrc") +
        expect_eq(found({"HOME": "/nowhere"}), {}, "no file at all: no credentials")
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
            "request_labels": _request_labels,
            "url_credentials_host": _url_credentials_host,
            "credentials": _credentials,
        },
        **kwargs
    )
