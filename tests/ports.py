"""TCP ports for what the tests start (process groups' stores, sshd, slurmd, HTTP servers): the one helper.

A port the kernel hands out (bind to 0) and the test lets go can be handed out again, to any socket another test
opens (a gloo rank's pair listener, an ssh client), before the process it was meant for binds it: beside CPU hogs
two DDP tests' ranks once met on one port and gloo's connectFullMesh failed "Connection closed by peer". These
ports are below the kernel's ephemeral range, where it never hands one out, and each process of the suite
takes them in turn from its own slice, so that no two tests are given the same one."""

from __future__ import annotations

import itertools
import os
import random
import socket

LOW = 10000
SLICES = 8  # xdist workers gw0..gw7 (more share a slice, from a random start)


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _slice() -> range:
    high = max(LOW + SLICES * 100, min(_ephemeral_low(), 32768))
    size = (high - LOW) // SLICES
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % SLICES if worker.isdigit() else 0
    return range(LOW + index * size, LOW + (index + 1) * size)


_ports = _slice()
_turn = itertools.count(random.randrange(len(_ports)))  # two suites at once start apart


def free_port() -> int:
    """A port free on every interface now, no other test of this suite is given, the kernel never hands out."""
    for _ in range(len(_ports)):
        port = _ports[next(_turn) % len(_ports)]
        with socket.socket() as sock:
            try:
                sock.bind(("", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {_ports.start}-{_ports.stop - 1}")
