"""The GPU-side slow run, from the run's own measurements (issue 37): each finding with what it costs, ranked
with the input-bound and oversubscription findings (slow.py) by that cost.

- ``sync``: synchronising ops counted in one step (``flops`` event ``syncs``/``sync_sites``, CUDA only);
- ``host_bound``: at the end of most steps the GPU had already finished the step before (``step`` events'
  ``gpu_dry``): it waits for the host to queue work (Python overhead, many small kernels);
- ``tf32_off``: most of the step's FLOPs are float32 matmuls on a GPU whose tensor cores run TF32, with TF32 off;
- ``small_batch``: the step's peak memory is a small share of the GPU while MFU is low;
- ``pageable_copy``: the counted step copied host memory that is not pinned to the GPU (``flops`` event ``h2d``:
  telemetry/copies.py), a copy the host waits for even with ``non_blocking=True``; the DataLoader's
  ``pin_memory`` (``dataloader`` event) names the fix;
- ``default_stream_copy``: pinned copies on the default stream, which serialise with the step's kernels.

A copy's time is not measured (it would take CUDA events around each copy): it is its bytes at a usual PCIe
rate, said in the text as an estimate.
"""

from __future__ import annotations

from typing import Any

from gpumon.core.doctor.advice_types import Advice
from gpumon.core.format import size
from gpumon.core.gpu.peaks import dense_peaks

DRY = 0.8  # the GPU ran dry at the end of at least this share of steps: host-bound
SMALL_MEMORY = 0.25  # a step's peak under this share of the GPU ...
LOW_MFU = 0.3  # ... while MFU is under this: a batch far below what memory allows
FP32_SHARE = 0.5  # float32 (TF32 off) FLOPs of the step at least this share: the TF32 rule
PAGEABLE_BPS = 10e9  # a usual host-to-device rate from pageable memory (staged through a pinned buffer) ...
PINNED_BPS = 25e9  # ... and from pinned memory (PCIe 4.0 x16); the copy rules' cost is bytes at these rates
COPY_COST = 0.01  # a copy finding below this share of the step is left out


def gpu_findings(telemetry: Any, make: Any) -> list[Any]:
    """The findings, each ``make(kind, rank, text, cost)`` (slow.py's Slowness); cost: the share of time."""
    use = telemetry.use
    per_step = telemetry.progress.step_time()
    fields = use.fields(per_step)
    mfu = fields.get("mfu")
    out = []
    for rank, count in sorted(use.counts.items()):
        if not str(count.get("dev") or "").startswith("cuda"):
            continue
        dry = use.dry_share(rank)
        syncs = count.get("syncs")
        if isinstance(syncs, int) and syncs > 0:
            sites = ", ".join(f"{s['site']} ({s['count']}x)" for s in count.get("sync_sites") or ())
            text = f"a device-to-host sync every step: {syncs} in step {count.get('step')} on rank {rank}"
            text += f", at {sites}" if sites else ""
            out.append(make("sync", rank, text, dry if dry is not None else 0.3))
        elif dry is not None and dry >= DRY:
            busy = f" (MFU {mfu:.0%})" if isinstance(mfu, float) else ""
            text = (
                f"host-bound: in {dry:.0%} of rank {rank}'s steps the GPU had finished the step before when the "
                f"host had queued the next{busy}: the GPU waits for Python to launch its kernels"
            )
            out.append(make("host_bound", rank, text, dry * (1 - (mfu or 0.0))))
        out += _tf32(telemetry, rank, count, per_step, make)
        out += _copies(telemetry, rank, count, per_step, make)
        memory = telemetry.memory.get(rank)
        if memory is not None and memory.peak and memory.capacity and isinstance(mfu, float) and mfu < LOW_MFU:
            share = memory.peak / memory.capacity
            if share < SMALL_MEMORY:
                text = (
                    f"batch far below memory: rank {rank}'s step peaks at {size(memory.peak)} of "
                    f"{size(memory.capacity)} ({share:.0%}) while MFU is {mfu:.0%}"
                )
                out.append(make("small_batch", rank, text, 0.1))
    return out


def _tf32(telemetry: Any, rank: int, count: dict[str, Any], per_step: float | None, make: Any) -> list[Any]:
    dtypes = count.get("dtypes") or {}
    total = sum(v for v in dtypes.values() if isinstance(v, int | float))
    fp32 = dtypes.get("fp32", 0)
    name = telemetry.use.names.get(rank)
    peaks = dense_peaks(name) if name else None
    if not total or fp32 / total < FP32_SHARE or not peaks or "tf32" not in peaks or "fp32" not in peaks:
        return []
    gain = peaks["tf32"] / peaks["fp32"]
    seconds = fp32 / peaks["fp32"]  # at least: the fp32 matmuls at their peak
    cost = min(1.0, seconds / per_step) * (1 - 1 / gain) if per_step else 0.5
    text = (
        f"float32 matmuls with TF32 off on {name}: {fp32 / total:.0%} of the step's FLOPs run at the fp32 peak "
        f"{peaks['fp32'] / 1e12:.0f} TFLOP/s, where TF32 runs {peaks['tf32'] / 1e12:.0f} ({gain:.1f}x) and bf16 "
        f"{peaks.get('bf16', 0) / 1e12:.0f}"
    )
    return [make("tf32_off", rank, text, cost)]


