"""Issue 26, point 1: alerts reach the user's channels from the run's supervisor, with no app open.

Real runs launched by `gpumon launch`, a webhook receiver of the test's own on 127.0.0.1 (stdlib http.server),
real commands for the command channel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.alert_receiver import Receiver
from tests.conftest import wait_until
from tests.ports import free_port

FAILS = 'import sys\nprint("loading shards", flush=True)\nsys.exit("the shard index is corrupt")\n'
OOM = (
    'raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity; '
    '76.10 GiB already allocated; 1.02 GiB free; 77.50 GiB reserved in total by PyTorch)")\n'
)
WRITE_STDIN = "import sys\nopen(sys.argv[1], 'a').write(sys.stdin.read() + '\\n')\n"


class Cli:
    def __init__(self, tmp: Path, config: str) -> None:
        self.tmp = tmp
        self.cfg = tmp / "cfg"
        self.cfg.mkdir(exist_ok=True)
        self.config(config)
        self.env = {**os.environ, "GPUMON_HOME": str(tmp / "home"), "GPUMON_CONFIG_DIR": str(self.cfg),
                    "CUDA_VISIBLE_DEVICES": ""}  # fmt: skip
        self.env.pop("DBUS_SESSION_BUS_ADDRESS", None)

    def config(self, text: str, mode: int = 0o600) -> None:
        path = self.cfg / "config.toml"
        path.write_text(text)
        path.chmod(mode)

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gpumon", *args], env=self.env, capture_output=True,
                              text=True, cwd=self.tmp, timeout=120)  # fmt: skip

    def launch(self, source: str, *flags: str) -> str:
        script = self.tmp / f"job{len(list(self.tmp.glob('job*.py')))}.py"
        script.write_text(source)
        done = self("launch", "script", script.name, *flags)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()[-1]

    def run_dir(self, run_id: str) -> Path:
        return self.tmp / "home" / "runs" / run_id

    def status(self, run_id: str) -> dict:
        try:
            return json.loads((self.run_dir(run_id) / "status.json").read_text())
        except (OSError, ValueError):
            return {}

    def supervisor_gone(self, run_id: str) -> bool:
        import fcntl

        with open(self.run_dir(run_id) / "supervisor.lock", "a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False
            return True


def test_a_failed_runs_alert_arrives_with_its_reason_and_a_finished_one_only_when_asked(tmp_path: Path) -> None:
    receiver = Receiver().start()
    try:
        cli = Cli(tmp_path, f'[alerts]\nwebhook = "{receiver.url}"\n')
        failed = cli.launch(FAILS)
        ok = cli.launch("print('done')\n")
        assert wait_until(lambda: receiver.arrived, timeout=90), "no alert arrived"
        (body,) = receiver.arrived
        assert (body["run"], body["state"], body["kind"]) == (failed, "failed", "failed")
        assert "the shard index is corrupt" in body["reason"] and "the shard index is corrupt" in body["text"]
        assert body["text"].count("\n") == 0 and failed in body["text"]  # one line, as Slack shows it
        attempts = cli.run_dir(failed) / "alerts.jsonl"
        assert attempts.stat().st_mode & 0o777 == 0o600
        assert wait_until(lambda: cli.supervisor_gone(ok), timeout=90)
        assert cli.status(ok)["state"] == "finished"
        assert not (cli.run_dir(ok) / "alerts.jsonl").exists()  # finished is off by default: not even raised

        cli.config(f'[alerts]\nwebhook = "{receiver.url}"\non = ["finished"]\n')
        again = cli.launch("print('done')\n")
        assert wait_until(lambda: len(receiver.arrived) == 2, timeout=90)
        assert (receiver.arrived[1]["run"], receiver.arrived[1]["kind"]) == (again, "finished")
        assert receiver.arrived[1]["text"].endswith(tuple("0123456789s"))  # "finished after 1s"
    finally:
        receiver.stop()


def test_a_receiver_down_slow_or_failing_leaves_the_run_alone_and_the_retry_arrives(tmp_path: Path) -> None:
    port = free_port()
    receiver = Receiver(port, answers=["slow:3", "500"])  # not started yet: down
    cli = Cli(tmp_path, f'[alerts]\nwebhook = "{receiver.url}"\ntimeout = 1\n')
    run_id = cli.launch(FAILS)
    attempts = cli.run_dir(run_id) / "alerts.jsonl"
    assert wait_until(lambda: attempts.exists() and '"type": "attempt"' in attempts.read_text(), timeout=90)
    assert wait_until(lambda: cli.status(run_id).get("state") == "failed", timeout=60)  # the run ended as it did
    listed = cli("alerts")
    assert listed.returncode == 0, listed.stderr
    assert f"webhook http://127.0.0.1:{port}/…: trying: Connection refused" in listed.stdout, listed.stdout
    assert "SECRET" not in listed.stdout + listed.stderr
    receiver.start()  # it comes back: slow first (timed out), then a 500, then it answers
    try:
        assert wait_until(lambda: receiver.arrived, timeout=90), receiver.requests
        assert receiver.arrived[0]["run"] == run_id
        assert [r["answer"] for r in receiver.requests][:2] == ["slow:3", "500"]
        doc = json.loads(cli("alerts", "--json").stdout)
        (alert,) = [a for a in doc["alerts"] if a["run"] == run_id]
        assert alert["status"] == "sent" and alert["channels"][f"webhook http://127.0.0.1:{port}/…"].startswith("sent")
        reasons = [json.loads(line).get("reason", "") for line in attempts.read_text().splitlines()]
        assert any("Connection refused" in r for r in reasons) and "timed out after 1 s" in reasons
        assert "HTTP 500 Internal Server Error" in reasons
        assert "SECRET" not in attempts.read_text()
    finally:
        receiver.stop()


def test_the_command_channel_gets_the_event_on_stdin_and_on_alert_still_runs(tmp_path: Path) -> None:
    writer = tmp_path / "write_stdin.py"
    writer.write_text(WRITE_STDIN)
    got, legacy = tmp_path / "got.jsonl", tmp_path / "legacy.txt"
    cli = Cli(tmp_path, f"[alerts]\ncommand = {json.dumps([sys.executable, str(writer), str(got)])}\n")
    legacy_cmd = f"{sys.executable} -c \"import sys; open({str(legacy)!r}, 'a').write(sys.argv[-1])\""
    run_id = cli.launch(OOM, "--on-alert", legacy_cmd, "--", "--batch-size", "64")
    # each file is complete once written: opened ('a') and written are two steps of the other process
    assert wait_until(lambda: got.exists() and got.read_text().endswith("\n") and legacy.exists(), timeout=90)
    event = json.loads(got.read_text().splitlines()[0])
    assert wait_until(lambda: legacy.read_text() == event["text"], timeout=60), legacy.read_text()
    assert (event["run"], event["kind"], event["state"]) == (run_id, "failed", "failed")
    assert event["reason"].startswith("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB")
    # the doctor's word: its headline as the reason and its first fix whole, in the event and in the text
    assert event["headline"].startswith("CUDA out of memory on GPU 0: tried to allocate 2.00 GiB")
    assert "--batch-size" in event["fix"]
    assert event["text"] == f"failed with exit code 1: {event['headline'].rstrip(' .')}. Fix: {event['fix']}"
    assert legacy.read_text() == event["text"]  # --on-alert's last argument: the same words


DDP_ARGS = """
import argparse
import torch.distributed as dist
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
dist.init_process_group("gloo")
dist.destroy_process_group()
"""


def test_a_torchrun_failure_alerts_with_the_doctors_headline_and_whole_fix_not_torchruns_banner(
    tmp_path: Path,
) -> None:
    """Issue 33: a torchrun run whose script rejects its arguments alerted "failed with exit code 1: ====..."
    (torchrun's banner, the launcher log's last line) everywhere, while the doctor knew the argparse error."""
    pytest.importorskip("torch")
    receiver = Receiver().start()
    try:
        cli = Cli(tmp_path, f'[alerts]\nwebhook = "{receiver.url}"\n')
        (tmp_path / "ddp_args.py").write_text(DDP_ARGS)
        done = cli("launch", "ddp", "ddp_args.py", "--nproc", "2", "--", "--epochs", "x")
        assert done.returncode == 0, done.stderr
        run_id = done.stdout.split()[-1]
        assert wait_until(lambda: receiver.arrived, timeout=180), "no alert arrived"
        (body,) = receiver.arrived
        launcher = (cli.run_dir(run_id) / "logs" / "launcher.log").read_text()
        assert launcher.rstrip().endswith("=" * 60)  # what the alert used to carry
        doctor = json.loads(cli("doctor", run_id, "--json").stdout)
        first = doctor["advice"][0]
        assert "argument --epochs: invalid int value: 'x'" in doctor["headline"]
        assert (body["headline"], body["fix"]) == (doctor["headline"], f"{first['title']}: {first['change']}")
        assert first["key"] == "usage"  # torchrun exits 1; the worker's argparse said 2: a usage error
        # one reason, one whole fix, a pointer and no link
        text = body["text"]
        assert text == (
            f"gpumon@{body['host']}: {run_id}: failed with exit code 1: {doctor['headline']}. "
            f"Fix: {body['fix']}. More: gpumon doctor {run_id}"
        ), text
        assert "==" not in text + body["reason"] and text.count(doctor["headline"]) == 1 and "above" not in text
        assert "http" not in text and text.count("\n") == 0
        listed = cli("alerts")
        (row,) = [
            line for line in listed.stdout.splitlines() if line.startswith(tuple("0123456789")) and run_id in line
        ]
        assert row.endswith(body["message"]) and f"Fix: {body['fix']}" in row and "==" not in row
        (alert,) = json.loads(cli("alerts", "--json").stdout)["alerts"]
        assert alert["text"] == body["message"]
        # the toast and the run's row read the run's own alert event: the same words
        rows = {r["id"]: r for r in json.loads(cli("runs", "--json").stdout)["runs"]}
        assert rows[run_id]["alerts"] == [body["message"]]
    finally:
        receiver.stop()


def test_a_channels_text_is_cut_only_past_its_limit_at_a_word_keeping_the_fix_and_the_pointer() -> None:
    from gpumon.core.alerts.channels import webhook_body
    from gpumon.core.alerts.text import LIMITS, with_fix

    fix = "Lower the batch size: gpumon launch ddp --batch-size 16 (the largest that fits in 79.2 GiB)"
    reason = "failed with exit code 1: " + " ".join(f"w{i:04d}" for i in range(800))  # ~4,800 characters
    alert = {"id": "x", "kind": "failed", "host": "trainbox", "run": "ddp-1", "text": with_fix(reason, fix)}
    for fmt in ("discord", "ntfy", "slack", "json"):
        body, _ = webhook_body(fmt, alert)
        text = body.decode() if fmt == "ntfy" else json.loads(body)["content" if fmt == "discord" else "text"]
        size = len(text.encode()) if fmt == "ntfy" else len(text)
        assert size <= LIMITS[fmt], (fmt, size)
        assert text.endswith(f"… Fix: {fix}. More: gpumon doctor ddp-1"), (fmt, text[-200:])
        cut = text.split("…")[0].split()[-1]
        assert len(cut) == 5 and f" {cut} " in reason + " ", cut  # a whole word (w0123), never part of one
    short = {**alert, "text": with_fix("failed with exit code 1: boom", fix)}
    assert json.loads(webhook_body("discord", short)[0])["content"] == (
        f"gpumon@trainbox: ddp-1: failed with exit code 1: boom. Fix: {fix}. More: gpumon doctor ddp-1"
    )
    slack = json.loads(webhook_body("slack", {**short, "text": "failed: expected <class 'int'> & got str"})[0])
    assert "expected &lt;class 'int'&gt; &amp; got str" in slack["text"]  # Slack's own control characters


def test_alerts_test_says_per_channel_what_happened_and_never_prints_the_url(tmp_path: Path) -> None:
    receiver = Receiver().start()
    try:
        cli = Cli(tmp_path, f'[alerts]\nwebhook = "{receiver.url}"\ncommand = ["false"]\ndesktop = true\n')
        done = cli("alerts", "test")
        assert done.returncode == 1, done.stderr  # one channel failed
        lines = done.stdout.splitlines()
        assert lines[0].startswith(f"webhook http://127.0.0.1:{receiver.port}/…: sent (HTTP 200")
        assert lines[1].startswith("command false: FAILED (exit code 1")
        assert lines[2].startswith("desktop: FAILED (no session bus here")
        assert receiver.arrived[0]["kind"] == "test"
        listed = cli("alerts")
        assert "test" in listed.stdout and "SECRET" not in listed.stdout + done.stdout

        cli.config(f'[alerts]\nwebhook = "{receiver.url}"\n', mode=0o644)  # readable by others: refused
        done = cli("alerts", "test")
        assert done.returncode == 1 and "is readable by others (mode 0644)" in done.stdout
        assert "chmod 600" in done.stdout and len(receiver.arrived) == 1
        assert "is readable by others" in cli("alerts").stderr

        cli.config('[alerts]\ncommand = "notify-send hi"\n')
        done = cli("alerts")
        assert done.returncode == 2 and "argument list, never a shell line" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    finally:
        receiver.stop()


@pytest.mark.parametrize("text", ["[alerts]\non = ['failed', 'exploded']\n", "[alerts]\nwebhook = 'ftp://x/y'\n"])
def test_a_config_mistake_is_one_line_and_exit_2(tmp_path: Path, text: str) -> None:
    done = Cli(tmp_path, text)("alerts", "test")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_fleet_host_going_down_while_watched_is_an_alert(tmp_path: Path) -> None:
    """`gpumon fleet --watch` through tests/ssh_standin.py (every "host" is this machine): the host's stream
    process is killed, its link goes down, and the host_down alert arrives where `on` asks for it."""
    import threading

    import psutil

    receiver = Receiver().start()
    cli = Cli(tmp_path, f'[alerts]\nwebhook = "{receiver.url}"\non = ["host_down"]\n')
    env = {**cli.env, "STANDIN_ROOT": str(tmp_path / "hosts")}
    env.pop("GPUMON_SSH", None)
    standin = f"{sys.executable} {Path(__file__).resolve().parent / 'ssh_standin.py'}"
    argv = [sys.executable, "-m", "gpumon", "fleet", "--hosts", "gpu7", "--ssh", standin, "--watch", "--json"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    lines: list[str] = []

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        assert wait_until(lambda: any('"link":"live"' in line for line in lines), timeout=90), lines[-1:]
        streams = [p for p in psutil.Process(proc.pid).children(recursive=True) if "snapshot" in p.cmdline()]
        assert streams
        for p in streams:
            p.kill()
        assert wait_until(lambda: receiver.arrived, timeout=60)
        body = receiver.arrived[0]
        assert (body["kind"], body["fleet_host"]) == ("host_down", "gpu7") and "run" not in body
        assert body["text"].startswith("gpumon@") and "host gpu7 went down: " in body["text"]
        listed = cli("alerts")
        row = next(line.split() for line in listed.stdout.splitlines()[2:] if "host_down" in line.split())
        assert row[2:5] == ["-", "host_down", "sent"], listed.stdout
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        receiver.stop()


def test_one_alert_per_kind_per_run_in_the_window_and_a_bounded_drain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpumon.core.alerts.delivery import Deliverer
    from gpumon.core.alerts.outbox import send_alert
    from gpumon.core.events import EventWriter
    from gpumon.core.runs.supervision.alerts import raise_alert

    receiver = Receiver().start()
    cli = Cli(tmp_path, f'[alerts]\nwebhook = "{receiver.url}"\nwindow = 600\n')
    monkeypatch.setenv("GPUMON_CONFIG_DIR", str(cli.cfg))
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    run_dir = tmp_path / "home" / "runs" / "script-1125-000000-abcd"
    (run_dir / "events").mkdir(parents=True)
    events = EventWriter(run_dir, "launcher")
    raise_alert(run_dir, events, "memory leak on rank 0: +2 MiB/step", kind="leak")
    raise_alert(run_dir, events, "memory leak on rank 1: +3 MiB/step", kind="leak")  # the same kind: held
    raise_alert(run_dir, events, "loss is nan from step 37 on rank 0", kind="nan")  # another kind: sent
    assert wait_until(lambda: len(receiver.arrived) == 2, timeout=60)
    assert sorted(b["kind"] for b in receiver.arrived) == ["leak", "nan"]
    records = [json.loads(line) for line in (run_dir / "alerts.jsonl").read_text().splitlines()]
    held = [r for r in records if r["type"] == "alert" and r.get("held")]
    assert len(held) == 1 and "rank 1" in held[0]["text"] and "one per kind per run every 600 s" in held[0]["held"]
    receiver.stop()

    deliverer = Deliverer()  # a receiver that stays down: the wait at exit is bounded, and what is left is said
    from gpumon.core.alerts.channels import channels_of
    from gpumon.core.alerts.settings import load_settings

    record = send_alert("failed with exit code 1", "failed", run_dir=run_dir, deliver=False, channels=[])
    deliverer.submit(run_dir / "alerts.jsonl", record, channels_of(load_settings()))
    attempts = run_dir / "alerts.jsonl"
    assert wait_until(lambda: deliverer.pending() == 1 and "Connection refused" in attempts.read_text(), timeout=60)
    assert deliverer.drain(timeout_s=0.5) == 1
    assert "given up: gpumon exited after 0.5 s of retries" in (run_dir / "alerts.jsonl").read_text()


def test_a_run_stopped_by_the_user_alerts_only_when_asked(tmp_path: Path) -> None:
    receiver = Receiver().start()
    try:
        cli = Cli(tmp_path, f'[alerts]\nwebhook = "{receiver.url}"\non = ["stopped"]\n')
        run_id = cli.launch("import time\ntime.sleep(300)\n")
        assert wait_until(lambda: cli.status(run_id).get("state") == "running", timeout=60)
        assert cli("stop", run_id).returncode == 0
        assert wait_until(lambda: receiver.arrived, timeout=60)
        body = receiver.arrived[0]
        assert (body["run"], body["kind"], body["state"]) == (run_id, "stopped", "stopped")
        assert body["message"].startswith("stopped by the user after ")
    finally:
        receiver.stop()
