"""NvmlSource against a fake pynvml that raises pynvml's real error classes."""

from __future__ import annotations

import os

import psutil
import pynvml
import pytest

from gpumon.core.gpu import open_gpu_source
from gpumon.core.gpu.nvml import NvmlSource, NvmlUnavailable
from gpumon.core.model import GpuDevice, GpuProcess, GpuSample
from tests.conftest import needs_no_gpu
from tests.fake_nvml import GIB, FakeDevice, FakeNvml, nvml_error, proc, util_sample

NO_SUCH_PID = 4_999_999  # above Linux's largest pid_max (2**22): never a live process


def open_source(*devices: FakeDevice) -> tuple[FakeNvml, NvmlSource]:
    fake = FakeNvml(list(devices) or [FakeDevice()])
    return fake, NvmlSource(nvml=fake)


def by_pid(dev: GpuDevice) -> dict[int, GpuProcess]:
    return {p.pid: p for p in dev.processes}


# -- values -------------------------------------------------------------------
def test_reads_every_field_with_units_converted() -> None:
    fake, source = open_source(
        FakeDevice(
            name=b"NVIDIA H100 80GB HBM3",
            uuid=b"GPU-abc",
            gpu_util=57,
            mem_util=31,
            mem_total=80 * GIB,
            mem_used=20 * GIB,
            temperature=61,
            power_mw=312_500,
            power_limit_mw=700_000,
            fan=45,
            sm_clock=1980,
            mem_clock=2619,
            pstate=2,
            ecc_errors=3,
            mig_mode=(0, 0),
        )
    )
    sample = source.sample()

    assert isinstance(sample, GpuSample)
    assert sample.source == "nvml"
    assert sample.driver == "550.54.15"
    assert sample.reason is None
    (dev,) = sample.devices
    assert dev.state == "ok" and dev.reason is None
    assert dev.name == "NVIDIA H100 80GB HBM3"  # bytes from the driver decoded
    assert dev.uuid == "GPU-abc"
    assert dev.gpu_util == 57.0 and dev.mem_util == 31.0
    assert dev.mem_used == 20 * GIB and dev.mem_total == 80 * GIB
    assert dev.mem_percent == pytest.approx(25.0)
    assert dev.temperature == 61
    assert dev.power_draw == pytest.approx(312.5)  # mW -> W
    assert dev.power_limit == pytest.approx(700.0)
    assert dev.fan == 45
    assert dev.sm_clock == 1980 and dev.mem_clock == 2619
    assert dev.pstate == 2
    assert dev.ecc_errors == 3
    assert dev.mig_mode is False
    assert dev.na == {}
    assert dev.processes == () and dev.processes_reason is None
    # volatile, uncorrected ECC errors are the ones asked for
    assert fake.args_of("nvmlDeviceGetTotalEccErrors") == [
        (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
    ]


def test_str_values_from_newer_pynvml_are_kept_as_is() -> None:
    fake = FakeNvml([FakeDevice(name="NVIDIA A100-SXM4-40GB", uuid="GPU-str")], driver="535.104.05")
    sample = NvmlSource(nvml=fake).sample()
    assert sample.driver == "535.104.05"
    assert (sample.devices[0].name, sample.devices[0].uuid) == ("NVIDIA A100-SXM4-40GB", "GPU-str")


def test_mig_mode_on_reads_true_and_hides_per_process_memory() -> None:
    me = os.getpid()
    _, source = open_source(FakeDevice(mig_mode=(1, 1), compute=[proc(me, used_memory=3 * GIB)]))
    dev = source.sample().devices[0]
    assert dev.mig_mode is True
    (p,) = dev.processes
    assert p.pid == me
    assert p.used_memory is None  # per-process memory is meaningless under MIG


def test_static_name_and_uuid_are_read_once() -> None:
    fake, source = open_source(FakeDevice())
    for _ in range(3):
        source.sample()
    assert fake.count("nvmlDeviceGetName") == 1
    assert fake.count("nvmlDeviceGetUUID") == 1
    assert fake.count("nvmlDeviceGetUtilizationRates") == 3


# -- N/A values ---------------------------------------------------------------
def test_not_supported_field_is_none_with_reason_and_not_asked_again() -> None:
    dev = FakeDevice()
    dev.errors["nvmlDeviceGetFanSpeed"] = pynvml.NVMLError_NotSupported
    dev.errors["nvmlDeviceGetPowerUsage"] = nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
    fake, source = open_source(dev)

    for _ in range(3):
        d = source.sample().devices[0]
        assert d.state == "ok"
        assert d.fan is None and d.power_draw is None
        assert d.na["fan"] == "Not Supported"
        assert d.na["power_draw"] == "Not Supported"
        # the other values are untouched
        assert d.power_limit == pytest.approx(700.0)
        assert d.gpu_util == 57.0 and d.temperature == 61
        assert set(d.na) == {"fan", "power_draw"}

    assert fake.count("nvmlDeviceGetFanSpeed") == 1
    assert fake.count("nvmlDeviceGetPowerUsage") == 1
    assert fake.count("nvmlDeviceGetTemperature") == 3


def test_unsupported_field_on_one_gpu_is_still_read_on_another() -> None:
    no_fan = FakeDevice(fan=0)
    no_fan.errors["nvmlDeviceGetFanSpeed"] = pynvml.NVMLError_NotSupported
    fake, source = open_source(no_fan, FakeDevice(fan=70))
    source.sample()
    second = source.sample()
    assert second.devices[0].fan is None
    assert second.devices[1].fan == 70
    assert fake.count("nvmlDeviceGetFanSpeed", 0) == 1
    assert fake.count("nvmlDeviceGetFanSpeed", 1) == 2


def test_transient_error_is_retried_and_the_value_comes_back() -> None:
    dev = FakeDevice(temperature=64)
    dev.errors["nvmlDeviceGetTemperature"] = pynvml.NVMLError_Timeout
    _, source = open_source(dev)
    first = source.sample().devices[0]
    assert first.temperature is None
    assert first.na["temperature"] == str(pynvml.NVMLError_Timeout())

    del dev.errors["nvmlDeviceGetTemperature"]
    second = source.sample().devices[0]
    assert second.temperature == 64
    assert "temperature" not in second.na


# -- lost GPU -----------------------------------------------------------------
def test_lost_gpu_is_marked_lost_while_others_stay_live() -> None:
    fake, source = open_source(FakeDevice(name=b"GPU zero", gpu_util=10), FakeDevice(name=b"GPU one", gpu_util=20))
    first = source.sample()
    assert [d.state for d in first.devices] == ["ok", "ok"]
    assert first.reason is None

    fake.devices[1].errors["nvmlDeviceGetUtilizationRates"] = nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
    fake.devices[0].gpu_util = 11
    second = source.sample()
    d0, d1 = second.devices
    assert d1.state == "lost"
    assert d1.reason and "lost" in d1.reason.lower()
    assert d1.name == "GPU one"  # the user still sees which card it is
    assert d1.gpu_util is None
    assert d0.state == "ok" and d0.gpu_util == 11.0 and d0.temperature == 61
    assert second.reason is not None and "GPU 1" in second.reason
    assert "GPU 0" not in second.reason

    calls_on_lost = fake.calls_on(1)
    fake.devices[0].gpu_util = 12
    third = source.sample()
    assert third.devices[1].state == "lost"
    assert third.devices[0].state == "ok" and third.devices[0].gpu_util == 12.0
    assert third.reason is not None and "GPU 1" in third.reason
    assert fake.calls_on(1) == calls_on_lost  # a lost GPU is not polled again


def test_gpu_lost_before_the_first_sample() -> None:
    lost = FakeDevice()
    lost.errors["nvmlDeviceGetHandleByIndex"] = pynvml.NVMLError_GpuIsLost
    _, source = open_source(FakeDevice(), lost)
    sample = source.sample()
    assert sample.devices[0].state == "ok" and sample.devices[0].mem_used == 20 * GIB
    assert sample.devices[1].state == "lost" and sample.devices[1].reason
    assert sample.reason is not None and "GPU 1" in sample.reason


def test_gpu_lost_while_listing_processes() -> None:
    lost = FakeDevice()
    lost.errors["nvmlDeviceGetComputeRunningProcesses_v3"] = pynvml.NVMLError_GpuIsLost
    _, source = open_source(FakeDevice(compute=[proc(os.getpid())]), lost)
    sample = source.sample()
    # device 0 decided which process API works; device 1 is lost, not "no processes"
    assert sample.devices[1].state == "lost"
    assert sample.devices[0].state == "ok" and len(sample.devices[0].processes) == 1


def test_handle_error_other_than_lost_reads_as_error_and_is_retried() -> None:
    dev = FakeDevice()
    dev.errors["nvmlDeviceGetHandleByIndex"] = pynvml.NVMLError_Unknown
    _, source = open_source(FakeDevice(), dev)
    first = source.sample()
    assert first.devices[1].state == "error" and first.devices[1].reason
    assert first.devices[0].state == "ok"
    del dev.errors["nvmlDeviceGetHandleByIndex"]
    assert source.sample().devices[1].state == "ok"


# -- process list -------------------------------------------------------------
def test_memory_used_leaves_out_the_drivers_reserved_memory_as_nvidia_smi_does() -> None:
    # Seen on an idle H100 (driver 580): memory info v1 said 480 MiB used, nvidia-smi and v2 said 0.
    _, source = open_source(FakeDevice(mem_total=80 * GIB, mem_used=0, mem_reserved=480 * 2**20))
    d = source.sample().devices[0]
    assert (d.mem_used, d.mem_total) == (0, 80 * GIB)


def test_memory_info_v2_missing_in_an_old_driver_falls_back_to_v1_and_is_not_asked_again() -> None:
    dev = FakeDevice(mem_total=16 * GIB, mem_used=3 * GIB, mem_reserved=300 * 2**20)
    dev.errors["nvmlDeviceGetMemoryInfo_v2"] = pynvml.NVMLError_FunctionNotFound
    fake, source = open_source(dev)
    for _ in range(3):
        d = source.sample().devices[0]
        assert d.mem_used == 3 * GIB + 300 * 2**20 and "mem_used" not in d.na  # v1: reserved counted as used
    assert fake.count("nvmlDeviceGetMemoryInfo_v2") == 1
    assert fake.count("nvmlDeviceGetMemoryInfo") == 3


def test_v3_process_api_missing_in_driver_falls_back_to_v2() -> None:
    me = os.getpid()
    dev = FakeDevice(compute=[proc(me, 2 * GIB)])
    dev.errors["nvmlDeviceGetComputeRunningProcesses_v3"] = pynvml.NVMLError_FunctionNotFound
    fake, source = open_source(dev)

    for _ in range(2):
        d = source.sample().devices[0]
        assert d.processes_reason is None
        (p,) = d.processes
        assert (p.pid, p.used_memory, p.kind) == (me, 2 * GIB, "compute")

    assert fake.count("nvmlDeviceGetComputeRunningProcesses_v3") == 1  # probed once
    assert fake.count("nvmlDeviceGetComputeRunningProcesses_v2") == 2
    assert fake.count("nvmlDeviceGetComputeRunningProcesses") == 0


def test_old_pynvml_without_versioned_process_apis_uses_the_plain_one() -> None:
    me = os.getpid()
    fake = FakeNvml([FakeDevice(compute=[proc(me)])])
    fake.remove("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2")
    d = NvmlSource(nvml=fake).sample().devices[0]
    assert [p.pid for p in d.processes] == [me]
    assert fake.count("nvmlDeviceGetComputeRunningProcesses") == 1


def test_no_process_api_at_all_sets_processes_reason_and_keeps_values() -> None:
    dev = FakeDevice(compute=[proc(os.getpid())])
    dev.errors["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVMLError_FunctionNotFound
    fake = FakeNvml([dev])
    fake.remove("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2")
    sample = NvmlSource(nvml=fake).sample()
    d = sample.devices[0]
    assert d.state == "ok"
    assert d.processes == ()
    assert d.processes_reason and "process" in d.processes_reason
    assert d.gpu_util == 57.0 and d.mem_used == 20 * GIB and d.power_draw == pytest.approx(312.5)
    assert sample.reason is None  # the GPU itself is fine


def test_graphics_and_compute_processes_are_merged_without_duplicates() -> None:
    me = os.getpid()
    dev = FakeDevice(compute=[proc(me, 4 * GIB)], graphics=[proc(me, 4 * GIB), proc(NO_SUCH_PID, GIB)])
    _, source = open_source(dev)
    procs = by_pid(source.sample().devices[0])
    assert set(procs) == {me, NO_SUCH_PID}
    assert procs[me].kind == "compute"
    assert procs[NO_SUCH_PID].kind == "graphics"


def test_process_user_and_command_come_from_psutil() -> None:
    me = os.getpid()
    _, source = open_source(FakeDevice(compute=[proc(me, 5 * GIB), proc(NO_SUCH_PID, GIB)]))
    procs = by_pid(source.sample().devices[0])

    mine = procs[me]
    assert mine.user == psutil.Process().username()
    assert mine.command is not None and "python" in mine.command
    assert mine.create_time == psutil.Process().create_time()
    assert mine.used_memory == 5 * GIB
    assert mine.simulated is False

    ghost = procs[NO_SUCH_PID]  # e.g. a host PID seen from inside a container
    assert ghost.user is None and ghost.command is None and ghost.create_time is None
    assert ghost.used_memory == GIB


def test_process_memory_not_available_reads_none() -> None:
    _, source = open_source(FakeDevice(compute=[proc(os.getpid(), used_memory=None)]))
    (p,) = source.sample().devices[0].processes
    assert p.used_memory is None


# -- per-process SM % ---------------------------------------------------------
def test_process_sm_util_asks_only_for_samples_newer_than_last_seen() -> None:
    me = os.getpid()
    dev = FakeDevice(compute=[proc(me), proc(NO_SUCH_PID)])
    dev.util_samples = [util_sample(me, 1_000, 30), util_sample(me, 2_000, 40)]
    fake, source = open_source(dev)

    first = by_pid(source.sample().devices[0])
    assert first[me].sm_util == 40.0  # the newest sample for the PID
    assert first[NO_SUCH_PID].sm_util == 0.0  # no sample: idle

    dev.util_samples.append(util_sample(me, 3_500, 75))
    second = by_pid(source.sample().devices[0])
    assert second[me].sm_util == 75.0

    third = by_pid(source.sample().devices[0])  # nothing newer: NVML says NOT_FOUND
    assert third[me].sm_util == 0.0

    stamps = [args[0] for args in fake.args_of("nvmlDeviceGetProcessUtilization")]
    assert stamps == [0, 2_000, 3_500]


def test_process_sm_util_timestamps_are_kept_per_gpu() -> None:
    me = os.getpid()
    a = FakeDevice(compute=[proc(me)], util_samples=[util_sample(me, 9_000, 50)])
    b = FakeDevice(compute=[proc(me)], util_samples=[util_sample(me, 100, 20)])
    fake, source = open_source(a, b)
    source.sample()
    source.sample()
    assert [x[0] for x in fake.args_of("nvmlDeviceGetProcessUtilization", 0)] == [0, 9_000]
    assert [x[0] for x in fake.args_of("nvmlDeviceGetProcessUtilization", 1)] == [0, 100]


def test_process_sm_util_not_supported_reads_none_and_is_not_asked_again() -> None:
    dev = FakeDevice(compute=[proc(os.getpid())])
    dev.errors["nvmlDeviceGetProcessUtilization"] = pynvml.NVMLError_NotSupported
    fake, source = open_source(dev)
    for _ in range(2):
        (p,) = source.sample().devices[0].processes
        assert p.sm_util is None
    assert fake.count("nvmlDeviceGetProcessUtilization") == 1


# -- cannot start -------------------------------------------------------------
@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (pynvml.NVMLError_LibraryNotFound, "NVML library not found"),
        (pynvml.NVMLError_DriverNotLoaded, "NVIDIA driver not loaded"),
        (pynvml.NVMLError_NoPermission, "no permission to use the NVIDIA driver"),
        (pynvml.NVMLError_Unknown, "NVML failed to start: Unknown Error"),
    ],
)
def test_init_failure_gives_a_plain_reason(error: type[pynvml.NVMLError], expected: str) -> None:
    fake = FakeNvml()
    fake.errors["nvmlInit"] = error
    with pytest.raises(NvmlUnavailable) as info:
        NvmlSource(nvml=fake)
    assert str(info.value).startswith(expected)
    assert fake.count("nvmlDeviceGetCount") == 0


