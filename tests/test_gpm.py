"""SM activity from NVML GPM (issue 37 item 3) with the fake NVML: pynvml's real errors, GPM's two-sample rule."""

from __future__ import annotations

import pynvml
import pytest

from gpumon.core.gpu.gpm import NOT_OFFERED
from gpumon.core.gpu.nvml import NvmlSource
from gpumon.core.model import HostSample, Snapshot
from tests.fake_nvml import FakeDevice, FakeNvml

FIELDS = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")
NO_DCGM = "DCGM: no host engine (nv-hostengine) on port 5555"  # this machine: no DCGM (checked in the test below)


def _host() -> HostSample:
    return HostSample("h", 1.0, (1.0,), None, 1, 2, 0, 0, 0.0)


def test_sm_activity_is_read_from_two_gpm_samples_as_ratios() -> None:
    fake = FakeNvml([FakeDevice()])
    source = NvmlSource(nvml=fake)
    first = source.sample().devices[0]
    assert all(getattr(first, f) is None for f in FIELDS) and not any(f in first.na for f in FIELDS)  # one sample
    dev = source.sample().devices[0]
    assert (dev.sm_active, dev.sm_occupancy, dev.tensor_active, dev.dram_active) == (0.42, 0.21, 0.30, 0.18)
    doc = Snapshot(source.sample(), _host()).to_dict()["devices"][0]
    assert doc["sm_active"] == 0.42 and doc["tensor_active"] == 0.30 and doc["dram_active"] == 0.18
    assert fake.count("nvmlGpmQueryDeviceSupport") == 1 and fake.count("nvmlGpmSampleAlloc") == 2  # once each
    # The headline case in numbers: one tiny kernel at a time reads 100% utilisation, 1% of the SMs.
    fake.devices[0].gpu_util, fake.devices[0].gpm = 100, {pynvml.NVML_GPM_METRIC_SM_UTIL: 1.0}
    trickle = source.sample().devices[0]
    assert trickle.gpu_util == 100.0 and trickle.sm_active == 0.01
    assert trickle.tensor_active is None and trickle.na["tensor_active"].startswith("GPM: ")
    source.close()
    assert fake.count("nvmlGpmSampleFree") == 2


def test_a_gpu_without_gpm_says_why_once_and_is_not_asked_again() -> None:
    fake = FakeNvml([FakeDevice(name=b"NVIDIA A100-SXM4-80GB", gpm_supported=False)])
    source = NvmlSource(nvml=fake)
    for _ in range(3):
        dev = source.sample().devices[0]
        assert dev.sm_active is None and dev.na["sm_active"] == f"{NOT_OFFERED}; {NO_DCGM}"
        assert dev.gpu_util == 57.0  # the rest reads as before
    assert fake.count("nvmlGpmQueryDeviceSupport") == 1 and fake.count("nvmlGpmSampleGet") == 0


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (pynvml.NVMLError_NotSupported, "GPM not offered here (Not Supported)"),
        (pynvml.NVMLError_FunctionNotFound, "GPM not offered here (Function Not Found)"),
    ],
)
def test_an_older_driver_without_gpm_is_a_stated_reason(error: type[Exception], words: str) -> None:
    fake = FakeNvml([FakeDevice()])
    fake.devices[0].errors["nvmlGpmQueryDeviceSupport"] = error
    source = NvmlSource(nvml=fake)
    source.sample()
    dev = source.sample().devices[0]
    assert dev.state == "ok" and dev.sm_active is None and dev.na["dram_active"] == f"{words}; {NO_DCGM}"
    assert fake.count("nvmlGpmQueryDeviceSupport") == 1


def test_a_pynvml_without_gpm_calls_mig_and_a_lost_gpu() -> None:
    old = FakeNvml([FakeDevice()])
    old.remove("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet", "nvmlGpmMetricsGet")
    dev = NvmlSource(nvml=old).sample().devices[0]
    assert "no GPM calls" in dev.na["sm_active"] and dev.gpu_util == 57.0
    mig = NvmlSource(nvml=FakeNvml([FakeDevice(mig_mode=(1, 1))])).sample().devices[0]
    assert mig.na["sm_active"].startswith("MIG is on")
    lost = FakeNvml([FakeDevice(), FakeDevice()])
    source = NvmlSource(nvml=lost)
    source.sample()
    lost.devices[1].errors["nvmlGpmSampleGet"] = pynvml.NVMLError_GpuIsLost
    devices = source.sample().devices
    assert devices[1].state == "lost" and devices[0].state == "ok" and devices[0].sm_active == 0.42


def test_the_panel_shows_sm_activity_under_util_only_where_gpm_reads() -> None:
    from gpumon.tui.widgets.gpu_panels import GpuPanel

    source = NvmlSource(nvml=FakeNvml([FakeDevice(gpu_util=100), FakeDevice(gpm_supported=False)]))
    source.sample()
    hopper, older = source.sample().devices
    panel = GpuPanel(0, simulated=False)
    panel.device = hopper
    lines = [line.plain for line in panel.lines(100)]
    assert lines[0].startswith("UTIL") and lines[1] == "SM active 42%  occupancy 21%  tensor 30%  DRAM 18%"
    panel.device = older
    assert not any("SM active" in line.plain for line in panel.lines(100))  # its reason is in the snapshot


def test_a_one_shot_read_primes_gpm_so_its_single_sample_has_sm_activity() -> None:
    fake = FakeNvml([FakeDevice(), FakeDevice(gpm_supported=False)])
    source = NvmlSource(nvml=fake)
    source.prime()  # what `gpumon snapshot --json` does before its 0.1 s window
    hopper, older = source.sample().devices
    assert hopper.sm_active == 0.42 and older.na["sm_active"] == f"{NOT_OFFERED}; {NO_DCGM}"


def test_where_gpm_is_missing_the_reason_says_whether_dcgm_could_give_it() -> None:
    """No DCGM host engine listens here (nothing answers on 127.0.0.1:5555) and pydcgm is not importable: the
    reason says so beside GPM's own, for an older GPU, MIG, and a pynvml without GPM."""
    import importlib.util
    import socket

    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", 5555), timeout=0.2).close()
    assert importlib.util.find_spec("pydcgm") is None
    older = NvmlSource(nvml=FakeNvml([FakeDevice(name=b"NVIDIA A100-SXM4-80GB", gpm_supported=False)]))
    assert older.sample().devices[0].na["sm_active"] == f"{NOT_OFFERED}; {NO_DCGM}"
    mig = NvmlSource(nvml=FakeNvml([FakeDevice(mig_mode=(1, 1))])).sample().devices[0]
    assert mig.na["tensor_active"] == f"MIG is on: GPM per MIG instance (nvmlGpmMigSampleGet) is not read; {NO_DCGM}"
