"""The fleet through real OpenSSH: an sshd on 127.0.0.1 with keys made for the test (skipped, saying why, where
sshd cannot start: ``apt-get install -y openssh-server``)."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpumon.core.fleet.hosts import parse_host
from gpumon.core.fleet.monitor import FleetMonitor, settled
from gpumon.core.fleet.reasons import AUTH, HOST_KEY, NOT_INSTALLED, OLD_REMOTE, UNREACHABLE
from gpumon.core.fleet.remote import ask
from gpumon.core.nodes.remote import NodeError, Reach
from tests.conftest import wait_until
from tests.ports import free_port
from tests.sshd_host import Sshd, start_sshd

GPUMON = str(Path(sys.executable).with_name("gpumon"))


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    started = start_sshd(tmp_path_factory.mktemp("sshd"))
    if isinstance(started, str):
        pytest.skip(started)
    try:
        yield started
    finally:
        started.stop()


def _remote_gpumon(marker: int) -> list[str]:
    """gpumon on the 'host', with a seed no other test uses: its processes are found by it."""
    return [GPUMON, "--simulate", "2", "--seed", str(marker)]


def _marked(marker: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "--seed" in cmd and str(marker) in cmd and "snapshot" in cmd:
            found.append(proc)
    return found


def test_a_live_host_through_real_ssh_a_wrong_key_and_a_closed_port(sshd: Sshd) -> None:
    marker = random.randrange(10**6, 10**7)
    here = f"127.0.0.1:{sshd.port}"
    monitor = FleetMonitor([parse_host(here)], sshd.ssh(), 0.5, _remote_gpumon(marker), runs_every=1.0)
    wrong = FleetMonitor([parse_host(here)], sshd.ssh(sshd.wrong_key), 0.5, _remote_gpumon(marker))
    closed = FleetMonitor([parse_host(f"127.0.0.1:{free_port()}")], sshd.ssh(), 0.5, _remote_gpumon(marker))
    monitors = (monitor, wrong, closed)
    for m in monitors:
        m.start()
    try:
        live = monitor.wait(lambda s: settled(s) and s.hosts[0].runs_at is not None, timeout=60).hosts[0]
        assert live.link == "live", (live.reason, live.detail)
        assert [d["index"] for d in live.gpus] == [0, 1] and live.snapshot["simulated"] is True  # type: ignore[index]
        assert live.latency_ms is not None and live.runs == () and live.runs_reason is None
        denied = wrong.wait(settled, timeout=60).hosts[0]
        assert denied.link == "down" and denied.reason == AUTH and "Permission denied" in (denied.detail or "")
        refused = closed.wait(settled, timeout=60).hosts[0]
        assert refused.link == "down" and refused.reason == UNREACHABLE and "refused" in (refused.detail or "")
        assert len(_marked(marker)) >= 1  # the remote `gpumon snapshot --watch` runs under sshd
    finally:
        for m in monitors:
            m.stop()
    # ssh gone, the remote stream ends at its next line (EPIPE), quietly
    assert wait_until(lambda: _marked(marker) == [], timeout=20)


def test_a_remote_stream_killed_mid_way_reads_down_then_live_again(sshd: Sshd) -> None:
    marker = random.randrange(10**6, 10**7)
    monitor = FleetMonitor(
        [parse_host(f"127.0.0.1:{sshd.port}")], sshd.ssh(), 0.5, _remote_gpumon(marker), runs_every=0
    )
    monitor.start()
    try:
        assert monitor.wait(lambda s: s.hosts[0].link == "live", timeout=60).hosts[0].link == "live"
        first = _marked(marker)
        for proc in first:
            proc.kill()
        state = monitor.wait(lambda s: s.hosts[0].link == "down", timeout=30).hosts[0]
        assert state.link == "down" and state.reason and state.snapshot is not None
        since = time.time()
        state = monitor.wait(lambda s: s.hosts[0].link == "live" and s.hosts[0].since > since, timeout=60).hosts[0]
        assert state.link == "live" and {p.pid for p in _marked(marker)}.isdisjoint(p.pid for p in first)
    finally:
        monitor.stop()
    assert wait_until(lambda: _marked(marker) == [], timeout=20)


def test_a_multi_node_launch_and_the_fleet_give_the_same_reasons_through_real_ssh(sshd: Sshd) -> None:
    """One classifier: the nodes of ``launch --hosts`` (Reach), the Fleet's signals (ask) and its links."""
    here = parse_host(f"127.0.0.1:{sshd.port}")
    closed = parse_host(f"127.0.0.1:{free_port()}")
    strict = [*sshd.ssh()[:-6], "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={sshd.home}-none"]
    cases = [  # (ssh, host, gpumon, reason, a piece of ssh's or the shell's own line)
        (sshd.ssh(sshd.wrong_key), here, [GPUMON], AUTH, "Permission denied"),
        (sshd.ssh(), closed, [GPUMON], UNREACHABLE, "Connection refused"),
        (strict, here, [GPUMON], HOST_KEY, "Host key verification failed"),
        (sshd.ssh(), here, ["/nowhere/gpumon"], NOT_INSTALLED, "/nowhere/gpumon"),
        (sshd.ssh(), here, [str(sshd.key)], NOT_INSTALLED, "Permission denied"),  # a file that cannot run: 126
    ]
    for ssh, host, gpumon, reason, line in cases:
        answer = ask(ssh, host, gpumon, ["--version"])
        assert (answer.reason, answer.host) == (reason, host.name) and line in (answer.detail or ""), answer
        with pytest.raises(NodeError) as caught:
            Reach(tuple(ssh), tuple(gpumon)).call(host, ["--version"])
        assert str(caught.value) == f"{host.name}: {reason} ({answer.detail})"
    link = FleetMonitor([here], strict, 0.5, _remote_gpumon(1), runs_every=0)
    link.start()
    try:
        down = link.wait(settled, timeout=60).hosts[0]
    finally:
        link.stop()
    assert down.link == "down" and down.reason == HOST_KEY and "Host key verification failed" in (down.detail or "")
    assert Reach(tuple(sshd.ssh()), (GPUMON,)).call(here, ["--version"]).startswith("gpumon ")
    older = (sys.executable, "-c", "import argparse; argparse.ArgumentParser(prog='gpumon').parse_args()")
    with pytest.raises(NodeError) as caught:  # a gpumon there without the option asked for
        Reach(tuple(sshd.ssh()), older).call(here, ["--version"])
    assert caught.value.reason == f"{OLD_REMOTE} (unrecognized arguments: --version)"


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no ssh here: apt-get install -y openssh-client")
def test_an_ssh_failure_without_words_of_its_own_says_ssh_failed_and_its_line() -> None:
    """A mistake in the user's --ssh: ssh's own line, marked as ssh's, for the fleet and a multi-node launch alike."""
    ssh = ["ssh", "-o", "NoSuchOption=1"]
    answer = ask(ssh, parse_host("127.0.0.1:1"), [GPUMON], ["--version"])
    assert answer.code == 255 and answer.failure == (
        "127.0.0.1:1: ssh failed: command-line: line 0: Bad configuration option: nosuchoption"
    )
    with pytest.raises(NodeError) as caught:
        Reach(tuple(ssh), (GPUMON,)).call(parse_host("127.0.0.1:1"), ["--version"])
    assert str(caught.value) == answer.failure


