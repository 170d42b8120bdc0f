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

from gpumon.core import format as fmt
from gpumon.core.doctor.advice_types import Advice, Context

DIVERGE_FACTOR = 10.0
WARMUP_STEPS = 20
RECENT = 5
EARLY_SHARE = 0.1  # and the recent median is back above a tenth of where the curve started
LR_FAR_TOO_HIGH = 1.0  # no usual optimizer trains at lr >= 1 (SGD tops out near 0.1-0.5)
LR_HIGH = 0.01  # high for Adam/AdamW (usual 1e-4 to 1e-3); ordinary for SGD
GRAD_NORM_HUGE = 1000.0
CLIMB = 10.0  # the last finite loss this far above the lowest before it: it climbed before it overflowed
STEADY = 10  # a jump: the last finite loss within 2x the median of the (up to) 10 readings before it
# What a step means, by the source of the run's loss (runs/reading/sources.py): said once in the doctor's loss section.
STEP_WORDS = {
    "backward": "gpumon counts optimizer steps from 1",
    "tqdm": "gpumon counts optimizer steps from 1",
    "telemetry": "the steps the script passed to telemetry.log",
    "hf": "the Trainer's global_step",
    "lightning": "Lightning's trainer.global_step",
    "tensorboard": "the global_step the script logged with",
    "wandb": "the step the script logged with",
    "mlflow": "the step the script logged with",
}


@dataclass(frozen=True)
class LossProblem:
    kind: str  # "nonfinite" or "diverging"
    rank: int
    step: int | None  # the first non-finite step; for a divergence, the latest curve step
    text: str  # "loss turned inf at step 3, nan from step 5 on rank 0", "loss diverging on rank 0: ..."
    first_step: int | None = None  # the curve's first step
    onset: str = ""  # nonfinite: "start", "climb", "jump" or "unknown" (``Onset``)
    before: str = ""  # what the loss did before it went bad, in words
    recovered: bool = False  # nonfinite: it was finite again after its first bad value
    steps: str = ""  # what the step numbers count (STEP_WORDS)

    def details(self) -> list[tuple[str, str]]:
        """What the doctor says under the loss's headline: how it got there, what a step number counts (once)."""
        found = [("before", self.before)] if self.before else []
        return found + ([("steps", self.steps)] if self.steps else [])


@dataclass(frozen=True)
class Onset:
    """How the finite loss reached its first non-finite value: the evidence each cause needs."""

    shape: str  # "start" (bad from its first reading), "climb", "jump" (from a steady value), "unknown"
    before: str  # in words, with the numbers
    recovered: bool = False


def loss_rank(telemetry: Any) -> int:
    """The rank whose loss is the run's (the one ``nonfinite`` follows)."""
    return min(telemetry.loss_sources) if telemetry.loss_sources else 0


def nonfinite_text(telemetry: Any) -> str | None:
    """ "loss turned inf at step 3, nan from step 5 on rank 0" once the run's loss was not finite; None while it
    always was."""
    rank = loss_rank(telemetry)
    text = telemetry.nonfinite.words(telemetry.latest.get(rank, {}).get("loss"), rank)
    return text or None


def onset(telemetry: Any) -> Onset:
    """The finite curve before the first non-finite value: none (``start``), a climb to it, a jump from a steady
    value (the reading just before it, no climb), or too little to tell."""
    found = telemetry.nonfinite
    curve = telemetry.loss
    first, word = found.first, found.first_word or "not finite"
    recovered = found.count > 0 and (found.since is None or found.since != found.first)
    points = [
        (s, v, lo)
        for s, v, lo in zip(curve.steps, curve.values, curve.lows, strict=False)
        if first is None or s < first
    ]
    if first is None:
        return Onset("unknown", "", recovered)
    if not points and first <= 1:  # the first step (0 or 1): no update had happened yet
        return Onset("start", f"the loss was {word} from its first reading (step {first})", recovered)
    if not points:  # its first reading came late (a script that logs from step 500): nothing known before
        return Onset("unknown", f"the loss was {word} at its first reading (step {first})", recovered)
    last_step, last = points[-1][0], points[-1][1]
    best_step, best = min(((s, lo) for s, _, lo in points), key=lambda p: p[1])
    if best > 0 and last > CLIMB * best:
        climbed = f"the loss climbed from {fmt.loss(best)} (step {best_step}) to {fmt.loss(last)} (step {last_step})"
        return Onset("climb", f"{climbed}, then was {word} at step {first}", recovered)
    prior = [v for _, v, _ in points[-1 - STEADY : -1]]
    if prior and last_step == first - 1 and 0 < last <= 2 * statistics.median(prior):
        return Onset(
            "jump",
            f"the loss went from {fmt.loss(last)} (step {last_step}) to {word} at step {first}, "
            f"no climb before (its lowest {fmt.loss(best)})",
            recovered,
        )
    unread = f"; steps {last_step + 1}-{first - 1} were not read" if first - last_step > 1 else ""
    return Onset(
        "unknown", f"the loss was {fmt.loss(last)} at step {last_step}, {word} at step {first}{unread}", recovered
    )


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
    steps = STEP_WORDS.get(telemetry.loss_sources.get(rank, ""), "")
    if text is not None:
        how = onset(telemetry)
        return LossProblem(
            "nonfinite", rank, telemetry.nonfinite.first, text, first, how.shape, how.before, how.recovered, steps
        )
    found = diverging(list(curve.steps), [float(v) for v in curve.values])
    if found is None:
        return None
    recent, best, best_step = found
    text = (
        f"loss diverging on rank {rank}: {fmt.loss(recent)} over its last {RECENT} points, "
        f"{recent / best:.0f}x its best {fmt.loss(best)} (step {best_step})"
    )
    return LossProblem("diverging", rank, curve.steps[-1], text, first, steps=steps)


