"""uv as a test fixture: a local index served over HTTP, and the uv.lock / pylock.toml the real uv makes
against it (nothing outside the machine is asked)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator, Sequence


@contextlib.contextmanager
def serve_over_http(directory: Path) -> Iterator[str]:
    """Serve ``directory`` on a free port of 127.0.0.1, as PyPI serves its files; yields the base URL.

    uv records a ``file://`` index's files as local paths, which rules_python's uv.lock reader does not
    take (it reads each wheel's ``url``), so the uv fixtures lock against the same pages over HTTP.
    """
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = _JoinedServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _JoinedServer(http.server.ThreadingHTTPServer):
    """Closing the server waits for its handlers (non-daemon threads), so a request's end lands inside the
    test that made it, never in a later one's output."""

    daemon_threads = False


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    timeout = 60  # a client that connects and never sends a request cannot hold server_close forever

    def handle(self) -> None:
        """A client hanging up mid-file (uv or Bazel cancelling a download it no longer needs) is not an
        error of the server: without this, socketserver prints the BrokenPipeError's traceback on stderr."""
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format: str, *args: object) -> None:
        """Bazel's and uv's requests are not the test's output."""


def uv_locks(project: Path, index_url: str, requirements: Sequence[str]) -> tuple[Path, Path]:
    """``uv.lock`` and ``pylock.toml`` of ``requirements``, made by the real ``uv lock`` / ``uv export``
    against ``index_url`` (nothing outside the machine is asked: uv's caches and configuration are the
    test's own), for the one platform the fake wheels exist for."""
    project.mkdir(parents=True)
    dependencies = ", ".join(f'"{requirement}"' for requirement in requirements)
    (project / "pyproject.toml").write_text(
        f"""[project]
name = "rpw-fixture"
version = "0"
requires-python = ">=3.9"
dependencies = [{dependencies}]

[tool.uv]
package = false
environments = ["sys_platform == 'linux' and platform_machine == 'x86_64'"]

[[tool.uv.index]]
name = "fake-pypi"
url = "{index_url}/simple"
default = true
""",
        encoding="utf-8",
    )
    run_uv(project, "lock")
    run_uv(project, "export", "--frozen", "--format", "pylock.toml", "-o", "pylock.toml")
    return project / "uv.lock", project / "pylock.toml"


def compile_lock(project: Path, find_links: Path, requirements: Sequence[str]) -> Path:
    """``requirements_lock.txt`` of ``requirements`` as the real ``uv pip compile --generate-hashes`` writes it
    (``# via`` comments; a root's extras dropped: ``toolkit[rt]`` is written ``toolkit==1.0``), from the wheels in
    ``find_links`` alone, for Python 3.11."""
    project.mkdir(parents=True)
    (project / "requirements.in").write_text("".join(f"{line}\n" for line in requirements), encoding="utf-8")
    run_uv(
        project,
        *("pip", "compile", "--generate-hashes", "--no-index", "--find-links", str(find_links)),
        *("requirements.in", "-o", "requirements_lock.txt", "--python-version", "3.11"),
    )
    return project / "requirements_lock.txt"


def run_uv(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``uv ARGS`` in ``project`` with the test's own cache and no user configuration; fails the test
    with uv's output when uv fails."""
    import uv

    environment = {
        **os.environ,
        "UV_CACHE_DIR": str(project / ".uv-cache"),
        "XDG_CONFIG_HOME": str(project / ".config"),  # no user uv.toml
        "UV_PYTHON": sys.executable,
        "UV_PYTHON_DOWNLOADS": "never",
    }
    result = subprocess.run(
        [uv.find_uv_bin(), *args], cwd=project, env=environment, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"uv {' '.join(args)} failed:\n{result.stderr}"
    return result
