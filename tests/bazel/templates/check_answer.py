"""Runs under `bazel test`, where every wheel is its own sys.path entry (rules_python's layout):
`import PACKAGE` and check `PACKAGE.answer()`.

Used for the fixtures whose import works only if the hub fixed them: `fakejax` opens libfoo.so.1 of the
fakert-foo wheel by its path, as JAX's CUDA plugin opens the nvidia-* libraries, and libfoo needs
libbar.so.1 of fakert-bar through an RPATH that only works in one site-packages (fixed by
`preload_wheels`); `pkg` loads pkg/_ext.so, which finds pkg.libs/libdep.so.1 of its own wheel only
through the RUNPATH of the hub's `rpath` edit.
"""

import argparse
import importlib
import sys


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--package", required=True, help="the package to import")
    parser.add_argument("--expected", type=int, required=True, help="what PACKAGE.answer() must return")
    args = parser.parse_args()

    answer = importlib.import_module(args.package).answer()
    if answer != args.expected:
        sys.exit(f"{args.package}.answer() returned {answer}, expected {args.expected}")
    print(f"{args.package}.answer() == {answer}")


if __name__ == "__main__":
    main()
