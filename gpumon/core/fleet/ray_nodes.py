"""Inside the Ray driver: every node of the cluster, one pinned gpumon actor each, polled once per tick.

``ray`` is handed in (the driver imported it), so importing this module imports no Ray. A node that
leaves the cluster, an actor that dies or stops answering: that node alone reads ``down`` or ``stale``
with the reason in words, the others stay live; a node that joins gets an actor at the next tick.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

from gpumon.core.fleet.ray_agent import NodeAgent

STUCK_S = 30.0  # an actor that has not answered for this long is replaced
# A new actor's first answer waits on a worker's start and gpumon's shipped code: over 30 s on a busy node
# (measured beside CPU hogs), where replacing it only starts that wait again and calls a live node down.
STARTING_S = 120.0
BACKOFF_MAX_S = 30.0
HEAD = "node:__internal_head__"


@dataclass
class Node:
    id: str
    ip: str
    hostname: str
    index: int  # the order it was first seen in: the offset of its simulated seed
    head: bool = False
    alive: bool = True
    actor: Any = None
    pending: Any = None  # the ObjectRef of the sample asked for
    asked: float = 0.0  # monotonic, when it was asked
    placed: float = 0.0  # monotonic, when its current actor was placed
    link: str = "connecting"
    reason: str | None = None
    since: float = 0.0  # wall clock, when ``link`` last changed
    latency_ms: float | None = None
    snapshot: dict[str, Any] | None = None
    last: float | None = None  # monotonic, when the newest snapshot came
    failures: int = 0
    retry_at: float = 0.0  # monotonic: no new actor before this

    def set_link(self, link: str, reason: str | None) -> None:
        if link != self.link:
            self.since = time.time()
        self.link, self.reason = link, reason


def why(err: BaseException) -> str:
    """Ray's error in one line: its first sentence, and the first of the worker's exit detail where it says one."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    first = _sentence(lines[0]) if lines else type(err).__name__
    for line in lines:
        _, found, detail = line.partition("Worker exit detail:")
        if found and detail.strip():
            return f"{first}: {_sentence(detail.strip())}"
    return first


def _sentence(text: str) -> str:
    return text.split(". ")[0].rstrip(".")


