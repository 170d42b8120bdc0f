"""``gpumon doctor RUN --snapshot [FILE]``: a CUDA allocator snapshot kept with a run, summarised as text or JSON
(core/runs/reading/cuda_snapshot.py): no browser, no CDN. Without FILE, every snapshot the run keeps, the OOM's
first; FILE is a path, or a name in the run's folder or its ``pymem/``."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from gpumon.cli.common import fail


def cmd_snapshot(args: argparse.Namespace) -> int:
    from gpumon.core.runs.reading.cuda_snapshot import SnapshotError, load, summarise

    if args.census:
        return fail("--snapshot reads a kept file and --census asks a live run: give one of them")
    paths, run_id = _paths(args)
    if isinstance(paths, int):
        return paths
    docs: list[dict[str, Any]] = []
    for path in paths:
        try:
            docs.append({"path": str(path), "summary": summarise(load(path))})
        except SnapshotError as err:
            docs.append({"path": str(path), "error": str(err)})
    if len(docs) == 1 and "error" in docs[0]:
        return fail(docs[0]["error"])
    if args.json:
        print(json.dumps({"run": run_id, "snapshots": docs}, indent=2))
    else:
        print(_text(docs, run_id))
    return 1 if any("error" in d for d in docs) else 0


def _paths(args: argparse.Namespace) -> tuple[list[Path] | int, str | None]:
    """The snapshots to read and the run they belong to; an exit code (the mistake said) instead of paths."""
    from gpumon.core.runs.reading.cuda_snapshot import kept
    from gpumon.core.runs.record.store import RunNotFound, RunStore

    given = args.snapshot
    if given and args.run == "last" and os.path.lexists(given):  # a file of its own, with no run named
        return [Path(given)], None
    try:
        record = RunStore().resolve(args.run)
    except RunNotFound as err:
        return fail(str(err)), None
    names = ", ".join(p.name for p in kept(record.dir)) or "none"
    if not given:
        found = kept(record.dir)
        if not found:
            return fail(
                f"{record.id} keeps no CUDA snapshot: one is kept at a CUDA out-of-memory (pymem/oom<N>.pickle) "
                "and by a memory window on a CUDA rank (pymem/rank<N>.pickle)"
            ), record.id
        return found, record.id
    for path in (record.dir / "pymem" / given, record.dir / given):
        if os.path.lexists(path) and _inside(path, record.dir):
            return [path], record.id
    if os.path.lexists(given):
        return [Path(given)], record.id
    return fail(f"no snapshot {given!r} here nor in {record.id}'s folder (kept there: {names})"), record.id


def _inside(path: Path, folder: Path) -> bool:
    """``path`` lies under ``folder`` by its name (``../`` does not climb out of the run)."""
    return os.path.normpath(path).startswith(os.path.normpath(folder) + os.sep)


def _text(docs: list[dict[str, Any]], run_id: str | None) -> str:
    from gpumon.core.doctor.oom import fmt_size
    from gpumon.core.runs.reading.cuda_snapshot import text_lines
    from gpumon.core.visible import visible_log

    lines = []
    for doc in docs:
        lines.append(f"{run_id + '  ' if run_id else ''}CUDA snapshot {doc['path']}")
        if "error" in doc:
            lines.append(f"  cannot read it: {doc['error']}")
            continue
        lines += [f"  {line}" for line in text_lines(doc["summary"], fmt_size)]
    return visible_log("\n".join(lines), colour=False)  # frames and paths are the script's, not ours
