"""Shared fixtures: a deterministic app (simulated GPUs, a frozen host sample)."""

from __future__ import annotations

import compileall
import contextlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest
from textual.pilot import Pilot

from gpumon.core.gpu import GpuSource, NoGpuSource
from gpumon.core.gpu.simulated import SimulatedSource
from gpumon.core.model import HostSample
from gpumon.core.sampler import Sampler
from gpumon.tui.app import GpumonApp
from gpumon.tui.views.runs.launch_form import LaunchForm

if TYPE_CHECKING:
    from tests.tmux_term import Tmux

# One torch thread in every process the suite starts (the tests, their runs, their ranks): torch's default of a
# thread per CPU makes each small op wait for the other thread's turn on a busy 2-CPU machine (2,000 steps of a
# Linear(64, 8): 17.9 CPU-s against 1.05 with one thread, load 9). Tests whose subject is torch's default count
# take OMP_NUM_THREADS out of their runs' environment (tests/test_pace.py); scripts that ask for more threads
# still get them (torch.set_num_threads: tests/data/scripts/crowded_ranks.py, spawned_ranks.py).
os.environ["OMP_NUM_THREADS"] = "1"

NO_NVML_REASON = "NVML library not found (is the NVIDIA driver installed?); nvidia-smi not found"


class FrozenHost:
    """A fixed host reading, so screenshots do not depend on this machine's load."""

    def sample(self) -> HostSample:
        return HostSample(
            hostname="trainbox",
            cpu_percent=37.5,
            per_cpu=(12.0, 88.0, 40.0, 10.0, 55.0, 25.0, 60.0, 10.0),
            load=(2.5, 2.1, 1.9),
            mem_used=41 * 1024**3,
            mem_total=128 * 1024**3,
            swap_used=0,
            swap_total=8 * 1024**3,
            time=0.0,
        )


def make_app(
    source: GpuSource | None = None,
    gpus: int = 2,
    ticks: int = 40,
    readonly: bool = False,
    keymap: dict[str, str] | None = None,
) -> GpumonApp:
    sampler = Sampler(source or SimulatedSource(gpus, seed=1), FrozenHost(), interval=1.0)
    for _ in range(ticks):
        sampler.sample_once()
    return heard(GpumonApp(sampler, readonly=readonly, keymap=keymap))


_SAID: weakref.WeakKeyDictionary[GpumonApp, list[str]] = weakref.WeakKeyDictionary()


def heard(app: GpumonApp) -> GpumonApp:
    """``app``, keeping every note it raises for `notes`. A toast leaves ``app._notifications`` 3-6 s after it is
    raised, by the clock: beside four CPU hogs 5-11 s passed between two steps of a test, so a note raised was gone
    before the test looked."""
    said: list[str] = []
    shown = app.notify

    def notify(message: str, *args: Any, **kwargs: Any) -> None:
        said.append(str(message))
        shown(message, *args, **kwargs)

    app.notify = notify  # type: ignore[method-assign]
    _SAID[app] = said
    return app


def notes(app: GpumonApp) -> list[str]:
    """Every note ``app`` raised, oldest first, expired or not (an app from make_app, or one given to `heard`)."""
    assert app in _SAID, "notes() reads what heard() keeps: build the app with make_app or pass it to heard()"
    return list(_SAID[app])


def no_gpu_app() -> GpumonApp:
    return make_app(NoGpuSource(NO_NVML_REASON), ticks=3)


def needs_installed(name: str) -> None:
    """Skip the calling module unless ``name`` is installed, found without importing it: a package that only the
    tests' own processes import (sklearn, for the trainers' digits) cost each xdist worker ~2 CPU-s at collection
    as `pytest.importorskip`, whichever worker then ran the file."""
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"could not import {name!r}: it is not installed", allow_module_level=True)


