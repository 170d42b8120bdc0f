"""config.toml ``[alerts]``: which channels, which events, how patient.

[alerts]
webhook = "https://hooks.slack.com/services/..."   # POST JSON: the event's fields and a one-line text
format = "json"                                     # json (Slack, Mattermost), discord, ntfy
command = ["notify-me", "--urgent"]                 # argument list; the event's JSON on stdin
desktop = true                                      # notify-send / org.freedesktop.Notifications
on = ["failed", "stalled", "leak", "nan", "restart"]         # the default with only a channel set; "all" for every kind
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from gpumon.core.config import ConfigError, config_path, config_section

#: Every kind an alert can have; ``on`` may name only these (or "all").
KINDS = (
    "failed", "finished", "stopped", "leak", "nan", "stalled", "input_bound", "straggler", "gpu_idle", "restart",
    "queue_started", "queue_impossible", "host_down", "test", "alloc_retries", "fragmentation",
)  # fmt: skip
DEFAULT_ON = ("failed", "stalled", "leak", "nan", "restart")  # a restart is a failure torchrun recovered from
FORMATS = ("json", "slack", "mattermost", "discord", "ntfy")
KEYS = ("webhook", "format", "command", "desktop", "on", "timeout", "window")
TIMEOUT_S = 5.0  # one attempt's limit: a slow receiver never holds a delivery longer
WINDOW_S = 600.0  # at most one alert of a kind per run in this window (a flapping leak, a stall that repeats)


@dataclass(frozen=True)
class AlertSettings:
    webhook: str = ""
    format: str = "json"
    command: tuple[str, ...] = ()
    desktop: bool = False
    on: frozenset[str] = frozenset(DEFAULT_ON)
    timeout_s: float = TIMEOUT_S
    window_s: float = WINDOW_S
    exposed: str = ""  # why the webhook is refused: config.toml readable by others ("" when private)

    @property
    def channels(self) -> tuple[str, ...]:
        """The configured channels' names, in the order they are tried."""
        names = ("webhook",) if self.webhook else ()
        return names + (("command",) if self.command else ()) + (("desktop",) if self.desktop else ())

    def wants(self, kind: str) -> bool:
        return kind in self.on


def mask_url(url: str) -> str:
    """``https://hooks.slack.com/…``: a webhook's path and query are its secret, and so is any user:password."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(a URL that does not parse)"
    return f"{parts.scheme or '?'}://{host}{port}/…"


def exposure(path: Path) -> str:
    """Why ``path`` is too open to hold a secret ("" when only its owner can read it), as ssh says of keys."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return ""
    if not mode & 0o077:
        return ""
    return (
        f"{path} is readable by others (mode {mode:04o}) and holds a webhook URL, which is a secret: "
        f"run chmod 600 {path}; the webhook sends nothing until then"
    )


def load_settings(path: Path | None = None) -> AlertSettings:
    """The ``[alerts]`` table checked. Raises ConfigError (one line: where and what to write)."""
    path = path or config_path()
    table = config_section("alerts", path)
    where = f"{path}: [alerts]"
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; known: {', '.join(KEYS)}")
    webhook = table.get("webhook", "")
    if not isinstance(webhook, str) or (webhook and urlsplit(webhook).scheme not in ("http", "https")):
        raise ConfigError(f'{where}: webhook must be an http(s) URL string, e.g. webhook = "https://..."')
    fmt = table.get("format", "json")
    if fmt not in FORMATS:
        raise ConfigError(f"{where}: format must be one of {', '.join(FORMATS)} (not {fmt!r})")
    command = table.get("command", [])
    if isinstance(command, str):
        raise ConfigError(f'{where}: command is an argument list, never a shell line: command = ["prog", "arg"]')
    if not isinstance(command, list) or not all(isinstance(a, str) and a for a in command):
        raise ConfigError(f'{where}: command must be a list of strings, e.g. command = ["prog", "arg"]')
    desktop = table.get("desktop", False)
    if not isinstance(desktop, bool):
        raise ConfigError(f"{where}: desktop must be true or false")
    on = table.get("on", list(DEFAULT_ON))
    if not isinstance(on, list) or not all(isinstance(k, str) for k in on):
        raise ConfigError(f'{where}: on must be a list of event kinds, e.g. on = ["failed", "finished"]')
    bad = [k for k in on if k not in KINDS and k != "all"]
    if bad:
        raise ConfigError(f"{where}: unknown event {bad[0]!r} in on; known: all, {', '.join(KINDS)}")
    numbers = {}
    for key, default, low in (("timeout", TIMEOUT_S, 0.1), ("window", WINDOW_S, 0.0)):
        value = table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < low:
            raise ConfigError(f"{where}: {key} must be a number of seconds >= {low:g}")
        numbers[key] = float(value)
    return AlertSettings(
        webhook=webhook,
        format=str(fmt),
        command=tuple(command),
        desktop=desktop,
        on=frozenset(KINDS if "all" in on else on),
        timeout_s=numbers["timeout"],
        window_s=numbers["window"],
        exposed=exposure(path) if webhook else "",
    )
