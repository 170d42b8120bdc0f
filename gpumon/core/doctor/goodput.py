"""A run whose wall time goes elsewhere than its steps (issue 52): start-up, checkpoint saves, evaluation.

Read from the run's time ledger (core/runs/reading/ledger.py). A part is a finding once it takes ``LARGE`` of the
wall time and ``LARGE_S`` seconds at least, start-up without the script's ``import torch`` (measured in the rank: no
fix here); each comes with its fix.
Stalls and restarts have their own sections (stall.py, restarts.py).
"""

from __future__ import annotations

from typing import Any

from gpumon.core.doctor.advice_types import Advice

LARGE = 0.2  # share of the wall time
LARGE_S = 5.0  # seconds
LEDGER_KINDS = ("startup", "checkpoint", "eval")


def ledger_findings(ledger: dict[str, float], make: Any) -> list[Any]:
    """``make(kind, rank, text, cost)`` (slow.py's Slowness) for each part that takes a large share, largest first:
    "37% of this run was start-up (9.3 s before the first step)"."""
    wall = ledger.get("wall") or 0.0
    found = []
    for kind in LEDGER_KINDS:
        seconds = ledger.get(kind) or 0.0
        share = seconds / wall if wall > 0 else 0.0
        imports = min(seconds, ledger.get("imports") or 0.0) if kind == "startup" else 0.0
        if share < LARGE or seconds < LARGE_S or (seconds - imports) < LARGE_S or (seconds - imports) < LARGE * wall:
            continue  # judged on what the script does after `import torch`: the import itself has no fix here
        if kind == "startup":
            torch = f", {imports:.1f} s of it importing torch" if imports >= 0.05 else ""
            what = f"start-up ({seconds:.1f} s before the first step{torch})"
        elif kind == "checkpoint":
            what = f"saving checkpoints ({_each(seconds, int(ledger.get('saves') or 0), 'save')})"
        else:
            what = f"evaluation ({_each(seconds, int(ledger.get('evals') or 0), 'evaluation')})"
        found.append(make(kind, None, f"{share:.0%} of this run was {what}", share))
    return sorted(found, key=lambda f: -f.cost)


def _each(seconds: float, count: int, noun: str) -> str:
    """ "3 saves, 1.5 s each" (or "4.5 s in all" where the count is not known)."""
    if count <= 0:
        return f"{seconds:.1f} s in all"
    return f"{count} {noun}{'s' if count != 1 else ''}, {seconds / count:.1f} s each"


def ledger_advice(kind: str, text: str) -> list[Advice]:
    """The fix for a ledger finding: ``kind`` one of LEDGER_KINDS, ``text`` the finding's words (the evidence)."""
    if kind == "startup":
        return [
            Advice(
                "startup",
                "start training sooner: cache what start-up builds, import lazily",
                text,
                "build the dataset's index (file lists, tokenised shards, lengths) once and load it from a cache file "
                "next time; import heavy modules inside the functions that need them; `python -X importtime train.py "
                "2> imports.txt` shows which imports cost",
            )
        ]
    if kind == "checkpoint":
        return [
            Advice(
                "async_checkpoint",
                "save checkpoints in the background, or less often",
                text + ": training waits for each save",
                "torch.distributed.checkpoint.async_save(state_dict, checkpoint_id=path) (stages the tensors, then "
                "writes while training goes on; keep its future and wait on it before the next save), or copy the "
                "state to CPU and torch.save it in a thread; or save every 2x as many steps",
            )
        ]
    return [
        Advice(
            "eval_less",
            "evaluate less often, or on a subset",
            text + ": training waits for each evaluation",
            "evaluate every 2x as many steps, or on a fixed subset of the validation set "
            "(torch.utils.data.Subset(val_set, range(n))) and the whole set only at the end",
        )
    ]
