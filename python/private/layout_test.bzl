"""`layout_test`: the probe in the test's own runfiles layout, and again with the same wheels in one site-packages.

A macro around the user's rules_python `py_binary`/`py_test` (public API of every release we support), so the
layout judged is the one Bazel really gives a `py_test` with those deps under the user's flags. It makes:

* `NAME_layout_probe`: a `py_binary` with `deps`, whose main runs its first argument as code;
* `NAME`: the `py_test` whose main (patched_wheels.layouttest) runs the probe through it and in one
  site-packages built of links at test time, and fails on any difference;
* `NAME_layout_files`: the two mains and the test's config (the probe code), written beside each other.
"""

load("@rules_python//python:defs.bzl", "py_binary", "py_test")

# Whether Bazel reads MODULE.bazel: labels are canonical (@@) only then (rules_python's own test).
_BZLMOD = str(Label("//:unused")).startswith("@@")

def _layout_files_impl(ctx):
    ctx.actions.expand_template(template = ctx.file._probe_template, output = ctx.outputs.probe_main, substitutions = {})
    ctx.actions.expand_template(template = ctx.file._main_template, output = ctx.outputs.test_main, substitutions = {})
    closure = ctx.file.pip_closure
    ctx.actions.write(ctx.outputs.config, json.encode({
        "probe": ctx.attr.probe,
        "test": ctx.attr.test,
        # Its path under the runfiles root (an external repository's short_path starts with ../).
        "pip_closure": "%s/%s" % (ctx.workspace_name, closure.short_path) if closure else "",
        # Where the fix line's patched_wheel goes: the hub the closure comes from ("": the main repository's file).
        "pip_closure_repository": closure.owner.workspace_name if closure else "",
        "bzlmod": _BZLMOD,
    }))
    return [DefaultInfo(files = depset([ctx.outputs.probe_main, ctx.outputs.test_main, ctx.outputs.config]))]

_layout_files = rule(
    implementation = _layout_files_impl,
    attrs = {
        "config": attr.output(mandatory = True),
        "pip_closure": attr.label(allow_single_file = [".json"]),
        "probe": attr.string(mandatory = True),
        "probe_main": attr.output(mandatory = True),
        "test": attr.string(mandatory = True),
        "test_main": attr.output(mandatory = True),
        "_main_template": attr.label(default = Label("//python/private:layout_test_main.py"), allow_single_file = True),
        "_probe_template": attr.label(default = Label("//python/private:layout_test_probe.py"), allow_single_file = True),
    },
)

# Names of the generated files: patched_wheels.layouttest.config finds the config and the probe program beside its main.
_PROBE = "%s_layout_probe"
_MAIN = "%s_layout_main.py"
_CONFIG = "%s_layout_test.json"

def layout_test(name, deps, probe, pip_closure = None, **kwargs):
    """A test that fails when the layout Bazel gives `deps` maps fewer of the wheels' libraries than one
    site-packages, or runs `probe` differently there.

    Args:
      name: the test's name.
      deps: the wheels, as for a `py_test`: `requirement("jax")`, `all_requirements`, ...
      probe: Python code that imports a package and uses what loads at run time, e.g.
        `"import jax; jax.devices()"`; it runs once in each layout.
      pip_closure: the hub's `@<hub>//:pip_closure.json` (any `patched.index` of the lock the deps come
        from): the test then also fails when deps lack a wheel that pip installs for them from that lock,
        naming it and the requirements that bring it (rules_python drops extras on dependency edges); and
        the `patched_wheel` its `fix:` line gives names this hub.
      **kwargs: passed to the `py_test` (`size`, `tags`, `timeout`, `env`, ...).
    """
    where = 'layout_test(name = "%s")' % name
    if not deps:
        fail("%s: deps is empty: give the wheels the probe imports, e.g. deps = [requirement(\"jax\")]" % where)
    if type(probe) != "string" or not probe.strip():
        fail("%s: probe must be Python code that imports a package of deps, e.g. probe = \"import jax; jax.devices()\"" % where)
    for reserved in ("srcs", "main", "data", "args"):
        if reserved in kwargs:
            fail("%s: %s is layout_test's own; the probe is the code it runs" % (where, reserved))
    testonly = kwargs.pop("testonly", True)
    visibility = kwargs.get("visibility")
    label = "//%s:%s" % (native.package_name(), name)
    if native.repository_name() not in ("@", ""):
        label = native.repository_name() + label
    _layout_files(
        name = name + "_layout_files",
        config = _CONFIG % name,
        probe = probe,
        pip_closure = pip_closure,
        probe_main = (_PROBE % name) + ".py",
        test = label,
        test_main = _MAIN % name,
        testonly = testonly,
        visibility = ["//visibility:private"],
    )
    py_binary(
        name = _PROBE % name,
        srcs = [(_PROBE % name) + ".py"],
        main = (_PROBE % name) + ".py",
        deps = deps,
        testonly = testonly,
        tags = ["manual"],
        visibility = visibility,
    )
    py_test(
        name = name,
        srcs = [_MAIN % name],
        main = _MAIN % name,
        data = [_PROBE % name, _CONFIG % name] + ([pip_closure] if pip_closure else []),
        deps = [Label("//python/patched_wheels:layout_test_runner")],
        testonly = testonly,
        **kwargs
    )
