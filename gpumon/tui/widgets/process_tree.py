"""The process tree (nvitop's tree view): each GPU process under the parent processes the core found for it."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpumon.core.model import GpuProcess


@dataclass(frozen=True)
class TreeRow:
    """One row of the tree: a GPU process, or one of its parents (``proc`` None)."""

    key: str  # the row key: "GPU:PID" for a GPU process (as in the flat table), "^PID" for a parent
    prefix: str  # the tree glyphs before the command
    pid: int
    command: str
    proc: GpuProcess | None


@dataclass
class _Node:
    key: str
    pid: int
    command: str
    proc: GpuProcess | None
    children: dict[str, _Node] = field(default_factory=dict)


def tree_rows(processes: list[GpuProcess]) -> list[TreeRow]:
    """The rows in tree order; siblings keep the order of ``processes`` (the table's sort), so the tree of the
    first process comes first. A process with no known parent (simulated, or another PID namespace) is a root."""
    roots: dict[str, _Node] = {}
    for proc in processes:
        level = roots
        for pid, command in reversed(proc.parents):  # the oldest ancestor first
            node = level.setdefault(f"^{pid}", _Node(f"^{pid}", pid, command, None))
            level = node.children
        key = f"{proc.gpu_index}:{proc.pid}"
        level.setdefault(key, _Node(key, proc.pid, proc.command or "", proc))
    rows: list[TreeRow] = []

    def walk(nodes: dict[str, _Node], indent: str, top: bool) -> None:
        for i, node in enumerate(nodes.values()):
            last = i == len(nodes) - 1
            glyph = "" if top else ("└─ " if last else "├─ ")
            rows.append(TreeRow(node.key, indent + glyph, node.pid, node.command, node.proc))
            walk(node.children, "" if top else indent + ("   " if last else "│  "), False)

    walk(roots, "", True)
    return rows
