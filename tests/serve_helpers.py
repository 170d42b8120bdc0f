"""``gpumon serve`` started as a user starts it, for the serve tests: its URL from its first line."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def start_serve(home: Path, *args: str, cwd: Path | None = None) -> tuple[subprocess.Popen[str], str]:
    """``gpumon serve --port 0 ARGS`` with ``home`` as its state dir; (the process, its base URL)."""
    env = {**os.environ, "GPUMON_HOME": str(home), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpumon", "serve", "--port", "0", *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the event: serve listens once it says where
    if not line.startswith("gpumon serve: http://"):
        proc.kill()
        raise AssertionError(f"serve did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return proc, line.split()[2]


def stop(proc: subprocess.Popen[Any], timeout: float = 20) -> None:
    """Terminate a process we started, killed after ``timeout`` s."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def get(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, Any, bytes]:
    """(status, headers, body) of one request; an HTTP error is an answer, not an exception; status 0: no answer."""
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()
    except (urllib.error.URLError, ConnectionError):  # not listening yet (a process still starting)
        return 0, {}, b""


@contextlib.contextmanager
def serving(home: Path, gpus: int = 3) -> Iterator[tuple[Any, str]]:
    """serve in this process, as ``gpumon serve`` assembles it (ServeState on simulated GPUs, the HTTP
    server), polling every 0.25 s: (the state, its base URL)."""
    import threading

    from gpumon.core.gpu.simulated import SimulatedSource
    from gpumon.core.sampler import Sampler
    from gpumon.serve.http import make_server
    from gpumon.serve.state import ServeState
    from tests.conftest import FrozenHost

    old = os.environ.get("GPUMON_HOME")
    os.environ["GPUMON_HOME"] = str(home)
    state = ServeState(Sampler(SimulatedSource(gpus, seed=1), FrozenHost(), interval=0.25), interval=0.25)
    server = make_server(state, "127.0.0.1", 0, None)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    state.start()
    thread.start()
    try:
        assert state.polled.wait(30)
        yield state, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        state.stop()
        if old is None:
            os.environ.pop("GPUMON_HOME", None)
        else:
            os.environ["GPUMON_HOME"] = old


def listener(state: Any, kind: type) -> Any:
    """The one listener of ``state`` that is a bound method of a ``kind`` (the Exposition, the Events)."""
    (found,) = [fn.__self__ for fn in state.listeners if isinstance(getattr(fn, "__self__", None), kind)]
    return found
