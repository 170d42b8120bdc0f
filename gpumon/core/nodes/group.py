"""Multi-node runs: one gpumon run per host, each a torchrun node, under one group id.

``gpumon launch ddp --hosts a,b`` first asks every host for its gpumon (so an
unreachable host starts nothing), starts node 0 on the first host with
``--rdzv-endpoint A:0`` (that gpumon picks a free port there and reports it),
then every other node with that endpoint, at once. Each node is an ordinary run
on its host whose spec names the group; the group id is torchrun's rendezvous id.
The group file lives where the launch ran, ``groups/<id>.json``: the hosts, how to
reach them, each node's run. Status and stop go through each host's own gpumon
(``gpumon runs --json RUN``, ``gpumon stop RUN``; group_status.py). torchrun does
the rest: when a node fails or stops, the other nodes' workers lose their peer
and fail too (measured: docs/fleet.md).
"""

from __future__ import annotations

import secrets
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpumon.core.fleet.hosts import Host, parse_host
from gpumon.core.nodes.remote import NodeError, Reach, each
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunNotFound, read_json, write_json
from gpumon.core.runs.supervision.launcher import node_argv

PREFIX = "g-"  # no run kind starts so: an id names a group or a run, never both
MULTI_NODE_KINDS = ("ddp", "pipeline", "script")


class GroupError(ValueError):
    """A group could not start (a user's mistake, or a host that cannot be used); one line that says why."""


@dataclass(frozen=True)
class Node:
    host: str  # as the user wrote it (parse_host reads it back)
    rank: int
    run: str


@dataclass(frozen=True)
class Group:
    id: str
    kind: str
    label: str
    created: float
    nodes: tuple[Node, ...]
    rdzv_endpoint: str
    reach: Reach
    final: dict[str, Any] | None = None  # the group's last status once every node ended (read without ssh)

    def host(self, node: Node) -> Host:
        return parse_host(node.host)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "label": self.label,
            "created": self.created,
            "nodes": [{"host": n.host, "rank": n.rank, "run": n.run} for n in self.nodes],
            "rdzv_endpoint": self.rdzv_endpoint,
            "ssh": list(self.reach.ssh),
            "gpumon": list(self.reach.gpumon),
            "final": self.final,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Group:
        nodes = tuple(Node(str(n["host"]), int(n["rank"]), str(n["run"])) for n in data["nodes"])
        reach = Reach(tuple(map(str, data.get("ssh") or ("ssh",))), tuple(map(str, data.get("gpumon") or ("gpumon",))))
        final = data.get("final") if isinstance(data.get("final"), dict) else None
        return cls(
            str(data["id"]),
            str(data["kind"]),
            str(data.get("label", "")),
            float(data["created"]),
            nodes,
            str(data["rdzv_endpoint"]),
            reach,
            final,
        )


def groups_dir(root: Path) -> Path:
    path = root / "groups"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def save(root: Path, group: Group) -> None:
    write_json(groups_dir(root) / f"{group.id}.json", group.to_dict())


def load(path: Path) -> Group | None:
    try:
        return Group.from_dict(read_json(path))
    except (KeyError, TypeError, ValueError):
        return None  # half a file or another shape: not shown


def load_all(root: Path) -> list[Group]:
    """Every group launched from here, oldest first."""
    try:
        paths = sorted(groups_dir(root).glob(f"{PREFIX}*.json"))
    except OSError:
        return []
    groups = [g for g in map(load, paths) if g is not None]
    return sorted(groups, key=lambda g: (g.created, g.id))


def is_group_id(text: str) -> bool:
    return text.startswith(PREFIX)


