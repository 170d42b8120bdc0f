"""Alerts: a watched run first leaking, or failing, leaves one line for whoever looks later, and can call the
user's own command (``gpumon launch --on-alert CMD``: an argument list, never a shell)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from gpumon.core.events import EventWriter

_OPERATOR_CHARS = frozenset("();<>|&")


def shell_operator(text: str) -> str | None:
    """The shell syntax in ``--on-alert``'s text (``>>``, ``|``, ``;``, ``&&``, ``$(``, a backquote), which an
    argument list would pass on as plain arguments; None when there is none (or the text does not split)."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # an unclosed quote: shlex.split says so later
        return None
    for before, word in zip(["", *words], words, strict=False):
        if word and set(word) <= _OPERATOR_CHARS:
            return "$(" if word == "(" and before.endswith("$") else word
        if "`" in word:
            return "`"
    return None


def raise_alert(
    run_dir: Path, events: EventWriter, text: str, command: tuple[str, ...] = (), kind: str = "leak", **fields: Any
) -> None:
    """Record ``text`` as an ``alert`` event of ``kind`` (failed, finished, stopped, leak, nan, stalled,
    input_bound, gpu_idle, ...) and send it to the user's channels (config.toml ``[alerts]``, plus ``command``:
    ``--on-alert``, with the text as its last argument) on a thread: this returns at once. A ``fix`` field joins
    the text whole ("<text>. Fix: <fix>", alerts/text.py): the toast, the Alerts view and every channel say it."""
    from gpumon.core.alerts.outbox import send_alert
    from gpumon.core.alerts.text import with_fix

    text = with_fix(text, fields.get("fix"))
    events.write("alert", text=text, kind=kind)
    try:
        send_alert(text, kind, run_dir=run_dir, on_alert=command, **fields)
    except OSError as err:  # the attempts file cannot be written (a full disk): the run goes on
        events.write("note", text=f"the {kind} alert was not sent: {err}")


def loss_alert(fold: Any) -> str | None:
    """ "loss is inf from step 37 on rank 0" the first time the run's loss is not finite; None after its alert
    was raised (also by an earlier supervisor of the run: its alerts are in the summary)."""
    from gpumon.core.doctor.divergence import nonfinite_text

    text = nonfinite_text(fold)
    if text is None or any(a.startswith(("loss is ", "loss was ", "loss turned ")) for a in fold.alerts):
        return None
    return text


def loss_fix(fold: Any) -> dict[str, str]:
    """The doctor's first fix for the run's loss trouble, as the alert's ``fix`` field (none when it has none)."""
    from gpumon.core.doctor.divergence import loss_advice, loss_problem

    problem = loss_problem(fold)
    advice = loss_advice(problem, fold) if problem is not None else []
    return {"fix": fix_words(advice[0])} if advice else {}


def fix_words(advice: Any) -> str:
    """An advice as one fix: "<title>: <change>"."""
    return f"{advice.title}: {advice.change}" if advice.change else str(advice.title)


# How an alert of each slow kind is told among the run's alerts: once per run, by this supervisor or an earlier one
_SAID = {
    "input_bound": lambda text: text.startswith("input-bound"),
    "straggler": lambda text: " is the straggler: " in text,
}


def slow_alert(fold: Any, kind: str) -> tuple[str, dict[str, str]] | None:
    """The doctor's finding of ``kind`` ("input_bound": "input-bound: 74% of each step waits for data (...)";
    "straggler": "rank 2 is the straggler: ...") and its first fix, the first time the run shows it; None after
    its alert was raised."""
    from gpumon.core.doctor.slow import slow_advice, slow_findings

    found = [f for f in slow_findings(fold) if f.kind == kind]
    if not found or any(_SAID[kind](a) for a in fold.alerts):
        return None
    if kind != "straggler":
        return found[0].text, {}
    advice = slow_advice(found[0], fold, max(1, len(fold.feeding.ranks)), None, fold.run_dir.name)
    return found[0].text, ({"fix": fix_words(advice[0])} if advice else {})


def failure_line(run_dir: Path, error: dict[str, Any] | None, exceptions: list[dict[str, Any]]) -> str:
    """One line on why a run failed: torchrun's root cause, the last exception, else the last worded line of a
    rank's log (the launcher's last: torchrun ends its own with a banner of '='; never a line srun or
    slurmstepd wrote)."""
    from gpumon.core.doctor.ended import said_by_slurm
    from gpumon.core.logs.tail import tail_lines

    lines = str((error or {}).get("message", "")).strip().splitlines()
    if not lines and exceptions:
        last = exceptions[-1]
        lines = [f"{last.get('exc_type')}: {last.get('message')}"]
    logs = sorted((run_dir / "logs").glob("*.log"), key=lambda log: (log.name == "launcher.log", log.name))
    for log in logs if not lines else ():
        tail = tail_lines(log, 20)
        lines = [line for line in tail if any(c.isalnum() for c in line) and not said_by_slurm(line)][-5:]
        if lines:
            break
    return lines[-1].strip() if lines else ""


RESTART = "restart: "  # how a restart's alert begins (one per attempt, also across supervisors of the run)


def restart_alert(fold: Any, max_restarts: int) -> str | None:
    """ "restart: attempt 2 of 2 started after rank 1 raised RuntimeError: ... (shard.py:20) after 26 steps" once
    per new attempt torchrun started; None when every attempt seen was told."""
    told = sum(1 for a in fold.alerts if a.startswith(RESTART))
    restarts = fold.attempts.restarts_told()
    if len(restarts) <= told:
        return None
    last = restarts[told]  # the oldest not told: two restarts between two passes are each said
    who = f"rank {last.rank}" if last.rank is not None else "a rank"
    where = f" ({last.where})" if last.where else ""
    of = f" of {max_restarts + 1}" if max_restarts else ""
    return (
        f"{RESTART}attempt {last.attempt + 1}{of} started after {who} {last.what}{where} "
        f"in attempt {last.attempt}, after {last.steps} steps"
    )
