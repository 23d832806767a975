"""Runs under `bazel test`, where every wheel is its own sys.path entry (rules_python's layout).

`import faketorch` works there only if faketorch preloads its fake CUDA libraries in dependency
order; `--moved-from`/`--moved-to` also check that a library moved by `split_into` is gone from
faketorch's directory and is loaded from the sibling wheel's own directory (sys.path entry).
"""

import argparse
import os
import sys


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--expected", type=int, required=True, help="what faketorch.answer() must return")
    parser.add_argument("--moved-from", help="install path of a library split out of faketorch's wheel")
    parser.add_argument("--moved-to", help="its install path in the sibling wheel")
    parser.add_argument("--sibling-repo", help="fragment of the sibling wheel's repository name")
    parser.add_argument("--expected-version", help="the installed faketorch's version (the patched one)")
    parser.add_argument("--preloaded", action="store_true", help="faketorch must have run the generated preload")
    parser.add_argument(
        "--one-site-packages", action="store_true", help="faketorch and fake_nvidia must share a directory"
    )
    args = parser.parse_args()

    import faketorch

    if args.one_site_packages:
        own_entry = os.path.dirname(os.path.dirname(os.path.abspath(faketorch.__file__)))
        if not os.path.isdir(os.path.join(own_entry, "fake_nvidia")):
            sys.exit(f"faketorch's sys.path entry {own_entry} holds no fake_nvidia: not one site-packages")
        print(f"faketorch and fake_nvidia share one site-packages: {own_entry}")

    if args.expected_version:
        from importlib.metadata import version

        if version("faketorch") != args.expected_version:
            sys.exit(f"faketorch {version('faketorch')} is installed, expected {args.expected_version}")
        print(f"faketorch version {args.expected_version}")
    if args.preloaded:
        if "faketorch._patched_wheels_preload" not in sys.modules:
            sys.exit("faketorch did not import its generated preload (faketorch._patched_wheels_preload)")
        print("faketorch ran its generated preload")

    answer = faketorch.answer()
    if answer != args.expected:
        sys.exit(f"faketorch.answer() returned {answer}, expected {args.expected}")
    print(f"faketorch.answer() == {answer}")
    if args.moved_from:
        check_split(faketorch.__file__, args.moved_from, args.moved_to, args.sibling_repo)


def check_split(init_file: str, moved_from: str, moved_to: str, sibling_repo: str) -> None:
    own_entry = os.path.dirname(os.path.dirname(os.path.abspath(init_file)))
    if os.path.exists(os.path.join(own_entry, moved_from)):
        sys.exit(f"{moved_from} is still in faketorch's directory {own_entry}")
    entries = [entry for entry in sys.path if os.path.isfile(os.path.join(entry, moved_to))]
    if len(entries) != 1 or sibling_repo not in entries[0] or entries[0] == own_entry:
        sys.exit(f"{moved_to}: expected in one sys.path entry, the {sibling_repo} repository's; found in {entries}")
    library = os.path.realpath(os.path.join(entries[0], moved_to))
    with open("/proc/self/maps", encoding="utf-8") as maps:
        mapped = {
            os.path.realpath(line.split()[-1])
            for line in maps
            if line.rstrip().endswith("/" + os.path.basename(moved_to))
        }
    if mapped != {library}:
        sys.exit(f"{os.path.basename(moved_to)}: the process mapped {sorted(mapped)}, expected only {library}")
    print(f"{os.path.basename(moved_to)} loaded from {library}")


if __name__ == "__main__":
    main()