def resolve(root: Path, text: str) -> Group:
    """A group by id or unique prefix (ids start with ``g-``)."""
    matches = [g for g in load_all(root) if g.id == text] or [g for g in load_all(root) if g.id.startswith(text)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise RunNotFound(f"no group {text!r} (see 'gpumon runs' for the ids)")
    raise RunNotFound(f"{text!r} matches {len(matches)} groups; give more of the id")


def group_of(root: Path, run_id: str) -> Group | None:
    """The group launched from here that ``run_id`` is a node of, if any."""
    for group in load_all(root):
        if any(node.run == run_id for node in group.nodes):
            return group
    return None


def configured_reach(ssh: str | None) -> Reach:
    """The user's ssh (``ssh``: --ssh, else $GPUMON_SSH, else [fleet] ssh, else ssh) and remote gpumon
    ([fleet] gpumon), as the fleet reads them; GroupError when a setting cannot be used."""
    from gpumon.core.fleet.hosts import HostError, fleet_reach, load_fleet_config

    try:
        argv, gpumon = fleet_reach(ssh, load_fleet_config(), need_ssh=False)  # a missing ssh fails per host
    except HostError as err:
        raise GroupError(str(err)) from None
    return Reach(tuple(argv), tuple(gpumon))


def rendezvous_host(first: Host, rdzv_host: str | None) -> str:
    """The address the other nodes reach node 0 by: --rdzv-host, else the first host's address as given
    (``local``: this machine's host name)."""
    address = rdzv_host or (socket.gethostname() if first.local else first.address)
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def launch_group(
    spec: RunSpec,
    hosts: list[Host],
    reach: Reach,
    root: Path,
    rdzv_host: str | None = None,
    timeout: float = 60.0,
) -> Group:
    """Start one node per host; on any host's failure stop what started and raise GroupError naming it."""
    if spec.kind not in MULTI_NODE_KINDS:
        raise GroupError(f"{spec.kind} runs on one node: --hosts needs ddp, pipeline or script")
    if len(hosts) < 2:
        raise GroupError("--hosts needs two hosts or more (for one host, drop --hosts)")
    if spec.nnodes != 1 or spec.node_rank or spec.rdzv_endpoint or spec.rdzv_id:
        raise GroupError("--hosts sets --nnodes, --node-rank, --rdzv-endpoint and --rdzv-id itself: drop them")
    problems = [r for r in each(hosts, lambda h: reach.call(h, ["--version"], timeout)) if isinstance(r, NodeError)]
    if problems:
        raise GroupError(f"{problems[0]}; nothing was started")
    group_id = f"{PREFIX}{spec.kind}-{time.strftime('%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    multi = replace(
        spec,
        nnodes=len(hosts),
        rdzv_endpoint=f"{rendezvous_host(hosts[0], rdzv_host)}:0",
        rdzv_id=group_id,
        group=group_id,
    )
    extra = ("--json", "--cwd", spec.cwd) if spec.program is not None and not spec.module else ("--json",)

    def start(rank: int, endpoint: str) -> dict[str, Any]:
        words = node_argv(replace(multi, rdzv_endpoint=endpoint), rank, group_id, (), extra)
        doc = reach.call_json(hosts[rank], words, timeout)
        if not isinstance(doc.get("id"), str):
            raise NodeError(hosts[rank].name, "gpumon there did not report a run id (a different version?)")
        return doc

    started: list[Node] = []
    try:
        first = start(0, str(multi.rdzv_endpoint))
        started.append(Node(hosts[0].name, 0, first["id"]))
        endpoint = str(first.get("rdzv_endpoint") or "")
        if endpoint.endswith(":0") or ":" not in endpoint:
            raise NodeError(hosts[0].name, "gpumon there did not report its rendezvous port (a different version?)")
        results = each(range(1, len(hosts)), lambda rank: start(rank, endpoint))
        for rank, result in enumerate(results, start=1):
            if not isinstance(result, NodeError):
                started.append(Node(hosts[rank].name, rank, result["id"]))
        failed = [r for r in results if isinstance(r, NodeError)]
        if failed:
            raise failed[0]
    except NodeError as err:
        partial = Group(group_id, spec.kind, spec.label(), time.time(), tuple(started), "", reach)
        stop_group(partial, kill=True)
        what = f"stopped the {len(started)} node(s) already started" if started else "nothing was started"
        raise GroupError(f"{err}; {what}") from None
    group = Group(group_id, spec.kind, spec.label(), time.time(), tuple(started), endpoint, reach)
    save(root, group)
    return group


def stop_group(group: Group, kill: bool = False, only: tuple[Node, ...] | None = None) -> list[tuple[Node, bool, str]]:
    """``gpumon stop RUN`` on every node at once (it waits there for the run to end): per node, whether it
    ended and the line that says so, or the reason it could not be stopped."""
    words = ["--node-only", *(["--kill"] if kill else [])]
    nodes = group.nodes if only is None else only
    results = each(nodes, lambda n: group.reach.call(group.host(n), ["stop", n.run, *words], 60.0))
    out = []
    for node, result in zip(nodes, results, strict=True):
        if isinstance(result, NodeError):
            out.append((node, False, result.reason))
        else:
            out.append((node, True, (result.strip().splitlines() or ["stopped"])[-1]))
    return out
