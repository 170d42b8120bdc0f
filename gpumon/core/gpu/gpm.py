"""SM activity, SM occupancy, tensor-core activity and DRAM bandwidth from NVML's GPU Performance Monitoring (GPM).

NVML's ``utilization.gpu`` is the share of time any kernel ran: one tiny kernel at a time reads 100%. GPM
(Hopper and later, driver 520+) counts cycles instead: the share of SMs busy (``sm_active``), the warps
resident over the maximum (``sm_occupancy``), the tensor cores' busy share (``tensor_active``) and the DRAM
bandwidth used over the peak (``dram_active``), all 0..1 here (NVML gives percents). A metric is the
difference of two samples: each sampling tick takes one and reads the metrics against the previous one, so
the first tick has none. Cycle-based figures skew when clocks change between the two samples.

Where GPM is not offered the fields are None and the device's ``na`` says why, once asked: the GPU is older
than Hopper, the driver or pynvml lacks GPM, or MIG is on (a MIG instance needs per-instance samples,
``nvmlGpmMigSampleGet``, not read: one figure per GPU would mix the instances of several users); and whether
DCGM could give it here (dcgm.py). No per-process GPM exists (dcgm.py says why).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from gpumon.core.gpu.dcgm import dcgm_reason

GPM_FIELDS = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")
_METRICS = (
    ("sm_active", "NVML_GPM_METRIC_SM_UTIL"),
    ("sm_occupancy", "NVML_GPM_METRIC_SM_OCCUPANCY"),
    ("tensor_active", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
    ("dram_active", "NVML_GPM_METRIC_DRAM_BW_UTIL"),
)
NOT_OFFERED = "GPM is offered on Hopper and later GPUs only (nvmlGpmQueryDeviceSupport: not supported)"


class GpmReader:
    """One per NVML source: per device, two GPM samples alternately filled, or the reason there are none."""

    def __init__(self, nv: ModuleType, lost: type[Exception]) -> None:
        self.nv = nv
        self.lost = lost  # raised when the GPU is lost (the source's own exception)
        self.samples: dict[int, list[Any]] = {}  # device -> [previous, current] samples
        self.taken: dict[int, bool] = {}  # device -> the previous sample holds a reading
        self.reasons: dict[int, str] = {}  # device -> why no GPM (asked once)

    def read(self, index: int, handle: Any, mig_on: bool | None) -> tuple[dict[str, float | None], dict[str, str]]:
        """({field: 0..1 or None}, {field: why it is None}); the first tick has no reading and no reason."""
        empty: dict[str, float | None] = dict.fromkeys(GPM_FIELDS)
        if index in self.reasons:
            return empty, dict.fromkeys(GPM_FIELDS, self.reasons[index])
        if mig_on:
            why = "MIG is on: GPM per MIG instance (nvmlGpmMigSampleGet) is not read"
            return empty, dict.fromkeys(GPM_FIELDS, f"{why}; {dcgm_reason()}")
        nv = self.nv
        try:
            if index not in self.samples:
                self._open(index, handle)
            previous, current = self.samples[index]
            nv.nvmlGpmSampleGet(handle, current)
            self.samples[index] = [current, previous]
            if not self.taken.get(index):
                self.taken[index] = True
                return empty, {}  # a metric is the difference of two samples: the next tick has one
            return self._metrics(previous, current)
        except nv.NVMLError_GpuIsLost:
            raise self.lost from None
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound) as err:
            self.reasons.setdefault(index, f"GPM not offered here ({err})")
            self.reasons[index] += f"; {dcgm_reason()}"
        except AttributeError:
            self.reasons[index] = f"this nvidia-ml-py has no GPM calls (nvmlGpm*): upgrade it; {dcgm_reason()}"
        except nv.NVMLError as err:
            return empty, dict.fromkeys(GPM_FIELDS, f"GPM: {err}")
        return empty, dict.fromkeys(GPM_FIELDS, self.reasons[index])

    def _open(self, index: int, handle: Any) -> None:
        support = self.nv.nvmlGpmQueryDeviceSupport(handle)
        if not getattr(support, "isSupportedDevice", 0):
            self.reasons[index] = NOT_OFFERED
            raise self.nv.NVMLError_NotSupported()
        self.samples[index] = [self.nv.nvmlGpmSampleAlloc(), self.nv.nvmlGpmSampleAlloc()]

    def _metrics(self, older: Any, newer: Any) -> tuple[dict[str, float | None], dict[str, str]]:
        nv = self.nv
        get = nv.c_nvmlGpmMetricsGet_t()
        get.version = nv.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = len(_METRICS)
        get.sample1, get.sample2 = older, newer
        for i, (_, constant) in enumerate(_METRICS):
            get.metrics[i].metricId = getattr(nv, constant)
        nv.nvmlGpmMetricsGet(get)
        out: dict[str, float | None] = {}
        why: dict[str, str] = {}
        for i, (name, _) in enumerate(_METRICS):
            metric = get.metrics[i]
            code = int(metric.nvmlReturn)
            out[name] = min(1.0, max(0.0, float(metric.value) / 100.0)) if code == nv.NVML_SUCCESS else None
            if code != nv.NVML_SUCCESS:
                why[name] = f"GPM: {nv.NVMLError(code)}"
        return out, why

    def close(self, free: Callable[[Any], None] | None = None) -> None:
        release = free or getattr(self.nv, "nvmlGpmSampleFree", None)
        for pair in self.samples.values():
            for sample in pair:
                try:
                    if release is not None:
                        release(sample)
                except Exception:  # noqa: BLE001 - shutting down never fails loudly
                    pass
        self.samples.clear()