class Poller:
    def __init__(self, ray: Any, interval: float, simulate: int, seed: int) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.ray, self.interval, self.simulate, self.seed = ray, interval, simulate, seed
        self._affinity = NodeAffinitySchedulingStrategy
        self._agent = ray.remote(NodeAgent)
        self.nodes: dict[str, Node] = {}

    # -- one tick -------------------------------------------------------------------
    def tick(self, deadline: float) -> None:
        """List the nodes, place missing actors, ask every idle actor and collect answers until ``deadline``."""
        self._list()
        now = time.monotonic()
        for node in self.nodes.values():
            if node.alive and node.actor is None and now >= node.retry_at:
                self._place(node)
            if node.actor is not None and node.pending is None:
                node.pending, node.asked = node.actor.sample.remote(), time.monotonic()
        self._collect(deadline)
        self._age()

    def _list(self) -> None:
        try:
            listed = self.ray.nodes()
        except Exception:  # noqa: BLE001 - the GCS is busy: the actors' answers still tell
            return
        seen = set()
        # The head first, then in Ray's order: a stable index per node for its simulated seed.
        for info in sorted(listed, key=lambda n: HEAD not in (n.get("Resources") or {})):
            node_id = str(info.get("NodeID"))
            seen.add(node_id)
            node = self.nodes.get(node_id)
            alive = bool(info.get("Alive"))
            if node is None:
                if not alive:
                    continue  # gone before we came: not ours to report
                node = self.nodes[node_id] = Node(
                    node_id,
                    str(info.get("NodeManagerAddress") or "?"),
                    str(info.get("NodeManagerHostname") or info.get("NodeManagerAddress") or "?"),
                    index=len(self.nodes),
                    head=HEAD in (info.get("Resources") or {}),
                    since=time.time(),
                )
            if node.alive and not alive:
                message = str(info.get("DeathReasonMessage") or "").strip()
                self._gone(node, "the node left the Ray cluster" + (f": {message}" if message else ""))
        for node in self.nodes.values():
            if node.alive and node.id not in seen:
                self._gone(node, "the node left the Ray cluster")

    def _gone(self, node: Node, reason: str) -> None:
        node.alive = False
        node.actor = node.pending = None  # Ray ends the actor with its node
        node.latency_ms = None
        node.set_link("down", reason)

    def _place(self, node: Node) -> None:
        options: dict[str, Any] = {
            "scheduling_strategy": self._affinity(node.id, soft=False),
            "num_cpus": 0,  # a sampler takes no slot from the user's tasks
            "max_restarts": 0,
        }
        node.placed = time.monotonic()
        try:
            node.actor = self._agent.options(**options).remote(self.simulate, self.seed + node.index)
        except Exception as err:  # noqa: BLE001
            self._failed(node, f"could not place gpumon's actor: {why(err)}")

    def _collect(self, deadline: float) -> None:
        waiting = {node.pending: node for node in self.nodes.values() if node.pending is not None}
        while waiting:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            ready, _ = self.ray.wait(list(waiting), num_returns=1, timeout=remaining)
            for ref in ready:
                node = waiting.pop(ref)
                self._answer(node, ref)

    def _answer(self, node: Node, ref: Any) -> None:
        latency = time.monotonic() - node.asked
        node.pending = None
        try:
            doc = self.ray.get(ref, timeout=self.interval)
        except Exception as err:  # noqa: BLE001 - RayActorError, ActorUnschedulableError, the agent's own
            self._failed(node, f"its gpumon actor failed: {why(err)}")
            return
        node.snapshot, node.last, node.failures = doc, time.monotonic(), 0
        node.latency_ms = round(latency * 1000.0, 1)
        node.set_link("live", None)

    def _failed(self, node: Node, reason: str) -> None:
        """The actor is gone or useless: drop it; a new one is placed after a backoff while the node lives."""
        if node.actor is not None:
            self._kill(node.actor)
        node.actor = node.pending = None
        node.failures += 1
        wait = min(BACKOFF_MAX_S, 2.0 ** (node.failures - 1))
        node.retry_at = time.monotonic() + wait
        node.latency_ms = None
        node.set_link("down", f"{reason} (another in {wait:.0f} s)")

    def _age(self) -> None:
        now = time.monotonic()
        for node in self.nodes.values():
            if node.pending is None:
                continue
            silent = now - (node.last if node.last is not None and node.last > node.asked else node.asked)
            answered = node.last is not None and node.last > node.placed  # this actor has started
            if silent >= (STUCK_S if answered else STARTING_S):
                self._failed(node, f"its gpumon actor has not answered for {silent:.0f} s")
            elif node.link == "live" and node.last is not None and now - node.last >= 2 * self.interval:
                node.link, node.reason = "stale", f"no answer from its gpumon actor for {now - node.last:.0f} s"
                node.since = time.time() - (now - node.last)

    def _kill(self, actor: Any) -> None:
        with contextlib.suppress(Exception):  # already dead
            self.ray.kill(actor)

    # -- out ----------------------------------------------------------------------------
    def doc(self) -> list[dict[str, Any]]:
        names: dict[str, int] = {}
        for node in self.nodes.values():
            names[node.hostname] = names.get(node.hostname, 0) + 1
        out = []
        for node in self.nodes.values():
            # Several nodes on one machine (as in tests) share a host name: the node id tells them apart.
            name = f"ray:{node.hostname}" + (f"/{node.id[:6]}" if names[node.hostname] > 1 else "")
            out.append(
                {
                    "id": node.id,
                    "name": name,
                    "address": node.ip,
                    "hostname": node.hostname,
                    "head": node.head,
                    "link": node.link,
                    "reason": node.reason,
                    "since": node.since,
                    "latency_ms": node.latency_ms,
                    "snapshot": node.snapshot,
                }
            )
        return out

    def close(self) -> None:
        for node in self.nodes.values():
            if node.actor is not None:
                self._kill(node.actor)
            node.actor = node.pending = None
