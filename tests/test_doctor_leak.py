"""The leak doctor: the detector on synthetic series, the census in-process, and the examples run for real.

The examples (trainers/examples) run under the telemetry bootstrap, all at once: the test tails
their events, feeds the detector as a monitor would, asks for a census when it says "leak" (or
at step 60 on a healthy run), and then names the cause from the two censuses.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpumon.core.doctor.causes import diff_census, name_causes, read_census_events
from gpumon.core.doctor.leak import LeakDetector, LeakWatch, analyse, analyse_series
from gpumon.core.protocol import request_census
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.supervision.launcher import BOOTSTRAP_DIR

EXAMPLES = Path(__file__).resolve().parents[1] / "trainers" / "examples"
CAPACITY = 16 * 1024**3
BASE = 120e6
WARMUP = LeakDetector().warmup


def run_detector(values: list[float], capacity: int | None = CAPACITY, **options) -> LeakDetector:
    return analyse_series(list(range(1, len(values) + 1)), values, capacity, **options)


def states(detector: LeakDetector) -> set[str]:
    return {state for _, state in detector.transitions}


def first(detector: LeakDetector, state: str) -> int | None:
    return next((step for step, s in detector.transitions if s == state), None)


# --- the detector on synthetic series -------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_healthy_series_never_warn(seed: int) -> None:
    rng = random.Random(seed)
    series = {
        "flat": [BASE] * 500,
        "glibc noise": [BASE + rng.choice((-48, -16, 0, 16, 32, 544)) for _ in range(500)],
        "batch-size noise": [BASE + rng.gauss(0, 10_000) for _ in range(500)],
        "sawtooth": [BASE + (s % 7) * 3000 for s in range(500)],
        "warm-up growth": [BASE + 20_000 * min(s, 25) + rng.gauss(0, 500) for s in range(500)],
        "a step jump": [BASE + (4 << 20) * (s > 200) + rng.gauss(0, 100) for s in range(500)],
        "two jumps (a census)": [BASE + 4000 * ((s > 150) + (s > 170)) for s in range(500)],
    }
    for name, values in series.items():
        detector = run_detector(values)
        assert states(detector) <= {"ok"}, (name, detector.transitions)
        assert detector.state.state == "ok" and not detector.state.warning


@pytest.mark.parametrize(
    "name, grow, within",
    [
        ("loss graph, 5.6 KB/iter", lambda s, rng: 5600 * s + rng.gauss(0, 300), 60),
        ("outputs list, 1.6 KB/iter", lambda s, rng: 1600 * s + rng.gauss(0, 50), 60),
        ("slow leak under noise, 200 B/iter", lambda s, rng: 200 * s + rng.gauss(0, 1000), 60),
        ("evaluation every 5 steps, 870 KB each", lambda s, rng: 870_000 * (s // 5), 60),
        # A staircase needs 4 stairs in the window before it is more than a few allocations.
        ("evaluation every 10 steps", lambda s, rng: 870_000 * (s // 10), 70),
    ],
)
def test_leaks_are_found_within_60_iterations_after_warmup(name: str, grow, within: int) -> None:
    rng = random.Random(1)
    detector = run_detector([BASE + grow(s, rng) for s in range(1, 501)])
    leak = first(detector, "leak")
    assert leak is not None and leak - WARMUP <= within, (name, detector.transitions)
    assert first(detector, "growing") < leak  # growing first: the hysteresis climbs one state at a time
    state = detector.state
    assert state.state == "leak" and state.slope > 0 and state.strength > 0.5
    assert state.runs_out_at is not None and state.runs_out_at > state.step


@pytest.mark.parametrize("period", [20, 100, 1000])
def test_a_leak_every_epoch_is_found_by_the_coarser_windows(period: int) -> None:
    detector = run_detector([BASE + 870_000 * (s // period) for s in range(1, 20_001)])
    leak = first(detector, "leak")
    assert leak is not None and leak < 10 * period + 1000, detector.transitions


DATA = Path(__file__).resolve().parent / "data" / "memory"


def test_a_healthy_twins_allocator_steps_on_a_loaded_machine_are_no_trend() -> None:
    # Recorded on a loaded machine (tests/data/memory): a few ~1 KiB heap steps in a window (the float list's
    # reallocations) read 65-90 B/iter with every quarter above the last; the detector said "growing" at 135.
    rows = [r.split(",") for r in (DATA / "eval_no_grad_fixed_loaded.csv").read_text().splitlines() if r[0] != "#"]
    detector = analyse_series([int(r[0]) for r in rows], [float(r[2]) for r in rows], CAPACITY)
    assert states(detector) == {"ok"}, detector.transitions


def test_a_slow_staircase_of_allocations_is_left_to_the_coarser_window() -> None:
    # 1 KiB every 10 steps: five steps in the finest window vouch for no rate; 800 samples do.
    rng = random.Random(0)
    detector = run_detector([BASE + 1000 * (s // 10) + rng.choice((-48, -16, 0, 16, 32)) for s in range(1, 1001)])
    assert first(detector, "growing") == 400 and first(detector, "leak") == 640, detector.transitions
    assert states(run_detector([BASE + 1000 * (s // 10) for s in range(1, 300)])) == {"ok"}


def test_state_fields_and_projection() -> None:
    detector = run_detector([BASE + 1_000_000 * s for s in range(1, 101)], capacity=int(BASE + 400e6))
    state = detector.state
    assert state.slope == pytest.approx(1_000_000)
    assert state.strength == pytest.approx(1.0)
    assert state.runs_out_at == 400  # 100 + (capacity - current) / slope
    assert state.samples == 100 and state.step == 100 and state.current == BASE + 100e6
    assert "leak: +976.6 KiB/iter" in state.describe() and "runs out at iteration ~400" in state.describe()
    assert LeakDetector().add(1, BASE).state == "warmup"


def test_hysteresis_one_noisy_step_flips_nothing() -> None:
    rng = random.Random(2)
    flat = [BASE + rng.gauss(0, 200) for _ in range(200)]
    flat[120] += 5_000_000  # one spike
    assert states(run_detector(flat)) == {"ok"}
    leak = [BASE + 5600 * s for s in range(300)]
    leak[150] -= 3_000_000  # one dip inside a leak
    detector = run_detector(leak)
    assert [s for _, s in detector.transitions] == ["ok", "growing", "leak"]


def test_back_to_ok_only_after_a_long_quiet_stretch() -> None:
    values = [BASE + 5600 * min(s, 150) for s in range(1, 401)]
    detector = run_detector(values)
    leak, ok = first(detector, "leak"), [s for s, state in detector.transitions if state == "ok"][-1]
    assert leak is not None and leak < 150
    assert ok - 150 >= detector.cooldown  # the quiet stretch, not one flat sample, brings it down


def test_a_restarted_rank_starts_over() -> None:
    detector = run_detector([BASE + 5600 * s for s in range(1, 2001)])
    assert detector.state.state == "leak" and detector._coarse.state.state == "leak"
    assert detector.add(1, BASE).state == "warmup"  # steps went back: a new process, every level anew
    assert detector.transitions[-1] == (1, "warmup") and detector.state.samples == 2001


def test_growth_that_eats_capacity_warns_through_noise() -> None:
    rng = random.Random(0)
    values = [BASE + 1_000_000 * s + rng.gauss(0, 20_000_000) for s in range(300)]  # 1 MB/iter, 20 MB noise
    assert states(run_detector(values, capacity=None)) == {"ok"}  # no capacity: the noise hides it
    detector = run_detector(values, capacity=8 << 30)  # 12% of 8 GiB per 1000 iterations
    assert detector.state.warning and detector.state.runs_out_at is not None


def step_event(step: int, heap: float, rank: int = 0) -> dict:
    # 1,000 steps a second: with no plan, a leak alarms when memory fills within 24 h at the run's pace
    return {"type": "step", "src": f"rank{rank}", "t": step / 1000, "step": step, "dev": "cpu", "heap": heap}


def test_an_attached_watch_sees_every_step_while_the_series_is_downsampled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpumon.core.runs.reading.series.MAX_POINTS", 64)
    telemetry = RunTelemetry(Path("/nonexistent"))
    watch = LeakWatch({0: CAPACITY})
    fed = []
    for step in range(1, 301):
        telemetry.apply(step_event(step, BASE + 5600 * step))
        telemetry.apply(step_event(step, BASE, rank=1))
        if step % 7 == 0:
            watch.update(telemetry)  # the first call attaches it: from then on every step reaches it
            fed.append(watch.detectors[0, ""].state.step)
    result = watch.update(telemetry)
    assert telemetry.memory[0].used.width > 1  # the series merged buckets on the way
    assert fed == sorted(fed) and result[0].state == "leak" and result[1].state == "ok"
    assert watch.detectors[0, ""].state.samples == 300  # every step: 7 from the series at attach, then each one
    assert analyse(telemetry)[0].warning  # a late watcher: from the downsampled series alone


def test_a_downsampled_series_keeps_its_spikes_and_its_size() -> None:
    from gpumon.core.runs.reading.series import MAX_POINTS, Series

    series = Series()
    for step in range(1, 2_000_001):
        series.add(step, 1000.0 if step == 1_234_567 else float(step % 7))
    assert len(series) <= MAX_POINTS and series.steps[-1] == 2_000_000 and series.last == 2_000_000 % 7
    assert max(series.highs) == 1000.0 and min(series.lows) == 0.0  # the one spike survives as a bucket's max
    again = Series.from_state(series.to_state())
    again.add(2_000_001, 5.0)
    assert again.steps[-1] == 2_000_001 and len(again) <= MAX_POINTS


# --- the census and the cause, in this process ----------------------------------------------


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def mlp(torch) -> tuple:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.01), torch.nn.CrossEntropyLoss()


def train_step(torch, model, optimizer, loss_fn, batch: int = 8):
    loss = loss_fn(model(torch.randn(batch, 16)), torch.randint(0, 4, (batch,)))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def group(census: dict, shape: list[int], grad_fn: str | None) -> dict:
    (found,) = [g for g in census["groups"] if g["shape"] == shape and g["grad_fn"] == grad_fn]
    return found


def test_census_groups_tensors_counts_storage_once_and_walks_graphs(torch) -> None:
    from gpumon.telemetry.census import take_census

    model, optimizer, loss_fn = mlp(torch)
    kept = [torch.zeros(5, 7) for _ in range(3)]
    views = [kept[0][1:], kept[0][:2]]  # share kept[0]'s storage
    total = 0
    for _ in range(10):
        total = total + train_step(torch, model, optimizer, loss_fn)
    census = take_census(torch)
    assert census["params"] == {"count": 4, "bytes": 4 * (16 * 32 + 32 + 32 * 4 + 4)}
    plain = group(census, [5, 7], None)
    assert plain["count"] == 3 and plain["bytes"] == 3 * 5 * 7 * 4
    assert group(census, [4, 7], None)["bytes"] == 0 and group(census, [2, 7], None)["bytes"] == 0
    running = group(census, [], "AddBackward0")
    assert running["count"] == 1 and running["nodes"] > 40 and running["freed_nodes"] >= 10
    assert census["tensors"] >= 7 and census["ms"] > 0 and census["truncated"] is False
    del views


def test_a_census_twice_sees_the_same_graphs(torch) -> None:
    from gpumon.telemetry.census import take_census

    model, _, loss_fn = mlp(torch)
    kept = [loss_fn(model(torch.randn(64, 16)), torch.randint(0, 4, (64,))) for _ in range(5)]
    first, second = take_census(torch), take_census(torch)  # the first unpacked the saved tensors
    a, b = group(first, [], "NllLossBackward0"), group(second, [], "NllLossBackward0")
    assert a["count"] == b["count"] == 5 and a["saved_bytes"] == b["saved_bytes"] > 5 * 64 * 32 * 4
    assert [64, 32] in a["saved_shapes"]
    assert first["groups_total"] == second["groups_total"]
    assert diff_census(first | {"step": 1}, second | {"step": 2}) == []
    del kept


def test_the_trigger_takes_two_censuses_gap_steps_apart(torch, tmp_path: Path) -> None:
    from gpumon.core.protocol import request_census
    from gpumon.telemetry.census_trigger import CensusTrigger

    written: list[dict] = []
    trigger = CensusTrigger(str(tmp_path), torch, time.time_ns() - 10**9)  # file mtimes may lag the clock
    for step in range(1, 6):
        trigger.at_step(step, time.time(), lambda kind, **f: written.append(f))
    assert written == []  # no request, no census
    request = request_census(tmp_path, gap=3)
    now = time.time() + 1
    for step in range(6, 20):
        trigger.at_step(step, now + step, lambda kind, **f: written.append({"kind": kind, **f}))
    assert [(w["seq"], w["step"], w["request"], w["gap"]) for w in written] == [(1, 6, request, 3), (2, 9, request, 3)]
    assert all(w["kind"] == "census" and "groups" in w for w in written)
    old = CensusTrigger(str(tmp_path), torch, time.time_ns() + 10**9)  # started after the request
    old.at_step(1, time.time() + 5, lambda kind, **f: written.append(f))
    assert len(written) == 2


def census_event(step: int, groups: list[dict], seq: int = 1, request: int = 7) -> dict:
    return {"type": "census", "src": "rank0", "seq": seq, "request": request, "step": step, "groups": groups}


def g(shape: list[int], grad_fn: str | None, count: int, **fields) -> dict:
    base = {"shape": shape, "dtype": "float32", "device": "cuda:0", "grad_fn": grad_fn, "requires_grad": bool(grad_fn)}
    return base | {"count": count, "bytes": 0, "nodes": 0, "saved_bytes": 0, "freed_nodes": 0} | fields


def test_more_views_of_storage_already_held_are_no_growing_list() -> None:
    # A healthy DDP run under load: +4 tensors of each bias shape in 20 steps, every one a view (+0 B)
    shapes = ([64], [32], [16])
    first = census_event(168, [g(shape, None, 10, bytes=4 * shape[0]) for shape in shapes])
    views = census_event(188, [g(shape, None, 14, bytes=4 * shape[0]) for shape in shapes], seq=2)
    assert name_causes([first, views])[0] == []
    kept = census_event(188, [g(shape, None, 14, bytes=56 * shape[0]) for shape in shapes], seq=2)
    assert [c.kind for c in name_causes([first, kept])[0]] == ["outputs_list"]  # the same count, with bytes: kept


def test_causes_are_named_with_what_was_seen() -> None:
    first = census_event(100, [g([], "AddBackward0", 1, nodes=800, freed_nodes=500), g([32, 10], None, 80)])
    second = census_event(
        120,
        [
            g([], "AddBackward0", 1, nodes=960, freed_nodes=600),
            g([32, 10], None, 100, bytes=20 * 1280),
            g([], "NllLossBackward0", 16, saved_bytes=3 << 20, saved_shapes=[[256, 128]]),
        ],
        seq=2,
    )
    causes = name_causes([first, second])[0]
    kinds = [c.kind for c in causes]
    assert kinds == ["eval_no_grad", "loss_graph", "outputs_list"]
    evaluation, loss, outputs = causes
    assert "+16 tensors of shape () float32 with NllLossBackward0" in evaluation.evidence
    assert "+3.0 MiB of saved activations (shapes (256, 128))" in evaluation.evidence
    assert "torch.no_grad()" in evaluation.advice
    assert "grew in 20 steps (+160 nodes" in loss.evidence and "loss.item()" in loss.advice
    assert outputs.title == "a growing list of tensors kept on cuda:0"
    assert "+20 tensors of shape (32, 10) float32 on cuda:0 in 20 steps, +25.0 KiB" in outputs.evidence
    assert ".detach().cpu()" in outputs.advice and outputs.bytes_per_step == 1280


def test_churn_and_incomplete_requests_name_nothing() -> None:
    first = census_event(100, [g([64, 64], None, 1), g([48, 64], None, 2)])
    second = census_event(120, [g([64, 64], None, 2), g([48, 64], None, 1), g([7], None, 90, bytes=90 * 7 * 4)], seq=2)
    assert [c.kind for c in name_causes([first, second])[0]] == ["outputs_list"]  # (7,) is new: 0 before
    first["groups_total"] = 51  # the first census left groups out: (7,) may have been there all along
    assert name_causes([first, second]) == {0: []}
    assert name_causes([first]) == {}
    assert name_causes([first, second | {"error": "RuntimeError: boom"}]) == {}


# --- the examples, run for real under the bootstrap -----------------------------------------

LEAKS = {
    "leak_loss_graph.py": "loss_graph",
    "leak_eval_no_grad.py": "eval_no_grad",
    "leak_outputs_list.py": "outputs_list",
}
HEALTHY = {
    "leak_loss_graph.py --fixed": None,
    "leak_eval_no_grad.py --fixed": None,
    "leak_outputs_list.py --fixed": None,
    "healthy_noisy.py": None,
}


@dataclass
class Watched:
    proc: subprocess.Popen
    run_dir: Path
    leaky: bool
    telemetry: RunTelemetry
    watch: LeakWatch = field(default_factory=LeakWatch)
    requested: int | None = None  # the step at which the test asked for a census


@pytest.fixture(scope="module")
def example_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Watched]]:
    """Every example at once (each mostly waits on `import torch`), watched as gpumon would."""
    pytest.importorskip("torch")
    base = tmp_path_factory.mktemp("examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUMON_", "RANK", "WORLD_SIZE"))}
    env.update(PYTHONPATH=BOOTSTRAP_DIR, OMP_NUM_THREADS="1")
    runs: dict[str, Watched] = {}
    try:
        for index, name in enumerate([*LEAKS, *HEALTHY]):
            script, *flags = name.split()
            leaky = name in LEAKS
            # A sleep per step stands in for a real model's step time, so the census request has time to land.
            args = ["--steps", "400", "--step-ms", "5"] if leaky else ["--steps", "500", "--step-ms", "3"]
            run_dir = base / f"run{index}"
            cmd = [sys.executable, str(EXAMPLES / script), *flags, *args]
            proc = subprocess.Popen(cmd, env={**env, "GPUMON_RUN_DIR": str(run_dir)}, stdout=subprocess.DEVNULL)
            runs[name] = Watched(proc, run_dir, leaky, RunTelemetry(run_dir))
        deadline = time.monotonic() + 600  # bounds a failure only: the loop ends when every example ended
        while time.monotonic() < deadline:
            alive = [w for w in runs.values() if w.proc.poll() is None]
            for w in runs.values():
                w.telemetry.update()
                # as the supervisor does: a census once memory grows (an alarm or not: that depends on host size)
                leaking = any(s.grows and s.trend == "leak" for s in w.watch.update(w.telemetry).values())
                step = w.telemetry.optimizer_steps or 0
                if w.requested is None and (leaking if w.leaky else step >= 60):
                    request_census(w.run_dir)
                    w.requested = step
            if not alive:
                break
            time.sleep(0.1)  # a pass reads 7 runs' new events: every 30 ms was ~5 CPU-s more (68.6 -> 63.4)
        yield runs
    finally:
        for w in runs.values():
            if w.proc.poll() is None:
                w.proc.kill()
            w.proc.wait()


@pytest.mark.parametrize("name", list(LEAKS))
def test_each_example_leak_is_found_and_its_cause_named(example_runs: dict[str, Watched], name: str) -> None:
    w = example_runs[name]
    assert w.proc.returncode == 0
    detector = w.watch.detectors[0, ""]
    leak = first(detector, "leak")
    assert leak is not None and leak - WARMUP <= 60, detector.transitions
    assert w.requested is not None
    censuses = read_census_events(w.run_dir)
    assert [c["seq"] for c in censuses] == [1, 2], "the census request did not land before the run ended"
    assert censuses[0]["step"] >= leak and censuses[1]["step"] == censuses[0]["step"] + 20
    causes = name_causes(censuses)[0]
    assert causes and causes[0].kind == LEAKS[name], [c.describe() for c in causes]
    assert causes[0].count > 0 or causes[0].nodes > 0


@pytest.mark.parametrize("name", list(HEALTHY))
def test_healthy_twins_raise_no_warning_and_name_no_cause(example_runs: dict[str, Watched], name: str) -> None:
    w = example_runs[name]
    assert w.proc.returncode == 0
    detector = w.watch.detectors[0, ""]
    assert detector.state.step == 500
    assert states(detector) == {"ok"}, detector.transitions  # never growing, never leak, census included
    censuses = read_census_events(w.run_dir)
    assert [c["seq"] for c in censuses] == [1, 2], "the census request did not land before the run ended"
    causes = name_causes(censuses)[0]
    assert causes == [], [c.describe() for c in causes]


def cuda_step(step: int, alloc: float, heap: float) -> dict:
    return {"type": "step", "src": "rank0", "t": step / 1000, "step": step, "dev": "cuda:0", "alloc": alloc,
            "reserved": alloc * 1.2, "heap": heap}  # fmt: skip


@pytest.mark.parametrize("grows", ["host", "gpu"])
def test_a_cuda_rank_is_reported_on_the_memory_that_grows_and_projected_on_the_recorded_device(grows: str) -> None:
    from gpumon.core.doctor.leak_advice import leak_advice
    from gpumon.core.doctor.report import Diagnosis

    telemetry = RunTelemetry(Path("/nonexistent"))
    telemetry.apply({"type": "device", "src": "rank0", "t": 0.0, "dev": "cuda:0", "name": "H100", "total": 80 << 30})
    watch = LeakWatch()
    watch.update(telemetry)
    for step in range(1, 301):
        rise = 64 * 1024 * step
        telemetry.apply(cuda_step(step, 4e9 + (rise if grows == "gpu" else 0), 3e8 + (rise if grows == "host" else 0)))
    states = watch.update(telemetry)
    state = states[0]
    assert state.state == "leak" and state.memory == grows
    headline = Diagnosis("r", "running", states, ()).headline()
    if grows == "host":
        assert headline.startswith("host memory leak") and "autograd graph kept alive" in headline
        assert leak_advice(states, ())[0].key == "leak_loss_graph"  # a graph on the host: the loss first
    else:
        assert headline.startswith("GPU memory leak") and "the GPU fills at iteration ~" in headline
        remaining = (80 << 30) - state.current
        assert state.runs_out_at == pytest.approx(300 + remaining / state.slope, rel=0.05)  # the device's 80 GiB
        assert leak_advice(states, ())[0].key == "leak_outputs_list"  # tensors kept on the device first
