"""Is the GPU used well: each rank's FLOPs per step (``flops`` events, telemetry/flops.py) over the run's pace.

``achieved_flops_per_s`` = the FLOPs of one step x the steps a second (the run's wall-clock pace, progress.py:
data waits and pauses count against it, as they do against the run). ``mfu`` = achieved over the dense peak of
the rank's device for the dtype its matmuls ran in (core/gpu/peaks.py), summed over the ranks that counted:
null on a CPU or an unknown GPU, with ``mfu_reason`` saying why. ``tokens_per_s`` where the batch is tokens
(token ids into an ``nn.Embedding``, or a DataLoader batch of integer ids).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpumon.core.gpu.peaks import dtype_label, peak_for

USE_FIELDS = (
    "mfu",
    "mfu_reason",
    "tokens_per_s",
    "flops_per_step",
    "achieved_flops_per_s",
    "flops_method",
    "flops_dtype",
    "flops_shape",  # the batch's shape the count is of (the flops event's ``shape``)
    "peak_flops_per_s",
    "time_split",  # where the step's time goes (time_split.py), set by the summary
)
FLOPS_KEEP: tuple[str, ...] = (
    "step",
    "flops",
    "method",
    "dtypes",
    "tokens",
    "params",
    "dev",
    "why",
    "count_s",
    "syncs",
    "sync_sites",
)
FLOPS_KEEP += ("h2d",)  # the counted step's host-to-device copies (telemetry/copies.py)
FLOPS_KEEP += ("shape",)  # the batch's shape at the count (a new shape is counted again)


@dataclass
class GpuUse:
    counts: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> its latest ``flops`` event's fields
    names: dict[int, str] = field(default_factory=dict)  # rank -> its CUDA device's name (``device`` events)
    dry: dict[int, list[float]] = field(default_factory=dict)  # rank -> latest ``gpu_dry`` shares

    def fold(self, kind: str, event: dict[str, Any], rank: int) -> None:
        if kind == "flops":
            keep = FLOPS_KEEP
            self.counts[rank] = {k: event[k] for k in keep if k in event}
        elif kind == "device" and isinstance(event.get("name"), str):
            self.names[rank] = event["name"]
        elif kind == "step" and isinstance(dry := event.get("gpu_dry"), int | float):
            shares = self.dry.setdefault(rank, [])
            shares.append(float(dry))
            del shares[:-32]  # the latest ones: the run as it is now

    def dry_share(self, rank: int) -> float | None:
        """The share of the rank's recent steps at whose end the GPU had already finished the step before."""
        shares = self.dry.get(rank)
        return sum(shares) / len(shares) if shares else None

    def fields(self, step_time_s: float | None) -> dict[str, Any]:
        """The summary's and row's fields (``USE_FIELDS``); all None before any rank counted a step."""
        out: dict[str, Any] = dict.fromkeys(USE_FIELDS)
        counted = {r: c for r, c in self.counts.items() if isinstance(c.get("flops"), int | float)}
        if not counted:
            if self.counts:
                out["mfu_reason"] = str(next(iter(self.counts.values())).get("why") or "")
            return out
        lowest = counted[min(counted)]
        out["flops_per_step"] = lowest["flops"]
        out["flops_method"] = lowest.get("method")
        out["flops_shape"] = lowest.get("shape")
        # What the math ran in, from the counts themselves: a CPU or an unknown GPU has no peak but a dtype.
        labels = {dtype_label(dict(c.get("dtypes") or {})) for c in counted.values()} - {""}
        out["flops_dtype"] = (labels.pop() if len(labels) == 1 else "mixed") if labels else None
        if not step_time_s or step_time_s <= 0:
            out["mfu_reason"] = "no pace yet"
            return out
        achieved = sum(float(c["flops"]) for c in counted.values()) / step_time_s
        out["achieved_flops_per_s"] = achieved
        tokens = [c["tokens"] for c in counted.values() if isinstance(c.get("tokens"), int)]
        if tokens:
            out["tokens_per_s"] = sum(tokens) / step_time_s
        peaks, reasons = 0.0, []
        for rank, count in counted.items():
            dev = str(count.get("dev") or "cpu")
            name = "cpu" if dev == "cpu" else self.names.get(rank)
            if name is None:
                reasons.append(f"rank {rank}'s device name is not known yet")
                continue
            peak, _, why = peak_for(name, dict(count.get("dtypes") or {}))
            if peak is None:
                reasons.append(why)
            else:
                peaks += peak
        if reasons:
            out["mfu_reason"] = reasons[0]
        elif peaks > 0:
            out["mfu"] = achieved / peaks
            out["peak_flops_per_s"] = peaks
        return out

    def to_state(self) -> dict[str, Any]:
        counts = {str(r): c for r, c in self.counts.items()}
        dry = {str(r): d for r, d in self.dry.items()}
        return {"counts": counts, "names": {str(r): n for r, n in self.names.items()}, "dry": dry}

    @classmethod
    def from_state(cls, state: Any) -> GpuUse:
        if not isinstance(state, dict):
            return cls()
        try:
            return cls(
                counts={int(r): dict(c) for r, c in (state.get("counts") or {}).items()},
                names={int(r): str(n) for r, n in (state.get("names") or {}).items()},
                dry={int(r): [float(x) for x in d] for r, d in (state.get("dry") or {}).items()},
            )
        except (TypeError, ValueError, AttributeError):
            return cls()


def mfu_text(mfu: float | None) -> str:
    """ "41%", "0.3%", or "—" where unknown (a CPU, an unknown GPU, no count yet)."""
    if mfu is None:
        return "—"
    pct = mfu * 100
    return f"{pct:.0f}%" if pct >= 10 else f"{pct:.1f}%"


def rate_text(per_s: float | None, unit: str) -> str:
    """ "12.3k tok/s", "1.2M tok/s", "" where unknown."""
    if per_s is None:
        return ""
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if per_s >= scale:
            return f"{per_s / scale:.1f}{suffix} {unit}"
    return f"{per_s:.0f} {unit}"
