"""Give Debian's bootstrap Bazel the build label it lacks (run once by tools/bazel while provisioning).

Debian builds bazel-bootstrap without `build-data.properties` in the server jar, so Bazel reports no
version: `bazel version` says "Version information not available", `native.bazel_version` is "" and
`bazel_compatibility` is never checked. rules_python 2.x reads the empty version as a future Bazel and
asks for toolchains Bazel 7 does not have (`launcher_maker_toolchain_type`). Bazel's main class reads
the label from that resource (`build.label`), so we add it with the label the package ships in
build-label.txt. Only the offline root's copy of Bazel changes; nothing users load is touched.

    python3 tools/offline/label_bazel.py ROOT
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

RESOURCE = "build-data.properties"


def label(root: Path) -> str:
    share = root / "usr/share/bazel"
    build_label = (share / "build-label.txt").read_text(encoding="utf-8").strip()
    with zipfile.ZipFile(share / "A-server.jar", "a") as jar:
        if RESOURCE not in jar.namelist():
            jar.writestr(RESOURCE, f"build.label={build_label}\n")
    return build_label


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    print(label(Path(sys.argv[1])))
