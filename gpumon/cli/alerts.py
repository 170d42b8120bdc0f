"""``gpumon alerts [--json]``: what was sent where and what failed, across runs; ``gpumon alerts test``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from gpumon.cli.common import fail, print_table, whole


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    alerts = sub.add_parser(
        "alerts",
        parents=[parent],
        help="list the alerts sent to your channels and what failed; 'test' sends one to each",
        description="Channels come from config.toml [alerts] (webhook, command, desktop, on). "
        "'gpumon alerts test' sends one alert to every channel now and says what each did.",
    )
    alerts.add_argument("action", nargs="?", choices=["test"], help="test: send a test alert to every channel")
    alerts.add_argument("--json", action="store_true", help="print JSON: each alert with every channel's outcome")
    alerts.add_argument("-n", "--limit", type=whole(1), default=50, help="the newest N alerts (default 50)")


def cmd_alerts(args: argparse.Namespace) -> int:
    from gpumon.core.alerts.settings import load_settings
    from gpumon.core.config import ConfigError

    try:
        settings = load_settings()
    except ConfigError as err:
        return fail(str(err))
    if args.action == "test":
        return _test(settings, args.json)
    if settings.exposed:
        print(f"gpumon: {settings.exposed}", file=sys.stderr)
    from gpumon.core.alerts.history import AlertBook

    book = AlertBook(limit=args.limit)
    entries = book.read()
    unread = [
        f"could not read the alerts of {run}: {why} (another user's run?)" for run, why in book.unreadable.items()
    ]
    if args.json:
        doc = {"schema": 1, "channels": _channels(settings), "alerts": [e.to_dict() for e in entries]}
        doc["unreadable"] = [{"run": run, "why": why} for run, why in sorted(book.unreadable.items())]
        print(json.dumps(doc, indent=1))
        return 0
    print(_setup_line(settings))
    for line in sorted(unread):
        print(line, file=sys.stderr)
    if not entries:
        print("no alerts yet")
        return 0
    rows = [("TIME", "RUN", "KIND", "STATUS", "TEXT")]
    details: list[str] = []
    for e in entries:
        rows.append((_when(e.t), e.run or "-", e.kind, e.summary(), " ".join(e.text.split())))  # whole: its fix
    print_table(rows)
    for e in entries:
        bad = {c: s for c, s in e.delivery().items() if not s.startswith("sent")}
        for channel, outcome in bad.items():
            details.append(f"  {_when(e.t)} {e.run or '-'} {e.kind} → {channel}: {outcome}")
        if e.held:
            details.append(f"  {_when(e.t)} {e.run or '-'} {e.kind}: held: {e.held}")
        if e.config_error:
            details.append(f"  {_when(e.t)} {e.run or '-'} {e.kind}: config: {e.config_error}")
    if details:
        print("not delivered:")
        print("\n".join(details))
    return 0


def _channels(settings: Any) -> list[str]:
    from gpumon.core.alerts.channels import channels_of

    return [c.label for c in channels_of(settings)]


def _setup_line(settings: Any) -> str:
    channels = _channels(settings)
    if not channels:
        return "channels: none (add webhook, command or desktop to [alerts] in config.toml)"
    return f"channels: {', '.join(channels)}; on: {', '.join(sorted(settings.on))}"


def _when(t: float) -> str:
    return time.strftime("%m-%d %H:%M:%S", time.localtime(t))


def _test(settings: Any, as_json: bool) -> int:
    """One alert to every channel now, one try each, recorded in the state dir's attempts file."""
    from gpumon.core.alerts.channels import channels_of, send
    from gpumon.core.alerts.delivery import append
    from gpumon.core.alerts.outbox import attempts_path, send_alert

    channels = channels_of(settings)
    if not channels:
        return fail("no alert channel: add webhook = \"URL\", command = [\"prog\"] or desktop = true to [alerts] in "
                    "config.toml")  # fmt: skip
    text = "a test alert from gpumon alerts test"
    record = send_alert(text, "test", settings=settings, channels=channels, deliver=False)
    alert = {k: v for k, v in record.items() if k not in ("type", "channels")}
    path = attempts_path(None)
    results = []
    for channel in channels:
        started = time.monotonic()
        outcome = send(channel, alert)
        took = time.monotonic() - started
        results.append({"channel": channel.label, "ok": outcome.ok, "reason": outcome.reason, "ms": round(took * 1000)})
        append(path, {"type": "attempt", "t": round(time.time(), 3), "id": alert["id"], "run": None, "kind": "test",
                      "channel": channel.label, "try": 1, "ok": outcome.ok, "reason": outcome.reason,
                      "ms": round(took * 1000), "final": True})  # fmt: skip
    if as_json:
        print(json.dumps({"schema": 1, "results": results}, indent=1))
    else:
        for r in results:
            print(f"{r['channel']}: {'sent' if r['ok'] else 'FAILED'} ({r['reason']}, {r['ms']} ms)")
    return 0 if all(r["ok"] for r in results) else 1
