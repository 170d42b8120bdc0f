"""What serve refuses to whom (issue 49): requests not addressed to it (DNS rebinding), another site's page on
the event stream, token files it cannot trust, HTTP/0.9, idle connections and more connections than it serves."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.serve_helpers import get, serving, start_serve, stop


def _raw(url: str, request: bytes, timeout: float = 10.0) -> bytes:
    """The bytes serve answers to ``request`` sent as is, until it closes or ``timeout`` passes."""
    host, port = url.split("//")[1].rstrip("/").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(request)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            chunks.append(b"<timed out>")
        return b"".join(chunks)


def test_requests_addressed_to_another_name_or_to_none_are_refused(tmp_path: Path) -> None:
    proc, url = start_serve(tmp_path / "home", "--simulate", "1", "--allow-host", "gpu-box.example")
    port = url.rstrip("/").rsplit(":", 1)[1]
    try:
        assert get(url + "api/state")[0] == 200  # 127.0.0.1:PORT, as a browser on this machine sends it
        code, _, body = get(url + "api/state", {"Host": "evil.example"})
        assert code == 421 and b"--allow-host evil.example" in body and b"devices" not in body
        assert get(url + "metrics", {"Host": f"evil.example:{port}"})[0] == 421
        assert get(url + "api/state", {"Host": f"localhost:{port}"})[0] == 200
        assert get(url + "api/state", {"Host": "gpu-box.example"})[0] == 200  # named with --allow-host
        no_host = _raw(url, b"GET /api/state HTTP/1.0\r\n\r\n")
        assert no_host.startswith(b"HTTP/1.1 421") and b"devices" not in no_host
        # A page of another site may not read the event stream, even when addressed by a local name.
        events = get(url + "api/events", {"Origin": "http://evil.example"})
        assert events[0] == 403
        assert get(url + "page/events", {"Origin": "http://evil.example"})[0] == 403  # the page's stream too
    finally:
        stop(proc)


def test_http_0_9_is_answered_not_left_hanging(tmp_path: Path) -> None:
    proc, url = start_serve(tmp_path / "home", "--simulate", "1")
    try:
        started = time.monotonic()
        answer = _raw(url, b"GET /\r\n", timeout=15)
        assert answer.startswith(b"HTTP/1.1 400") and b"<timed out>" not in answer, answer[:200]
        assert time.monotonic() - started < 10
    finally:
        stop(proc)


def _serve_cmd(tmp_path: Path, *args: str):  # a CompletedProcess
    import subprocess
    import sys

    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home")}
    command = [sys.executable, "-m", "gpumon", "serve", "--port", "0", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def test_token_files_serve_cannot_trust_are_one_line_each(tmp_path: Path) -> None:
    folder = tmp_path / "tokens"
    folder.mkdir(mode=0o700)
    done = _serve_cmd(tmp_path, "--token-file", str(folder))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "not a regular file" in done.stderr
    if os.geteuid() != 0:
        pytest.skip("a file of another user needs root to make")
    theirs = tmp_path / "theirs"
    theirs.write_text("0123456789abcdef0123456789abcdef\n")
    theirs.chmod(0o600)
    os.chown(theirs, 65534, 65534)
    done = _serve_cmd(tmp_path, "--token-file", str(theirs))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "belongs to another user" in done.stderr


def _connect(url: str, n: int) -> list[socket.socket]:
    host, port = url.split("//")[1].rstrip("/").rsplit(":", 1)
    return [socket.create_connection((host, int(port)), timeout=30) for _ in range(n)]


def test_connections_past_the_cap_are_told_so_and_closed_without_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpumon.serve import http

    monkeypatch.setattr(http.Server, "max_connections", 8)
    with serving(tmp_path / "home", gpus=1) as (_state, url):
        before = threading.active_count()
        idle = _connect(url, 40)  # a slowloris: connections that never send a request
        try:
            answers = [sock.recv(200) for sock in idle[8:]]
            assert all(a.startswith(b"HTTP/1.1 503") for a in answers), answers[:3]
            assert threading.active_count() <= before + 8
        finally:
            for sock in idle:
                sock.close()
        assert wait_until(lambda: get(url + "api/state")[0] == 200, timeout=30)  # the slots are free again


def test_idle_and_half_sent_requests_are_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpumon.serve import http

    monkeypatch.setattr(http.Handler, "timeout", 1.0)
    with serving(tmp_path / "home", gpus=1) as (_state, url):
        idle = _connect(url, 4)
        try:
            idle[0].sendall(b"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # half a request, never ended
            assert [sock.recv(200) for sock in idle] == [b""] * 4  # closed by serve, no answer
        finally:
            for sock in idle:
                sock.close()
