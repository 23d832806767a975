"""A real nginx (Debian's ``nginx-light``) serving a directory on a free port of 127.0.0.1, for the Bazel tests
that need what a user's CI talks to: a private index behind HTTP basic auth over TLS, and an HTTP remote
cache (WebDAV, as Bazel's remote-caching docs describe it).

The server is one process (``master_process off``: no workers to leave behind), started with its own
configuration, prefix, logs and temporary folders under the test's directory, and stopped by its pid when the
``with`` block ends, also when the test fails. Bazel's downloader refuses an ``http://`` page that has no
checksum (every index page), so the index is served over TLS with a certificate made here; Bazel's JVM
trusts it through the Java trust store :func:`serve` writes beside it (``startup --host_jvm_args``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import shutil
import socket
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
TRUST_STORE_PASSWORD = "changeit"  # the JDK's own default: a trust store holds no secret


@dataclass(frozen=True)
class Server:
    url: str
    """``https://127.0.0.1:PORT`` (``tls``) or ``http://127.0.0.1:PORT``: the served directory's root."""
    trust_store: Path | None
    """The Java trust store holding the server's certificate (``tls``), else None."""
    access_log: Path

    def jvm_flags(self) -> list[str]:
        """The ``startup`` options that make Bazel's JVM trust this server (and nothing else)."""
        assert self.trust_store is not None, "a plain-http server needs no trust store"
        return [
            f"--host_jvm_args=-Djavax.net.ssl.trustStore={self.trust_store}",
            f"--host_jvm_args=-Djavax.net.ssl.trustStorePassword={TRUST_STORE_PASSWORD}",
            "--host_jvm_args=-Djavax.net.ssl.trustStoreType=JKS",
        ]


def available() -> bool:
    return Path(NGINX).is_file()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _certificate(work: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (the name Java checks) and its key, made by openssl."""
    cert, key = work / "server.pem", work / "server.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def jks_trust_store(certificate_der: bytes) -> bytes:
    """A Java KeyStore (JKS, version 2) holding one trusted certificate, as ``keytool -importcert`` writes it:
    so the test needs no JDK of its own. The trailing SHA-1 is the format's integrity check, keyed by the
    store's password as UTF-16BE followed by the format's fixed salt."""
    alias = b"rpw-test-server"
    body = struct.pack(">III", 0xFEEDFEED, 2, 1)
    body += struct.pack(">IH", 2, len(alias)) + alias + struct.pack(">q", 0)
    body += struct.pack(">H", 5) + b"X.509" + struct.pack(">I", len(certificate_der)) + certificate_der
    digest = hashlib.sha1(TRUST_STORE_PASSWORD.encode("utf-16-be") + b"Mighty Aphrodite" + body).digest()
    return body + digest


def _der(cert: Path) -> bytes:
    text = cert.read_text(encoding="ascii")
    inner = text.split("-----BEGIN CERTIFICATE-----")[1].split("-----END CERTIFICATE-----")[0]
    return base64.b64decode("".join(inner.split()))


def _config(work: Path, root: Path, port: int, locations: str, tls: tuple[Path, Path] | None) -> str:
    temps = "\n".join(
        f"  {kind}_temp_path {work / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    listen = f"listen 127.0.0.1:{port}" + (" ssl" if tls else "") + ";"
    certificate = f"ssl_certificate {tls[0]};\n    ssl_certificate_key {tls[1]};" if tls else ""
    return f"""\
daemon off;
master_process off;
pid {work / "nginx.pid"};
error_log {work / "error.log"} info;
events {{ worker_connections 256; }}
http {{
  access_log {work / "access.log"};
{temps}
  server {{
    {listen}
    {certificate}
    root {root};
{locations}
  }}
}}
"""


def _wait_until_listening(process: subprocess.Popen[bytes], port: int, error_log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"nginx exited {process.returncode}: {error_log.read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nginx did not listen on 127.0.0.1:{port} within 20 s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stops the one nginx process by its pid: SIGTERM (nginx's fast shutdown), SIGKILL if it lingers."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextlib.contextmanager
def serve(
    root: Path,
    work: Path,
    *,
    tls: bool = False,
    basic_auth: tuple[str, str] | None = None,
    webdav: bool = False,
) -> Iterator[Server]:
    """Serves ``root`` until the block ends; ``work`` (created) holds the configuration, logs and certificate.

    ``basic_auth``: (login, password) every request must carry (the password file holds its salted SHA-1
    only). ``webdav``: PUT, DELETE and MKCOL write under ``root`` (an HTTP remote cache for Bazel).
    """
    work.mkdir(parents=True, exist_ok=True)
    locations = ["    location / {"]
    if basic_auth is not None:
        login, password = basic_auth
        salt = b"rpw-salt"
        digest = base64.b64encode(hashlib.sha1(password.encode() + salt).digest() + salt).decode()
        (work / "htpasswd").write_text(f"{login}:{{SSHA}}{digest}\n", encoding="utf-8")
        locations.append(f'      auth_basic "rpw test index";\n      auth_basic_user_file {work / "htpasswd"};')
    if webdav:
        locations.append(
            "      dav_methods PUT DELETE MKCOL;\n      create_full_put_path on;\n      client_max_body_size 0;"
        )
    locations.append("    }")
    certificate = _certificate(work) if tls else None
    trust_store = None
    if certificate is not None:
        trust_store = work / "truststore.jks"
        trust_store.write_bytes(jks_trust_store(_der(certificate[0])))
    port = _free_port()
    config = work / "nginx.conf"
    config.write_text(_config(work, root, port, "\n".join(locations), certificate), encoding="utf-8")
    process = subprocess.Popen(
        [NGINX, "-p", str(work), "-c", str(config), "-e", str(work / "error.log")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_until_listening(process, port, work / "error.log")
        scheme = "https" if tls else "http"
        yield Server(f"{scheme}://127.0.0.1:{port}", trust_store, work / "access.log")
    finally:
        _stop(process)
