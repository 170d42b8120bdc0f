"""Logs as a terminal shows them: a tqdm bar is its latest frame in `gpumon logs`, `--follow`, the Runs view's
pane and the full-screen log; a line of any length shows its tail; following a flood stays small."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gpumon.core.logs.follow import LogFollower
from gpumon.core.logs.tail import tail_lines
from gpumon.core.logs.terminal import render
from gpumon.core.logs.window import LogWindow
from tests.conftest import wait_until

BAR = """
import os, sys, time
from tqdm import tqdm
gate1, gate2 = sys.argv[1], sys.argv[2]
bar = tqdm(total=600, mininterval=0, miniters=1, ncols=100)  # stderr, a frame per update
for i in range(5100):  # about 500 KB of frames and no newline; the last one 299/600
    bar.n = i % 300
    bar.refresh()
bar.set_postfix_str("held")  # a last frame of its own (299/600 ends every cycle): the test waits for it in the log
open(gate1 + ".ready", "w").close()
end = time.monotonic() + 600  # a test that failed before its gates never leaves this run behind for good
while not os.path.exists(gate1) and time.monotonic() < end:
    time.sleep(0.02)
bar.write("{'loss': 1.5, 'epoch': 0.5}")  # as the HF Trainer's progress callback writes its logs
bar.n = 421
bar.refresh()
open(gate2 + ".ready", "w").close()
while not os.path.exists(gate2) and time.monotonic() < end:
    time.sleep(0.02)
bar.n = 600
bar.close()
"""


def last_frame(log: Path) -> bytes:
    """The bytes after the log's last carriage return: the frame a terminal would show last."""
    return log.read_bytes().rsplit(b"\r", 1)[-1].rstrip()


def shows(log: Path, count: bytes) -> bool:
    """The log's last frame is the held bar at ``count``, whole (it ends with the postfix)."""
    frame = last_frame(log)
    return count in frame and frame.endswith(b"held]")


