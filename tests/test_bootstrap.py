"""The telemetry bootstrap instruments a plain script that never imports gpumon."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpumon.core.events import EventReader
from gpumon.core.runs.supervision.launcher import BOOTSTRAP_DIR

pytest.importorskip("torch")

TRAIN = textwrap.dedent(
    """
    import sys
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    for i in range(int(sys.argv[1])):
        loss = model(torch.randn(32, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sys.argv[2] == "leak":
            kept.append(loss)  # the graph of every step stays alive
    print("trained", flush=True)
    if sys.argv[3] == "crash":
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    """
)


def run_script(tmp_path: Path, *args: str, rate: str = "0") -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    """``rate``: GPUMON_STEP_RATE (0: record every step, as these tests compare step by step). One torch thread:
    with a thread per core on a busy machine each small op waits for the other thread's turn (3000 steps of this
    model took 87 s, against 2 s with one)."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    run_dir = tmp_path / "run"
    env = {**os.environ, "GPUMON_RUN_DIR": str(run_dir), "PYTHONPATH": BOOTSTRAP_DIR, "GPUMON_STEP_RATE": rate}
    env["OMP_NUM_THREADS"] = "1"
    env.pop("RANK", None)
    done = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True)
    return done, EventReader(run_dir).poll()


def test_every_optimizer_step_records_memory_without_changing_the_script(tmp_path: Path) -> None:
    done, events = run_script(tmp_path, "30", "healthy", "ok")
    assert done.returncode == 0, done.stderr
    assert "trained" in done.stdout
    steps = [e for e in events if e["type"] == "step"]
    assert [e["step"] for e in steps] == list(range(1, 31))
    assert all(e["dev"] == "cpu" and e["heap"] > 0 and e["rss"] > 0 for e in steps)
    assert steps[0]["dt"] is None and all(e["dt"] > 0 for e in steps[1:])
    assert {e["type"] for e in events} >= {"proc_start", "torch"}
    assert all(e["src"] == "rank0" for e in events)


def test_a_fast_loop_records_at_most_the_step_rate_and_always_its_last_step(tmp_path: Path) -> None:
    done, events = run_script(tmp_path, "3000", "healthy", "ok", rate="50")
    assert done.returncode == 0, done.stderr
    steps = [e for e in events if e["type"] == "step"]
    span = steps[-1]["t"] - steps[0]["t"]
    assert len(steps) < 3000 and len(steps) <= 50 * span + 3  # 50 a second, plus the first and the last
    assert steps[-1]["step"] == 3000  # the count stays exact: the last step is written at exit
    assert [e["step"] for e in steps] == sorted(e["step"] for e in steps)
    assert all(e["dt"] > 0 for e in steps[1:])  # per step, over the steps it stands for


def test_a_leak_shows_as_heap_growth_per_step(tmp_path: Path) -> None:
    _, healthy = run_script(tmp_path, "200", "healthy", "ok")
    _, leaky = run_script(tmp_path, "200", "leak", "ok")

    def growth(events: list[dict]) -> int:
        heap = [e["heap"] for e in events if e["type"] == "step"]
        return heap[-1] - heap[50]  # after warm-up

    assert growth(leaky) > 150 * 1000  # each kept graph holds a few KB
    assert growth(leaky) > 10 * max(growth(healthy), 1)


