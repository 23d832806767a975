"""Runs under `bazel test`: `import pkg` loads pkg/_ext.so, which needs pkg.libs/libdep.so.1 of the
same wheel; it finds it only through the RUNPATH the hub's `rpath` edit gave it."""

import argparse
import sys


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--expected", type=int, required=True, help="what pkg.answer() must return")
    args = parser.parse_args()

    import pkg

    answer = pkg.answer()
    if answer != args.expected:
        sys.exit(f"pkg.answer() returned {answer}, expected {args.expected}")
    print(f"pkg.answer() == {answer}")


if __name__ == "__main__":
    main()
