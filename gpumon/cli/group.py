"""Multi-node groups on the command line: their lines in ``gpumon runs`` and ``gpumon stop GROUP``
(``gpumon launch KIND --hosts a,b`` starts them: launch.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from gpumon.cli.common import fail
from gpumon.core import format as fmt
from gpumon.core.visible import visible


def group_docs(root: Path, settle: bool) -> list[dict[str, Any]]:
    """Every group launched from here with its nodes' states (ended groups from their files, no ssh)."""
    from gpumon.core.nodes.group import load_all
    from gpumon.core.nodes.status import status

    return [status(group, root, settle) for group in load_all(root)]


def group_row(doc: dict[str, Any]) -> tuple[str, ...]:
    """A group as one line of ``gpumon runs``: its state, node 0's step and loss, each node's state."""
    from gpumon.core.runs.reading.progress import progress_text, rate_text
    from gpumon.core.runs.record.values import metric_value

    nodes = doc.get("nodes") or []
    first = nodes[0] if nodes else {}
    each = ", ".join(f"{n['host']} {n['state']}" for n in nodes)
    loss = first.get("loss")
    ends = [n["ended"] for n in nodes if n.get("ended")]
    end = max(ends) if ends and doc["state"] in ("finished", "failed", "stopped") else time.time()
    return (
        doc["id"],
        doc["kind"],
        doc["state"],
        "",
        fmt.duration(max(0.0, end - doc["created"])),
        "" if first.get("step") is None else str(first["step"]),
        progress_text(metric_value(first.get("progress")), metric_value(first.get("eta_s"))),
        rate_text(metric_value(first.get("step_time_s"))),
        fmt.loss(metric_value(loss)),  # "nan" in JSON: shown as nan
        "",
        "",
        "",
        "",
        "",
        f"{doc['program']} on {each}",
    )


def print_causes(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        if doc.get("root_cause") and doc["state"] in ("failed", "failing", "stopped", "stopping"):
            print(visible(f"{doc['id']}: {doc['root_cause']}"))
        for node in doc.get("nodes") or []:
            if node.get("reason"):
                print(visible(f"{doc['id']}: {node['host']}: {node['reason']}"))


def cmd_stop_group(text: str, kill: bool) -> int:
    """Stop every node of a group (or the group a run is a node of); exit 1 naming a node left running."""
    from gpumon.core.nodes.group import resolve
    from gpumon.core.runs.record.store import RunNotFound, RunStore

    try:
        group = resolve(RunStore().root, text)
    except RunNotFound as err:
        return fail(str(err))
    return stop_nodes(group, kill)


def stop_nodes(group: Any, kill: bool) -> int:
    from gpumon.core.nodes.group import stop_group

    print(f"{'killing' if kill else 'stopping'} {group.id}: {len(group.nodes)} nodes", flush=True)
    results = stop_group(group, kill)
    for node, ok, line in results:
        print(visible(f"node {node.rank} ({node.host}): {line}"), file=sys.stdout if ok else sys.stderr)
    return 0 if all(ok for _, ok, _ in results) else 1
