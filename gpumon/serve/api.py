"""``/api/``: the view as JSON, for the page and for scripts (the same numbers as ``/metrics``).

Non-finite numbers are written as the strings "nan", "inf", "-inf" (docs/events.md), never as bare NaN:
browsers' ``JSON.parse`` refuses those.
"""

from __future__ import annotations

import json
import math
from typing import Any

from gpumon import __version__
from gpumon.core.redact import redact
from gpumon.serve.state import ServeState
from gpumon.serve.view import HostView, View

ENDPOINTS = {
    "/api/state": "every host's GPUs, processes, live and recent runs (with loss series), alerts",
    "/api/events": "/api/state's document as server-sent events, every 2 s (at most 16 streams at once)",
    "/api/runs": "the runs of every host (live, and the newest ended), without series",
    "/api/runs/RUN": "one run with its loss series ([step, loss] pairs) and doctor headline",
    "/api/history?host=H&gpu=N": "a GPU's last 24 h, one point a minute: [time, util %, peak memory bytes, power W]",
}


FINITE = frozenset({"loss_series"})  # finite by construction (runs_view.thin): not walked, the bulk of a doc


def clean(value: Any) -> Any:
    """JSON-ready: non-finite numbers as strings, and every text redacted (a script's log line or exception in
    an alert or a run's error can carry a token: core/redact.py)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {str(k): v if k in FINITE else clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def dumps(doc: Any) -> bytes:
    return json.dumps(clean(doc), allow_nan=False, separators=(",", ":")).encode()


def host_doc(host: HostView, series: bool = True) -> dict[str, Any]:
    runs = [r if series else {k: v for k, v in r.items() if k != "loss_series"} for r in host.runs]
    return {
        "name": host.name,
        "link": host.link,
        "reason": host.reason,
        "time": host.time,
        "source": host.source,
        "gpu_reason": host.gpu_reason,
        "queue": host.queue,
        "gpus": list(host.devices),
        "processes": list(host.processes),
        "runs": runs,
    }


def state_doc(view: View) -> dict[str, Any]:
    return {
        "schema": 1,
        "version": __version__,
        "time": view.time,
        "error": view.error,
        "hosts": [host_doc(h) for h in view.hosts],
        "alerts": list(view.alerts),
    }


def route(state: ServeState, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
    """(HTTP status, the document) for a path under /api/."""
    view = state.view
    if path in ("/api", "/api/"):
        return 200, {"version": __version__, "endpoints": ENDPOINTS}
    if path == "/api/state":
        return 200, state_doc(view)
    if path == "/api/runs":
        return 200, {"time": view.time, "runs": [r for h in view.hosts for r in host_doc(h, series=False)["runs"]]}
    if path.startswith("/api/runs/"):
        run_id = path[len("/api/runs/") :]
        for host in view.hosts:
            for run in host.runs:
                if run["id"] == run_id:
                    return 200, run
        return 404, {"error": "no such run among the live and recent ones"}
    if path == "/api/history":
        name = (query.get("host") or [view.hosts[0].name if view.hosts else ""])[0]
        try:
            gpu = int((query.get("gpu") or ["0"])[0])
        except ValueError:
            return 400, {"error": "gpu takes a GPU index"}
        return 200, {"host": name, "gpu": gpu, "bucket_s": state.ring.bucket_s, "points": state.ring.points(name, gpu)}
    return 404, {"error": "no such endpoint", "endpoints": ENDPOINTS}
