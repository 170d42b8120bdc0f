"""A process in a real Docker container is attributed to it by id and name: in `snapshot --json`, in the GPUs
view's OWNER column (filter and sort) and in /metrics' labels.

The test starts a dockerd of its own (Debian's docker.io) on a socket of its own, imports an image from this
machine's files (no registry) and runs `sleep` in it; a simulated GPU's state file lists that PID, as NVML
would. Where dockerd cannot start (no binary, not root, no overlay), the tests skip saying why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.core.gpu import OwnedSource
from gpumon.core.gpu.simulated import SimulatedSource
from gpumon.serve.metrics import registry
from gpumon.serve.view import PROCESS_KEYS, HostView, View
from gpumon.tui.widgets.process_table import ProcessTable
from tests.conftest import make_app, pilot_until
from tests.serve_helpers import stop

ROOT_FILES = ["bin", "lib", "lib64", "usr/bin/sleep"]  # sleep and the C library it links (found below)


def _docker(sock: str, *args: str, stdin: bytes | None = None, timeout: float = 60) -> str:
    done = subprocess.run(
        ["docker", "-H", f"unix://{sock}", *args], input=stdin, capture_output=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {done.stderr.decode(errors='replace')}")
    return done.stdout.decode().strip()


def _libraries() -> list[str]:
    """The real files sleep loads (ldd), relative to /, so the image holds them behind the /lib links."""
    out = subprocess.run(["ldd", "/usr/bin/sleep"], capture_output=True, text=True, check=True).stdout
    paths = [word for line in out.splitlines() for word in line.split() if word.startswith("/")]
    linked = {os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p)) for p in paths}  # the links
    return sorted(p.lstrip("/") for p in linked | {os.path.realpath(p) for p in paths})


def _start_dockerd(where: Path) -> subprocess.Popen[bytes]:
    log = open(where / "dockerd.log", "wb")  # noqa: SIM115 - the daemon writes it while it runs
    argv = ["dockerd", "--host", f"unix://{where}/d.sock", "--data-root", str(where / "data"),
            "--exec-root", str(where / "exec"), "--pidfile", str(where / "pid"), "--bridge=none",
            "--iptables=false"]  # fmt: skip
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def container() -> Iterator[tuple[str, str, str, int]]:
    """(socket, container id, name, PID of its process) of a container running `sleep`."""
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        pytest.skip("dockerd is not installed (apt-get install docker.io)")
    if os.geteuid() != 0:
        pytest.skip("dockerd needs root here")
    where = Path(tempfile.mkdtemp(prefix="gd", dir="/tmp"))  # short: a unix socket's path is at most 107 bytes
    daemon = _start_dockerd(where)
    sock = str(where / "d.sock")
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _docker(sock, "info", timeout=10)
                break
            except (RuntimeError, subprocess.TimeoutExpired):
                if daemon.poll() is not None or time.monotonic() > deadline:
                    tail = (where / "dockerd.log").read_text(errors="replace")[-600:]
                    pytest.skip(f"dockerd did not start: {tail}")
                time.sleep(0.2)
        tar = subprocess.run(["tar", "-C", "/", "-c", *ROOT_FILES, *_libraries()], capture_output=True, check=True)
        _docker(sock, "import", "-", "local/gpumon-mini", stdin=tar.stdout)
        name = f"gpu-owner-{os.getpid()}"
        cid = _docker(
            sock, "run", "-d", "--name", name, "--network", "none", "local/gpumon-mini", "/usr/bin/sleep", "600"
        )
        pid = int(_docker(sock, "inspect", "-f", "{{.State.Pid}}", cid))
        assert pid > 0, _docker(sock, "logs", cid)  # sleep did not start in the image
        yield sock, cid, name, pid
        _docker(sock, "rm", "-f", cid)
    finally:
        stop(daemon, timeout=30)
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def state(tmp_path: Path, container: tuple[str, str, str, int], monkeypatch: pytest.MonkeyPatch) -> Path:
    """A simulated GPU whose processes are the container's and this test's own (which has no owner)."""
    sock, _, _, pid = container
    path = tmp_path / "gpus.json"
    procs = [{"pid": pid, "user": "root", "command": "sleep 600", "used": 2 << 30},
             {"pid": os.getpid(), "user": "root", "command": "pytest", "used": 1 << 30}]  # fmt: skip
    path.write_text(json.dumps({"gpus": [{"total": 80 << 30, "processes": procs}]}))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    return path


def test_snapshot_json_and_metrics_name_the_container(state: Path, container: tuple[str, str, str, int]) -> None:
    _, cid, name, pid = container
    env = os.environ | {"GPUMON_SIMULATE_STATE": str(state)}
    out = subprocess.run(
        [sys.executable, "-m", "gpumon", "snapshot", "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    procs = {p["pid"]: p for p in json.loads(out.stdout)["processes"]}
    mine = procs[pid]
    assert (mine["container_id"], mine["container_runtime"], mine["container_name"]) == (cid, "docker", name)
    assert procs[os.getpid()]["container_id"] is None  # this test runs on the host: no container
    text = subprocess.run([sys.executable, "-m", "gpumon", "snapshot"], env=env, capture_output=True, text=True)
    assert f"[docker {name}] sleep 600" in text.stdout, text.stdout
    served = tuple({k: p.get(k) for k in PROCESS_KEYS} | {"run": None} for p in procs.values())
    view = View(time=time.time(), hosts=(HostView(name="h", link="local", processes=served),))
    memory = next(m for m in registry(lambda: view).collect() if m.name == "gpumon_process_gpu_memory_bytes")
    labels = {s.labels["pid"]: s.labels for s in memory.samples}
    assert labels[str(pid)]["container"] == name and labels[str(os.getpid())]["container"] == ""


async def test_owner_column_filters_and_sorts(state: Path, container: tuple[str, str, str, int]) -> None:
    _, _, name, pid = container
    app = make_app(source=OwnedSource(SimulatedSource(0, state=str(state))), ticks=2)
    async with app.run_test(size=(140, 40)) as pilot:
        table = app.query_one(ProcessTable)
        key = f"0:{pid}"
        await pilot_until(pilot, lambda: key in table.processes and "owner" in table.columns, "no OWNER column")
        assert table.get_cell(key, "owner").text.plain == f"docker {name}"
        assert table.get_cell(f"0:{os.getpid()}", "owner").text.plain == ""
        table.sort_by("owner")
        order = [str(r.key.value) for r in table.ordered_rows]
        assert order == [f"0:{os.getpid()}", key]
        table.sort_by("owner")
        assert [str(r.key.value) for r in table.ordered_rows] == [key, f"0:{os.getpid()}"]
        table.focus()
        await pilot.press("slash", *name)
        await pilot_until(pilot, lambda: list(table.processes) == [key], "the filter did not keep the container's")
