"""The text a failed run left behind, gathered for ``classify``: exceptions, torchrun's root cause, log tails; and
why a run's files cannot be read at all."""

from __future__ import annotations

import os
import re
from pathlib import Path

from gpumon.core.doctor.classifier import classify
from gpumon.core.doctor.failures import Failure, exception_text
from gpumon.core.doctor.oom_blocks import attach
from gpumon.core.doctor.oom_evidence import oom_evidence
from gpumon.core.logs.tail import tail_lines
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.record.store import RunRecord

LOG_BYTES = 32 * 1024  # of each log: enough for a traceback and torchrun's report


def failure_text(record: RunRecord, telemetry: RunTelemetry | None = None) -> str:
    """Everything that may name the error, most specific first: the launcher log (torchrun's root-cause
    report), exception events, the error file's message, then each rank's log tail."""
    parts: list[str] = []
    launcher = record.log_path(None)
    if launcher.exists():
        parts.append(_tail(launcher))
    if telemetry is not None:
        parts.extend(exception_text(e) for e in telemetry.exceptions[-4:])
    error = record.status.get("error")
    if isinstance(error, dict):
        parts.extend(str(error[k]) for k in ("message", "traceback") if error.get(k))
    for rank in record.log_ranks():
        parts.append(_tail(record.log_path(rank)))
    return "\n".join(p for p in parts if p.strip())


def run_failure(record: RunRecord, telemetry: RunTelemetry | None = None) -> Failure | None:
    """What the run died of; None when it has not failed (running, finished)."""
    if record.state not in ("failed", "killed", "stopped", "lost"):
        return None
    status, text = record.status, failure_text(record, telemetry)
    found = classify(text, status.get("exit_code"), status.get("signal"), state=record.state)
    if found.kind != "killed" or found.signal != "SIGKILL":  # a CUDA OOM with its snapshot's largest blocks
        return attach(found, telemetry.allocator, record.dir) if telemetry is not None else found
    pids = {int(a or b) for a, b in re.findall(r"\bPID (\d+)|\(pid:? (\d+)\)", text)}  # torchrun's report
    pids |= set(telemetry.pids) if telemetry is not None else set()
    pids |= {status["pid"]} if isinstance(status.get("pid"), int) else set()
    oom = oom_evidence(status, pids, telemetry.rss() if telemetry is not None else None)
    return classify(text, status.get("exit_code"), status.get("signal"), state=record.state, oom=oom)


def _tail(path: Path) -> str:
    return "\n".join(tail_lines(path, 400, max_bytes=LOG_BYTES))


def files_unreadable(run_dir: Path) -> str:
    """Why this user cannot read a run's events or logs (they belong to another user), else ""."""
    for name in ("events", "logs"):
        folder = run_dir / name
        try:
            os.listdir(folder)
        except PermissionError:
            owner: object = "?"
            for path in (folder, run_dir):  # the folder itself, or the run's, when this user cannot look in
                try:
                    owner = os.stat(path).st_uid
                    break
                except OSError:
                    continue
            return (
                f"its files cannot be read by this user (they belong to uid {owner}): "
                "ask its owner, or run gpumon doctor as that user"
            )
        except OSError:
            continue
    return ""
