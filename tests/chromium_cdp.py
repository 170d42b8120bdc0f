"""A real headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: what
Playwright speaks, with no package and no websocket): load a page once, then read its live DOM as often as a
test waits on it. ``--dump-dom`` cannot: it dumps at the load event, or, with a virtual time budget, waits
for every request to end, and an event stream never ends."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any


class Chromium:
    def __init__(self, exe: str, profile: Path) -> None:
        to_chrome_r, self._out = os.pipe()
        self._in, from_chrome_w = os.pipe()
        # above 4, so that setting the child's 3 and 4 never closes one of them
        for_child = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_chrome_r, from_chrome_w)]
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        to_chrome_r, from_chrome_w = for_child
        args = ["--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}", "--remote-debugging-pipe"]
        # the protocol lives on the child's fds 3 (it reads) and 4 (it writes)
        script = f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w} {to_chrome_r}<&- {from_chrome_w}>&-'
        self.proc = subprocess.Popen(
            ["bash", "-c", script, exe, *args],
            pass_fds=(to_chrome_r, from_chrome_w),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self._session: str | None = None

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60.0) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if self._session is not None and not method.startswith("Target."):
            msg["sessionId"] = self._session
        os.write(self._out, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self._in], [], [], left)[0]:
                    raise TimeoutError(f"Chromium did not answer {method}")
                chunk = os.read(self._in, 1 << 16)
                if not chunk:
                    raise EOFError("Chromium closed its pipe")
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:  # events (no id) and older answers are skipped
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result") or {})

    def open(self, url: str, javascript: bool = True) -> None:
        """Load ``url`` in a new tab; ``javascript=False``: as a browser with JavaScript turned off (the page's
        scripts never run; ``dom`` and ``evaluate`` still read it)."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        if not javascript:
            self.call("Emulation.setScriptExecutionDisabled", {"value": True})
        self.call("Page.navigate", {"url": url})

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (DevTools' own: it runs with the page's scripts off)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return result.get("result", {}).get("value")

    def dom(self) -> str:
        """The page's DOM as it is now."""
        return str(self.evaluate("document.documentElement.outerHTML") or "")

    def close(self) -> None:
        with contextlib.suppress(OSError, TimeoutError, EOFError, RuntimeError):
            self.call("Browser.close", timeout=10)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._out)
        os.close(self._in)