def _metric(latest: dict[str, float], *names: str, prefix: str = "") -> tuple[str, float] | None:
    """The first finite or non-finite value whose name (its last path part) is one of ``names``."""
    for key, value in latest.items():
        tail = key.lower().rsplit("/", 1)[-1]
        if tail in names or (prefix and tail.startswith(prefix)):
            return key, value
    return None


def loss_advice(problem: LossProblem, telemetry: Any, context: Context | None = None) -> list[Advice]:
    """What to check, best first: only the causes the run's own numbers support (its lr, grad norm and loss
    scale, its arguments, and how the loss got to its first bad value: ``Onset``)."""
    context = context or Context()
    latest = telemetry.latest.get(problem.rank) or telemetry.metrics
    where = f"step {problem.step}" if problem.step is not None else "its latest steps"
    shape = problem.onset if problem.kind == "nonfinite" else "climb"  # a divergence is a climb
    finite = problem.kind == "diverging"  # still finite: never "went bad", never NaN-only causes
    went = f"the loss climbed up to {where}" if finite else f"the loss went bad at {where}"
    climbed = (went if finite else f"the loss climbed before it went bad at {where}") if shape == "climb" else ""
    scored: list[tuple[int, Advice]] = []
    lr = _metric(latest, "lr", "learning_rate", prefix="lr-")
    scored += _lr(lr, shape, went, climbed, ordinary=not finite)
    scored += _grad_norm(_metric(latest, "grad_norm", "gradient_norm", "total_norm"), shape, climbed)
    scored += _amp(_metric(latest, "loss_scale", "grad_scale", "scale"), context)
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
        return _ranked(scored)
    said = {
        "start": f"not finite from its first reading ({where})",
        "jump": f"it went bad at once at {where}, from a steady value",
    }.get(shape, f"the loss was not finite from {where}")
    if shape == "start":  # onset: only at a step of 0 or 1
        said += ": no update had happened yet, so an op or the data did it"
    if problem.recovered:  # a bad batch passes; bad weights stay bad
        said += "; it was finite again after: one batch, not the weights, went bad"
    op = {"start": 85, "jump": 75, "unknown": 40}.get(shape, 60 if problem.recovered else 0)
    if op:
        scored.append(
            (
                op,
                Advice(
                    "log_zero",
                    "find the op that makes the first NaN (log or division of zero)",
                    said,
                    "run with torch.autograd.set_detect_anomaly(True) to name the op; guard it: "
                    "torch.log(x.clamp_min(1e-8)), x / (y + 1e-8), F.cross_entropy on logits, not log(softmax)",
                ),
            )
        )
    sample = 85 if problem.recovered else {"start": 80, "jump": 80}.get(shape, 0)
    if sample:  # a bad sample makes the loss bad at once: never after a climb, nor where the steps were not read
        scored.append(
            (
                sample,
                Advice(
                    "inputs",
                    "check the batch for NaN/inf",
                    f"{said}; a batch with a NaN or inf, or a sample an op cannot take, makes the loss bad at once",
                    "assert torch.isfinite(inputs).all() and torch.isfinite(targets).all() in the loop, "
                    f"at {where} first; normalise inputs (no division by a zero std)",
                ),
            )
        )
    return _ranked(scored)


def _ranked(scored: list[tuple[int, Advice]]) -> list[Advice]:
    return [advice for _, advice in sorted(scored, key=lambda pair: -pair[0])]


