"""A multi-node group's state: each node's run read on its host, the group's state and its root cause.

Each node is read where it runs (``gpumon runs --json RUN`` over ssh; ``local`` from
this state dir), all at once. A node that cannot be read says why and the others
still show. Once every node has ended, the result is kept in the group file, so
ended groups cost no ssh.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from gpumon.core.doctor.ended import peer_lost
from gpumon.core.nodes.group import Group, Node, save, stop_group
from gpumon.core.nodes.remote import NodeError, each
from gpumon.core.runs.record.store import END_STATES, LIVE_STATES, RunStore

# How long the other nodes get to end by themselves after one failed or stopped (torchrun takes a node down
# within seconds when its peer goes; a node still waiting in the rendezvous would wait 600 s).
SETTLE_S = 20.0


@dataclass(frozen=True)
class NodeStatus:
    host: str
    rank: int  # node rank
    run: str
    state: str  # the run's state there, or "unreachable"
    step: int | None = None
    loss: float | None = None
    exit_code: int | None = None
    error: str | None = None  # the run's root-cause message
    error_rank: int | None = None  # the global rank that failed, when torchrun named it
    reason: str | None = None  # why the node could not be read
    ended: float | None = None

    @property
    def peer_loss(self) -> bool:
        return self.error is not None and peer_lost(self.error)


def _from_doc(node: Node, doc: dict[str, Any]) -> NodeStatus:
    found = doc.get("error")
    error: dict[str, Any] = found if isinstance(found, dict) else {}
    rank = error.get("rank")
    return NodeStatus(
        node.host,
        node.rank,
        node.run,
        str(doc.get("status", "?")),
        doc.get("step") if isinstance(doc.get("step"), int) else None,
        doc.get("loss") if isinstance(doc.get("loss"), int | float) else None,
        doc.get("exit_code") if isinstance(doc.get("exit_code"), int) else None,
        str(error["message"]) if error.get("message") else None,
        rank if isinstance(rank, int) else None,
        None,
        doc.get("ended") if isinstance(doc.get("ended"), int | float) else None,
    )


def read_node(group: Group, node: Node, root: Path) -> NodeStatus:
    host = group.host(node)
    try:
        if host.local:
            from gpumon.core.runs.reading.summary import read_one
            from gpumon.core.runs.record.listing import run_doc

            doc = run_doc(read_one(RunStore(root).resolve(node.run)))
        else:
            runs = group.reach.call_json(host, ["runs", "--json", node.run], 30.0).get("runs") or [{}]
            doc = runs[0] if isinstance(runs[0], dict) else {}
    except NodeError as err:
        return NodeStatus(node.host, node.rank, node.run, "unreachable", reason=err.reason)
    except LookupError as err:  # the run is gone from its host (pruned)
        return NodeStatus(node.host, node.rank, node.run, "unknown", reason=str(err))
    return _from_doc(node, doc)


def group_state(nodes: list[NodeStatus]) -> str:
    """finished (every node), running/starting/stalled, failing/stopping (a node ended badly, others still live),
    failed/stopped, or unknown (a node cannot be read and the rest do not decide)."""
    states = [n.state for n in nodes]
    live = any(s in LIVE_STATES for s in states)
    if any(s in ("stopped", "killed") for s in states):
        return "stopping" if live else "stopped"
    if any(s in END_STATES and s != "finished" for s in states):
        return "failing" if live else "failed"
    if states and all(s == "finished" for s in states):
        return "finished"
    if live:
        if "stalled" in states:  # one node's ranks stopped stepping: the group waits on them
            return "stalled"
        return "starting" if "starting" in states else "running"
    return "unknown"


def root_cause(nodes: list[NodeStatus]) -> NodeStatus | None:
    """The node whose failure ended the group: one with an error of its own before one that lost a peer,
    then the earliest to end."""
    bad = [n for n in nodes if n.state in END_STATES and n.state != "finished"]
    if not bad:
        return None
    return min(bad, key=lambda n: (n.state not in ("stopped", "killed") and n.peer_loss, n.ended or float("inf")))


def cause_line(node: NodeStatus) -> str:
    """'n1 (node 1, rank 1) failed: RuntimeError: ...'"""
    rank = f", rank {node.error_rank}" if node.error_rank is not None else ""
    what = f"{node.host} (node {node.rank}{rank}) {node.state}"
    if node.state in ("stopped", "killed"):
        return f"{what} by request"
    return f"{what}: {node.error}" if node.error else f"{what} with exit code {node.exit_code}"


def status(group: Group, root: Path, settle: bool = False) -> dict[str, Any]:
    """The group as ``gpumon runs --json`` lists it. ``settle``: once a node failed or stopped, stop the nodes
    still live after SETTLE_S (the launching gpumon's ``runs`` and Runs view do; --readonly does not)."""
    if group.final is not None:
        return group.final
    nodes = [r for r in each(group.nodes, lambda n: read_node(group, n, root)) if isinstance(r, NodeStatus)]
    state = group_state(nodes)
    cause = root_cause(nodes)
    if settle and cause is not None and state in ("failing", "stopping"):
        ended = max((n.ended for n in nodes if n.state in END_STATES and n.ended), default=time.time())
        if time.time() - ended >= SETTLE_S:
            stop_group(group, only=tuple(g for g, n in zip(group.nodes, nodes, strict=True) if n.state in LIVE_STATES))
    doc: dict[str, Any] = {
        "id": group.id,
        "kind": group.kind,
        "program": group.label,
        "state": state,
        "created": group.created,
        "rdzv_endpoint": group.rdzv_endpoint,
        "hosts": [n.host for n in group.nodes],
        "nodes": [asdict(n) for n in nodes],
        "root_cause": cause_line(cause) if cause is not None else None,
    }
    if state in ("finished", "failed", "stopped"):  # every node ended: read from the file from now on
        save(root, replace(group, final=doc))
    return doc