def wait_until(predicate, timeout: float = 10.0, step: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


async def pilot_until(
    pilot: Pilot[None], what: Callable[[], object], why: str = "timed out", timeout: float = 60.0
) -> None:
    """Let the app run until ``what()`` holds; the deadline only bounds a failure, which says ``why`` (60 s: a run
    list read in a worker took over 20 s beside CPU hogs)."""
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, why
        await pilot.pause(0.05)


async def open_launch_form(pilot: Pilot[None]) -> LaunchForm:
    """`r n` as a person types it, and the launch form once it shows (`n` typed ahead waits for the Runs view)."""
    await pilot.press("r", "n")
    await pilot_until(pilot, lambda: isinstance(pilot.app.screen, LaunchForm), "the launch form never showed")
    form = pilot.app.screen
    assert isinstance(form, LaunchForm)
    return form


@pytest.fixture
def views_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """GPUMON_HOME holding every view's data (tests/views_data.py: runs, an ended experiment, alerts) and a fixed
    host memory, for the tests that draw every view."""
    from tests.views_data import record_everything

    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    monkeypatch.setattr("gpumon.core.doctor.leak.host_memory", lambda: 128 * 1024**3)
    record_everything(tmp_path)
    return tmp_path


@pytest.fixture
def run_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """GPUMON_HOME for tests that launch runs; a run still live at the end is killed, never left behind."""
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import stop

    home = tmp_path / "state"
    monkeypatch.setenv("GPUMON_HOME", str(home))
    yield home
    for record in RunStore(home).list():
        if record.live:
            stop(record, kill=True)


def _supervises(pid: int | None, run_dir: Path, mine: set[int]) -> bool:
    """``pid`` is ``run_dir``'s own supervisor (started with the folder as its argument), and not this test."""
    if not pid or pid in mine:
        return False
    try:
        return str(run_dir) in psutil.Process(pid).cmdline()
    except psutil.Error:
        return False


def stop_runs_under(root: Path) -> list[str]:
    """Kill every run still live in a GPUMON_HOME up to three folders below ``root`` (``root/home``,
    ``root/a/b/home``...); the ids of those it stopped. A run's own supervisor is asked (it kills the run and
    writes its end); a run without one loses the processes that carry its GPUMON_RUN_DIR. Never this process or
    its parents: tests write records by hand that name the test as a run's supervisor (tests/test_runs_view.py)."""
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import stop

    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    stopped, unsupervised = [], []
    for depth in ("", "*/", "*/*/", "*/*/*/"):
        for spec in root.glob(f"{depth}runs/*/spec.json"):
            record = RunStore(spec.parent.parent.parent).load(spec.parent)
            if record is None or not record.live:
                continue
            if not _supervises(record.supervisor_pid(), record.dir, mine):
                unsupervised.append(str(record.dir))
                continue
            with contextlib.suppress(Exception):  # a run placed elsewhere, one ending as we look
                stop(record, kill=True)
                stopped.append(record.id)
    for proc in psutil.process_iter() if unsupervised else ():
        try:
            run_dir = proc.environ().get("GPUMON_RUN_DIR", "") if proc.pid not in mine else ""
            if run_dir in unsupervised:
                proc.kill()
                stopped.append(Path(run_dir).name)
        except psutil.Error:
            continue
    return stopped


# Where gpumon keeps the user's own state, config and cache: no test reads or writes them (issue 50).
USER_DIRS = ("GPUMON_HOME", "GPUMON_CONFIG_DIR", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")


@pytest.fixture(scope="session", autouse=True)
def no_user_dirs_for_shared_fixtures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Module-scoped fixtures (a run several tests read) start before any test's own dirs are set below: they get
    the session's dirs, never the user's (a user's `[runs] stall_after = 1` once stalled test_goodput's run)."""
    own = tmp_path_factory.mktemp("session-user")
    with pytest.MonkeyPatch.context() as patch:
        for name in USER_DIRS:
            patch.setenv(name, str(own / name.lower()))
        yield


@pytest.fixture(autouse=True)
def no_run_left_behind(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Each test gets a state dir, a config dir and XDG dirs of its own (a test that wants another home sets it),
    never the user's: one unread alert of the user's own run once failed eight snapshot tests. Every run a test
    started under its tmp_path or that home is killed at the test's end, whatever its outcome: a test that
    failed before it opened its run's go file left the run and its supervisor waiting, a load on every later
    test (issue 35). Torn down after the test's own fixtures, which stop theirs first."""
    own = tmp_path_factory.mktemp("user")
    for name in USER_DIRS:
        monkeypatch.setenv(name, str(own / name.lower()))
    yield
    tmp = request.node.funcargs.get("tmp_path")
    roots = [own, *([tmp] if isinstance(tmp, Path) else [])]
    for root in roots:
        stop_runs_under(root)
    # every run a test made, read as every view reads it: the same figures everywhere, each within its bounds
    from tests.view_invariants import check_home, homes_under

    wrong = [line for root in roots for home in homes_under(root) for line in check_home(home)]
    assert not wrong, "the views disagree or a figure is out of bounds:\n" + "\n".join(wrong)


@pytest.fixture
def tmux(request: pytest.FixtureRequest) -> Iterator[Tmux]:
    """A tmux server of the test's own, its pane sized by the test's mark, `pytest.mark.tmux(100, 30)` (80x24
    without one); killed at the end with whatever runs in it."""
    from tests.tmux_term import Tmux

    mark = request.node.get_closest_marker("tmux")
    term = Tmux(*(mark.args if mark is not None and mark.args else (80, 24)))
    try:
        yield term
    finally:
        term.kill()


@pytest.fixture
def utc() -> Iterator[None]:
    """Clock times on screen ('stale since 14:02:11') read the same in every time zone."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


requires_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")


def nvidia_visible() -> bool:
    """NVML loads or nvidia-smi is on PATH: the 'no GPU' expectations do not hold."""
    if shutil.which("nvidia-smi"):
        return True
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


needs_no_gpu = pytest.mark.skipif(nvidia_visible(), reason="this machine has NVML or nvidia-smi")


def nvml_device_count() -> int:
    """GPUs NVML sees here (0 without a driver): the GPU suite (``pytest -m gpu``) runs only where > 0."""
    from gpumon.core.gpu.nvml import NvmlSource, NvmlUnavailable

    try:
        source = NvmlSource()
    except NvmlUnavailable:
        return 0
    source.close()
    return source.count


requires_gpu = pytest.mark.skipif(nvml_device_count() == 0, reason="NVML sees no GPU here: the GPU suite needs one")


def run_state(run_dir: Path | str) -> str:
    """The run's state as `gpumon runs` shows it (RunRecord.state), read in this process: no CLI started."""
    from gpumon.core.runs.record.store import RunStore

    run_dir = Path(run_dir)
    record = RunStore(run_dir.parent.parent).load(run_dir)  # load() reads the run's two files: nothing written
    return record.state if record else "not made"


def wait_state(run_dir: Path | str, *states: str, timeout: float = 120.0) -> str:
    """Until the run in ``run_dir`` is in one of ``states``, read in this process (run_state): a `gpumon runs`
    a poll is ~0.25-1 CPU-s taken from the run being waited on. The test then asks the CLI once for its row."""
    deadline = time.monotonic() + timeout
    while (state := run_state(run_dir)) not in states:
        assert time.monotonic() < deadline, f"{Path(run_dir).name} still {state} after {timeout:.0f} s, not {states}"
        time.sleep(0.1)
    return state


def wait_ended(home: Path, *run_ids: str, timeout: float = 300.0) -> None:
    """Until the supervisor of each run has written its end. Read in this process: a `gpumon runs` per poll costs
    about a CPU second, taken from the runs being waited on. The test then reads the ended runs as a user does."""
    from gpumon.core.runs.record.store import RunStore

    store = RunStore(home)  # load() only reads the run's two files: no index made, nothing written
    deadline = time.monotonic() + timeout
    for run_id in run_ids:
        while (record := store.load(store.runs_dir / run_id)) is None or record.live:
            state = record.state if record else "not made"
            assert time.monotonic() < deadline, f"{run_id} still {state} after {timeout:.0f} s"
            time.sleep(0.1)


class Gpumon:
    """`gpumon ARGS` as a user runs it, in ``cwd`` with its own state dir (``cwd/home``); no GPU."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.home = cwd / "home"
        self.env = {**os.environ, "GPUMON_HOME": str(self.home), "CUDA_VISIBLE_DEVICES": ""}

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpumon", *args], env=self.env, capture_output=True, text=True, cwd=self.cwd
        )

    def wait_ended(self, *run_ids: str, timeout: float = 300.0) -> None:
        wait_ended(self.home, *run_ids, timeout=timeout)


@pytest.fixture
def gpumon(tmp_path: Path) -> Gpumon:
    """`gpumon ARGS` as a user runs it, in tmp_path with its own state dir; no GPU."""
    return Gpumon(tmp_path)


# Under pytest-xdist (`-n 2 --dist loadgroup`, pyproject's addopts) each file runs whole on one worker, so its
# module fixtures are made once. The files that start a cluster of their own (Slurm, Ray) or wait on a real
# terminal's screen share one worker: they run one at a time, beside the other worker's files.
_SERIAL = {
    "test_slurm.py", "test_slurm_fleet.py", "test_ray_fleet.py", "test_tune.py", "test_tune_search.py",
    "test_tune_launch.py", "test_shipped_searches.py", "test_tmux.py", "test_tmux_fleet.py", "test_tmux_gpus.py",
    "test_tmux_queue.py", "test_tmux_runs.py", "test_tmux_typeahead.py", "test_stalls.py", "test_quick_escape.py",
    "test_ray_train.py",
}  # fmt: skip


def _compile_sources() -> None:
    """Write gpumon's (and trainers', tests' helpers') .pyc files once, before any test starts a process.

    This environment sets PYTHONDONTWRITEBYTECODE=1 and gpumon is installed editable, so each of the suite's
    hundreds of `python -m gpumon ...` processes (the CLI, supervisors, runners, a run's telemetry) compiled
    its ~80-160 modules again: about 0.1 CPU-s each. Python reads a .pyc that exists even so, and checks it
    against its source's mtime and size, so an edited file is compiled afresh as before."""
    roots: set[Path] = set()
    for name in ("gpumon", "trainers"):
        spec = importlib.util.find_spec(name)  # where the tests' processes import it from (PYTHONPATH first)
        if spec is not None:
            roots.update(Path(p) for p in spec.submodule_search_locations or ())
    for root in sorted(roots):
        compileall.compile_dir(root, quiet=2)
    # the helpers that tests' processes import (tests/fake_nvml.py...); not the test files, which pytest rewrites
    compileall.compile_dir(Path(__file__).parent, maxlevels=0, quiet=2, rx=re.compile(r"(^|/)test_[^/]*$"))


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or -n 0), before any worker starts a test
        _compile_sources()
    if hasattr(config, "workerinput"):
        # xdist's workers export COLUMNS=80 and LINES=24: every app they start (in tmux, over a pty) would
        # take them for its terminal's size (shutil.get_terminal_size reads them first)
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)
    # A suite started as a background job (`pytest &` in a script, CI wrappers) has SIGINT ignored, and an
    # ignored signal is inherited through exec: every process a test starts would shrug off the Ctrl-C it sends
    # (the I key's SIGINT, `gpumon fleet` stopped as by Ctrl-C). The tests' processes get it as from a terminal.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        name = item.path.name
        item.add_marker(pytest.mark.xdist_group("serial" if name in _SERIAL else name))
    # the serial worker's long queue first, so it does not run alone at the end
    items.sort(key=lambda item: item.path.name not in _SERIAL)
