"""A hub fetches from a private index behind HTTP basic auth, with the credentials of a netrc file.

A real nginx (tests/support/nginx.py) serves a PEP 503 index of synthetic wheels over TLS on 127.0.0.1 and
answers 401 to any request without the login and password. The hub is given the file by its `netrc`
attribute (bzlmod: `patched.index`; WORKSPACE: `patched_index`): its page and wheel downloads then carry the
credentials. Without the attribute the build fails on the first page, naming it and the 401. In no case does
the password reach Bazel's output, the output base's files (the request, the config, the lock, the hub's
files, MODULE.bazel.lock) or the workspace.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import nginx
from support.bazelworkspace import (
    BAZEL,
    CACHE_DIR,
    REPO_ROOT,
    TEMPLATES,
    BazelResult,
    BazelWorkspace,
    write_lock,
)
from support.wheelbuilder import build_wheel

pytestmark = pytest.mark.bazel

LOGIN = "ci-robot"
PASSWORD = "rpw-s3cret-9f1c-never-printed"
SECRETS = (PASSWORD.encode(), base64.b64encode(f"{LOGIN}:{PASSWORD}".encode()))  # as written, as sent
SUFFIX = "private.1"

BZLMOD = """\
module(name = "rpw_credentials")

bazel_dep(name = "rules_patched_wheels", version = "0.1.0")
local_path_override(module_name = "rules_patched_wheels", path = "{repo_root}")

patched = use_extension("@rules_patched_wheels//python:extensions.bzl", "patched")
patched.patched_wheel(name = "alpha", hub = "private", suffix = "{suffix}")
patched.index(
    name = "private",
    requirements_lock = "//:requirements_lock.txt",
    index_url = "{index_url}",{netrc}
)
use_repo(patched, "private")
"""

# The integration workspace's head (rules_python, which the offline launcher overrides), then the hub.
WORKSPACE = (
    (TEMPLATES / "WORKSPACE.tmpl").read_text(encoding="utf-8").partition("local_repository(")[0]
    + """\
local_repository(name = "rules_patched_wheels", path = "{repo_root}")

load("@rules_patched_wheels//python:repositories.bzl", "patched_index", "patched_wheel")

patched_index(
    name = "private",
    requirements_lock = "//:requirements_lock.txt",
    index_url = "{index_url}",
    wheels = [patched_wheel(name = "alpha", suffix = "{suffix}")],{netrc}
)
"""
)


def _private_index(directory: Path) -> list[Path]:
    """Two pure wheels indexed by the CLI users run (PEP 503 pages with sha256 fragments). Their bytes hold a
    random token, so no earlier run left them in Bazel's repository cache: the hub must download them. (They
    named ``directory`` before; pytest numbers its directories again once /tmp is emptied, and a run whose
    directory an earlier one had found its wheels in the shared repository cache: no download to log.)"""
    directory.mkdir()
    unique = f"RUN = {os.urandom(16).hex()!r}\n".encode()
    wheels = [
        build_wheel(directory, "alpha", "1.0", {"alpha/__init__.py": b"ANSWER = 42\n" + unique}),
        build_wheel(directory, "beta", "2.0", {"beta/__init__.py": b"NAME = 'beta'\n" + unique}),
    ]
    subprocess.run([sys.executable, "-m", "patched_wheels", "index", str(directory)], check=True, capture_output=True)
    return wheels


def _workspace(root: Path, server: nginx.Server, mode: str) -> BazelWorkspace:
    (root / "logs").mkdir()
    (root / ".bazelignore").write_text(f"pypi\nnginx\nlogs\nsecrets\n{CACHE_DIR}\n", encoding="utf-8")
    (root / ".bazelrc").write_text(
        "".join(f"startup {flag}\n" for flag in server.jvm_flags())
        + "startup --max_idle_secs=600\n"
        + f"common --repo_env=RULES_PATCHED_WHEELS_CACHE={root / CACHE_DIR}\n"
        + "common:workspace --noenable_bzlmod --enable_workspace\n",
        encoding="utf-8",
    )
    (root / "BUILD.bazel").write_text('exports_files(["requirements_lock.txt"])\n', encoding="utf-8")
    secrets = root / "secrets"
    secrets.mkdir(mode=0o700)
    netrc = secrets / "netrc"
    netrc.write_text(f"machine 127.0.0.1\nlogin {LOGIN}\npassword {PASSWORD}\n", encoding="utf-8")
    netrc.chmod(0o600)
    return BazelWorkspace(root, root / "logs", config=["--config=workspace"] if mode == "workspace" else [])


def _declare(root: Path, mode: str, index_url: str, *, netrc: bool) -> None:
    """The workspace's MODULE.bazel or WORKSPACE: the hub on the private index, with or without `netrc`."""
    attribute = f'\n    netrc = "{root / "secrets" / "netrc"}",' if netrc else ""
    values = dict(repo_root=str(REPO_ROOT), index_url=index_url, suffix=SUFFIX, netrc=attribute)
    name, template = ("MODULE.bazel", BZLMOD) if mode == "bzlmod" else ("WORKSPACE", WORKSPACE)
    (root / name).write_text(template.format(**values), encoding="utf-8")
    if mode == "bzlmod":
        (root / "WORKSPACE").unlink(missing_ok=True)
    else:
        (root / "MODULE.bazel").write_text("", encoding="utf-8")


