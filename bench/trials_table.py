"""Trials view at scale: 1,000 trials and 50,000 results replayed into the core fold and the view (goal < 50 ms).

Writes a Tune experiment's events the way GpumonCallback does (one ``tune``
file in a live run of kind tune): 1,000 trials, 950 of them ended with 50
results each (47,500), then --rounds rounds in which each of the 50 running
trials reports once more (2,500 results at the default 50 rounds: 50,000 in
all). Each round is one refresh:

- worker side: ``ExperimentsMonitor.refresh()`` + ``snapshot()`` (read the
  new lines, fold them, rebuild the 50 changed rows);
- UI side: ``TrialsView.apply()`` in a headless app (``run_test``): the
  DataTable diff (update_cell on the changed cells, re-sort when the sort
  column changed), then the next frame (``pilot.pause()``) separately.

Memory: tracemalloc of the core fold (retained after the cold fold, and its
peak), and the process's RSS with the app holding the 1,000 rows. The Runs
view's own worker reads the run too (as in the app): the rounds start after
its first read, and its reads every second run beside them.

Usage: python bench/trials_table.py [--trials 1000] [--results-per-trial 50] [--rounds 50] [--sort loss]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import psutil

GOAL_MS = 50.0
RUNNING = 50  # trials running at once


def record(home: Path, trials: int, per_trial: int) -> tuple[Path, list[str]]:
    """A live run of kind tune holding the ended trials' events; returns the run dir and the running trials."""
    from gpumon.core.events import EventWriter
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import write_json

    run_dir = home / "runs" / "tune-bench-000000-0000"
    (run_dir / "logs").mkdir(parents=True)
    write_json(run_dir / "spec.json", RunSpec("tune", search="bench.toml", cwd="/tmp").to_dict())
    me = psutil.Process()
    status = {"state": "running", "created": time.time(), "started": time.time(), "pid": me.pid}
    status.update(supervisor_pid=me.pid, supervisor_create_time=me.create_time())
    write_json(run_dir / "status.json", status)
    writer = EventWriter(run_dir, "tune")
    space = ["lr", "batch_size", "l1", "l2"]
    writer.write("tune_start", metric="loss", mode="min", search_alg="optuna", scheduler="asha", space=space)
    ids = [f"b{i // 1000:04x}_{i:05d}" for i in range(trials)]
    for i, trial_id in enumerate(ids):
        config = {"lr": 10 ** -(1 + i % 4) * (1 + i % 7), "batch_size": 2 ** (3 + i % 5), "l1": 2 ** (2 + i % 7)}
        config["l2"] = 2 ** (2 + i % 6)
        writer.write("trial_start", trial_id=trial_id, config=config)
    ended = ids[: trials - RUNNING]
    for it in range(1, per_trial + 1):  # round-robin, as concurrent trials report
        for i, trial_id in enumerate(ended):
            result(writer, trial_id, i, it)
    for i, trial_id in enumerate(ended):
        writer.write("trial_end", trial_id=trial_id, status="ERROR" if i % 20 == 0 else "TERMINATED")
    writer.close()
    return run_dir, ids[trials - RUNNING :]


def result(writer: object, trial_id: str, i: int, iteration: int) -> None:
    loss = 2.0 * math.exp(-iteration / (10 + i % 30)) + (i % 97) / 500
    metrics = {"loss": loss, "accuracy": 1 - loss / 3, "val_loss": loss * 1.1}
    writer.write(  # type: ignore[attr-defined]
        "trial_result", trial_id=trial_id, iteration=iteration, time_total_s=3.0 * iteration, trial_pid=4_000_000 + i,
        metrics=metrics,
    )  # fmt: skip


@dataclass
class Replay:
    cold_fold: float  # seconds
    first_apply: float  # seconds
    fold_ms: list[float]
    apply_ms: list[float]
    frame_ms: list[float]
    rows: int
    results: int
    rss: float  # MiB
    sort: str


def fold_memory(home: Path) -> tuple[float, float]:
    """MiB retained by the cold fold + snapshot of the whole experiment, and its peak (tracemalloc)."""
    from gpumon.core.runs.reading.experiments import ExperimentsMonitor
    from gpumon.core.runs.record.store import RunStore

    tracemalloc.start()
    monitor = ExperimentsMonitor(RunStore(home))
    infos = monitor.refresh()
    snap = monitor.snapshot(infos[0].run_id)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert snap is not None
    return current / 2**20, peak / 2**20


