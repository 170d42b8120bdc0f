"""The alert a run's end raises: failed (the doctor's headline as its reason, its first fix whole), and, only when
config.toml's ``[alerts] on`` asks for them, finished and stopped by the user."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpumon.core.runs.supervision.alerts import failure_line, fix_words


def end_alert(
    run_dir: Path,
    spec: dict[str, Any],
    status: dict[str, Any],
    fold: Any,
    rc: int | None,
    error: dict[str, Any] | None,
) -> tuple[str, str, dict[str, Any]] | None:
    """(text, kind, fields) for the run that just ended with ``status`` (its end state already in it)."""
    from gpumon.core.alerts.outbox import wanted

    state = status.get("state")
    took = _took(status)
    if state == "failed":
        fold.update()
        why = failure_line(run_dir, error, fold.exceptions)  # the run's own words, for the record
        doctor = _doctor(run_dir, spec, status, fold)
        said = doctor.get("headline") or why[:300]  # the doctor read every log: never a launcher's banner
        code = f"failed with exit code {rc}" if rc is not None else "failed (seen by the gpumon that adopted it)"
        if rc is not None and f"status {rc}" in said:  # "the script exited with status 1: ...": said once
            code = "failed"
        return code + (f": {said}" if said else ""), "failed", {"exit_code": rc, "reason": why[:500], **doctor}
    if state in ("stopped", "killed") and wanted("stopped"):
        return f"{state} by the user{took}", "stopped", {"exit_code": rc}
    if state == "finished" and wanted("finished"):
        return f"finished{took}", "finished", {"exit_code": rc}
    return None


def _took(status: dict[str, Any]) -> str:
    from gpumon.core import format as fmt

    started, ended = status.get("started"), status.get("ended")
    if isinstance(started, int | float) and isinstance(ended, int | float):
        return f" after {fmt.duration(ended - started)}"
    return ""


def _doctor(run_dir: Path, spec: dict[str, Any], status: dict[str, Any], fold: Any) -> dict[str, str]:
    """The doctor's headline and its first fix; nothing when it has nothing (or fails: the alert goes anyway)."""
    try:
        from gpumon.core.doctor.report import diagnose
        from gpumon.core.runs.record.spec import RunSpec
        from gpumon.core.runs.record.store import RunRecord

        record = RunRecord(run_dir.name, run_dir, RunSpec.from_dict(spec), status)
        found = diagnose(record, fold)  # a fresh leak watch: the supervisor's own keeps its state
    except Exception:  # noqa: BLE001 (a doctor bug must not cost the user the alert)
        return {}
    fields = {"headline": found.headline()}
    if found.advice:
        fields["fix"] = fix_words(found.advice[0])
    return fields
