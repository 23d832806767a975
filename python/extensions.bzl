"""Bzlmod API of rules_patched_wheels.

```starlark
patched = use_extension("@rules_patched_wheels//python:extensions.bzl", "patched")
patched.patched_wheel(hub = "patched_pypi", name = "torch", suffix = "stripe.5",
                      patches = ["//patches/torch-2.1.0:preload.patch"], remove_requires = ["triton"], preload = "auto")
patched.index(name = "patched_pypi", requirements_lock = "//third_party:requirements_lock.txt")
use_repo(patched, "patched_pypi")

pip = use_extension("@rules_python//python/extensions:pip.bzl", "pip")
pip.parse(name = "pypi", requirements_lock = "@patched_pypi//:requirements_lock.txt")
```
"""

load("//python/private:extension.bzl", _patched = "patched")

patched = _patched
