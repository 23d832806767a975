#!/usr/bin/env python3
"""Run buildifier, the Starlark formatter rules_python runs, on the project's own Bazel files.

The binary comes from npm's ``@bazel/buildifier`` package (the one registry of buildtools' releases this
machine and CI reach: GitHub is not), pinned by the tarball's sha256 and unpacked once into ``.venv/``,
so nothing is written into the checkout beyond ``.venv*/`` (CONTRIBUTING.md).

    tools/buildifier.py            check: exit 1, naming each file, when one is not formatted
    tools/buildifier.py --fix      format them in place

Test templates (``*.tmpl``, with ``$placeholders`` buildifier cannot parse) and the offline registry's
module stubs are not the project's Bazel code and are left out.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import platform
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

VERSION = "8.2.1"
URL = f"https://registry.npmjs.org/@bazel/buildifier/-/buildifier-{VERSION}.tgz"
SHA256 = "b96ea9b13003036c801f52bee6f9b0314738f8432e5cb9d814c89f59292604ee"
ROOT = Path(__file__).resolve().parent.parent
PATTERNS = ("*.bzl", "*BUILD*", "*.bazel", "WORKSPACE*")
EXCLUDED_PREFIXES = ("tools/offline/modules/",)


def _member() -> str:
    """The tarball member for this host: buildtools publishes linux and darwin on amd64 and arm64."""
    machine = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower()
    )
    system = sys.platform if sys.platform in ("linux", "darwin") else None
    if machine is None or system is None:
        raise SystemExit(f"tools/buildifier.py: no buildifier {VERSION} binary for {sys.platform}/{platform.machine()}")
    return f"package/buildifier-{system}_{machine}"


def binary() -> Path:
    """The pinned buildifier under ``.venv/``, fetched and checked against :data:`SHA256` on first use."""
    target = ROOT / ".venv" / f"buildifier-{VERSION}"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    try:
        with urllib.request.urlopen(URL, timeout=60) as response:
            data = response.read()
    except OSError as error:
        raise SystemExit(f"tools/buildifier.py: cannot fetch {URL}: {error}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        raise SystemExit(f"tools/buildifier.py: {URL} has sha256 {digest}, expected {SHA256}")
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        extracted = archive.extractfile(_member())
        if extracted is None:
            raise SystemExit(f"tools/buildifier.py: {URL} has no file {_member()}")
        content = extracted.read()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.write_bytes(content)
    partial.chmod(0o755)
    partial.replace(target)
    return target


def bazel_files() -> list[str]:
    """The tracked Bazel files buildifier checks, relative to the checkout."""
    listed = subprocess.run(["git", "ls-files", "--", *PATTERNS], cwd=ROOT, capture_output=True, text=True, check=True)
    return [
        name
        for name in listed.stdout.splitlines()
        if not name.endswith(".tmpl") and not name.startswith(EXCLUDED_PREFIXES)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fix", action="store_true", help="format the files in place instead of checking them")
    args = parser.parse_args()
    mode = "fix" if args.fix else "check"
    return subprocess.run([str(binary()), f"-mode={mode}", *bazel_files()], cwd=ROOT, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