def _following(run_id: str) -> list[psutil.Process]:
    """The host's ``gpumon logs RUN --follow`` processes (under sshd: this machine plays the host)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "logs" in cmd and run_id in cmd and "--follow" in cmd:
            found.append(proc)
    return found


def test_a_followed_log_through_real_ssh_leaves_no_gpumon_on_the_host_once_stopped(sshd: Sshd, tmp_path: Path) -> None:
    from gpumon.core.fleet.hosts import ssh_argv
    from gpumon.core.fleet.log_follow import RemoteLogFollow

    host = parse_host(f"127.0.0.1:{sshd.port}")
    script = tmp_path / "quiet.py"
    script.write_text("print('started', flush=True)\nimport time\ntime.sleep(600)\n")  # then nothing to write
    launched = subprocess.run(
        ssh_argv(sshd.ssh(), host, [GPUMON, "launch", "script", str(script)]), capture_output=True, text=True
    )
    assert launched.returncode == 0, launched.stderr
    run_id = launched.stdout.split()[-1]
    follow = RemoteLogFollow(sshd.ssh(), host, [GPUMON], run_id, 10).start()
    try:
        assert wait_until(lambda: "started" in follow.lines, timeout=60), follow.reason
        assert len(_following(run_id)) == 1 and follow.reason is None
        follow.stop()
        # ssh gone, the host's follow notices its reader left although the run writes nothing more
        assert wait_until(lambda: _following(run_id) == [], timeout=20)
    finally:
        follow.stop()
        subprocess.run(ssh_argv(sshd.ssh(), host, [GPUMON, "stop", run_id, "--kill"]), capture_output=True)
