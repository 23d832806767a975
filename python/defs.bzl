"""Public rules of rules_patched_wheels for BUILD files.

```starlark
load("@rules_patched_wheels//python:defs.bzl", "layout_test")
layout_test(name = "jax_layout_test", deps = [requirement("jax")], probe = "import jax; jax.devices()")
```
"""

load("//python/private:layout_test.bzl", _layout_test = "layout_test")

layout_test = _layout_test
