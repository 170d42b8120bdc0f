"""A stall (``status.json`` ``stall`` / ``last_stall``, written by ``core/runs/supervision/stall.py``) in words."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpumon.core.doctor.advice_text import item, logs_command
from gpumon.core.doctor.advice_types import Advice
from gpumon.core.format import duration


def stall_of(status: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """(the stall, whether it is going on): the current one, else the latest that ended, else None."""
    current = status.get("stall")
    if isinstance(current, dict):
        return current, True
    last = status.get("last_stall")
    return (last, False) if isinstance(last, dict) else (None, False)


def stall_headline(stall: dict[str, Any], now: float | None = None) -> str:
    """ "stalled at step 5 for 1m10s: diverged ranks: rank 1 never reached ..." """
    now = time.time() if now is None else now
    since = stall.get("since")
    idle = f" for {duration(now - since)}" if isinstance(since, int | float) else ""
    step = f" at step {stall['step']}" if stall.get("step") is not None else ""
    head = stall.get("headline") or "; ".join(stall.get("where") or ()) or "no stack came back"
    return f"stalled{step}{idle}: {head}"


def stall_section(stall: dict[str, Any], going_on: bool, run_dir: Path, now: float | None = None) -> list[str]:
    """The doctor's lines: when and why, each rank's place, where the stacks are."""
    now = time.time() if now is None else now
    since = stall.get("since")
    step = f" after step {stall['step']}" if stall.get("step") is not None else ""
    if going_on:
        idle = duration(now - since) if isinstance(since, int | float) else "?"
        first = f"no step{step} for {idle}"
    else:
        first = f"a stall{step} ended after {duration(stall.get('lasted_s'))}: stepping resumed"
    usual = stall.get("step_s")
    if isinstance(usual, int | float):
        first += f" (usual step {usual:.3g} s)"
    out = [first, *(str(line) for line in stall.get("where") or ())]
    if stall.get("collectives"):  # each rank's last collective started and finished (collective_ledger.py)
        out += ["collectives:", *(f"  {line}" for line in stall["collectives"])]
    if stall.get("rule"):
        out.append(f"rule: {stall['rule']}")
    if stall.get("stacks"):
        out.append(f"stacks: {run_dir / str(stall['stacks'])}")
    return out


def stall_advice(stall: dict[str, Any], run_id: str = "") -> list[Advice]:
    """What to do about a stall going on, from where its ranks wait (``core/runs/supervision/stall.py``'s verdict); the
    commands it advises name ``run_id``."""
    where = [str(line) for line in stall.get("where") or ()]
    found = []
    stopped = [line for line in where if "is stopped (SIGSTOP)" in line]
    if stopped:
        pids = " ".join(line.split("(pid ", 1)[1].split(")", 1)[0] for line in stopped if "(pid " in line)
        found.append(item(100, "resume_rank", "; ".join(stopped), pids=pids))
    found += collective_advice(stall.get("collective"))
    if stall.get("verdict") == "diverged":  # one rank never reached the others' collective, or they differ
        why = str(stall.get("headline") or "; ".join(where))
        blame = ", ".join(str(rank) for rank in stall.get("blame") or ())
        logs = logs_command(run_id, blame)
        found.append(item(90, "stalled_rank", why, ranks=blame, logs=logs) if blame else item(90, "diverged", why))
    stuck = [line for line in where if " waits in " in line.partition(": its worker ")[2]]  # not a stopped one
    if stuck:
        found.append(item(80, "loader_timeout", "; ".join(stuck)))
    return [advice for _, advice in sorted(found, key=lambda scored: -scored[0])]


def collective_advice(odd: Any) -> list[tuple[int, Advice]]:
    """The fix for a collective mismatch or a size mismatch (``core/doctor/stuck.py``'s verdict); the rank that
    never arrived has the stack's advice."""
    if not isinstance(odd, dict) or odd.get("kind") not in ("mismatch", "size_mismatch"):
        return []
    ranks = ", ".join(str(r) for r in odd.get("ranks") or ())
    where = str(odd.get("where") or "?")
    name = f"rank {ranks}" if len(odd.get("ranks") or ()) == 1 else f"ranks {ranks}"
    if odd["kind"] == "mismatch":
        return [item(95, "collective_mismatch", str(odd["headline"]), ranks=name, where=where)]
    return [item(95, "size_mismatch", str(odd["headline"]), op=odd.get("op", "?"), where=where)]
