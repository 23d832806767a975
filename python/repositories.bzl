"""WORKSPACE API of rules_patched_wheels.

```starlark
load("@rules_patched_wheels//python:repositories.bzl", "patched_index", "patched_wheel")
patched_index(
    name = "patched_pypi",
    requirements_lock = "//third_party:requirements_lock.txt",
    wheels = [patched_wheel(name = "torch", suffix = "stripe.5", remove_requires = ["triton"], preload = "auto")],
)
load("@rules_python//python:pip.bzl", "pip_parse")
pip_parse(name = "pypi", requirements_lock = "@patched_pypi//:requirements_lock.txt")
```
Give the hub exactly one of `requirements_lock`, `uv_lock` (then also `pip_parse` the hub's `uv.lock` with
rules_python >= 2.2) and `pylock`. Without an extension to record it, the hub resolves the wheel URLs
itself (index pages are fetched again after `clean --expunge`, and one that cannot be fetched is answered by
what an earlier fetch of it recorded in the helper's cache; the wheels still come from the repository cache).
"""

load("//python/private:helper.bzl", "HELPER_DEPS_REPOSITORY", "helper_deps_repository")
load("//python/private:hub.bzl", "INDEX_ATTRS", "patched_hub")
load("//python/private:specs.bzl", "PATCHED_WHEEL_DEFAULTS", "hub_specs", "patched_wheel_problems")

def patched_wheels_dependencies():
    """The repositories `layout_test` (//python:defs.bzl) needs: the helper's pinned dependencies. `patched_index`
    calls it; a WORKSPACE with no `patched_index` calls it once itself."""
    if not native.existing_rule(HELPER_DEPS_REPOSITORY):
        helper_deps_repository(name = HELPER_DEPS_REPOSITORY)

def patched_wheel(**kwargs):
    """Describes one patched wheel for `patched_index(wheels = [...])`; takes the attributes of the
    bzlmod `patched_wheel` tag (without `hub`), checked against the same schema."""
    problems = patched_wheel_problems(kwargs)
    if problems:
        fail("rules_patched_wheels: patched_wheel(name = \"%s\"): %s" % (kwargs.get("name", "?"), "; ".join(problems)))
    return struct(**dict(PATCHED_WHEEL_DEFAULTS, **kwargs))

def patched_index(name, wheels = [], **attributes):
    """A hub repository `name` with `requirements_lock.txt` for pip_parse (and `uv.lock` for a `uv_lock`),
    serving the lock's wheels (those in `wheels` patched) from a local index; takes the attributes of the
    bzlmod `index` tag, with the same defaults."""
    unknown = sorted([key for key in attributes if key not in INDEX_ATTRS])
    if unknown:
        fail("rules_patched_wheels: patched_index(name = \"%s\"): unknown attributes %s; known: name, wheels, %s" % (
            name,
            ", ".join(unknown),
            ", ".join(INDEX_ATTRS),
        ))
    specs, patches = hub_specs(wheels)
    patched_wheels_dependencies()
    patched_hub(
        name = name,
        patched = json.encode(specs),
        patches = patches,
        **attributes
    )
