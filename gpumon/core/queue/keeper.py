"""The queue's keeper: ``python -m gpumon.core.queue.keeper``, one per state dir (host and user).

It holds ``queue/keeper.lock`` (flock) for its whole life, so there are never two; the kernel drops the
lock however it dies. It lives exactly as long as runs wait: ``launch --queue`` starts one when no keeper
holds the lock, and so does any gpumon that lists runs and finds queued ones with no keeper (adoption).
Everything it knows is in files (the entries, blocked_since, the started runs' GPUs), so a keeper killed
and started again picks up where the last one was; only the settle window is watched again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpumon.core.events import EventWriter
from gpumon.core.queue import entry as q
from gpumon.core.queue.plan import Decision, Inputs, plan
from gpumon.core.queue.watch import GpuWatch, reservations
from gpumon.core.runs.record.store import END_STATES, LIVE_STATES, RunStore, state_dir
from gpumon.core.safefs import open_own

LOCK = "keeper.lock"
SETTLE_ENV, INTERVAL_ENV = "GPUMON_QUEUE_SETTLE_S", "GPUMON_QUEUE_INTERVAL_S"
SETTLE_S, BACKFILL_S, INTERVAL_S = 10.0, 600.0, 0.5


def settings() -> dict[str, float]:
    """settle, backfill and interval in seconds: config.toml ``[queue]``, the environment over it."""
    from gpumon.core.config import ConfigError, config_section

    try:
        table = config_section("queue")
    except ConfigError:
        table = {}
    out = {"settle": SETTLE_S, "backfill": BACKFILL_S, "interval": INTERVAL_S}
    for key in out:
        value = table.get(key)
        if isinstance(value, int | float) and value >= 0:
            out[key] = float(value)
    for key, env in (("settle", SETTLE_ENV), ("interval", INTERVAL_ENV)):
        with contextlib.suppress(ValueError):
            out[key] = max(0.0, float(os.environ[env])) if env in os.environ else out[key]
    out["interval"] = max(0.05, out["interval"])
    return out


def _try_lock(root: Path) -> int | None:
    fd = open_own(q.queue_dir(root) / LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def keeper_alive(root: Path) -> bool:
    fd = _try_lock(root)
    if fd is None:
        return True
    os.close(fd)
    return False


def wake(root: Path, events: EventWriter) -> None:
    """A run's end may free what queued runs wait for: make sure a keeper lives to start them (one killed
    with runs waiting would otherwise leave them until someone ran gpumon). Said in the ended run's events."""
    try:
        if ensure_keeper(root):
            events.write("note", text="started the queue's keeper: runs were waiting and none was looking")
    except OSError as err:
        events.write("note", text=f"could not start the queue's keeper: {err}")


def ensure_keeper(root: Path) -> bool:
    """Start a keeper when runs wait and none holds the lock. True when one was started."""
    if not any(e.state == q.WAITING for e in q.load_all(root)) or keeper_alive(root):
        return False
    log = open_own(q.queue_dir(root) / "keeper.log", os.O_WRONLY | os.O_APPEND)
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "gpumon.core.queue.keeper", str(root)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # like a supervisor: closing the terminal does not reach it
            close_fds=True,
        )
    finally:
        os.close(log)
    import threading

    threading.Thread(target=child.wait, name="reap-keeper", daemon=True).start()
    return True


