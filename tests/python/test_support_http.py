"""The fixtures' HTTP server: a client that hangs up mid-file (uv, Bazel's downloader cancelling a
request) leaves no traceback in a passing run's output."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest

from support.uvfixture import serve_over_http


def test_a_client_hanging_up_mid_file_prints_nothing(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # Larger than the socket buffers on both sides, so the server is still writing when the client resets.
    (tmp_path / "big.whl").write_bytes(b"\0" * (32 << 20))
    with serve_over_http(tmp_path) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(b"GET /big.whl HTTP/1.0\r\n\r\n")
            assert client.recv(1024).startswith(b"HTTP/1.0 200")
            # SO_LINGER 0: close() sends a reset, so the server's next write fails (broken pipe or reset).
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    # Leaving serve_over_http waits for the handler's thread: whatever it printed is printed by now.
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
