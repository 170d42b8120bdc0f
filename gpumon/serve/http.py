"""The HTTP side: GET/HEAD only, a token for any bind beyond localhost, headers that stop framing.

Routes: ``/`` the page (``page.html`` with the view rendered in, page.py; one file, no CDN), ``/page/view`` (the
view alone) and ``/page/events`` (it as server-sent events), ``/snapshot/RUN/NAME`` (a kept CUDA snapshot drawn,
snapshot_page.py), ``/metrics`` (Prometheus), ``/api/...`` (JSON),
``/api/events`` (``/api/state`` as server-sent events, events.py).
The token is read once from a file that only its owner may read (0600), and compared in constant time
(``hmac.compare_digest``); it may come as ``Authorization: Bearer T``, or, for a browser, as ``?token=T``
once (then a SameSite=Strict, HttpOnly cookie, and the page redirects to its URL without it, so the token leaves the
address bar and the browser's history). Nothing served carries a webhook URL, an environment or a
command line. Every request reads the latest view: no request waits on a GPU or a run's files.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import re
import socket
import stat
import threading
from collections.abc import Callable
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from prometheus_client import exposition

from gpumon.serve.api import dumps, route
from gpumon.serve.events import WRITE_TIMEOUT_S, Events, TooMany, json_event, text_event
from gpumon.serve.exposition import Exposition
from gpumon.serve.guard import IDLE_TIMEOUT_S, MAX_CONNECTIONS, allowed_hosts, host_problem, origin_problem
from gpumon.serve.page import SLOT, render_view, template
from gpumon.serve.state import ServeState
from gpumon.serve.view import View

LOCAL = ("127.0.0.1", "localhost", "::1")
COOKIE = "gpumon_token"
PAGES = ("/", "/index.html")
STREAMS = {"/api/events": "json", "/page/events": "html"}  # path -> the kind of event it streams
# The classic text format every Prometheus 2.x reads (newer clients announce 1.0.0 for the same bytes)
CONTENT_TYPE = getattr(exposition, "CONTENT_TYPE_PLAIN_0_0_4", exposition.CONTENT_TYPE_LATEST)


class TokenError(ValueError):
    """A token file serve refuses: its one line says why."""


def read_token(path: Path) -> str:
    """The token in ``path``: the file must be the user's own and readable by no one else (0600)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        raise TokenError(f"cannot read the token file {path}: {err.strerror}") from None
    st = os.fstat(fd)  # before fdopen: open() of a directory's descriptor raises, and no traceback is one line
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise TokenError(f"the token file {path} is not a regular file: give a file holding the token")
    if st.st_uid != os.geteuid():  # another user could change the token under serve
        os.close(fd)
        raise TokenError(f"the token file {path} belongs to another user (uid {st.st_uid}): use a file of your own")
    with os.fdopen(fd, "rb") as fh:
        if st.st_mode & 0o077:
            raise TokenError(
                f"the token file {path} is readable by others (mode {stat.S_IMODE(st.st_mode):04o}): chmod 600 {path}"
            )
        token = fh.read(4096).decode("utf-8", "replace").strip()
    if len(token) < 16:
        raise TokenError(f"the token in {path} is too short (16 characters at least; e.g. openssl rand -hex 32)")
    return token


def bind_problem(bind: str, token_file: Path | None) -> str | None:
    if bind not in LOCAL and token_file is None:
        return (
            f"--bind {bind} serves beyond this machine: give --token-file FILE (a secret, mode 0600), "
            "or keep the default 127.0.0.1 and reach it through ssh -L"
        )
    return None