class Keeper:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = RunStore(root)
        self.conf = settings()
        self.watch = GpuWatch(self.conf["settle"])
        self.source: Any = None
        self.last_plan: dict[str, Any] | None = None
        self._stamp: str | None = None  # the change token when the entries were read
        self._cache: list[q.QueueEntry] = []
        self._sig: tuple[Any, ...] | None = None  # the last look's inputs
        self.stopping = False
        self.error = ""  # the last look's traceback (keeper.log has each distinct one once)

    def run(self) -> int:
        held = _try_lock(self.root)
        if held is None:
            return 0  # another keeper has the queue
        fd: int = held
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        try:
            while not self.stopping:
                try:
                    busy = self.tick()
                except Exception:  # noqa: BLE001 - a bug in one look must not strand the queue: say it, look again
                    import traceback

                    text = traceback.format_exc()
                    if text != self.error:  # once per distinct error, not every look
                        self.error = text
                        print(text, file=sys.stderr, flush=True)
                    busy = True
                if not busy:
                    # Nothing waits: let go of the lock, then look once more, so a run queued meanwhile (whose
                    # launcher saw the lock held and started no keeper) is never left without one.
                    os.close(fd)
                    fd = -1
                    if not any(e.state == q.WAITING for e in q.load_all(self.root)):
                        break
                    self._stamp = None
                    again = _try_lock(self.root)
                    if again is None:
                        return 0  # a new keeper took over
                    fd = again
                    continue
                time.sleep(self.conf["interval"])
        finally:
            if fd >= 0:
                os.close(fd)
            if self.source is not None:
                self.source.close()
            from gpumon.core.alerts.delivery import DELIVERER

            DELIVERER.drain()
        return 0

    def tick(self) -> bool:
        """One look: start, fail or explain every waiting run. False when none waits."""
        now = time.time()
        entries = self._entries()
        waiting = [e for e in entries if e.state == q.WAITING]
        if not waiting:
            q.write_plan(self.root, {"time": now, "keeper_pid": os.getpid(), "runs": {}})
            return False
        started = [e for e in entries if e.state == q.STARTED]
        sample = self._sample() if any(e.gpus for e in waiting) else None
        gpus = self.watch.update(sample, now) if sample is not None else []
        deps = {d for e in waiting for d in e.after}
        inputs = Inputs(
            entries=waiting,
            gpus=gpus,
            now=now,
            settle_s=self.conf["settle"],
            backfill_s=self.conf["backfill"],
            reserved=reservations(sample, self._started_gpus(started)) if sample is not None else {},
            dep_states={d: self._state(d) for d in deps},
            cpu_running=sum(1 for e in started if e.gpus == 0),
        )
        # The same look as last time (nothing moved, no GPU changed): nothing to decide or write.
        sig = (
            self._stamp,
            tuple((g.index, g.used, g.settled_free, g.settled_idle, int(g.settling_s), g.procs) for g in gpus),
            tuple(sorted(inputs.reserved.items())),
            tuple(sorted(inputs.dep_states.items(), key=str)),
            inputs.cpu_running,
            int(now // 5),  # the backfill bound is a time: look again every few seconds anyway
        )
        if sig == self._sig:
            return True
        self._sig = sig
        decisions = plan(inputs)
        for decision in decisions:
            if decision.action == "start":
                self._start(decision)
            elif decision.action == "fail":
                self._fail(decision)
            else:
                self._note_blocked(decision, entries)
        runs = {d.run: {"position": d.position, "reason": d.reason} for d in decisions if d.action == "wait"}
        if runs != (self.last_plan or {}).get("runs"):
            self.last_plan = {"time": now, "keeper_pid": os.getpid(), "runs": runs}
            q.write_plan(self.root, self.last_plan)
        return True

    def _sample(self) -> Any:
        if self.source is None:
            from gpumon.core.gpu import open_gpu_source

            self.source = open_gpu_source()
        return self.source.sample()

    def _state(self, run: str) -> str | None:
        record = self.store.load(self.store.runs_dir / run)
        return None if record is None else record.state

    def _entries(self) -> list[q.QueueEntry]:
        """The entries, read again only after a change (``queue/changed`` holds a new token); otherwise only the
        started runs' states are looked at (a waiting run's status changes only with its entry: cancel removes
        it, start is the keeper's)."""
        stamp = q.change_token(self.root)
        if stamp != self._stamp or stamp is None:
            self._stamp = stamp
            self._cache = self._tidy(q.load_all(self.root), waiting_too=True)
        else:
            self._cache = self._tidy(self._cache, waiting_too=False)
        return self._cache

    def _tidy(self, entries: list[q.QueueEntry], waiting_too: bool) -> list[q.QueueEntry]:
        """Entries of runs that ended (or vanished) go; a run marked started whose status still says queued (a
        keeper died between the two writes) waits again."""
        kept = []
        for e in entries:
            if e.state == q.WAITING and not waiting_too:
                kept.append(e)
                continue
            record = self.store.load(self.store.runs_dir / e.run)
            state = None if record is None else record.state
            if state is None or state in END_STATES or (e.state == q.WAITING and state != q.QUEUED):
                if record is None and (self.store.runs_dir / e.run).exists():
                    kept.append(e)  # being written
                    continue
                with q.edit_lock(self.root):
                    q.remove(self.root, e.run)
                continue
            if e.state == q.STARTED and state == q.QUEUED:
                e = replace(e, state=q.WAITING, assigned=(), started_at=None)
                q.save(self.root, e)
            kept.append(e)
        return kept

    def _started_gpus(self, started: list[q.QueueEntry]) -> list[tuple[str, tuple[int, ...], int | None, set[int]]]:
        out = []
        for e in started:
            if not e.assigned:
                continue
            record = self.store.load(self.store.runs_dir / e.run)
            if record is None or record.state not in LIVE_STATES:
                continue
            out.append((e.run, e.assigned, e.gpu_mem, {pid for pid, _ in record.processes()}))
        return out

    def _note_blocked(self, decision: Decision, entries: list[q.QueueEntry]) -> None:
        if decision.blocked_since is None:
            return
        for e in entries:
            if e.run == decision.run and e.blocked_since is None:
                with q.edit_lock(self.root):
                    fresh = q.load(self.root, e.run)
                    if fresh is not None and fresh.state == q.WAITING:
                        q.save(self.root, replace(fresh, blocked_since=decision.blocked_since))

    def _start(self, decision: Decision) -> None:
        from gpumon.core.runs.supervision.launcher import start_supervisor

        with q.edit_lock(self.root):
            e = q.load(self.root, decision.run)
            record = self.store.load(self.store.runs_dir / decision.run)
            if e is None or e.state != q.WAITING or record is None or record.status.get("state") != q.QUEUED:
                return  # cancelled meanwhile
            now = time.time()
            q.save(self.root, replace(e, state=q.STARTED, assigned=decision.gpus, started_at=now, force=False))
            spec = record.spec
            if decision.gpus:
                # NVML's indexes are PCI bus order; CUDA's default order may differ, so say which one we mean.
                order = (("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),)
                env = spec.env if any(k == order[0][0] for k, _ in spec.env) else spec.env + order
                spec = replace(spec, gpus=",".join(map(str, decision.gpus)), env=env)
                from gpumon.core.runs.record.store import write_json

                write_json(record.dir / "spec.json", spec.to_dict())
            status = {**record.status, "queued_s": round(now - record.created, 3), "queue_gpus": list(decision.gpus)}
            try:
                start_supervisor(spec, self.store, record.dir, status, wait_s=0.0)
            except OSError as err:
                self._end(record.dir, f"the queue could not start it: {err}")
                q.remove(self.root, e.run)
                return
        where = f" on GPU {','.join(map(str, decision.gpus))}" if decision.gpus else ""
        waited = now - record.created
        self._alert(record.dir, f"{record.id} started from the queue{where} after {waited:.0f} s", "queue_started")

    def _fail(self, decision: Decision) -> None:
        with q.edit_lock(self.root):
            e = q.load(self.root, decision.run)
            record = self.store.load(self.store.runs_dir / decision.run)
            if e is None or e.state != q.WAITING or record is None or record.status.get("state") != q.QUEUED:
                return
            self._end(record.dir, decision.reason)
            q.remove(self.root, decision.run)
        if decision.impossible:
            self._alert(record.dir, f"{record.id} can never start: {decision.reason}", "queue_impossible")

    def _end(self, run_dir: Path, why: str) -> None:
        from gpumon.core.runs.record.store import read_json, write_json

        status = read_json(run_dir / "status.json")
        now = time.time()
        status.update(state="failed", ended=now, exit_code=None, ended_by="queue", error={"message": why})
        write_json(run_dir / "status.json", status)

    def _alert(self, run_dir: Path, text: str, kind: str) -> None:
        """To the user's channels and the Alerts view; only a run that can never start also marks its row (!)."""
        from gpumon.core.alerts.outbox import send_alert
        from gpumon.core.events import EventWriter
        from gpumon.core.runs.record.store import read_json

        on_alert = tuple(read_json(run_dir / "spec.json").get("on_alert") or ())
        with contextlib.suppress(OSError):
            if kind == "queue_impossible":
                EventWriter(run_dir, "queue").write("alert", text=text, kind=kind)
            send_alert(text, kind, run_dir=run_dir, on_alert=on_alert)


def main(argv: list[str]) -> int:
    os.umask(0o077)
    root = Path(argv[0]) if argv else state_dir()
    return Keeper(root).run()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
