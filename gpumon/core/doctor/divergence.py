"""A loss that turned NaN or infinite, or climbs far above its best: where, and what to check, ranked.

Read from what the fold already holds (no code change in the script): the step where the run's loss first
was not finite (``RunTelemetry.nonfinite``), its finite curve, and the latest value of each metric the run
reported (``lr``/``learning_rate``, ``grad_norm``, a loss scale) from telemetry.log or a framework's hooks.

Diverging: the median of the last ``RECENT`` curve points is above ``DIVERGE_FACTOR`` times the lowest
point after warm-up (the first ``WARMUP_STEPS`` steps, or the first 5% of the curve, are left out: a loss
often rises there while the learning rate warms up), and that median is back above a tenth of the curve's
first points (a loss fitted to 1e-5 that wobbles to 1e-4 is noise, not divergence). Positive losses only:
a negative log-likelihood has no meaningful ratio. It is a doctor warning, not an alert: losses spike and
recover (restarts, a new epoch's shuffle), and one that really diverges turns NaN soon after, which does alert.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from gpumon.core.doctor.advice_types import Advice, Context
from gpumon.core.runs.values import is_nonfinite

DIVERGE_FACTOR = 10.0
WARMUP_STEPS = 20
RECENT = 5
EARLY_SHARE = 0.1  # and the recent median is back above a tenth of where the curve started
LR_FAR_TOO_HIGH = 1.0  # no usual optimizer trains at lr >= 1 (SGD tops out near 0.1-0.5)
LR_HIGH = 0.01  # high for Adam/AdamW (usual 1e-4 to 1e-3); ordinary for SGD
GRAD_NORM_HUGE = 1000.0


@dataclass(frozen=True)
class LossProblem:
    kind: str  # "nonfinite" or "diverging"
    rank: int
    step: int | None  # the first non-finite step; for a divergence, the latest curve step
    text: str  # "loss is nan from step 37 on rank 0", "loss climbed to 52.1 (40x its best 1.3 at step 80) ..."
    first_step: int | None = None  # the curve's first step (early NaN points at inputs, not the lr)


def loss_rank(telemetry: Any) -> int:
    """The rank whose loss is the run's (the one ``nonfinite`` follows)."""
    return min(telemetry.loss_sources) if telemetry.loss_sources else 0


def nonfinite_text(telemetry: Any) -> str | None:
    """ "loss is nan from step 37 on rank 0" once the run's loss was not finite; None while it always was."""
    found = telemetry.nonfinite
    if not found.count:
        return None
    rank = loss_rank(telemetry)
    latest = telemetry.latest.get(rank, {}).get("loss")
    where = f" from step {found.first}" if found.first is not None else ""
    if is_nonfinite(latest):
        return f"loss is {latest}{where} on rank {rank}"
    return f"loss was not finite{where.replace(' from', ' at')} on rank {rank}"


def diverging(steps: list[int], values: list[float]) -> tuple[float, float, int] | None:
    """(recent, best, best's step) when the curve's recent median is above DIVERGE_FACTOR x its best
    after warm-up; None otherwise."""
    if len(steps) < RECENT * 3:
        return None
    warmup = max(WARMUP_STEPS, int(0.05 * (steps[-1] - steps[0])))
    after = [(s, v) for s, v in zip(steps[:-RECENT], values[:-RECENT], strict=True) if s - steps[0] >= warmup]
    if len(after) < RECENT:
        return None
    best_step, best = min(after, key=lambda p: p[1])
    recent = statistics.median(values[-RECENT:])
    if best <= 0 or not math.isfinite(recent) or recent <= DIVERGE_FACTOR * best:
        return None
    if recent < EARLY_SHARE * statistics.median(values[:RECENT]):
        return None  # noise on a loss fitted close to zero (1e-5 to 1e-4), far below where it started
    return recent, best, best_step


def loss_problem(telemetry: Any) -> LossProblem | None:
    """The run's loss trouble: non-finite first (it ends training), else a climb far above its best."""
    rank = loss_rank(telemetry)
    curve = telemetry.loss
    first = curve.steps[0] if curve.steps else None
    text = nonfinite_text(telemetry)
    if text is not None:
        return LossProblem("nonfinite", rank, telemetry.nonfinite.first, text, first)
    found = diverging(list(curve.steps), [float(v) for v in curve.values])
    if found is None:
        return None
    recent, best, best_step = found
    text = (
        f"loss diverging on rank {rank}: {recent:.4g} over its last {RECENT} points, "
        f"{recent / best:.0f}x its best {best:.4g} (step {best_step})"
    )
    return LossProblem("diverging", rank, curve.steps[-1], text, first)


def _metric(latest: dict[str, float], *names: str, prefix: str = "") -> tuple[str, float] | None:
    """The first finite or non-finite value whose name (its last path part) is one of ``names``."""
    for key, value in latest.items():
        tail = key.lower().rsplit("/", 1)[-1]
        if tail in names or (prefix and tail.startswith(prefix)):
            return key, value
    return None


