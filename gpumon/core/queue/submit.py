"""Put a run in the queue, and what a user does to a queued run: cancel, move, start now."""

from __future__ import annotations

import re
import time
from pathlib import Path

from gpumon.core.queue import entry as q
from gpumon.core.queue.keeper import ensure_keeper
from gpumon.core.runs.record.spec import RunSpec, SpecError, validate
from gpumon.core.runs.record.store import RunRecord, RunStore, write_json

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)?\s*$", re.IGNORECASE)
_UNIT = {"": 1024**3, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(text: str) -> int:
    """'20G', '20GiB', '512M', '20' (GiB) → bytes. Raises SpecError."""
    match = _SIZE.match(text)
    if not match:
        raise SpecError(f"--gpu-mem takes a size like 20G or 512M, not {text!r}")
    return int(float(match.group(1)) * _UNIT[match.group(2).upper()])


def parse_after(text: str | None, store: RunStore) -> tuple[str, ...]:
    """'RUN[,RUN]' (ids or unique prefixes) → run ids. Raises SpecError naming the one not found."""
    from gpumon.core.runs.record.store import RunNotFound

    if not text:
        return ()
    out = []
    for part in text.split(","):
        try:
            out.append(store.resolve(part.strip()).id)
        except RunNotFound as err:
            raise SpecError(f"--after: {err}") from None
    return tuple(out)


_QUEUE_WORDS = {"--gpus": "gpus", "--gpu-mem": "gpu_mem", "--after": "after", "--priority": "priority"}
_QUEUE_WORDS["--slots"] = "slots"


def parse_line(text: str, store: RunStore) -> dict[str, object]:
    """The launch form's queue field: ``queue`` and the options of ``launch --queue`` (--gpus N, --gpu-mem SIZE,
    --after RUN[,RUN], --priority P, --slots N), as QueueEntry's fields. Raises SpecError."""
    import shlex

    try:
        words = shlex.split(text)
    except ValueError as err:
        raise SpecError(f"queue: {err}") from None
    if words[:1] == ["queue"]:
        words = words[1:]
    given: dict[str, str] = {}
    i = 0
    while i < len(words):
        flag, sep, value = words[i].partition("=")
        if flag not in _QUEUE_WORDS:
            raise SpecError(f"queue: {words[i]!r} is not an option: write queue, or --gpus 2 --gpu-mem 20G ...")
        if not sep:
            if i + 1 >= len(words):
                raise SpecError(f"queue: {flag} needs a value")
            value, i = words[i + 1], i + 1
        given[_QUEUE_WORDS[flag]] = value
        i += 1
    for key in ("gpus", "priority", "slots"):
        if key in given and not given[key].lstrip("-").isdigit():
            raise SpecError(f"queue: --{key} takes a whole number, not {given[key]!r}")
    gpus = int(given.get("gpus", 0))
    if "gpu_mem" in given and not gpus:
        raise SpecError("queue: --gpu-mem is per GPU: add --gpus N")
    if "slots" in given and gpus:
        raise SpecError("queue: --slots is for runs with no GPU: drop --gpus, or drop --slots")
    return {
        "gpus": gpus,
        "gpu_mem": parse_size(given["gpu_mem"]) if "gpu_mem" in given else None,
        "after": parse_after(given.get("after"), store),
        "priority": int(given.get("priority", 0)),
        "slots": int(given["slots"]) if "slots" in given else None,
    }


def host_gpus() -> tuple[int, str]:
    """The GPUs the keeper will see (its own GPU source) and, with none, why: ``(0, " (NVML ...)")``."""
    from gpumon.core.gpu import open_gpu_source

    source = open_gpu_source()
    try:
        sample = source.sample()
    finally:
        source.close()
    return len(sample.devices), "" if sample.devices or not sample.reason else f" ({sample.reason})"


def submit(spec: RunSpec, store: RunStore, visible_gpus: int, **fields: object) -> RunRecord:
    """Validate the spec, write the run directory (state ``queued``) and its entry, and make sure a keeper
    runs. ``fields``: QueueEntry's gpus, gpu_mem, after, priority, slots."""
    spec = validate(spec, visible_gpus)
    count = int(fields.get("gpus") or 0)  # type: ignore[call-overload]
    if count:
        have, why = host_gpus()
        if count > have:  # the keeper would fail it a second later: say it now
            raise SpecError(
                f"--gpus {count}: this host has {have} GPU{'' if have == 1 else 's'}{why}: it could never start"
            )
    run_id, run_dir = store.new_run_dir(spec)
    (run_dir / "logs").mkdir(mode=0o700)
    write_json(run_dir / "spec.json", spec.to_dict())
    write_json(run_dir / "status.json", {"state": q.QUEUED, "created": time.time()})
    q.save(store.root, q.new_entry(run_id, **fields))
    ensure_keeper(store.root)
    record = store.load(run_dir)
    if record is None:
        raise OSError(f"run directory {run_dir} vanished")
    return record


def cancel(root: Path, run: str) -> bool:
    """End a queued run before it starts (state stopped). False when it is not waiting (started, or gone)."""
    with q.edit_lock(root):
        entry = q.load(root, run)
        status_path = root / "runs" / run / "status.json"
        from gpumon.core.runs.record.store import read_json

        status = read_json(status_path)
        if status.get("state") != q.QUEUED or (entry is not None and entry.state != q.WAITING):
            return False
        status.update(state="stopped", ended=time.time(), exit_code=None, ended_by="cancelled in the queue")
        status["error"] = {"message": "cancelled while queued"}
        write_json(status_path, status)
        q.remove(root, run)
    return True


def move(root: Path, run: str, step: int) -> str:
    """Move a waiting run one place ahead (-1) or back (+1); a line for the user."""
    with q.edit_lock(root):
        moved = q.move(q.load_all(root), run, step)
        if moved is None:
            return f"{run} is already {'first' if step < 0 else 'last'} in the queue (or not waiting)"
        for entry in moved:
            q.save(root, entry)
    ensure_keeper(root)
    return f"moved {run} {'ahead' if step < 0 else 'back'}"


def start_now(root: Path, run: str) -> str:
    """Ask the keeper to start a waiting run at its next look, whatever it waits for."""
    from dataclasses import replace

    with q.edit_lock(root):
        entry = q.load(root, run)
        if entry is None or entry.state != q.WAITING:
            return f"{run} is not waiting in the queue"
        q.save(root, replace(entry, force=True))
    ensure_keeper(root)
    return f"starting {run} now"


def is_queued(record: RunRecord) -> bool:
    return record.status.get("state") == q.QUEUED
