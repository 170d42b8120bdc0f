"""A webhook receiver of the tests' own: a stdlib HTTP server on 127.0.0.1 in a thread, with scripted answers."""

from __future__ import annotations

import http.server
import json
import threading
import time
from typing import Any

from tests.ports import free_port


class Receiver:
    """``answers``: what each request in turn gets ("ok", "500", "slow:S" answers 200 after S seconds); once
    they are used up every request gets 200. ``arrived`` holds the bodies answered 200, in order."""

    def __init__(self, port: int | None = None, answers: list[str] | None = None) -> None:
        self.port = port or free_port()
        self.answers = list(answers or [])
        self.requests: list[dict[str, Any]] = []
        self.arrived: list[dict[str, Any]] = []
        self.arrived_at: list[float] = []  # time.time() of each arrival
        self.server: http.server.ThreadingHTTPServer | None = None
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/T0SECRET/B1SECRET"

    def start(self) -> Receiver:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    answer = receiver.answers.pop(0) if receiver.answers else "ok"
                    doc = json.loads(body) if body.startswith(b"{") else {"body": body.decode()}
                    receiver.requests.append({"answer": answer, **doc})
                if answer.startswith("slow:"):
                    time.sleep(float(answer.split(":")[1]))
                code = 500 if answer == "500" else 200
                if code == 200 and not answer.startswith("slow:"):
                    with receiver.lock:
                        receiver.arrived.append(doc)
                        receiver.arrived_at.append(time.time())
                try:
                    self.send_response(code)
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:
                    pass  # the client gave up (a slow answer): as a real server would see it

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