def _loader_pin(telemetry: Any, rank: int) -> Any:
    feed = telemetry.feeding.ranks.get(rank)
    return (feed.loader or {}).get("pin_memory") if feed is not None else None


def _copies(telemetry: Any, rank: int, count: dict[str, Any], per_step: float | None, make: Any) -> list[Any]:
    h2d = count.get("h2d")
    if not isinstance(h2d, dict) or not per_step or per_step <= 0:
        return []
    out = []
    pageable, blocking = int(h2d.get("pageable_bytes") or 0), int(h2d.get("pageable_non_blocking") or 0)
    seconds = pageable / PAGEABLE_BPS
    if pageable and seconds / per_step >= COPY_COST:
        asked = f", {blocking} of them with non_blocking=True, which a pageable copy ignores" if blocking else ""
        pin = _loader_pin(telemetry, rank)
        loader = " (DataLoader pin_memory=False)" if pin is False else ""
        text = (
            f"host-to-device copies from memory that is not pinned{loader}: {size(pageable)} in step "
            f"{count.get('step')} on rank {rank}{asked}; the host waits for each, about {seconds * 1e3:.1f} ms of "
            f"the {per_step * 1e3:.0f} ms step at {PAGEABLE_BPS / 1e9:.0f} GB/s (an estimate: copies are not timed)"
        )
        out.append(make("pageable_copy", rank, text, min(1.0, seconds / per_step)))
    serial = int(h2d.get("default_stream_bytes") or 0)
    seconds = serial / PINNED_BPS
    if serial and seconds / per_step >= COPY_COST:
        text = (
            f"copies on the default stream: {size(serial)} of pinned memory in step {count.get('step')} on rank "
            f"{rank} wait for the step's kernels and hold up the next, about {seconds * 1e3:.1f} ms of the "
            f"{per_step * 1e3:.0f} ms step at {PINNED_BPS / 1e9:.0f} GB/s (an estimate: copies are not timed)"
        )
        out.append(make("default_stream_copy", rank, text, min(1.0, seconds / per_step)))
    return out


def gpu_advice(kind: str, finding_text: str, telemetry: Any) -> list[Advice]:
    """The fixes for a GPU-side finding, best first."""
    if kind == "sync":
        return [
            Advice(
                "sync",
                "keep per-step values on the GPU; read them every N steps",
                finding_text,
                "accumulate on the GPU (total += loss.detach()) and call .item()/.cpu()/print only every 100 steps; "
                "avoid data-dependent shapes (nonzero, boolean masks) in the step",
            )
        ]
    if kind == "host_bound":
        return [
            Advice(
                "compile",
                "fuse the step's kernels so the GPU is not waiting for Python",
                finding_text,
                "model = torch.compile(model) (mode='reduce-overhead' adds CUDA graphs), or a larger batch per step",
            )
        ]
    if kind == "tf32_off":
        return [
            Advice(
                "tf32",
                "run float32 matmuls on the tensor cores",
                finding_text,
                "torch.set_float32_matmul_precision('high') at the top of the script (TF32), or "
                "with torch.autocast('cuda', dtype=torch.bfloat16): around the forward pass",
            )
        ]
    if kind == "small_batch":
        return [_batch_advice(finding_text, telemetry)]
    if kind == "pageable_copy":
        loader = "pin_memory=False" in finding_text
        return [
            Advice(
                "pin_memory",
                "copy from pinned memory so the copy overlaps the step",
                finding_text,
                "DataLoader(..., pin_memory=True) and batch.to(device, non_blocking=True)"
                if loader
                else "pin the host tensor once (t = t.pin_memory()) and copy with .to(device, non_blocking=True)",
            )
        ]
    if kind == "default_stream_copy":
        return [
            Advice(
                "copy_stream",
                "copy the next batch on a side stream, overlapping the step",
                finding_text,
                "s = torch.cuda.Stream(); with torch.cuda.stream(s): nxt = batch.to(device, non_blocking=True); "
                "then torch.cuda.current_stream().wait_stream(s) before using nxt",
            )
        ]
    return []


def _batch_advice(text: str, telemetry: Any) -> Advice:
    batch = next((f.loader.get("batch_size") for f in telemetry.feeding.ranks.values() if f.loader), None)
    peak = max((m.peak or 0 for m in telemetry.memory.values()), default=0)
    total = min((m.capacity for m in telemetry.memory.values() if m.capacity), default=0)
    change = "a larger batch (or fewer, larger micro-batches), with the learning rate scaled to it"
    if isinstance(batch, int) and batch > 0 and peak and total:
        fits = int(batch * 0.8 * total / peak)  # all of the peak counted per sample: a floor, never too much
        change = f"batch_size={fits} or less (now {batch}: its peak {size(peak)}, scaled to 80% of {size(total)})"
    return Advice("batch_size_up", "use the memory the GPU has: a larger batch", text, change)