async def replay(home: Path, run_dir: Path, running: list[str], rounds: int, sort: str) -> Replay:
    from gpumon.core.events import EventWriter
    from gpumon.core.gpu.simulated import SimulatedSource
    from gpumon.core.host import HostSource
    from gpumon.core.runs.reading.experiments import ExperimentsMonitor
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.sampler import Sampler
    from gpumon.tui.app import GpumonApp
    from gpumon.tui.views.runs.view import RunsView
    from gpumon.tui.views.trials.view import TrialsView

    monitor = ExperimentsMonitor(RunStore(home))
    started = time.perf_counter()
    infos = monitor.refresh()
    snap = monitor.snapshot(infos[0].run_id)
    cold_fold = time.perf_counter() - started
    assert snap is not None
    sampler = Sampler(SimulatedSource(1, seed=1), HostSource(), interval=1.0)
    sampler.sample_once()
    app = GpumonApp(sampler, store=RunStore(home))
    fold_ms, apply_ms, frame_ms = [], [], []
    async with app.run_test(size=(200, 50)) as pilot:
        view = app.query_one(TrialsView)
        view.polling = False  # this script is the worker
        while not app.query_one(RunsView).summaries:  # the Runs view's worker reads the same events once, on a thread
            await pilot.pause(0.05)
        app.show_view("trials")
        started = time.perf_counter()
        view.apply(infos, snap)
        first_apply = time.perf_counter() - started
        await pilot.pause()
        table = view.table
        assert table.row_count == len(snap.trials), table.row_count
        key = sort if sort in ("iter", "time", "gpu", "best", "id", "status") else f"m:{sort}"
        if key != table.sort_key:
            table.sort_by(key)
        table.select_trial(running[0])
        await pilot.pause()
        writer = EventWriter(run_dir, "tune")
        offset = len(snap.trials) - len(running)
        for it in range(1, rounds + 1):
            for j, trial_id in enumerate(running):
                result(writer, trial_id, offset + j, it)
            started = time.perf_counter()
            infos = monitor.refresh()
            snap = monitor.snapshot(infos[0].run_id, view.trial_id)
            fold_ms.append((time.perf_counter() - started) * 1e3)
            assert snap is not None
            started = time.perf_counter()
            view.apply(infos, snap)
            apply_ms.append((time.perf_counter() - started) * 1e3)
            started = time.perf_counter()
            await pilot.pause()
            frame_ms.append((time.perf_counter() - started) * 1e3)
        writer.close()
        rows, results = table.row_count, sum(r.iteration or 0 for r in snap.trials)
        rss = psutil.Process().memory_info().rss / 2**20
        subtitle = str(table.border_subtitle)
    return Replay(cold_fold, first_apply, fold_ms, apply_ms, frame_ms, rows, results, rss, subtitle)


def stats(values: list[float]) -> str:
    p90 = sorted(values)[int(len(values) * 0.9)]
    return f"median {statistics.median(values):6.2f}  p90 {p90:6.2f}  max {max(values):6.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--results-per-trial", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--sort", default="loss", help="sort column while replaying: loss (default), id, iter, ...")
    args = parser.parse_args()
    import gpumon.tui.app  # noqa: F401 - the baseline RSS counts Textual and the app's modules

    rss0 = psutil.Process().memory_info().rss / 2**20
    with tempfile.TemporaryDirectory(prefix="gpumon-bench-") as tmp:
        home = Path(tmp)
        os.environ["GPUMON_HOME"] = tmp
        started = time.perf_counter()
        run_dir, running = record(home, args.trials, args.results_per_trial)
        write_s = time.perf_counter() - started
        events_mib = sum(p.stat().st_size for p in (run_dir / "events").iterdir()) / 2**20
        out = asyncio.run(replay(home, run_dir, running, args.rounds, args.sort))
        retained, peak = fold_memory(home)  # after the replay: tracemalloc's own memory stays out of its RSS
    median = statistics.median(out.apply_ms)
    print(f"machine: {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}  load: {os.getloadavg()[0]:.2f}")
    print(
        f"experiment: {out.rows} trials, {out.results} results ({events_mib:.1f} MiB of events, "
        f"written in {write_s:.1f} s); {len(running)} trials change per refresh; table {out.sort}"
    )
    print(f"worker  cold fold of every event + snapshot:   {out.cold_fold * 1e3:8.1f} ms")
    print(f"worker  one refresh (read, fold, snapshot) ms: {stats(out.fold_ms)}")
    print(f"UI      first apply (one add_row per trial):   {out.first_apply * 1e3:8.1f} ms")
    print(f"UI      apply one refresh (diff) ms:           {stats(out.apply_ms)}")
    print(f"UI      the next frame after it ms:            {stats(out.frame_ms)}")
    print(f"memory  core fold: {retained:.1f} MiB retained, {peak:.1f} MiB peak (tracemalloc)")
    print(f"memory  process RSS: {rss0:.0f} MiB with the modules imported, {out.rss:.0f} MiB with the app showing it")
    print(f"goal: median apply < {GOAL_MS:.0f} ms: {'met' if median < GOAL_MS else 'MISSED'} ({median:.2f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