def test_broken_shared_library_gives_a_reason() -> None:
    fake = FakeNvml()
    fake.errors["nvmlInit"] = OSError("libnvidia-ml.so.1: undefined symbol")
    with pytest.raises(NvmlUnavailable, match="could not be loaded"):
        NvmlSource(nvml=fake)


def test_no_gpu_is_unavailable_and_nvml_is_shut_down() -> None:
    fake = FakeNvml([])
    with pytest.raises(NvmlUnavailable, match=r"^NVML sees no GPU$"):
        NvmlSource(nvml=fake)
    assert fake.shutdowns == 1


def test_count_failure_is_unavailable_and_nvml_is_shut_down() -> None:
    fake = FakeNvml()
    fake.errors["nvmlDeviceGetCount"] = pynvml.NVMLError_Unknown
    with pytest.raises(NvmlUnavailable, match="could not count GPUs"):
        NvmlSource(nvml=fake)
    assert fake.shutdowns == 1


def test_driver_version_failure_is_not_fatal() -> None:
    fake = FakeNvml()
    fake.errors["nvmlSystemGetDriverVersion"] = pynvml.NVMLError_NotSupported
    sample = NvmlSource(nvml=fake).sample()
    assert sample.driver is None
    assert sample.devices[0].state == "ok"


def test_close_shuts_nvml_down_and_never_raises() -> None:
    fake, source = open_source(FakeDevice())
    fake.errors["nvmlShutdown"] = pynvml.NVMLError_Uninitialized
    source.close()
    assert fake.count("nvmlShutdown") == 1


# -- open_gpu_source on this machine ------------------------------------------


@needs_no_gpu
def test_open_gpu_source_without_nvidia_reports_why() -> None:
    source = open_gpu_source()
    try:
        assert source.name == "none"
        sample = source.sample()
    finally:
        source.close()
    assert sample.source == "none"
    assert sample.devices == ()
    assert sample.reason is not None and "NVML library not found" in sample.reason
    assert "nvidia-smi not found" in sample.reason


def test_open_gpu_source_simulated() -> None:
    source = open_gpu_source(simulate=2)
    try:
        sample = source.sample()
    finally:
        source.close()
    assert source.name == "simulated"
    assert sample.source == "simulated" and sample.simulated
    assert len(sample.devices) == 2
