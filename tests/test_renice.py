"""htop's F7/F8 in the GPUs view (issue 50, item 8): the selected process's nice value goes down (higher priority)
or up, after a yes; a simulated PID and another user's process are refused in one line saying why.

The processes are real (a `sleep` this test starts, attributed to a fake NVML GPU so that it shows in the table);
their nice values are read back through psutil."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpumon.core.gpu.nvml import NvmlSource
from gpumon.tui.app import GpumonApp
from gpumon.tui.widgets.process_table import ProcessTable
from gpumon.tui.widgets.screens import ConfirmScreen
from tests.conftest import make_app, notes, pilot_until
from tests.fake_nvml import GIB, FakeDevice, FakeNvml, proc

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(["sleep", "120"])
    try:
        yield child
    finally:
        child.kill()
        child.wait(timeout=10)


def on_fake_gpu(pid: int) -> GpumonApp:
    """The app with one fake NVML GPU whose only process is ``pid``."""
    return make_app(NvmlSource(nvml=FakeNvml([FakeDevice(compute=[proc(pid, 4 * GIB)])])), ticks=2)


async def renice_with(pilot, key: str) -> None:  # type: ignore[no-untyped-def]
    app = pilot.app
    await pilot.press(key)
    await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), f"{key} asked nothing")
    await pilot.press("y")
    await pilot_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), "the question stayed")


async def test_f8_then_f7_change_the_real_nice_value_after_a_yes(sleeper: subprocess.Popen[bytes]) -> None:
    target = psutil.Process(sleeper.pid)
    start = target.nice()
    app = on_fake_gpu(sleeper.pid)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(ProcessTable)
        await pilot_until(pilot, lambda: table.row_count == 1, "the sleep never showed")
        table.focus()
        await pilot.press("f8")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "F8 asked nothing")
        question = app.screen.question  # type: ignore[attr-defined]
        assert f"PID {sleeper.pid} from {start} to {start + 1}" in question and "lower priority" in question
        await pilot.press("n")  # no: nothing changes
        await pilot_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert target.nice() == start
        await renice_with(pilot, "f8")
        await pilot_until(pilot, lambda: target.nice() == start + 1, "F8 did not nice it up")
        await renice_with(pilot, "f7")
        await renice_with(pilot, "f7")  # below where it started: root may (the tests run as root or skip below)
        if os.geteuid() == 0:
            await pilot_until(pilot, lambda: target.nice() == start - 1, "F7 did not nice it down")
        assert any(f"PID {sleeper.pid}: nice" in n for n in notes(app)), notes(app)


async def test_a_simulated_pid_is_refused_at_once() -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(ProcessTable)
        await pilot_until(pilot, lambda: table.row_count >= 1)
        table.focus()
        for key in ("f7", "f8"):
            await pilot.press(key)
            await pilot_until(pilot, lambda: any("simulated" in n for n in notes(app)), f"{key}: no word")
            assert not isinstance(app.screen, ConfirmScreen)  # no question whose answer changes nothing


async def test_readonly_refuses_renicing() -> None:
    app = make_app(gpus=2, readonly=True)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(ProcessTable)
        await pilot_until(pilot, lambda: table.row_count >= 1)
        table.focus()
        await pilot.press("f8")
        await pilot_until(pilot, lambda: any("Read-only" in n for n in notes(app)), "no refusal")


# gpumon run as nobody, on a process of root's: the app as a user runs it, in a process of that user's
AS_NOBODY = """
import asyncio, json, sys
sys.path.insert(0, {root!r})
from tests.test_renice import on_fake_gpu
from tests.conftest import notes, pilot_until
from gpumon.tui.widgets.process_table import ProcessTable
from gpumon.tui.widgets.screens import ConfirmScreen

async def main():
    app = on_fake_gpu({pid})
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(ProcessTable)
        await pilot_until(pilot, lambda: table.row_count == 1, "the process never showed")
        table.focus()
        await pilot.press("f8")
        await pilot_until(pilot, lambda: any("renice" in n for n in notes(app)), "no word")
        print(json.dumps({{"notes": notes(app), "asked": isinstance(app.screen, ConfirmScreen)}}))

asyncio.run(main())
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start gpumon as another user (setpriv)")
def test_another_users_process_is_refused_with_the_reason(sleeper: subprocess.Popen[bytes]) -> None:
    before = psutil.Process(sleeper.pid).nice()
    home = tempfile.mkdtemp(prefix="gpumon-nobody-")
    os.chmod(home, 0o777)  # nobody's home, state and config for this one run
    env = {
        **os.environ,
        "HOME": home,
        "GPUMON_HOME": f"{home}/state",
        "GPUMON_CONFIG_DIR": f"{home}/config",
        "XDG_STATE_HOME": f"{home}/xdg-state",
        "XDG_CONFIG_HOME": f"{home}/xdg-config",
        "XDG_CACHE_HOME": f"{home}/xdg-cache",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    script = AS_NOBODY.format(root=str(ROOT), pid=sleeper.pid)
    try:
        done = subprocess.run(
            ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", sys.executable, "-c", script],
            env=env,
            cwd=home,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        subprocess.run(["rm", "-rf", home], check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    line = next(n for n in said["notes"] if "renice" in n)
    assert line == f"cannot renice PID {sleeper.pid} (root's): permission denied; run gpumon as root or as that user"
    assert not said["asked"]  # refused before a question
    assert psutil.Process(sleeper.pid).nice() == before


LOWER_OWN = """
import subprocess, sys
sys.path.insert(0, {root!r})
import psutil
from gpumon.core.model import GpuProcess
from gpumon.core.priority import plan_renice, renice

child = subprocess.Popen(["sleep", "60"])
try:
    me = psutil.Process(child.pid)
    proc = GpuProcess(0, child.pid, None, None, "compute", user="nobody", create_time=me.create_time())
    plan = plan_renice(proc, -1)
    print(renice(proc, plan.to).message)
    print(me.nice())
finally:
    child.kill()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a process as another user (setpriv)")
def test_a_lower_nice_value_of_ones_own_process_is_refused_saying_it_needs_privilege() -> None:
    script = LOWER_OWN.format(root=str(ROOT))
    done = subprocess.run(
        ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", sys.executable, "-c", script],
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    message, nice = done.stdout.strip().splitlines()[-2:]
    assert message.endswith("to -1: a lower nice value (higher priority) needs root (CAP_SYS_NICE, or RLIMIT_NICE)")
    assert nice == "0"
