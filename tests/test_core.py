"""History, Sampler, SimulatedSource, Snapshot JSON, HostSource and the text report."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpumon.core.gpu import NoGpuSource
from gpumon.core.gpu.simulated import SIM_PID_BASE, SimulatedSource
from gpumon.core.history import History
from gpumon.core.host import HostSource, meminfo
from gpumon.core.model import SNAPSHOT_SCHEMA, GpuDevice, GpuSample, HostSample, Snapshot
from gpumon.core.report import snapshot_text
from gpumon.core.sampler import MIN_INTERVAL, Sampler

GIB = 1024**3


def host_sample(**overrides: object) -> HostSample:
    values: dict[str, object] = {
        "hostname": "trainbox",
        "cpu_percent": 12.5,
        "per_cpu": (10.0, 15.0),
        "load": (0.5, 0.25, 0.125),
        "mem_used": 8 * GIB,
        "mem_total": 32 * GIB,
        "swap_used": 0,
        "swap_total": 0,
        "time": 1.0,
    }
    values.update(overrides)
    return HostSample(**values)  # type: ignore[arg-type]


class FixedHost:
    def __init__(self, **overrides: object) -> None:
        self.overrides = overrides

    def sample(self) -> HostSample:
        return host_sample(**self.overrides)


class CountingSource:
    """Wraps a GPU source and counts close() calls."""

    def __init__(self, inner: SimulatedSource) -> None:
        self.inner = inner
        self.name = inner.name
        self.closed = 0

    def sample(self) -> GpuSample:
        return self.inner.sample()

    def close(self) -> None:
        self.closed += 1


class BrokenSource:
    name = "nvml"

    def __init__(self) -> None:
        self.closed = 0

    def sample(self) -> GpuSample:
        raise RuntimeError("driver hiccup")

    def close(self) -> None:
        self.closed += 1


# -- History ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("seconds", "interval", "capacity"),
    [(600, 1.0, 600), (600, 0.25, 2400), (10, 0.5, 20), (2.5, 1.0, 3), (0.1, 1.0, 2)],
)
def test_history_capacity_covers_the_window(seconds: float, interval: float, capacity: int) -> None:
    assert History(seconds, interval).capacity == capacity


def test_history_keeps_the_newest_values_oldest_first() -> None:
    h = History(seconds=5, interval=1.0)
    for v in range(1, 9):
        h.push("k", v)
    assert h.tail("k") == [4.0, 5.0, 6.0, 7.0, 8.0]
    assert h.tail("k", 2) == [7.0, 8.0]
    assert h.tail("k", 99) == [4.0, 5.0, 6.0, 7.0, 8.0]
    assert h.tail("k", 0) == []


def test_history_skips_none_and_separates_keys() -> None:
    h = History(seconds=10, interval=1.0)
    h.push(("gpu", 0, "util"), 10)
    h.push(("gpu", 0, "util"), None)
    h.push(("gpu", 0, "util"), 30)
    h.push(("gpu", 1, "util"), None)
    assert h.tail(("gpu", 0, "util")) == [10.0, 30.0]
    assert h.tail(("gpu", 1, "util")) == []  # never a value: no series
    assert h.tail("unknown") == []
    assert len(h) == 1


# -- Sampler ------------------------------------------------------------------
def test_sample_once_records_history_for_gpu_and_host() -> None:
    sampler = Sampler(SimulatedSource(2, seed=1), FixedHost(cpu_percent=40.0), interval=1.0)
    snaps = [sampler.sample_once() for _ in range(3)]

    assert sampler.latest is snaps[-1]
    assert sampler.wait_first(timeout=0) is snaps[-1]
    for index in (0, 1):
        util = sampler.history.tail(("gpu", index, "util"))
        mem = sampler.history.tail(("gpu", index, "mem"))
        assert util == [s.gpu.devices[index].gpu_util for s in snaps]
        assert mem == pytest.approx([s.gpu.devices[index].mem_percent for s in snaps])
    assert sampler.history.tail(("host", "cpu")) == [40.0, 40.0, 40.0]
    assert sampler.history.tail(("host", "mem")) == [25.0, 25.0, 25.0]


def test_sampler_history_window_follows_interval() -> None:
    sampler = Sampler(SimulatedSource(1), FixedHost(), interval=0.5, history_seconds=60)
    assert sampler.history.capacity == 120


def test_failing_gpu_source_still_gives_a_snapshot_with_the_reason() -> None:
    seen: list[Snapshot] = []
    source = BrokenSource()
    sampler = Sampler(source, FixedHost(cpu_percent=5.0), on_sample=seen.append)
    snap = sampler.sample_once()
    assert snap.gpu.devices == ()
    assert snap.gpu.source == "nvml"
    assert snap.gpu.reason is not None and snap.gpu.reason.startswith("GPU source failed")
    assert "driver hiccup" in snap.gpu.reason
    assert snap.host.cpu_percent == 5.0
    assert seen == [snap]
    assert sampler.history.tail(("host", "cpu")) == [5.0]


@pytest.mark.parametrize("interval", [0.0, 0.1, MIN_INTERVAL - 0.01, -1.0])
def test_sampler_rejects_too_short_intervals(interval: float) -> None:
    with pytest.raises(ValueError, match="at least"):
        Sampler(SimulatedSource(1), FixedHost(), interval=interval)


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "gpumon-sampler"]


def test_sampler_thread_samples_repeatedly_and_stops() -> None:
    wanted = 4
    stamps: list[float] = []
    enough = threading.Event()

    def on_sample(snap: Snapshot) -> None:
        stamps.append(time.monotonic())
        if len(stamps) >= wanted:
            enough.set()

    source = CountingSource(SimulatedSource(2))
    sampler = Sampler(source, HostSource(), interval=MIN_INTERVAL, on_sample=on_sample)
    started = time.monotonic()
    sampler.start()
    try:
        first = sampler.wait_first(timeout=5)
        assert first is not None and len(first.gpu.devices) == 2
        assert enough.wait(timeout=5), f"only {len(stamps)} samples in 5 s at a {MIN_INTERVAL} s interval"
    finally:
        sampler.stop()

    assert stamps[0] - started < 1.0  # the first sample comes at once, not after an interval
    # ticks follow the interval rather than bursting (0, .25, .5, .75 s)
    assert stamps[wanted - 1] - stamps[0] >= (wanted - 1) * MIN_INTERVAL * 0.9
    assert _sampler_threads() == []
    assert source.closed == 1
    assert sampler.history.tail(("gpu", 0, "util"))  # the thread filled the history
    assert len(sampler.history.tail(("host", "cpu"))) == len(stamps)


def test_sampler_thread_survives_a_failing_source() -> None:
    got = threading.Event()
    seen: list[Snapshot] = []

    def on_sample(snap: Snapshot) -> None:
        seen.append(snap)
        if len(seen) >= 2:
            got.set()

    sampler = Sampler(BrokenSource(), FixedHost(), interval=MIN_INTERVAL, on_sample=on_sample)
    sampler.start()
    try:
        assert got.wait(timeout=5)
    finally:
        sampler.stop()
    assert all(s.gpu.reason and "GPU source failed" in s.gpu.reason for s in seen)


def test_stop_without_start_closes_the_source() -> None:
    source = BrokenSource()
    Sampler(source, FixedHost()).stop()
    assert source.closed == 1


# -- SimulatedSource ----------------------------------------------------------
def _run(source: SimulatedSource, ticks: int = 6) -> list[tuple[GpuDevice, ...]]:
    return [source.sample().devices for _ in range(ticks)]


def test_simulated_is_deterministic_for_a_seed() -> None:
    a = _run(SimulatedSource(4, seed=7))
    b = _run(SimulatedSource(4, seed=7))
    assert a == b
    assert a[0] != a[1]  # values move from tick to tick


def test_simulated_differs_between_seeds() -> None:
    assert _run(SimulatedSource(4, seed=7)) != _run(SimulatedSource(4, seed=8))


def test_simulated_sample_is_labelled_and_processes_are_flagged() -> None:
    sample = SimulatedSource(4, seed=0).sample()
    assert sample.source == "simulated" and sample.simulated
    assert len(sample.devices) == 4
    procs = [p for d in sample.devices for p in d.processes]
    assert procs
    for p in procs:
        assert p.simulated is True
        assert p.pid >= SIM_PID_BASE >= 5_000_000
    for d in sample.devices:
        assert d.state == "ok"
        assert d.mem_used is not None and d.mem_total is not None and 0 <= d.mem_used <= d.mem_total
        assert d.gpu_util is not None and 0.0 <= d.gpu_util <= 100.0
    assert len({p.pid for p in procs}) == len(procs)


# -- Snapshot JSON ------------------------------------------------------------
def test_snapshot_to_dict_is_the_stable_json_document() -> None:
    snap = Snapshot(gpu=SimulatedSource(2, seed=3).sample(), host=host_sample())
    doc = snap.to_dict()
    assert doc["schema"] == SNAPSHOT_SCHEMA == 1
    assert {"devices", "processes", "host", "reason", "source", "simulated"} <= set(doc)
    assert doc["source"] == "simulated" and doc["simulated"] is True
    assert len(doc["devices"]) == 2
    assert all("processes" not in d for d in doc["devices"])
    assert all("mem_percent" in d for d in doc["devices"])
    assert len(doc["processes"]) == sum(len(d.processes) for d in snap.gpu.devices)
    assert all(p["simulated"] is True for p in doc["processes"])
    assert doc["host"]["load"] == [0.5, 0.25, 0.125]
    assert doc["host"]["per_cpu"] == [10.0, 15.0]
    assert json.loads(json.dumps(doc)) == doc


def test_snapshot_to_dict_without_gpu() -> None:
    snap = Snapshot(gpu=NoGpuSource("NVML library not found").sample(), host=host_sample(load=None))
    doc = json.loads(json.dumps(snap.to_dict()))
    assert doc["source"] == "none" and doc["simulated"] is False
    assert doc["devices"] == [] and doc["processes"] == []
    assert doc["reason"] == "NVML library not found"
    assert doc["host"]["load"] is None


# -- HostSource ---------------------------------------------------------------
def test_host_source_reads_sane_values() -> None:
    h = HostSource().sample()
    assert h.hostname
    assert h.mem_total > 0
    assert 0 <= h.mem_used <= h.mem_total
    assert 0.0 <= h.mem_percent <= 100.0
    assert len(h.per_cpu) == psutil.cpu_count()
    assert all(0.0 <= c <= 100.0 for c in h.per_cpu)
    assert 0.0 <= h.cpu_percent <= 100.0
    assert h.swap_total >= 0 and 0 <= h.swap_used <= max(h.swap_total, h.swap_used)
    assert h.load is None or len(h.load) == 3


def test_a_host_sample_reads_memory_and_swap_once_and_as_psutil_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each tick read /proc/meminfo twice and /proc/vmstat once (psutil's virtual_memory() and swap_memory()):
    the sampler thread's largest cost at idle. Now one read of /proc/meminfo gives the same numbers."""
    if not os.path.exists("/proc/meminfo"):
        pytest.skip("no /proc/meminfo: psutil's way is the only one")
    vm, sw = psutil.virtual_memory(), psutil.swap_memory()
    source = HostSource()
    opened: list[str] = []
    real_open = open

    def counted(file: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", counted)
    h = source.sample()
    monkeypatch.undo()
    assert [f for f in opened if f.endswith(("meminfo", "vmstat"))] == ["/proc/meminfo"]
    assert (h.mem_total, h.swap_total) == (vm.total, sw.total)
    assert abs(h.mem_used - (vm.total - vm.available)) < 256 * 1024**2  # (the machine's memory moves between)
    assert abs(h.swap_used - sw.used) < 256 * 1024**2


def test_meminfo_without_a_field_leaves_it_to_psutil(tmp_path: Path) -> None:
    path = tmp_path / "meminfo"
    path.write_text("MemTotal:       16000000 kB\nMemFree:  100 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n")
    assert meminfo(str(path)) is None  # no MemAvailable (a kernel before 3.14)
    path.write_text(path.read_text() + "MemAvailable:   8000000 kB\n")
    assert meminfo(str(path)) == (16000000 * 1024, 8000000 * 1024, 0, 0)
    assert meminfo(str(tmp_path / "none")) is None


# -- text report --------------------------------------------------------------
def test_report_without_gpu_says_why() -> None:
    reason = "NVML library not found (is the NVIDIA driver installed?); nvidia-smi not found"
    text = snapshot_text(Snapshot(gpu=NoGpuSource(reason).sample(), host=host_sample()))
    assert f"no GPU shown: {reason}" in text
    assert "trainbox" in text
    assert "source none" in text
    assert "[SIMULATED]" not in text


def test_report_simulated_is_labelled_and_lists_processes() -> None:
    gpu = SimulatedSource(2, seed=0).sample()
    text = snapshot_text(Snapshot(gpu=gpu, host=host_sample()), width=120)
    assert "[SIMULATED]" in text
    assert "no GPU shown" not in text
    for d in gpu.devices:
        assert f"[{d.index}] " in text
        for p in d.processes:
            assert str(p.pid) in text


def test_report_marks_a_lost_gpu_and_keeps_the_others() -> None:
    gpu = GpuSample(
        source="nvml",
        devices=(
            GpuDevice(0, "NVIDIA H100", "GPU-0", gpu_util=50.0, mem_used=GIB, mem_total=80 * GIB),
            GpuDevice(1, "NVIDIA H100", "GPU-1", state="lost", reason="GPU is lost: reset or reboot needed"),
        ),
        time=1.0,
        reason="GPU 1 not readable",
        driver="550.54.15",
    )
    text = snapshot_text(Snapshot(gpu=gpu, host=host_sample()))
    assert "note: GPU 1 not readable" in text
    assert "[1] NVIDIA H100  LOST: GPU is lost: reset or reboot needed" in text
    assert "50%" in text


def test_a_failing_host_reading_keeps_gpus_live_and_says_why() -> None:
    from gpumon.core.gpu.simulated import SimulatedSource
    from tests.conftest import FrozenHost

    class FlakyHost(FrozenHost):
        fail = False

        def sample(self):  # type: ignore[override]
            if self.fail:
                raise OSError("no /proc")
            return super().sample()

    host = FlakyHost()
    sampler = Sampler(SimulatedSource(1), host, interval=1.0)
    first = sampler.sample_once()
    host.fail = True
    second = sampler.sample_once()
    assert second.host is first.host and second.gpu.devices
    assert sampler.error is not None and "no /proc" in sampler.error
    host.fail = False
    sampler.sample_once()
    assert sampler.error is None
