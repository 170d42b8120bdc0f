"""What the doctor says of torchrun's restarts: a restarted run is "finished after 1 restart", never "no problem
seen", and each failed attempt's cause gets the fixes its error text calls for (attempts.py folds the attempts)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpumon.core.doctor.advice_types import Advice, Context
from gpumon.core.runs.reading.attempts import Restart, restart_line

LIVE = ("starting", "running", "stalled", "stopping", "unsupervised")


def restart_headline(state: str, restarts: Sequence[Restart], attempt: int, most: int) -> str:
    """ "finished after 1 restart: attempt 1 failed after 26 steps: rank 1 raised ..." (the latest failure)."""
    n = len(restarts)
    if state in LIVE:
        words = f"{state}, attempt {attempt}" + (f" of {most + 1}" if most else "")
    else:
        words = f"{state} after {n} restart{'s' if n > 1 else ''}"
    return f"{words}: {restart_line(restarts[-1]).split('; ')[0]}"


def restart_advice(restarts: Sequence[Restart], argv: Sequence[str], run_id: str) -> list[Advice]:
    """For the latest failed attempt: the fixes its error calls for (the failure rules), then what makes a restart
    cheaper where it redid steps or gpumon cannot tell."""
    from gpumon.core.doctor.advice import advise
    from gpumon.core.doctor.classifier import classify

    if not restarts:
        return []
    last = restarts[-1]
    who = f"rank {last.rank}" if last.rank is not None else "a rank"
    found = classify(f"{last.what.removeprefix('raised ')}\n", 1) if last.what.startswith("raised ") else None
    out: list[Advice] = []
    if found is not None and found.kind not in ("unknown", "exit"):
        out += advise(found, Context.from_argv(list(argv), run_id=run_id))
    else:
        out.append(
            Advice(
                "restart_cause",
                f"Fix what failed in attempt {last.attempt}",
                restart_line(last),
                f"read {who}'s error in attempt {last.attempt}: gpumon logs {run_id}"
                + (f" --rank {last.rank}" if last.rank is not None else "")
                + "; torchrun restarted every rank, so the same fault can end the next attempt too",
            )
        )
    if last.redone is None or last.redone > 0:
        said = f"it redid {last.redone} steps" if last.redone else "gpumon cannot tell how many steps it redid"
        out.append(
            Advice(
                "resume",
                "Resume from the latest checkpoint on a restart",
                f"a restart starts every rank again from the script's start: {said}",
                "save a checkpoint every N steps and load it at start when TORCHELASTIC_RESTART_COUNT > 0 "
                "(torch.distributed.checkpoint.save/load); say the position (tqdm(initial=step)) so gpumon counts "
                "the steps redone",
            )
        )
    return out


def restarts_of(telemetry: Any) -> tuple[Restart, ...]:
    return tuple(telemetry.attempts.restarts_told())