def _page() -> tuple[tuple[str, str], str]:
    """The page around its view's slot, and its Content-Security-Policy: its one inline script allowed by hash,
    nothing from elsewhere."""
    html = template()
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'" for s in scripts)
    csp = (
        f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; connect-src 'self'; "
        "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )
    before, after = html.split(SLOT)
    return (before, after), csp


class Handler(BaseHTTPRequestHandler):
    server_version = "gpumon"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    state: ServeState
    token: str | None
    allowed: frozenset[str]  # the names a request's Host may carry (guard.py)
    timeout = IDLE_TIMEOUT_S  # socketserver's: a connection silent this long is closed
    page: tuple[tuple[str, str], str]
    metrics: Callable[[], bytes]
    events: Events

    def version_string(self) -> str:
        return "gpumon"  # no Python version for a scanner to match

    def log_message(self, format: str, *args: Any) -> None:
        pass  # serve's terminal stays quiet; a request log would carry tokens in query strings

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):  # POST, PUT, DELETE, any verb: nothing here writes
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        self.close_connection = True  # its body is never read: the connection must not read it as a request
        self._send(
            405,
            b"gpumon serve is read-only: GET and HEAD only\n",
            "text/plain; charset=utf-8",
            {"Allow": "GET, HEAD", "Connection": "close"},
        )

    def parse_request(self) -> bool:
        """HTTP/0.9 (a request line with no version) is refused at once: the standard library would go on to read
        headers such a client never sends, and hang."""
        words = self.raw_requestline.split()
        if len(words) == 2:
            self.command, self.requestline = "", str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
            self.request_version = self.protocol_version  # so the refusal goes out with a status line
            self.close_connection = True
            self.send_error(400, "HTTP/0.9 is not served: send HTTP/1.0 or 1.1")
            return False
        return super().parse_request()

    def do_HEAD(self) -> None:
        self._get(head=True)

    def do_GET(self) -> None:
        self._get(head=False)

    def _get(self, head: bool) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        extra: dict[str, str] = {}
        host = self.headers.get("Host")
        refused = host_problem(host, self.allowed)  # DNS rebinding: a request not addressed to serve
        code = 421  # Misdirected Request
        if refused is None and url.path in STREAMS:
            refused, code = origin_problem(self.headers.get("Origin"), host), 403  # another site's page
        if refused is not None:
            self.close_connection = True
            body = f"{refused}\n".encode()
            self._send(code, body, "text/plain; charset=utf-8", {"Connection": "close"}, head)
            return
        if self.token is not None:
            given = self._given_token(query)
            if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
                self._send(
                    401,
                    b"a token is needed: Authorization: Bearer TOKEN\n",
                    "text/plain; charset=utf-8",
                    {"WWW-Authenticate": 'Bearer realm="gpumon"'},
                    head,
                )
                return
            if "token" in query:  # a browser's first visit: the cookie carries it from now on
                extra["Set-Cookie"] = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
                if url.path in PAGES:  # and the token leaves the address bar and the history: the same page without
                    rest = urlencode([(k, v) for k, vs in query.items() if k != "token" for v in vs])
                    extra["Location"] = url.path + (f"?{rest}" if rest else "")
                    self._send(303, b"", "text/plain; charset=utf-8", extra, head)
                    return
        path = url.path
        if path == "/metrics":
            self._send(200, self.metrics(), CONTENT_TYPE, extra, head)
        elif path in STREAMS:
            self._stream(extra, head, STREAMS[path])
        elif path == "/page/view":
            self._send(200, self._view().encode(), "text/html; charset=utf-8", extra, head)
        elif path == "/api" or path.startswith("/api/"):
            code, doc = route(self.state, path, query)
            self._send(code, dumps(doc), "application/json", extra, head)
        elif path.startswith("/snapshot/"):
            self._snapshot(path, extra, head)
        elif path in PAGES:
            (before, after), csp = self.page
            html = (before + self._view() + after).encode()
            self._send(200, html, "text/html; charset=utf-8", {**extra, "Content-Security-Policy": csp}, head)
        else:
            self._send(404, b"not found: / (the page), /metrics, /api/\n", "text/plain; charset=utf-8", extra, head)

    def _snapshot(self, path: str, extra: dict[str, str], head: bool) -> None:
        """A kept CUDA snapshot's page: only a file the poll listed for a local run (never a path from the URL)."""
        from gpumon.serve.snapshot_page import CSP, page

        run_id, _, name = unquote(path[len("/snapshot/") :]).partition("/")
        file = self.state.view.snapshots.get((run_id, name))
        if file is None:
            self._send(404, b"no such snapshot: the page links those kept\n", "text/plain; charset=utf-8", extra, head)
            return
        html = page(run_id, name, file).encode()
        self._send(200, html, "text/html; charset=utf-8", {**extra, "Content-Security-Policy": CSP}, head)

    def _view(self) -> str:
        """The latest view rendered (page.py): the first paint holds the state, with or without JavaScript."""
        return render_view(self.state.view, self.state.ring.points)

    def _stream(self, extra: dict[str, str], head: bool, kind: str) -> None:
        """Server-sent events until the viewer goes: the connection is its own thread's, and closes after."""
        self.close_connection = True
        stream = {**extra, "Connection": "close", "X-Accel-Buffering": "no"}  # no proxy holds the events back
        if head:
            self._send(200, b"", "text/event-stream", stream, head=True, length=False)
            return
        started = False

        def write(data: bytes) -> None:
            nonlocal started
            if not started:  # the headers before the first bytes, not before: a refused stream gets a 503
                started = True
                self._send(200, b"", "text/event-stream", stream, head=True, length=False)
            self.wfile.write(data)

        try:
            self.connection.settimeout(WRITE_TIMEOUT_S)  # a viewer that takes no bytes frees its slot
            self.events.stream(lambda: self.state.view, write, kind)
        except TooMany:
            poll = b"/api/state" if kind == "json" else b"/page/view"
            self._send(503, b"too many event streams: poll " + poll + b"\n", "text/plain; charset=utf-8", extra)
        except OSError:
            pass  # the viewer went

    def _given_token(self, query: dict[str, list[str]]) -> str | None:
        auth = self.headers.get("Authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        if query.get("token"):
            return query["token"][0]
        cookie = SimpleCookie()
        try:
            cookie.load(self.headers.get("Cookie", ""))
        except Exception:  # noqa: BLE001 - a malformed cookie is no token
            return None
        morsel = cookie.get(COOKIE)
        return morsel.value if morsel is not None else None

    def _send(
        self,
        code: int,
        body: bytes,
        ctype: str,
        headers: dict[str, str] | None = None,
        head: bool = False,
        length: bool = True,
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        if length:  # an event stream has none: it ends when the connection does
            self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")
        if "Content-Security-Policy" not in (headers or {}):
            self.send_header("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    events: Events | None = None
    max_connections = MAX_CONNECTIONS
    _open = 0  # connections being served, each on its own thread
    _open_lock: Any = None

    def process_request(self, request: Any, client_address: Any) -> None:
        """One thread per connection, up to ``max_connections``; past them 503 and closed, never a thread."""
        if self._open_lock is None:
            self._open_lock = threading.Lock()
        with self._open_lock:
            full = self._open >= self.max_connections
            if not full:
                self._open += 1
        if full:
            with contextlib.suppress(OSError):
                request.settimeout(1.0)
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
                    b"Content-Length: 37\r\nConnection: close\r\n\r\ntoo many connections: try again soon\n"
                )
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._open_lock:
                self._open -= 1

    def server_close(self) -> None:
        if self.events is not None:
            self.events.close()  # the event streams end: their threads hold no connection open
        super().server_close()


class Server6(Server):
    address_family = socket.AF_INET6


def make_server(
    state: ServeState, bind: str, port: int, token: str | None, allow_hosts: tuple[str, ...] = ()
) -> Server:
    """The server, bound (raises OSError when the port is taken); ``serve_forever`` runs it. ``allow_hosts``:
    names beyond localhost and the bound address that requests may be addressed to (guard.py)."""

    def html_event(view: View) -> bytes:
        return text_event(render_view(view, state.ring.points))

    expo, events = Exposition(poll_s=state.interval), Events(kinds={"json": json_event, "html": html_event})
    state.listeners.append(expo.on_view)  # rendered in the poll thread, before the view is published
    state.listeners.append(events.on_view)  # encoded every 2 s for every event stream (each kind watched)

    def metrics() -> bytes:
        return expo.body(state.view)

    handler = type(
        "GpumonHandler",
        (Handler,),
        {
            "state": state,
            "token": token,
            "allowed": allowed_hosts(bind, allow_hosts),
            "page": _page(),
            "metrics": staticmethod(metrics),
            "events": events,
        },
    )
    server = Server6((bind, port), handler) if ":" in bind else Server((bind, port), handler)
    server.events = events
    return server