def _lr(
    found: tuple[str, float] | None, shape: str, went: str, climbed: str, ordinary: bool = True
) -> list[tuple[int, Advice]]:
    """The learning rate: never at the first step (no update yet); a reported high one where the loss climbed or
    too little is known; an ordinary or unreported one only where it climbed (``ordinary``: a finite climb's
    own advice already says to lower it, and the lr it reports now may be a scheduler's, long after the climb)."""
    if shape == "start":
        return []
    if found is None or not math.isfinite(found[1]):
        if shape not in ("climb", "unknown"):
            return []
        why = "the run reported no learning rate: a too-high one is the most common cause"
        why = f"{climbed}; {why} of a climb" if climbed else why
        change = (
            "print optimizer.param_groups[0]['lr'], or report it: "
            "gpumon.telemetry.log(step, loss=loss.item(), lr=optimizer.param_groups[0]['lr'])"
        )
        return [(70 if shape == "climb" else 50, Advice("lr", "check the learning rate", why, change))]
    name, value = found
    if value >= LR_FAR_TOO_HIGH:
        score, judged = 95, "far above what any usual optimizer trains with (Adam 1e-4..1e-3, SGD 0.01..0.1)"
    elif value >= LR_HIGH and shape in ("climb", "unknown"):
        score, judged = 75, "high for Adam/AdamW (usual 1e-4..1e-3); ordinary only for SGD"
    elif shape == "climb" and ordinary:
        score, judged = 40, "in the usual range, yet the loss climbed: with no warm-up even that can be too high"
    else:
        return []
    return [
        (
            score,
            Advice(
                "lr",
                f"lower the learning rate ({name}={value:g})",
                f"the run reported {name}={value:g}, {judged}; {went}",
                f"divide it by 10 (e.g. lr={value / 10:g}) and add a warm-up "
                "(torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.01, total_iters=500))",
            ),
        )
    ]


def _grad_norm(found: tuple[str, float] | None, shape: str, climbed: str) -> list[tuple[int, Advice]]:
    """Clipping: a reported huge norm (finite: a NaN norm is only the NaN loss again), or an unreported one where
    the loss climbed; a small reported norm rules it out."""
    change = (
        "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0) between backward() "
        "and optimizer.step() (with a GradScaler: scaler.unscale_(optimizer) first); HF Trainer: max_grad_norm=1.0"
    )
    if found is not None and math.isfinite(found[1]) and found[1] >= GRAD_NORM_HUGE:
        why = f"the run reported {found[0]}={found[1]:g}: gradients exploded"
        return [(85, Advice("grad_norm", "clip the gradient norm (it exploded)", why, change))]
    if shape not in ("climb", "unknown") or (found is not None and math.isfinite(found[1])):
        return []
    if found is not None:  # not finite, as the loss is: no evidence of its own
        why = f"the run reported {found[0]}={found[1]:g}, as its loss: its last finite value is unknown"
        why = f"{climbed}; {why}" if climbed else why
        return [(60 if shape == "climb" else 35, Advice("grad_norm", "clip the gradient norm", why, change))]
    why = f"{climbed}, as exploding gradients make it; the run reported no grad_norm" if climbed else ""
    why = why or "the run reported no grad_norm"
    change = (
        "norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0) returns the norm "
        "before clipping: log it (gpumon.telemetry.log(step, grad_norm=norm.item())) and keep the clip"
    )
    return [(60 if shape == "climb" else 35, Advice("grad_norm", "check the gradient norm", why, change))]


def _amp(scale: tuple[str, float] | None, context: Context) -> list[tuple[int, Advice]]:
    """fp16: only where the run shows it (a loss scale below 1, or mixed precision in its arguments)."""
    if scale is not None and math.isfinite(scale[1]) and scale[1] < 1.0:
        return [
            (
                90,
                Advice(
                    "amp",
                    "fp16 overflows: the loss scaler keeps skipping steps",
                    f"the run reported {scale[0]}={scale[1]:g} (the scaler halves it at every overflow)",
                    "train in bf16 (torch.autocast(device_type='cuda', dtype=torch.bfloat16), no scaler needed), "
                    "or keep the overflowing op in fp32",
                ),
            )
        ]
    if not context.amp:
        return []
    return [
        (
            60,
            Advice(
                "amp",
                "fp16/AMP: use a GradScaler, or bf16",
                "the run's arguments turn on mixed precision: fp16 overflows at 65504, and without "
                "torch.amp.GradScaler the overflow is a NaN",
                "scaler = torch.amp.GradScaler(); scaler.scale(loss).backward(); scaler.step(optimizer); "
                "scaler.update(); or autocast with dtype=torch.bfloat16 (no scaler needed)",
            ),
        )
    ]