def test_a_tqdm_bar_past_256_kib_is_its_latest_frame_everywhere(
    gpumon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, gate1, gate2 = tmp_path / "bar.py", tmp_path / "gate1", tmp_path / "gate2"
    script.write_text(BAR)
    done = gpumon("launch", "script", str(script), "--", str(gate1), str(gate2))
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[-1].split()[-1]
    try:
        log = next((tmp_path / "home" / "runs").glob(f"{run_id}/logs/rank0.log"))
        assert wait_until(lambda: Path(f"{gate1}.ready").exists(), timeout=120)
        # The bar's frames reach the log through the supervisor's pipe, after the script wrote its gate: read
        # the log once its last frame is there (the script then writes nothing until gate1), never mid-copy.
        assert wait_until(lambda: shows(log, b"299/600"), timeout=120), last_frame(log)
        raw = log.read_bytes()
        assert b"\n" not in raw[-256 * 1024 :]  # today's readers printed nothing here
        last = gpumon("logs", run_id, "-n", "1").stdout.splitlines()
        assert len(last) == 1 and "299/600" in last[0] and len(last[0]) <= 100, last  # one frame, not 500 KB of them
        assert last[0] == render(raw.rsplit(b"\r", 1)[-1].decode())
        monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
        from gpumon.core.runs.record.store import RunStore
        from gpumon.tui.views.runs.reading import read_log

        pane = read_log(RunStore().resolve(run_id), 0)
        assert pane.lines and pane.lines[-1] == last[0]  # the Runs view's pane: not "no output yet", not frame 0
        screen = LogWindow(log).tail()  # the full-screen log (o)
        assert screen.lines[-1] == last[0] and len(screen.lines) == 1

        gate1.write_text("go")
        assert wait_until(lambda: Path(f"{gate2}.ready").exists(), timeout=120)
        assert wait_until(lambda: shows(log, b"421/600"), timeout=120), last_frame(log)
        two = gpumon("logs", run_id, "-n", "2").stdout.splitlines()
        assert two[0] == "{'loss': 1.5, 'epoch': 0.5}" and "421/600" in two[1], two  # the loss line on its own
        assert LogWindow(log).tail().lines[-2:] == tuple(two)
        gate2.write_text("go")
        gpumon.wait_ended(run_id, timeout=120)
        assert "finished" in gpumon("runs").stdout
        end = gpumon("logs", run_id, "-n", "1").stdout.splitlines()
        assert len(end) == 1 and "600/600" in end[0], end
    finally:  # a failed assert must not leave the bar waiting on its gates
        gpumon("stop", run_id, "--kill")


def test_a_50_mb_line_without_a_newline_shows_its_tail(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    with log.open("wb") as fh:
        fh.write(b"first line\n")
        for i in range(50):
            fh.write(bytes([65 + i % 26]) * (1024 * 1024))
        fh.write(b"THE END")
    lines = tail_lines(log, 5)
    assert len(lines) == 1 and lines[0].endswith("X" * 10 + "THE END")
    page = LogWindow(log).tail()
    assert page.lines and page.lines[-1].endswith("THE END")
    # A bar of 50 MB (frames joined by \r, no newline): its latest frame.
    with log.open("wb") as fh:
        frame = 0
        while fh.tell() < 50 * 1024 * 1024:
            fh.write(b"".join(b"\r%6d/9999999 [elapsed]" % (frame + k) for k in range(10_000)))
            frame += 10_000
    latest = f"{frame - 1:6d}/9999999 [elapsed]"
    assert tail_lines(log, 1) == [latest]
    assert LogWindow(log).tail().lines == (latest,)


def test_carriage_returns_draw_as_on_a_terminal() -> None:
    assert render("\r 1/10 [#]\r 2/10 [##]\r10/10 [##########] done") == "10/10 [##########] done"
    assert render("hello world\rHI") == "HIllo world"  # a longer earlier frame's tail stays, as on a terminal
    assert render("loss 1.0\r\n"[:-1]) == "loss 1.0"  # CRLF line endings
    assert render("\r 50%|#####     | 5/10\r" + " " * 30 + "\r{'loss': 1.2}") == "{'loss': 1.2}"


def test_follow_redraws_a_bar_in_place_on_a_terminal_and_writes_frames_into_a_pipe(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_bytes(b"start\n")
    tty, pipe = LogFollower(log, log.stat().st_size, tty=True), LogFollower(log, log.stat().st_size, tty=False)
    with log.open("ab") as fh:
        fh.write(b"\r 1/3 [a]\r 2/3 [ab]")
    assert "".join(tty.poll()) == "\r 2/3 [ab]\x1b[K"
    assert "".join(pipe.poll()) == " 2/3 [ab]\n"
    with log.open("ab") as fh:
        fh.write(b"\r 3/3 [abc]\nnext line\n")
    assert "".join(tty.poll()) == "\r 3/3 [abc]\x1b[K\nnext line\n"
    assert "".join(pipe.poll()) == " 3/3 [abc]\nnext line\n"


@pytest.fixture
def uncapped_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log cap above the flood (the default 64 MiB would cut it): the follower must carry all 200 MB."""
    config = tmp_path / "config"
    config.mkdir()
    (config / "config.toml").write_text('[runs]\nlog_cap = "512 MiB"\n')
    monkeypatch.setenv("GPUMON_CONFIG_DIR", str(config))


def test_follow_on_a_200_mb_flood_stays_under_50_mb(uncapped_logs: None, gpumon, tmp_path: Path) -> None:
    script = tmp_path / "flood.py"
    gate = tmp_path / "gate"
    script.write_text(
        "import os, sys, time\n"
        "print('ready', flush=True)\n"
        "end = time.monotonic() + 600\n"  # a test that failed before its gate never leaves the run behind
        "while not os.path.exists(sys.argv[1]) and time.monotonic() < end: time.sleep(0.02)\n"
        "block = b''.join(b'%08d a log line of a flood, as a chatty training script writes it\\n' % i"
        " for i in range(4000))\n"
        "for _ in range(200 * 1024 * 1024 // len(block) + 1): sys.stdout.buffer.write(block)\n"
    )
    done = gpumon("launch", "script", str(script), "--", str(gate))
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[-1].split()[-1]
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home")}
    out = tmp_path / "followed.txt"
    with out.open("wb") as sink:
        follower = subprocess.Popen(
            [sys.executable, "-m", "gpumon", "logs", run_id, "--follow", "-n", "1"], env=env, stdout=sink
        )
        proc = psutil.Process(follower.pid)
        assert wait_until(lambda: out.read_bytes().startswith(b"ready\n"), timeout=60)  # following from here
        gate.write_text("go")
        peak = 0
        deadline = time.monotonic() + 600
        while follower.poll() is None and time.monotonic() < deadline:
            try:
                peak = max(peak, proc.memory_info().rss)
            except psutil.NoSuchProcess:
                break
            time.sleep(0.01)
    assert follower.wait(timeout=60) == 0
    size = out.stat().st_size
    assert size > 200 * 1024 * 1024, out.read_bytes()[-300:]  # every line came through
    assert peak < 50 * 1024 * 1024, f"peak RSS {peak / 2**20:.1f} MiB"


def test_the_full_screen_log_follows_a_bar_as_one_row_however_many_chunks_it_spans(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"

    def frames(first: int, last: int) -> bytes:
        return b"".join(b"\r%7d/9999999 [bar]" % i for i in range(first, last))

    log.write_bytes(b"hello\n" + frames(0, 15_000))
    window = LogWindow(log)
    assert window.tail().lines == ("  14999/9999999 [bar]",)
    with log.open("ab") as fh:
        fh.write(frames(15_000, 45_000))  # about 800 KB: several chunks
    assert window.follow().lines == ("  44999/9999999 [bar]",)
    with log.open("ab") as fh:
        fh.write(frames(45_000, 45_010) + b"\nnext\n")
    assert window.follow().lines[-2:] == ("  45009/9999999 [bar]", "next")


HF = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        ids = torch.randint(0, 64, (16,))
        return {"input_ids": ids, "labels": ids}

model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32))
args = TrainingArguments(output_dir="out", max_steps=40, logging_steps=10, per_device_train_batch_size=4,
                         report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=False)
Trainer(model=model, args=args, train_dataset=Data()).train()
"""


def test_the_hf_trainers_loss_lines_between_its_bar_frames_are_lines_of_their_own(gpumon, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    script = tmp_path / "hf_train.py"
    script.write_text(HF)
    done = gpumon("launch", "script", str(script))
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[-1].split()[-1]
    gpumon.wait_ended(run_id)
    assert "finished" in gpumon("runs").stdout, gpumon("logs", run_id).stdout
    lines = gpumon("logs", run_id, "-n", "6").stdout.splitlines()
    losses = [line for line in lines if line.startswith("{'loss': ")]
    assert len(losses) == 4, lines  # logging_steps=10 of 40: each its own line, not inside a joined bar
    assert "40/40" in lines[-1] and lines[-1].startswith("100%"), lines  # the bar's last frame, alone
