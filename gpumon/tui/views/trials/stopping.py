"""Stopping a trial or a whole search: the question asked first (or why not), then the request file."""

from __future__ import annotations

from pathlib import Path

from textual.notifications import SeverityLevel

from gpumon.core.runs.reading.experiments import ExperimentSnapshot, TrialRow
from gpumon.core.runs.reading.trials import ACTIVE
from gpumon.core.runs.supervision.control import request_stop_experiment, request_stop_trial


def trial_stop_question(snap: ExperimentSnapshot | None, row: TrialRow | None) -> tuple[str | None, str, str | None]:
    """(question, refusal, trial id): what to ask before stopping ``row``; no question: the refusal says why."""
    if snap is None or row is None:
        return None, "Select a trial first", None
    info = snap.info
    if not info.live or row.status not in ACTIVE:
        why = row.status if info.live else f"the search is {info.state}"
        return None, f"Trial {row.id} is not running ({why})", None
    question = f"Stop trial {row.id} of {info.run_id}?\nTune ends it at its next result; its results stay."
    return question + _stopper_note(info.kind), "", row.id


def search_stop_question(snap: ExperimentSnapshot | None) -> tuple[str | None, str, str | None]:
    """(question, refusal, None) for stopping every trial of the search."""
    if snap is None:
        return None, "No experiment selected", None
    info = snap.info
    if not info.live or info.ended:
        return None, f"{info.run_id} is not running ({info.state})", None
    question = (
        f"Stop the whole search {info.run_id}?\n"
        f"Its {info.running} running trial(s) end at their next result; no new trial starts."
    )
    return question + _stopper_note(info.kind), "", None


def write_stop_request(run_dir: Path, run_id: str, trial_id: str | None) -> tuple[str, SeverityLevel]:
    """Leave the request for the search's GpumonStopper (a thread worker calls this); the text tells the user."""
    what = f"trial {trial_id}" if trial_id is not None else "every trial"
    try:
        if trial_id is None:
            request_stop_experiment(run_dir)
        else:
            request_stop_trial(run_dir, trial_id)
    except OSError as err:
        return f"Could not ask to stop {what}: {err}", "error"
    return f"Asked {run_id} to stop {what} (at its next result)", "information"


def _stopper_note(kind: str) -> str:
    if kind == "tune":
        return ""
    return "\n(Only a search that passes gpumon's GpumonStopper to Tune reads this; T in Runs stops the whole run.)"