def loss_advice(problem: LossProblem, telemetry: Any, context: Context | None = None) -> list[Advice]:
    """What to check, best first, from what the run reported: its lr, grad norm, loss scale, arguments."""
    context = context or Context()
    latest = telemetry.latest.get(problem.rank) or telemetry.metrics
    where = f"step {problem.step}" if problem.step is not None else "its latest steps"
    scored: list[tuple[int, Advice]] = []
    early = problem.kind == "nonfinite" and problem.step is not None and problem.step <= (problem.first_step or 0) + 1

    lr = _metric(latest, "lr", "learning_rate", prefix="lr-")
    if lr is not None and math.isfinite(lr[1]):
        name, value = lr
        if value >= LR_FAR_TOO_HIGH:
            score, judged = 95, "far above what any usual optimizer trains with (Adam 1e-4..1e-3, SGD 0.01..0.1)"
        elif value >= LR_HIGH:
            score, judged = 75, "high for Adam/AdamW (usual 1e-4..1e-3); ordinary only for SGD"
        else:
            score, judged = 30, "in the usual range: less likely the cause"
        scored.append(
            (
                score,
                Advice(
                    "lr",
                    f"lower the learning rate ({name}={value:g})",
                    f"the run reported {name}={value:g}, {judged}; the loss went bad at {where}",
                    f"divide it by 10 (e.g. lr={value / 10:g}) and add a warm-up "
                    "(torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.01, total_iters=500))",
                ),
            )
        )
    else:
        scored.append(
            (
                50,
                Advice(
                    "lr",
                    "check the learning rate",
                    "the run reported none: a too-high learning rate is the most common cause",
                    "print optimizer.param_groups[0]['lr'], or report it: "
                    "gpumon.telemetry.log(step, loss=loss.item(), lr=optimizer.param_groups[0]['lr'])",
                ),
            )
        )

    norm = _metric(latest, "grad_norm", "gradient_norm", "total_norm")
    if norm is not None:
        name, value = norm
        huge = not math.isfinite(value) or value >= GRAD_NORM_HUGE
        scored.append(
            (
                85 if huge else 25,
                Advice(
                    "grad_norm",
                    "clip the gradient norm" + (" (it exploded)" if huge else ""),
                    f"the run reported {name}={value:g}" + (": gradients exploded" if huge else ""),
                    "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0) between backward() "
                    "and optimizer.step() (with a GradScaler: scaler.unscale_(optimizer) first); "
                    "HF Trainer: max_grad_norm=1.0",
                ),
            )
        )
    else:
        scored.append(
            (
                35,
                Advice(
                    "grad_norm",
                    "check the gradient norm",
                    "the run reported no grad_norm",
                    "norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0) returns the norm "
                    "before clipping: log it (gpumon.telemetry.log(step, grad_norm=norm.item())) and keep the clip",
                ),
            )
        )

    scale = _metric(latest, "loss_scale", "grad_scale", "scale")
    if scale is not None and math.isfinite(scale[1]) and scale[1] < 1.0:
        scored.append(
            (
                80,
                Advice(
                    "amp",
                    "fp16 overflows: the loss scaler keeps skipping steps",
                    f"the run reported {scale[0]}={scale[1]:g} (the scaler halves it at every overflow)",
                    "train in bf16 (torch.autocast(device_type='cuda', dtype=torch.bfloat16), no scaler needed), "
                    "or keep the overflowing op in fp32",
                ),
            )
        )
    else:
        amp = "the run's arguments turn on mixed precision" if context.amp else "a thing to check"
        scored.append(
            (
                60 if context.amp else 28,
                Advice(
                    "amp",
                    "fp16/AMP: use a GradScaler, or bf16",
                    f"{amp}: fp16 overflows at 65504, and without torch.amp.GradScaler the overflow is a NaN",
                    "scaler = torch.amp.GradScaler(); scaler.scale(loss).backward(); scaler.step(optimizer); "
                    "scaler.update(); or autocast with dtype=torch.bfloat16 (no scaler needed)",
                ),
            )
        )

    if problem.kind == "diverging":  # finite: what makes NaNs (a log of zero, a bad sample) is not the cause
        scored.append(
            (
                50,
                Advice(
                    "diverging",
                    "lower the learning rate, or clip the gradients",
                    f"{problem.text}: each update overshoots",
                    "divide the learning rate by 10 (or add warm-up), and "
                    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0) before optimizer.step()",
                ),
            )
        )
        return [advice for _, advice in sorted(scored, key=lambda pair: -pair[0])]
    scored.append(
        (
            85 if early else 40,
            Advice(
                "log_zero",
                "find the op that makes the first NaN (log or division of zero)",
                f"the loss was not finite from {where}"
                + (", its first steps: an op, not a learning rate, is the likely cause" if early else ""),
                "run with torch.autograd.set_detect_anomaly(True) to name the op; guard it: "
                "torch.log(x.clamp_min(1e-8)), x / (y + 1e-8), F.cross_entropy on logits, not log(softmax)",
            ),
        )
    )
    scored.append(
        (
            80 if early else 38,
            Advice(
                "inputs",
                "check the batch for NaN/inf",
                f"a bad sample makes the loss NaN at once ({where})",
                "assert torch.isfinite(inputs).all() and torch.isfinite(targets).all() in the loop, "
                f"at {where} first; normalise inputs (no division by a zero std)",
            ),
        )
    )
    return [advice for _, advice in sorted(scored, key=lambda pair: -pair[0])]