def _files_holding_a_secret(*roots: Path) -> list[str]:
    """Every regular file under ``roots`` whose bytes hold the password, as written or as a Basic header sends it
    (links are not followed: the output base links to the workspace, whose netrc file holds it by design)."""
    found = []
    for root in roots:
        for directory, _, names in os.walk(root):
            for name in names:
                path = Path(directory, name)
                if path.is_symlink() or not path.is_file() or path == root / "secrets" / "netrc":
                    continue
                data = path.read_bytes()
                if any(secret in data for secret in SECRETS):
                    found.append(str(path))
    return found


def _assert_no_secret(result: BazelResult) -> None:
    assert not any(secret.decode() in result.output for secret in SECRETS), result.tail()


@pytest.mark.parametrize("mode", ["bzlmod", "workspace"])
def test_the_hub_fetches_pages_and_wheels_behind_basic_auth_with_the_netrc_attribute(tmp_path: Path, mode: str) -> None:
    """Fails where the hub sends no credentials (or has no `netrc` attribute): every request is a 401."""
    if not os.access(BAZEL, os.X_OK):
        pytest.skip(f"{BAZEL} is not executable")
    if not nginx.available():
        pytest.skip(f"{nginx.NGINX} is missing (.ci/run installs Debian's nginx-light)")
    root = tmp_path / "ws"
    root.mkdir()
    wheels = _private_index(root / "pypi")
    write_lock(wheels, root / "requirements_lock.txt")
    with nginx.serve(root / "pypi", root / "nginx", tls=True, basic_auth=(LOGIN, PASSWORD)) as server:
        workspace = _workspace(root, server, mode)
        try:
            index_url = f"{server.url}/simple"
            _declare(root, mode, index_url, netrc=False)
            refused = workspace.run("build", *workspace.config, "@private//:wheels")
            assert refused.returncode != 0, refused.tail()
            assert "401 Unauthorized" in refused.output and f"{index_url}/" in refused.output, refused.tail()
            _assert_no_secret(refused)

            # Credentials in the URL, as pip takes them: refused before anything is written, naming the host only.
            _declare(root, mode, index_url.replace("://", f"://{LOGIN}:{PASSWORD}@"), netrc=False)
            in_url = workspace.run("build", *workspace.config, "@private//:wheels")
            assert in_url.returncode != 0, in_url.tail()
            assert f"index_url holds credentials (https://…@{server.url.partition('://')[2]})" in in_url.output, (
                in_url.tail()
            )
            _assert_no_secret(in_url)

            _declare(root, mode, index_url, netrc=True)
            built = workspace.run("build", *workspace.config, "@private//:wheels")
            assert built.returncode == 0, built.tail()
            _assert_no_secret(built)
            hub = workspace.hub("private")
            served = sorted(path.name for path in (hub / "index").glob("*.whl"))
            assert served == ["alpha-1.0+private.1-py3-none-any.whl", "beta-2.0-py3-none-any.whl"], served
            # Each page and each wheel was served to the hub's authenticated requests.
            log = server.access_log.read_text(encoding="utf-8").splitlines()
            for path in ["/simple/alpha/", "/simple/beta/", *(f"/{wheel.name}" for wheel in wheels)]:
                assert any(f" - {LOGIN} [" in line and f'"GET {path} HTTP/1.1" 200 ' in line for line in log), log
            assert _files_holding_a_secret(workspace.output_base, root) == []
        finally:
            workspace.shutdown()
