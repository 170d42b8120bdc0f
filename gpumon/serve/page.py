"""The page's view, rendered by serve from ``/api/state``'s document: the HTML of the first paint (``/``), of
every ``/page/events`` event and of ``/page/view``. One renderer: the page's script only swaps the newer
rendering in, so the page holds the state before any stream delivers, and reads as text without JavaScript.

Every text that is not gpumon's (host, run and GPU names, alert texts, reasons) goes through ``escape``: shown,
never read as markup.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from html import escape
from importlib import resources
from typing import Any
from urllib.parse import quote

from gpumon.core.format import duration, size
from gpumon.core.format import loss as loss_text
from gpumon.serve.api import clean, state_doc
from gpumon.serve.charts import chart
from gpumon.serve.view import View

History = Callable[[str, int], Sequence[Sequence[Any]]]  # (host, gpu) -> [minute, util %, peak bytes, power W]
SLOT = "<!--view-->"  # where page.html takes the view
LEVEL_CLASS = {"bad": "bad", "warn": "warn", "ok": "ok"}  # the doctor's severity; anything else reads muted


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _num(value: Any, digits: int = 2) -> str:
    if isinstance(value, str):  # "nan", "inf": written as such
        return value
    return "–" if not isinstance(value, int | float) else f"{value:.{digits}f}"


def _secs(value: Any) -> str:
    if not isinstance(value, int | float):
        return "–"
    return (
        f"{value * 1000:.{1 if value < 0.01 else 0}f} ms"
        if value < 1
        else f"{value:.2f} s"
        if value < 60
        else duration(value)
    )


def _loss(value: Any) -> str:
    return value if isinstance(value, str) else (loss_text(value) or "–")


def _clock(t: float, seconds: bool = False) -> str:
    return time.strftime("%H:%M:%S" if seconds else "%H:%M", time.localtime(t))


def _div(cls: str, text: str) -> str:
    return f'<div class="{cls}">{_e(text)}</div>' if cls else f"<div>{_e(text)}</div>"


def gpu_card(host: str, dev: dict[str, Any], held: int, history: History) -> str:
    util = dev.get("gpu_util")
    util = util if isinstance(util, int | float) else None
    out = [
        f'<div class="gpu" data-gpu="{_e(dev.get("index"))}">',
        _div("", f"GPU {dev.get('index')} {dev.get('name') or ''}"),
    ]
    if dev.get("state") and dev.get("state") != "ok":
        out.append(_div("bad", f"{dev['state']}: {dev.get('reason') or ''}"))
    out.append(_div("", "util " + ("N/A" if util is None else f"{util:.0f} %")))
    out.append(f'<div class="bar"><div style="width: {min(100.0, max(0.0, util or 0.0)):.0f}%"></div></div>')
    out.append(_div("", f"mem {size(dev.get('mem_used'))} / {size(dev.get('mem_total'))}"))
    extra = [f"{dev['temperature']} °C"] if isinstance(dev.get("temperature"), int | float) else []
    if isinstance(dev.get("power_draw"), int | float):
        extra.append(f"{dev['power_draw']:.0f} W")
    extra.append(f"{held} process{'es' if held > 1 else ''}" if held else "no process")
    out.append(_div("muted", " · ".join(extra)))
    day = [p for p in history(host, int(dev.get("index", -1))) if len(p) >= 4]
    if day:
        out.append('<div class="gpu-history">')
        for label, col, text in (
            ("util %", 1, lambda v: f"{v:.0f}"),
            ("memory", 2, size),
            ("power W", 3, lambda v: f"{v:.0f}"),
        ):
            points = [(float(p[0]), float(p[col])) for p in day if isinstance(p[col], int | float)]
            out.append(chart(points, label, text, _clock, "not measured", series=label.split()[0], height=54))
        out.append(_div("muted", f"since {_clock(float(day[0][0]))}, a point a minute (24 h kept)"))
        out.append("</div>")
    return "".join(out) + "</div>"


def run_box(run: dict[str, Any], local: bool = False) -> str:
    series = run.get("loss_series")
    if series is None:
        empty = "the curve is on its host's serve"
    elif run.get("live"):
        empty = "no loss curve yet"
    else:
        empty = "no loss recorded"
    points = [(float(s), float(v)) for s, v in series or ()]
    curve = chart(points, "loss", _loss, lambda s: f"step {s:.0f}", empty, series="loss", height=80)
    out = [f'<div class="run" data-run="{_e(run["id"])}" data-state="{_e(run.get("state"))}">', curve]
    state = run.get("state") or ""
    state_cls = "ok" if run.get("live") else "bad" if state == "failed" else "muted"
    out.append(f'<div class="facts"><div><b class="run-id">{_e(run["id"])}</b>')
    if run.get("name"):
        out.append(f" <span>{_e(run['name'])}</span>")
    out.append(f' <span class="{state_cls}">{_e(state)}</span></div>')
    total = f" / {run['total_steps']}" if run.get("total_steps") else ""
    facts = [f"step {_num(run.get('step'), 0)}{total}", f"loss {_loss(run.get('loss'))}"]
    facts.append(f"{_num(run.get('samples_per_s'), 1)} samples/s")
    if isinstance(run.get("tokens_per_s"), int | float):
        facts.append(f"{run['tokens_per_s']:.0f} tokens/s")
    if isinstance(run.get("mfu"), int | float):
        facts.append(f"MFU {100 * run['mfu']:.0f} %")
    facts += [
        f"{_secs(run.get('step_time_s'))}/step",
        f"ETA {_secs(run.get('eta_s'))}",
        f"mem {size(run.get('memory_bytes'))}",
    ]
    out.append(_div("run-facts", " · ".join(facts)))
    if run.get("loss_note"):
        out.append(_div("bad", run["loss_note"]))
    if run.get("headline"):
        level = LEVEL_CLASS.get(str(run.get("headline_level")), "muted")
        out.append(_div(f"headline {level}", f"doctor: {run['headline']}"))
    out += [_div("bad", f"alert: {a}") for a in run.get("alerts") or ()]
    if run.get("snapshots") and local:  # serve's own page of each (snapshot_page.py): no CDN
        links = " ".join(
            f'<a class="snapshot" href="snapshot/{quote(str(run["id"]), safe="")}/{quote(str(n), safe="")}">{_e(n)}</a>'
            for n in run["snapshots"]
        )
        out.append(f'<div class="muted">CUDA snapshots kept: {links}</div>')
    return "".join(out) + "</div></div>"


def host_section(host: dict[str, Any], history: History) -> str:
    link = host.get("link") or ""
    out = [f'<section class="host" data-host="{_e(host["name"])}"><h2>{_e(host["name"])} ']
    out.append(f'<span class="{"ok" if link in ("local", "live") else "bad"}">{_e(link)}</span>')
    if host.get("reason"):
        out.append(f' <span class="muted">{_e(host["reason"])}</span>')
    if host.get("queue"):
        out.append(f' <span class="muted">· {_e(host["queue"])} queued</span>')
    out.append("</h2>")
    if host.get("gpu_reason"):
        out.append(_div("muted", host["gpu_reason"]))
    held: dict[Any, int] = {}
    for proc in host.get("processes") or ():
        held[proc.get("gpu_index")] = held.get(proc.get("gpu_index"), 0) + 1
    gpus = host.get("gpus") or ()
    out.append(
        '<div class="gpus">'
        + "".join(gpu_card(host["name"], d, held.get(d.get("index"), 0), history) for d in gpus)
        + "</div>"
    )
    runs = host.get("runs") or ()
    live, done = [r for r in runs if r.get("live")], [r for r in runs if not r.get("live")]
    local = link == "local"  # a fleet host's snapshots are on its own serve
    out.append(f"<h2>Live runs ({len(live)})</h2>" + "".join(run_box(r, local) for r in reversed(live)))
    if done:
        out.append("<h2>Recent runs</h2>" + "".join(run_box(r, local) for r in reversed(done)))
    return "".join(out) + "</section>"


def alerts_table(alerts: Sequence[dict[str, Any]]) -> str:
    rows = []
    for a in alerts:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a.get("t") or 0))
        who = a.get("run") or a.get("host") or ""
        cells = [("muted", when), ("bad", a.get("kind")), ("", who), ("", a.get("text"))]
        tds = "".join(f'<td class="{cls}">{_e(text)}</td>' for cls, text in cells)
        rows.append(f'<tr class="alert" data-kind="{_e(a.get("kind"))}">{tds}</tr>')
    body = "".join(rows) or '<tr><td class="muted">no alerts</td></tr>'
    return f'<h2>Alerts</h2><table id="alerts"><tbody>{body}</tbody></table>'


def render(doc: dict[str, Any], history: History) -> str:
    """The view of ``doc`` (``/api/state``'s document, cleaned: non-finite numbers as strings)."""
    status = (
        f'<span id="status" class="bad">{_e(doc["error"])}</span>'
        if doc.get("error")
        else (f'<span id="status" class="muted">updated {_clock(doc["time"], seconds=True)}</span>')
    )
    hosts = "".join(host_section(h, history) for h in doc.get("hosts") or ())
    return f'<main id="view"><h1>gpumon {status}</h1>{hosts}{alerts_table(doc.get("alerts") or ())}</main>'


def render_view(view: View, history: History) -> str:
    return render(clean(state_doc(view)), history)


def template() -> str:
    return resources.files("gpumon.serve").joinpath("page.html").read_text(encoding="utf-8")
