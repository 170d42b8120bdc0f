"""Who serve answers: requests addressed to it by name (DNS rebinding), pages of its own origin (the event
stream), and no more connections than a few dozen, none of them idle for long.

A page on another site that a local browser opens can resolve its own name to 127.0.0.1 and read whatever a
local server answers, unless that server checks the ``Host`` its requests carry: serve answers the localhost
names, the address it is bound to (each of the machine's addresses when bound to all of them, with its host
names) and the names given with ``--allow-host``; anything else, or no ``Host``, gets 421.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "localhost.localdomain", "ip6-localhost"})
WILDCARDS = frozenset({"0.0.0.0", "::", ""})
MAX_CONNECTIONS = 48  # open connections at once; past them a new one gets 503 and is closed (threads are bounded)
IDLE_TIMEOUT_S = 20.0  # a connection that sends no request (or half of one) for this long is closed


def _interfaces() -> list[tuple[int, str]]:
    """(family, address) of this machine's interfaces, IPv4 and IPv6, without an IPv6 scope."""
    out = []
    with contextlib.suppress(Exception):  # psutil is a dependency; an odd interface table is no reason to fail
        import psutil

        for addresses in psutil.net_if_addrs().values():
            for address in addresses:
                if address.family in (socket.AF_INET, socket.AF_INET6):
                    out.append((int(address.family), address.address.split("%")[0].lower()))
    return out


def _machine_names() -> set[str]:
    """This machine's host names and the addresses of its interfaces (for a bind to all of them)."""
    names = {socket.gethostname().lower()}
    with contextlib.suppress(OSError):
        names.add(socket.getfqdn().lower())
    return names | {address for _, address in _interfaces()}


def open_urls(bind: str, port: int) -> list[str]:
    """The URLs one can open for a server bound to ``bind``: the address itself, or for all of them (0.0.0.0,
    ``::``) the loopback first, then this machine's name (where it resolves) and its interfaces' addresses of that
    family (an IPv6 link-local one left out: it needs a scope a URL seldom carries)."""
    bound = bind.strip("[]")
    if bound not in WILDCARDS:
        hosts = [bound]
    else:
        v6 = ":" in bound
        family = socket.AF_INET6 if v6 else socket.AF_INET
        found = [a for f, a in _interfaces() if f == family and not a.startswith(("127.", "::1", "fe80:"))]
        name = socket.gethostname()
        try:  # the name only where it resolves here: a URL that opens nothing is no help
            socket.getaddrinfo(name, None, family)
        except OSError:
            name = ""
        hosts = ["::1" if v6 else "127.0.0.1", *([name] if name else []), *dict.fromkeys(found)]
    return [f"http://[{h}]:{port}/" if ":" in h else f"http://{h}:{port}/" for h in hosts]


def allowed_hosts(bind: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The names a request's ``Host`` may carry (without its port), lower case."""
    names = set(LOCAL_NAMES) | {name.strip().lower().strip("[]") for name in extra if name.strip()}
    bound = bind.strip("[]").lower()
    if bound in WILDCARDS:
        names |= _machine_names()
    else:
        names.add(bound)
    return frozenset(names)


def host_name(value: str) -> str:
    """``Host``'s name without its port: ``[::1]:9731`` -> ``::1``, ``box:80`` -> ``box``."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def host_problem(host: str | None, allowed: frozenset[str]) -> str | None:
    """Why a request with this ``Host`` is not for serve; None when it is."""
    if not host:
        return "a request needs a Host header naming this server"
    name = host_name(host)
    if name not in allowed:
        return f"not served to Host {name!r}: start gpumon serve with --allow-host {name} if that name is this server"
    return None


def origin_problem(origin: str | None, host: str | None) -> str | None:
    """Why a page of ``origin`` may not read the event stream (a browser sends Origin with it); None: it may.
    The page's own origin is the host it was loaded from, which ``host_problem`` has checked."""
    if origin is None:
        return None  # not a browser's cross-origin request (curl, Prometheus, the page's same-origin GET)
    netloc = urlsplit(origin).netloc.lower()
    if not host or netloc != host.strip().lower():
        return f"the event stream is not served to pages of {origin!r}"
    return None
