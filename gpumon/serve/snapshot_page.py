"""``/snapshot/RUN/NAME``: a CUDA allocator snapshot a run keeps (``pymem/oom0.pickle``...), drawn by serve.

PyTorch's memory_viz page loads its script from a CDN; this one is gpumon's own HTML, SVG and CSS, with no script
and nothing from elsewhere (its Content-Security-Policy allows only its inline style). Each device's segments are
bars, widths to scale against the biggest, allocated and free pieces inside in address order; then the lines that
hold the most live bytes and the biggest blocks (core/runs/reading/cuda_snapshot.py reads and summarises the file,
refusing a pickle that names code). Every text from the file (paths, function names) is escaped and redacted.
A file is read once per change (its size and mtime), in the request's thread, never in the poll.
"""

from __future__ import annotations

import os
import threading
from html import escape
from typing import Any

from gpumon.core.doctor.oom import fmt_size
from gpumon.core.redact import redact_all
from gpumon.core.runs.reading.cuda_snapshot import SnapshotError, load, summarise, where

CSP = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
WIDTH, ROW = 1000, 16  # the picture's width and a segment's row height, in SVG units
CACHED = 8  # summaries kept (the newest read)
STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1em; background: #111; color: #ddd; }
h1 { font-size: 1.2em; } h2 { font-size: 1.05em; margin: 1em 0 .3em; } a { color: #8bf; }
.muted { color: #888; } .bad { color: #f66; } code { color: #ccc; }
svg.segments { width: 100%; max-width: 1000px; display: block; background: #181818; }
rect.allocated { fill: #4a9; } rect.free { fill: #333; stroke: #555; stroke-width: .5; }
.key span { display: inline-block; width: .8em; height: .8em; margin: 0 .3em 0 1em; }
table { border-collapse: collapse; } td, th { padding: .1em .8em .1em 0; text-align: left; vertical-align: top; }
td.n { text-align: right; white-space: nowrap; }
"""

_cache: dict[str, tuple[tuple[int, int], str]] = {}
_lock = threading.Lock()


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def page(run_id: str, name: str, path: str) -> str:
    """The whole page for the snapshot at ``path`` (read again only when the file changed)."""
    try:
        st = os.lstat(path)
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = (0, 0)
    with _lock:
        hit = _cache.get(path)
    if hit is not None and hit[0] == stamp:
        body = hit[1]
    else:
        try:
            body = render(redact_all(summarise(load(path))))
        except SnapshotError as err:
            body = f'<p class="bad" id="refused">cannot read it: {_e(err)}</p>'
        with _lock:
            _cache[path] = (stamp, body)
            while len(_cache) > CACHED:
                del _cache[next(iter(_cache))]
    title = f"CUDA snapshot {name} of run {run_id}"
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)} · gpumon</title>'
        f'<style>{STYLE}</style></head><body><main id="snapshot"><p><a href="../../">gpumon</a></p>'
        f"<h1>CUDA snapshot <code>{_e(name)}</code> of run <b>{_e(run_id)}</b></h1>"
        f'<p class="muted">{_e(path)} · also <code>gpumon doctor {_e(run_id)} --snapshot {_e(name)}</code></p>'
        f"{body}</main></body></html>"
    )


def render(summary: dict[str, Any]) -> str:
    """The summary's devices, lines and blocks as HTML."""
    out = [device_section(dev) for dev in summary.get("devices") or ()]
    if not out:
        out.append('<p class="muted">no segments: the allocator held no memory when the snapshot was taken</p>')
    rows = [
        f'<tr><td class="n">{fmt_size(int(s["bytes"]))}</td><td class="n">{_e(s["count"])}</td>'
        f"<td>{_e(where(s))}</td><td>{_e(' < '.join(s.get('stack') or ()))}</td></tr>"
        for s in summary.get("stacks") or ()
    ]
    out.append(
        '<h2>Live bytes by the line that allocated them</h2><table id="stacks"><thead><tr><th>bytes</th>'
        "<th>blocks</th><th>line</th><th>stack, innermost first</th></tr></thead><tbody>"
        + ("".join(rows) or '<tr><td class="muted">nothing allocated</td></tr>')
        + "</tbody></table>"
    )
    blocks = [
        f'<tr><td class="n">{fmt_size(int(b["size"]))}</td>'
        f"<td>{_e(' < '.join(b.get('stack') or ()) or '(no stack recorded)')}</td></tr>"
        for b in summary.get("largest") or ()
    ]
    if blocks:
        out.append('<h2>Largest blocks</h2><table id="largest"><tbody>' + "".join(blocks) + "</tbody></table>")
    return "".join(out)


def device_section(dev: dict[str, Any]) -> str:
    """One device: its numbers, then its segments as bars to scale, allocated and free pieces inside."""
    reserved, free, largest_free = int(dev["reserved"]), int(dev["free"]), int(dev["largest_free"])
    facts = [
        f"reserved {fmt_size(reserved)} in {dev['segments']} segments",
        f"allocated {fmt_size(int(dev['allocated']))}",
        f"free in the cache {fmt_size(free)}",
    ]
    if free:
        facts.append(f"largest free block {fmt_size(largest_free)}")
    drawn = dev.get("drawn") or []
    widest = max([int(s["size"]) for s in drawn] or [1]) or 1
    bars = []
    for row, seg in enumerate(drawn):
        x, y = 0.0, row * ROW
        label = f"segment {fmt_size(int(seg['size']))}, {fmt_size(int(seg['allocated']))} allocated"
        bars.append(f'<g class="segment" data-size="{int(seg["size"])}"><title>{_e(label)}</title>')
        for size, state in seg.get("pieces") or ():
            width = WIDTH * int(size) / widest
            bars.append(
                f'<rect class="{"free" if state == "free" else "allocated"}" x="{x:.2f}" y="{y + 2}" '
                f'width="{width:.2f}" height="{ROW - 4}"><title>{_e(state)} {fmt_size(int(size))}</title></rect>'
            )
            x += width
        bars.append("</g>")
    more = int(dev["segments"]) - len(drawn)
    note = f'<p class="muted">the {len(drawn)} biggest segments of {dev["segments"]}</p>' if more > 0 else ""
    svg = (
        f'<svg class="segments" viewBox="0 0 {WIDTH} {max(1, len(drawn)) * ROW}" role="img" '
        f'aria-label="segments of cuda:{_e(dev["device"])}">{"".join(bars)}</svg>'
    )
    key = '<p class="key muted"><span style="background:#4a9"></span>allocated<span style="background:#333"></span>free'
    return (
        f'<section class="device" data-device="{_e(dev["device"])}"><h2>cuda:{_e(dev["device"])}</h2>'
        f"<p>{_e(' · '.join(facts))}</p>{svg}{key} (each bar a segment, widths to scale)</p>{note}</section>"
    )
