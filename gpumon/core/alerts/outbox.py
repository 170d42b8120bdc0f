"""An alert raised: recorded in its attempts file, then handed to the delivery thread for the channels it picks."""

from __future__ import annotations

import secrets
import socket
import time
from pathlib import Path
from typing import Any

from gpumon.core.alerts.channels import Channel, channels_of
from gpumon.core.alerts.delivery import DELIVERER, append, sent_within
from gpumon.core.alerts.settings import AlertSettings, load_settings
from gpumon.core.config import ConfigError

ATTEMPTS = "alerts.jsonl"  # in the run's directory; the state dir's holds the alerts of no run (hosts, tests)


_last_good: list[AlertSettings] = []  # this process's last settings read whole (a run's supervisor: its start's)


def settings_or_error() -> tuple[AlertSettings, str]:
    """The user's settings, or the config's mistake with what this process read last (a config broken under a
    live run keeps the channels it had), else the defaults (an alert still goes to --on-alert)."""
    try:
        settings = load_settings()
    except ConfigError as err:
        return (_last_good[0] if _last_good else AlertSettings()), str(err)
    _last_good[:] = [settings]
    return settings, ""


def wanted(kind: str) -> bool:
    """Whether ``on`` picks ``kind`` (finished and stopped are raised only then: they are no news otherwise)."""
    settings, _ = settings_or_error()
    return settings.wants(kind) and bool(settings.channels)


def attempts_path(run_dir: Path | None) -> Path:
    if run_dir is not None:
        return run_dir / ATTEMPTS
    from gpumon.core.runs.record.store import state_dir

    return state_dir() / ATTEMPTS


def _run_fields(run_dir: Path) -> dict[str, Any]:
    from gpumon.core.runs.record.store import read_json

    spec = read_json(run_dir / "spec.json")
    status = read_json(run_dir / "status.json")
    found = {"run": run_dir.name, "state": status.get("state")}
    if spec.get("name"):
        found["name"] = spec["name"]
    return found


def send_alert(
    text: str,
    kind: str,
    *,
    run_dir: Path | None = None,
    on_alert: tuple[str, ...] = (),
    settings: AlertSettings | None = None,
    channels: list[Channel] | None = None,
    deliver: bool = True,
    **fields: Any,
) -> dict[str, Any]:
    """Record the alert and send it off this thread. ``fields`` join the event (state, exit_code, reason,
    headline, fix, host...). ``deliver=False``: only record it (the caller sends). Returns the record written."""
    now = time.time()
    config_error = ""
    if settings is None:
        settings, config_error = settings_or_error()
    if channels is None:
        channels = channels_of(settings, on_alert, run_dir) if settings.wants(kind) else []
    alert: dict[str, Any] = {
        "id": f"{int(now * 1000):x}-{secrets.token_hex(2)}",
        "kind": kind,
        "text": text,
        "t": round(now, 3),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "host": socket.gethostname(),
        **(_run_fields(run_dir) if run_dir is not None else {}),
        **fields,
    }
    path = attempts_path(run_dir)
    record: dict[str, Any] = {"type": "alert", **alert, "channels": [c.label for c in channels]}
    if config_error:
        record["config_error"] = config_error
    last = sent_within(path, kind, settings.window_s, now) if channels and run_dir is not None else None
    if last is not None:
        record["held"] = (
            f"a {kind} alert of this run went out {now - last:.0f} s ago (one per kind per run every "
            f"{settings.window_s:g} s)"
        )
    append(path, record)
    if channels and last is None and deliver:
        DELIVERER.submit(path, alert, channels)
    return record
