"""Regenerates the README's pictures: python docs/screenshots.py [fleet doctor trials runs main 80x24 no-gpu]"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import make_app, no_gpu_app  # noqa: E402


async def shoot(app, name: str, size: tuple[int, int], keys: tuple[str, ...] = ()) -> None:
    async with app.run_test(size=size) as pilot:
        await pilot.press(*keys)
        await pilot.pause()
        app.save_screenshot(str(ROOT / "docs" / name))


async def shoot_runs(name: str, size: tuple[int, int]) -> None:
    """A real 2-process DDP run on digits (about 10 s on a CPU), then the Runs view showing it."""
    import os
    import tempfile

    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import launch, wait
    from gpumon.tui.widgets.log_view import LogView

    os.environ["GPUMON_HOME"] = tempfile.mkdtemp(prefix="gpumon-shots-")
    store = RunStore()
    record = wait(launch(RunSpec(kind="ddp", nproc=2, args=("--epochs", "6")), store, 0), store, timeout=300)
    assert record.state == "finished", record.state
    app = make_app(gpus=2, ticks=120)
    async with app.run_test(size=size) as pilot:
        await pilot.press("r")
        for _ in range(200):
            await pilot.pause(0.05)
            if app.query_one(LogView).lines:
                break
        await pilot.pause(0.3)
        app.save_screenshot(str(ROOT / "docs" / name))


SEARCH = """
name = "digits-asha"
num_samples = 8
max_concurrent_trials = 2
seed = 3
scheduler = { type = "asha", max_t = 8, grace_period = 2 }
[space]
l1 = { type = "pow2", low = 8, high = 128 }
l2 = { type = "pow2", low = 8, high = 64 }
lr = { type = "loguniform", low = 1e-3, high = 1e-1 }
batch_size = { type = "choice", values = [16, 32, 64] }
epochs = 8
"""


async def shoot_trials(name: str, size: tuple[int, int]) -> None:
    """A real ASHA search of the digits trainable (8 trials, about a minute on a CPU), then the Trials view."""
    import os
    import tempfile

    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import launch, wait
    from gpumon.tui.views.trials.trial_table import TrialTable

    os.environ["GPUMON_HOME"] = home = tempfile.mkdtemp(prefix="gpumon-shots-")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    Path(home, "search.toml").write_text(SEARCH)
    store = RunStore()
    spec = RunSpec(kind="tune", search="search.toml", cwd=home, name="digits-asha")
    record = wait(launch(spec, store, 0), store, timeout=600)
    assert record.state == "finished", record.state
    app = make_app(gpus=2, ticks=120)
    async with app.run_test(size=size) as pilot:
        await pilot.press("t")  # the Trials view (f4 is now the filter)
        for _ in range(200):
            await pilot.pause(0.05)
            if app.query_one(TrialTable).row_count >= 8:
                break
        await pilot.pause(0.5)
        app.save_screenshot(str(ROOT / "docs" / name))


async def shoot_doctor(name: str, size: tuple[int, int]) -> None:
    """A real leaking run (total_loss += loss) launched by gpumon, caught live; d, then c for a census."""
    import os
    import tempfile

    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import launch, stop
    from gpumon.tui.views.doctor.text import DoctorText
    from gpumon.tui.views.runs.view import RunsView

    os.environ["GPUMON_HOME"] = tempfile.mkdtemp(prefix="gpumon-shots-")
    script = str(ROOT / "trainers" / "examples" / "leak_loss_graph.py")
    spec = RunSpec(kind="script", program=script, args=("--steps", "20000", "--step-ms", "5"), name="leak_loss_graph")
    record = launch(spec, RunStore(), 0)
    app = make_app(gpus=2, ticks=120)
    try:
        async with app.run_test(size=size) as pilot:
            await pilot.press("r")
            for _ in range(1200):
                await pilot.pause(0.1)
                summary = app.query_one(RunsView).summaries.get(record.id)
                if summary is not None and summary.leak is not None and summary.leak.state == "leak":
                    break
            await pilot.press("d")
            await pilot.pause(0.5)
            await pilot.press("c")
            for _ in range(600):
                await pilot.pause(0.1)
                if "loss accumulated" in app.query_one(DoctorText).text.plain:
                    break
            await pilot.pause(0.5)
            app.save_screenshot(str(ROOT / "docs" / name))
    finally:
        stop(RunStore().resolve(record.id), kill=True)


async def shoot_fleet(name: str, size: tuple[int, int]) -> None:
    """Five simulated hosts in every link state (tests/fleet_data.py), the app opening on the Fleet view."""
    from tests.fleet_data import StandInFleet, fleet_app, mixed_fleet

    await shoot(fleet_app(StandInFleet([mixed_fleet()], interval=0)), name, size)


PICTURES = {
    "fleet": lambda: shoot_fleet("screenshot-fleet.svg", (120, 40)),
    "doctor": lambda: shoot_doctor("screenshot-doctor.svg", (120, 40)),
    "trials": lambda: shoot_trials("screenshot-trials.svg", (120, 40)),
    "runs": lambda: shoot_runs("screenshot-runs.svg", (120, 40)),
    "main": lambda: shoot(make_app(gpus=4, ticks=120), "screenshot-main.svg", (120, 40), ("a",)),
    "80x24": lambda: shoot(make_app(gpus=2, ticks=120), "screenshot-80x24.svg", (80, 24)),
    "no-gpu": lambda: shoot(no_gpu_app(), "screenshot-no-gpu.svg", (80, 24)),
}


async def main() -> None:
    """Every picture, or those named: python docs/screenshots.py main no-gpu"""
    names = sys.argv[1:] or list(PICTURES)
    unknown = [name for name in names if name not in PICTURES]
    if unknown:  # --help, or a name mistyped: say which there are rather than a KeyError
        asked = unknown in (["--help"], ["-h"])
        print(__doc__, file=sys.stdout if asked else sys.stderr)
        raise SystemExit(0 if asked else 2)
    for name in names:
        await PICTURES[name]()


if __name__ == "__main__":
    asyncio.run(main())