def test_an_uncaught_exception_is_recorded_and_still_printed(tmp_path: Path) -> None:
    done, events = run_script(tmp_path, "3", "healthy", "crash")
    assert done.returncode == 1
    assert "RuntimeError: CUDA out of memory" in done.stderr  # the script's own traceback is untouched
    (exc,) = [e for e in events if e["type"] == "exception"]
    assert exc["exc_type"] == "RuntimeError"
    assert exc["message"].startswith("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert "train.py" in exc["traceback"]


def test_a_script_without_torch_runs_untouched(tmp_path: Path) -> None:
    script = tmp_path / "plain.py"
    script.write_text("import sys\nprint('torch' in sys.modules)\n")
    env = {**os.environ, "GPUMON_RUN_DIR": str(tmp_path / "run"), "PYTHONPATH": BOOTSTRAP_DIR}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"  # the bootstrap never imports torch itself
    assert done.stderr == ""
    assert EventReader(tmp_path / "run").poll() == []  # it never stepped: not a rank, no event file


def test_outside_a_run_the_bootstrap_does_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "GPUMON_RUN_DIR"}
    env["PYTHONPATH"] = BOOTSTRAP_DIR
    code = "import sys; print(any(type(f).__name__ == '_TorchWatcher' for f in sys.meta_path))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_another_sitecustomize_on_the_path_still_runs(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS = 42\n")
    env = {**os.environ, "GPUMON_RUN_DIR": str(tmp_path / "run"), "PYTHONPATH": f"{BOOTSTRAP_DIR}:{theirs}"}
    code = "import builtins; print(builtins.THEIRS)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "42"


HAND_SGD = """
import torch
model = torch.nn.Linear(8, 1)
for step in range(300):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-0.01)  # no torch.optim: as some official examples train
"""


def test_a_loop_without_an_optimizer_counts_its_backward_passes(tmp_path: Path) -> None:
    script = tmp_path / "hand.py"
    script.write_text(HAND_SGD)
    run_dir = tmp_path / "run"
    env = {**os.environ, "GPUMON_RUN_DIR": str(run_dir), "PYTHONPATH": BOOTSTRAP_DIR, "GPUMON_STEP_RATE": "0"}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    events = EventReader(run_dir).poll()
    steps = [e["step"] for e in events if e["type"] == "step"]
    assert steps == list(range(64, 301))  # counted from the 64th backward with no optimizer step, to the last
    assert any("a step is a backward" in e.get("text", "") for e in events if e["type"] == "note")


def test_a_library_that_probes_for_torch_before_importing_it_still_gets_steps(tmp_path: Path) -> None:
    # transformers 4.x, datasets and evaluate ask importlib.util.find_spec("torch") first (is torch available?),
    # and import it later: HF's run_clm.py recorded no step and no memory.
    script = tmp_path / "probe.py"
    script.write_text('import importlib.util\nassert importlib.util.find_spec("torch")\n' + TRAIN)
    run_dir = tmp_path / "run"
    env = {**os.environ, "GPUMON_RUN_DIR": str(run_dir), "PYTHONPATH": BOOTSTRAP_DIR, "GPUMON_STEP_RATE": "0"}
    env.pop("RANK", None)
    done = subprocess.run([sys.executable, str(script), "5", "healthy", "ok"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    events = EventReader(run_dir).poll()
    assert [e["step"] for e in events if e["type"] == "step"] == [1, 2, 3, 4, 5]


def test_a_new_optimizer_after_the_first_is_gone_keeps_counting(tmp_path: Path) -> None:
    # A script that makes its optimizer again (per phase, per fold, or in the loop, as some tutorials do):
    # accelerate's own test_script.py stepped 120 times per rank and gpumon showed 12.
    script = tmp_path / "phases.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            model = torch.nn.Linear(4, 1)
            for phase in range(3):
                opt = torch.optim.SGD(model.parameters(), lr=0.01)
                for _ in range(5):
                    opt.zero_grad()
                    model(torch.randn(8, 4)).pow(2).mean().backward()
                    opt.step()
            gen, critic = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
            g_opt = torch.optim.SGD(gen.parameters(), lr=0.01)  # two live optimizers: only the first counts
            for _ in range(4):
                g_opt.zero_grad()
                critic(gen(torch.randn(8, 4))).mean().backward()
                g_opt.step()
                opt.step()
            """
        )
    )
    run_dir = tmp_path / "run"
    env = {**os.environ, "GPUMON_RUN_DIR": str(run_dir), "PYTHONPATH": BOOTSTRAP_DIR, "GPUMON_STEP_RATE": "0"}
    env.pop("RANK", None)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    steps = [e["step"] for e in EventReader(run_dir).poll() if e["type"] == "step"]
    assert steps == list(range(1, 20))  # 3 phases x 5, then the last phase's optimizer 4 more times
