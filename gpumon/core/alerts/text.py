"""An alert in words, the same on every channel: one reason, one whole fix, and where to read more.

A run's alert text is its reason, then the doctor's first fix whole ("failed with exit code 1: <the doctor's
headline>. Fix: <title>: <change>"): ``with_fix`` makes it once, where the alert is raised, so the toast, the
Alerts view, ``gpumon alerts``, ``--on-alert`` and every channel say the same. A channel gets ``message``: who
sent it, the run, that text, and a pointer to the whole diagnosis (``gpumon doctor RUN``: a command, not a
link), in one line a phone shows. It is cut only past the channel's limit, at a word, and never the pointer.

Limits: Discord's ``content`` takes 2,000 characters; ntfy shows a body of up to 4,096 bytes (a longer one
becomes an attachment); Slack truncates ``text`` at 40,000 characters but folds a long message behind "show
more" and recommends 4,000 at most (3,000 is a section block's limit); Mattermost posts take 16,383 (4,000 on
older servers). A desktop notice has no fixed limit; its daemon shows a few lines.
"""

from __future__ import annotations

import socket
from typing import Any

FIX = ". Fix: "
ELLIPSIS = "…"
LIMITS = {"discord": 2000, "ntfy": 4096, "slack": 3000, "mattermost": 4000, "json": 3000, "desktop": 1000}
BYTES = frozenset({"ntfy"})  # limits in UTF-8 bytes, not characters
# The kinds the doctor explains further; a finished or stopped run, a queue's news, have nothing more to say.
DOCTOR_KINDS = frozenset({
    "failed", "nan", "leak", "stalled", "input_bound", "straggler", "gpu_idle", "restart", "alloc_retries",
    "fragmentation",
})  # fmt: skip


def with_fix(text: str, fix: str | None) -> str:
    """ "<reason>. Fix: <fix>": the fix whole; the text as it is when there is none or it already says it."""
    fix = " ".join(str(fix or "").split())
    if not fix or fix in text:
        return text
    return text.rstrip(" .") + FIX + fix


def message(alert: dict[str, Any], channel: str = "json") -> str:
    """What a channel shows: "gpumon@HOST: RUN: TEXT. More: gpumon doctor RUN", control characters replaced,
    within the channel's limit (``LIMITS``)."""
    where = f"gpumon@{alert.get('host') or socket.gethostname()}"
    run = str(alert.get("run") or "")
    kind = str(alert.get("kind") or "")
    text = _printable(str(alert.get("text", "")))
    if not run:
        head = f"{where}: {kind}: " if kind and not text.startswith(kind) else f"{where}: "
        return clip(head + text, LIMITS.get(channel, 3000), channel in BYTES)
    tail = f". More: gpumon doctor {run}" if kind in DOCTOR_KINDS else ""
    head = f"{where}: {run}: "
    limit = LIMITS.get(channel, 3000)
    room = limit - _size(head + tail, channel in BYTES)
    return head + _fit(text, room, channel in BYTES).rstrip(" .") + tail


def _fit(text: str, room: int, nbytes: bool) -> str:
    """The text within ``room``: the reason gives way first, then the fix; each cut at a word."""
    if _size(text, nbytes) <= room:
        return text
    reason, _, fix = text.partition(FIX)
    if fix:
        keep = room - _size(FIX + fix, nbytes)
        if keep >= 40:  # enough of the reason to read: the fix stays whole
            short = clip(reason, keep, nbytes)
            return short + (FIX[1:] if short.endswith(ELLIPSIS) else FIX) + fix
    return clip(text, room, nbytes)


def clip(text: str, limit: int, nbytes: bool = False) -> str:
    """``text`` within ``limit`` characters (or bytes), cut at the last space that fits, with "…"; never
    inside a word (a word longer than the limit alone is cut)."""
    if _size(text, nbytes) <= limit:
        return text
    room = limit - _size(ELLIPSIS, nbytes)
    cut = text.encode()[:room].decode(errors="ignore") if nbytes else text[:room]
    space = cut.rfind(" ")
    if space > 0 and not text[len(cut) : len(cut) + 1].isspace():  # the cut fell inside a word
        cut = cut[:space]
    return cut.rstrip(" ,;:.") + ELLIPSIS


def _size(text: str, nbytes: bool) -> int:
    return len(text.encode()) if nbytes else len(text)


def _printable(text: str) -> str:
    """One line: no newline, tab or escape reaches a chat client or a terminal."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())
