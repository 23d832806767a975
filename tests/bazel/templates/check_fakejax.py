"""Runs under `bazel test`, where every wheel is its own sys.path entry (rules_python's layout).

`import fakejax` opens libfoo.so.1 of the fakert-foo wheel by its path, as JAX's CUDA plugin opens
the nvidia-* libraries; libfoo needs libbar.so.1 of fakert-bar through an RPATH that only works in one
site-packages. So it works there only if fakejax preloads the fakert-* libraries (`preload_wheels`).
"""

import argparse
import sys


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--expected", type=int, required=True, help="what fakejax.answer() must return")
    args = parser.parse_args()

    import fakejax

    answer = fakejax.answer()
    if answer != args.expected:
        sys.exit(f"fakejax.answer() returned {answer}, expected {args.expected}")
    print(f"fakejax.answer() == {answer}")


if __name__ == "__main__":
    main()
