"""Where a metric came from, which source's loss a run shows, and which name is the training loss.

``metrics`` and ``total`` events carry an optional ``source`` (docs/events.md); absent means
``telemetry`` (the script's own ``telemetry.log``). A run shows, per rank, the loss of the best source
that reported one: the script's own call first, then what a framework logged, then a tqdm postfix,
then the value read from the tensor ``backward()`` started from.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from gpumon.core.format import value as fmt_value
from gpumon.core.runs.record.values import metric_value

# Best first. Frameworks rank among themselves in this order (a Lightning run with its TensorBoard
# logger reports both: Lightning's names are the ones the script chose).
SOURCES = ("telemetry", "hf", "lightning", "tensorboard", "wandb", "mlflow", "ray.train", "tqdm", "backward")
RANK = {source: i for i, source in enumerate(SOURCES)}
REPORTED = frozenset({"ray.train"})  # sources whose latest report a run shows whole (a Ray Train result's metrics)
NOT_TRAINING = {"val", "valid", "validation", "eval", "test", "epoch", "avg", "mean", "total"}
_SPLIT = re.compile(r"[^a-z0-9]+")


def source_of(event: Mapping[str, Any]) -> str:
    source = event.get("source")
    return source if isinstance(source, str) and source else "telemetry"


def rank_of(source: str) -> int:
    """Lower is better; a source this gpumon does not know comes last."""
    return RANK.get(source, len(SOURCES))


def number(value: Any) -> float | None:
    """A metric's value: numbers, and the strings JSON needs for NaN and infinities ("nan", "inf", "-inf")."""
    return metric_value(value)


def loss_key(metrics: Mapping[str, Any]) -> str | None:
    """The training loss among ``metrics``: ``loss`` itself, else the shortest name with a ``loss`` word and
    none that names another phase or an aggregate (``train_loss``, ``train/loss``, ``train_loss_step``;
    not ``val_loss``, ``eval_loss``, ``train_loss_epoch``)."""
    if "loss" in metrics:
        return "loss"
    best: str | None = None
    for name in metrics:
        words = set(_SPLIT.split(name.lower()))
        if "loss" in words and not words & NOT_TRAINING and (best is None or len(name) < len(best)):
            best = name
    return best


def finite_or_text(value: float | None) -> float | str | None:
    """JSON for a value that may be NaN or infinite: the value, or "nan"/"inf"/"-inf"."""
    if value is None or math.isfinite(value):
        return value
    return str(value)


REPORT_CALL = {"ray.train": "ray.train.report"}


def reported_words(reported: Mapping[str, Any] | None) -> str:
    """ "ray.train.report at step 24: epoch 2 · train_loss 10.51 · accuracy 0.52": a trainer's latest report, its
    names as the script wrote them (shown as text, never markup), values as the Trials view shows Tune's."""
    if not reported or not isinstance(metrics := reported.get("metrics"), Mapping) or not metrics:
        return ""
    source = str(reported.get("source") or "")
    step = reported.get("step")
    at = f" at step {step:,}" if isinstance(step, int) and not isinstance(step, bool) else ""
    items = " · ".join(f"{name} {fmt_value(number(v) if number(v) is not None else v)}" for name, v in metrics.items())
    return f"{REPORT_CALL.get(source, source)}{at}: {items}"


# Where the shown loss comes from, in words (the run detail's "loss from the HF Trainer's logs")
LOSS_FROM = {
    "hf": "the HF Trainer's logs",
    "lightning": "Lightning's self.log",
    "tqdm": "a tqdm postfix",
    "tensorboard": "TensorBoard scalars",
    "wandb": "wandb.log",
    "mlflow": "MLflow metrics",
    "ray.train": "ray.train.report",
    "backward": "the tensor backward() started from",
}
