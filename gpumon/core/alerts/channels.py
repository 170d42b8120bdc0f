"""One alert sent once to one channel: a webhook (urllib), a command (argument list, JSON on stdin), a desktop
notice. Each send says whether it worked, why not, and whether trying again could help."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpumon.core.alerts.settings import AlertSettings, mask_url
from gpumon.core.alerts.text import message
from gpumon.core.redact import redact_all
from gpumon.core.safefs import open_own

COMMAND_TIMEOUT_S = 30.0  # a user's command gets this long (as --on-alert always had)


@dataclass(frozen=True)
class Channel:
    name: str  # webhook, command, desktop, on-alert
    target: tuple[str, ...] = ()  # the URL (webhook), the argument list (command, on-alert)
    format: str = "json"
    timeout_s: float = 5.0
    refused: str = ""  # why this channel sends nothing (an exposed config file)
    run_dir: Path | None = None  # on-alert: its output goes to the run's alerts.log

    @property
    def label(self) -> str:
        """What ``gpumon alerts`` prints for it: never the whole URL."""
        if self.name == "webhook":
            return f"webhook {mask_url(self.target[0])}"
        if self.target:
            return f"{self.name} {os.path.basename(self.target[0])}"
        return self.name


@dataclass(frozen=True)
class Outcome:
    ok: bool
    reason: str = ""  # "HTTP 500", "timed out after 5 s", "exit code 3: <its last line>"
    retry: bool = True  # False: trying again cannot help (a 404, no session bus, a refused config)


def channels_of(settings: AlertSettings, on_alert: tuple[str, ...] = (), run_dir: Path | None = None) -> list[Channel]:
    found = []
    if settings.webhook:
        found.append(Channel("webhook", (settings.webhook,), settings.format, settings.timeout_s, settings.exposed))
    if settings.command:
        found.append(Channel("command", settings.command, timeout_s=COMMAND_TIMEOUT_S))
    if settings.desktop:
        found.append(Channel("desktop", timeout_s=settings.timeout_s))
    if on_alert:
        found.append(Channel("on-alert", on_alert, timeout_s=COMMAND_TIMEOUT_S, run_dir=run_dir))
    return found


def send(channel: Channel, alert: dict[str, Any]) -> Outcome:
    if channel.refused:
        return Outcome(False, channel.refused, retry=False)
    alert = redact_all(alert)  # a log line quoted in the reason may carry a token
    try:
        if channel.name == "webhook":
            return _webhook(channel, alert)
        if channel.name == "desktop":
            return _desktop(channel, alert)
        return _command(channel, alert)
    except Exception as err:  # noqa: BLE001 (a channel's bug never reaches the run: one failed attempt)
        return Outcome(False, f"{type(err).__name__}: {err}", retry=False)


def webhook_body(fmt: str, alert: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """The request's body and headers in the shape the receiving service reads; its text within the service's
    limit (alerts/text.py)."""
    text = message(alert, fmt)
    if fmt == "discord":
        return json.dumps({"content": text}).encode(), {"Content-Type": "application/json"}
    if fmt == "ntfy":  # ntfy shows a plain body; the title and tags are headers
        return text.encode(), {"Title": f"gpumon: {alert['kind']}", "Tags": f"gpumon,{alert['kind']}"}
    if fmt == "slack":  # Slack reads <...> as links and mentions: its three control characters are escaped
        text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    # json, slack, mattermost: Slack and Mattermost show "text" as is and ignore the other fields
    body = {**alert, "message": alert.get("text", ""), "text": text}  # message: the alert's own words
    return json.dumps(body).encode(), {"Content-Type": "application/json"}


def _webhook(channel: Channel, alert: dict[str, Any]) -> Outcome:
    url = channel.target[0]
    body, headers = webhook_body(channel.format, alert)
    request = urllib.request.Request(url, data=body, headers={**headers, "User-Agent": "gpumon"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=channel.timeout_s) as response:
            response.read(1024)
            return Outcome(True, f"HTTP {response.status}")
    except urllib.error.HTTPError as err:
        # A 4xx other than a timeout or rate limit is the URL or the body: the same request fails again.
        return Outcome(False, f"HTTP {err.code} {err.reason}", retry=err.code >= 500 or err.code in (408, 429))
    except TimeoutError:
        return Outcome(False, f"timed out after {channel.timeout_s:g} s")
    except urllib.error.URLError as err:
        reason = err.reason
        if isinstance(reason, TimeoutError):
            return Outcome(False, f"timed out after {channel.timeout_s:g} s")
        return Outcome(False, _scrub(str(getattr(reason, "strerror", None) or reason), url))
    except OSError as err:
        return Outcome(False, _scrub(str(err), url))


def _scrub(text: str, url: str) -> str:
    return text.replace(url, mask_url(url))


def _command(channel: Channel, alert: dict[str, Any]) -> Outcome:
    argv = list(channel.target)
    env = dict(os.environ)
    if channel.name == "on-alert":  # --on-alert's contract: the text as the last argument, and these variables
        argv.append(str(alert.get("text", "")))
        env.update(GPUMON_ALERT=str(alert.get("text", "")), GPUMON_ALERT_KIND=str(alert["kind"]))
        if channel.run_dir is not None:
            env.update(GPUMON_RUN_ID=channel.run_dir.name, GPUMON_RUN_DIR=str(channel.run_dir))
    out: Any = subprocess.PIPE
    log = None
    if channel.run_dir is not None:
        try:  # never through a link planted there, never waiting on a FIFO
            log = os.fdopen(open_own(channel.run_dir / "alerts.log", os.O_WRONLY | os.O_APPEND), "ab")
        except OSError:
            log = None  # no log of the command's output; the command still runs
        out = log if log is not None else subprocess.PIPE
    try:
        done = subprocess.run(
            argv,
            input=json.dumps(alert).encode(),
            env=env,
            stdout=out,
            stderr=out,
            timeout=channel.timeout_s,
            start_new_session=True,  # not one of the run's processes: stopping the run leaves it alone
            close_fds=True,
        )
    except subprocess.TimeoutExpired:  # killed; not started again: it may have done its work before hanging
        return Outcome(False, f"{argv[0]} did not end within {channel.timeout_s:g} s: killed", retry=False)
    except OSError as err:
        return Outcome(False, f"{argv[0]} did not start: {err.strerror or err}", retry=False)
    finally:
        if log is not None:
            log.close()
    if done.returncode == 0:
        return Outcome(True, "exit code 0")
    said = (done.stderr or b"").decode(errors="replace").strip().splitlines()
    return Outcome(False, f"exit code {done.returncode}" + (f": {said[-1][:200]}" if said else ""))


def session_bus() -> str:
    """Why no desktop notice can be shown ("" when a session bus is there)."""
    if os.environ.get("DBUS_SESSION_BUS_ADDRESS") or os.path.exists(f"/run/user/{os.getuid()}/bus"):
        return ""
    return (
        "no session bus here (DBUS_SESSION_BUS_ADDRESS unset, no /run/user/UID/bus): "
        "desktop notices need a desktop login"
    )


def _desktop(channel: Channel, alert: dict[str, Any]) -> Outcome:
    missing = session_bus()
    if missing:
        return Outcome(False, missing, retry=False)
    title, body = f"gpumon: {alert['kind']}", message(alert, "desktop")
    if shutil.which("notify-send"):
        argv = ["notify-send", "--app-name=gpumon", title, body]
    elif shutil.which("gdbus"):
        argv = ["gdbus", "call", "--session", "--dest", "org.freedesktop.Notifications", "--object-path",
                "/org/freedesktop/Notifications", "--method", "org.freedesktop.Notifications.Notify",
                "gpumon", "0", "", title, body, "[]", "{}", "10000"]  # fmt: skip
    else:
        return Outcome(False, "neither notify-send nor gdbus is installed (apt-get install libnotify-bin)", False)
    try:
        done = subprocess.run(argv, capture_output=True, timeout=channel.timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Outcome(False, f"{argv[0]} did not end within {channel.timeout_s:g} s")
    if done.returncode == 0:
        return Outcome(True, argv[0])
    said = done.stderr.decode(errors="replace").strip().splitlines()
    return Outcome(False, f"{argv[0]} exit code {done.returncode}" + (f": {said[-1][:200]}" if said else ""))
