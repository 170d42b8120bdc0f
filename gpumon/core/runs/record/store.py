"""Run directories under gpumon's state dir, and what they say about each run.

$GPUMON_HOME (default $XDG_STATE_HOME/gpumon, ~/.local/state/gpumon), mode 0700
  runs/<id>/spec.json     the validated RunSpec
            command.json  the argument list and extra environment the supervisor starts
            status.json   written atomically by the supervisor: state, pids, times, exit
            exit.json     the command's exit status, written by its parent (runner.py) when it ends
            events/       JSON-lines events, one file per writer (docs/events.md)
            logs/         rank<N>.log per rank; launcher.log is torchrun's own output
            error.json    torchrun's root-cause error file, when a rank failed
            search.toml   kind tune: the search file it started from
            ray_results/  kind tune: Tune's results and checkpoints
            control/      kind tune: stop requests (core/runs/supervision/control.py)
  groups/<id>.json        a multi-node group launched from here: its hosts and each node's run (group.py)
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from gpumon.core.placement.record import state_elsewhere
from gpumon.core.runs.record import cgroup
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.supervision.liveness import frozen, lock_holder, read_file
from gpumon.core.runs.supervision.runner import read_exit
from gpumon.core.safefs import private_dirs, read_bytes, write_atomic

HOME_ENV = "GPUMON_HOME"
# stalled: runs/supervision/stall.py; pending: a Slurm job not started yet (core/slurm)
LIVE_STATES = ("starting", "running", "stalled", "stopping", "unsupervised", "pending")
# exited: its processes ended while neither its supervisor nor its runner watched (adopted), so the exit code is unknown
END_STATES = ("finished", "failed", "stopped", "killed", "lost", "exited")


class RunNotFound(LookupError):
    """No run matches the id a user gave; the message says what to do."""


def state_dir() -> Path:
    """gpumon's state dir, created with mode 0700 (runs hold logs and environments)."""
    if os.environ.get(HOME_ENV):
        root = Path(os.environ[HOME_ENV]).expanduser()
    else:
        base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        root = Path(base) / "gpumon"
    if root in _CHECKED:
        return root
    try:
        private_dirs(root)
        if root.stat().st_mode & 0o077:
            root.chmod(0o700)
        probe = root / f".probe-{os.getpid()}-{secrets.token_hex(4)}"  # threads of one process check at once
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))  # a new name
        probe.unlink(missing_ok=True)
    except OSError as err:
        why = err.strerror or str(err)
        fix = "set GPUMON_HOME to a writable directory"
        raise StateDirError(f"gpumon cannot use its state dir {root}: {why}; {fix}") from err
    _CHECKED.add(root)
    return root


_CHECKED: set[Path] = set()  # state dirs this process made sure of: once each, not at every look


class StateDirError(OSError):
    """The state dir cannot be created or written (under /proc, a file, a read-only parent): one line."""


FULL_BYTES = 1 << 20  # less free space than this on the state dir's filesystem: telemetry cannot keep up


def disk_note(root: Path, live_steps: dict[str, int | None] | None = None) -> str | None:
    """ "state dir full: ..." when the state dir's filesystem is (nearly) full, else None."""
    try:
        stat = os.statvfs(root)
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize
    if free >= FULL_BYTES:
        return None
    live = live_steps or {}
    stopped = ", ".join(f"{run} at step {step}" for run, step in live.items() if step is not None)
    if stopped:
        where = f": telemetry stopped ({stopped}); training goes on"
    elif live:
        where = ": telemetry cannot be recorded; training goes on"
    else:  # no live run: nothing was stopped and nothing trains, but a launch would fail
        return f"state dir full ({free // 1024} KiB free on {root}): new runs cannot start. Free space to launch."
    return f"state dir full ({free // 1024} KiB free on {root}){where}. Free space to resume recording."


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomic: a reader sees the old file or the new one, never half of one."""
    write_text(path, json.dumps(data, indent=1))


def write_text(path: Path, text: str) -> None:
    """Atomic, and private: runs' environments and search files may hold secrets."""
    write_atomic(path, text.encode())


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_bytes(path))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _young(path: Path, seconds: float = 10.0) -> bool:
    try:
        return time.time() - path.stat().st_mtime < seconds
    except OSError:
        return False


def process_alive(pid: int | None, create_time: float | None) -> bool:
    """True if ``pid`` still runs and is the same process (its start time matches)."""
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return create_time is None or abs(proc.create_time() - create_time) < 0.5
    except psutil.Error:
        return False


@dataclass(frozen=True)
class RunRecord:
    id: str
    dir: Path
    spec: RunSpec
    status: dict[str, Any]
    unreadable: tuple[str, ...] = ()  # "status.json is empty", "spec.json is not valid JSON (cut short?)"

    @property
    def status_unreadable(self) -> bool:
        return any(why.startswith("status.json") for why in self.unreadable)

    @property
    def state(self) -> str:
        """status.json's state, except a live one whose supervisor died: "unsupervised" while any of the
        run's processes lives (gpumon can still stop it, and adopts it), else how it ended by its runner's
        record (exit.json), else "lost"; "unsupervised" too while its supervisor is stopped. With status.json
        unreadable, the supervisor's lock says: "running" while it is held, else "unknown" (never "lost":
        nothing is written over a file that could not be read)."""
        if self.status_unreadable:
            if self.supervisor_alive():
                return "running"
            from gpumon.core.runs.record.marks import marked  # the pids are in the file that cannot be read

            return "unsupervised" if marked(self.dir) else "unknown"
        state = str(self.status.get("state", "starting"))
        placed = state_elsewhere(self.spec, self.status) if state in LIVE_STATES else None
        if placed is not None and not self.supervisor_alive():  # its supervisor runs on a node: its place knows
            return placed(state)
        # A fresh supervisor gets a moment to write its first status (a queued run: from when the queue started it).
        asked = self.status.get("start_asked")
        fresh = state == "starting" and time.time() - (asked if isinstance(asked, float) else self.created) <= 10
        if state not in LIVE_STATES or fresh:
            return state
        supervisor = self.supervisor_pid()
        if supervisor is not None and not frozen(supervisor):
            return state
        # Dead, or SIGSTOPped (it watches nothing): a run that ended meanwhile ended as its runner recorded it.
        if self.live_processes() or process_alive(self.status.get("runner_pid"), self.runner_started):
            return "unsupervised"  # its runner still lives: it is about to write the exit
        return self.unwatched_end() or ("lost" if supervisor is None else "unsupervised")

    @property
    def runner_started(self) -> float:
        started = self.status.get("runner_create_time")
        return float(started) if isinstance(started, (int, float)) else -1.0  # no start time: never taken as alive

    def unwatched_end(self) -> str | None:
        """How a run ended after its supervisor died, from the exit its runner wrote (runner.py): finished,
        failed, or stopped (a stop was under way); None when there is no such record."""
        found = read_exit(self.dir, self.status.get("pid"))
        if found is None:
            return None
        if self.status.get("state") == "stopping":
            return "stopped"
        return "finished" if found["exit_code"] == 0 else "failed"

    def processes(self) -> list[tuple[int, float | None]]:
        """(pid, start time) of every process the supervisor saw in the run, the main one first."""
        out: list[tuple[int, float | None]] = []
        pid = self.status.get("pid")
        if isinstance(pid, int):
            out.append((pid, self.status.get("pid_create_time")))
        for entry in self.status.get("procs") or ():
            if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int) and entry[0] != pid:
                out.append((entry[0], entry[1]))
        return out

    def live_processes(self) -> list[int]:
        """The run's processes still alive: pid and start time both match (a reused pid is never taken for one);
        with a cgroup, every process in it too (cgroup.py: whatever its environment or parent)."""
        alive = [pid for pid, started in self.processes() if process_alive(pid, started)]
        grouped = cgroup.members(self.status.get("cgroup"), self.status.get("runner_pid"))
        return alive + sorted(set(grouped) - set(alive))

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def created(self) -> float:
        value = self.status.get("created")
        if isinstance(value, int | float):
            return float(value)
        return self._file_time("spec.json") if self.status_unreadable else 0.0  # the launcher wrote it then

    @property
    def started(self) -> float | None:
        value = self.status.get("started")
        if value is None and self.status_unreadable:  # its supervisor made its lock as it started
            return self._file_time("supervisor.lock") or None
        return value

    def _file_time(self, name: str) -> float:
        try:
            return os.stat(self.dir / name, follow_symlinks=False).st_mtime
        except OSError:
            return 0.0

    @property
    def ended(self) -> float | None:
        """status.json's end; for a run that ended while nobody recorded it (its supervisor dead or stopped), the
        end its runner wrote: its elapsed time stops there."""
        value = self.status.get("ended")
        if value is None and self.status.get("state") in LIVE_STATES and self.state not in LIVE_STATES:
            found = read_exit(self.dir, self.status.get("pid"))
            value = found.get("ended") if found is not None else None
        return value if isinstance(value, int | float) else None

    @property
    def exit_code(self) -> int | None:
        code = self.status.get("exit_code")
        if code is None and self.status.get("state") in LIVE_STATES:  # its end not written yet: the runner's
            found = read_exit(self.dir, self.status.get("pid"))
            return None if found is None else int(found["exit_code"])
        return code

    def elapsed(self, now: float | None = None) -> float | None:
        if self.started is None:
            return None
        end = self.ended if self.ended is not None else (now or time.time())
        return max(0.0, end - self.started)

    def supervisor_alive(self) -> bool:
        return self.supervisor_pid() is not None

    def supervisor_pid(self) -> int | None:
        """The run's live supervisor: status.json's, else whoever holds its lock (liveness.py); None if none."""
        pid = self.status.get("supervisor_pid")
        if isinstance(pid, int) and process_alive(pid, self.status.get("supervisor_create_time")):
            return pid
        return lock_holder(self.dir)

    def reread(self) -> RunRecord:
        """The same run with status.json read again (and whether it can be read)."""
        status, problem = read_file(self.dir / "status.json")
        kept = tuple(why for why in self.unreadable if not why.startswith("status.json"))
        return replace(self, status=status, unreadable=kept + ((problem,) if problem else ()))

    def log_path(self, rank: int | None = None) -> Path:
        """rank<N>.log, or torchrun's own launcher.log with rank None."""
        return self.dir / "logs" / ("launcher.log" if rank is None else f"rank{rank}.log")

    def log_ranks(self) -> list[int]:
        ranks = []
        for path in (self.dir / "logs").glob("rank*.log"):
            digits = path.stem[4:]
            if digits.isdigit():
                ranks.append(int(digits))
        return sorted(ranks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.spec.kind,
            "program": self.spec.label(),
            "status": self.state,
            "exit_code": self.exit_code,
            "started": self.started,
            "ended": self.ended,
            "nproc": self.spec.nproc,
            "gpus": self.spec.gpus,
            "dir": str(self.dir),
            "error": self.status.get("error"),
            "retry_of": self.spec.retry_of,  # --oom-retry: the run this one retries
            "retried_as": self.status.get("retried_as"),
            "group": self.spec.group,  # a multi-node group's id (gpumon launch --hosts); None for one node
            "nnodes": self.spec.nnodes,
            "node_rank": self.spec.node_rank,
            "rdzv_endpoint": self.spec.rdzv_endpoint,
            "stall": self.status.get("stall"),  # while stalled: since, step, where each rank waits (stall.py)
            "last_stall": self.status.get("last_stall"),  # the latest stall that ended, with lasted_s
            "unreadable": list(self.unreadable),  # which of its files could not be read, and why
        }


class RunStore:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or state_dir()
        self.runs_dir = self.root / "runs"

    def new_run_dir(self, spec: RunSpec) -> tuple[str, Path]:
        private_dirs(self.runs_dir)
        stamp = time.strftime("%m%d-%H%M%S")
        for _ in range(100):
            run_id = f"{spec.kind.replace('model-parallel', 'mp')}-{stamp}-{secrets.token_hex(2)}"
            path = self.runs_dir / run_id
            try:
                path.mkdir(mode=0o700)
            except FileExistsError:
                continue
            return run_id, path
        raise OSError(f"could not create a run directory under {self.runs_dir}")

    def load(self, path: Path) -> RunRecord | None:
        """The run in ``path``; None for a folder the launcher is still filling (its spec, then its status, are
        written within milliseconds). A run whose files were damaged later is still listed, saying which."""
        spec_data, spec_problem = read_file(path / "spec.json")
        status, status_problem = read_file(path / "status.json")
        missing = [why for why in (spec_problem, status_problem) if why and why.endswith("is missing")]
        if len(missing) == 2 or (missing and _young(path)):
            return None  # not a run's folder, or one being made
        spec = RunSpec(kind="unknown", name=f"unreadable: {spec_problem}", cwd="")
        if spec_problem is None:
            try:
                spec = RunSpec.from_dict(spec_data)
            except (TypeError, ValueError):
                spec_problem = "spec.json has fields of another shape"
                spec = RunSpec(kind="unknown", name=f"unreadable: {spec_problem}", cwd="")
        unreadable = tuple(why for why in (spec_problem, status_problem) if why)
        return RunRecord(id=path.name, dir=path, spec=spec, status=status, unreadable=unreadable)

    def list(self) -> list[RunRecord]:
        """All runs, oldest first."""
        try:
            paths = [p for p in self.runs_dir.iterdir() if p.is_dir()]
        except OSError:
            return []
        records = [r for r in (self.load(p) for p in paths) if r is not None]
        return sorted(records, key=lambda r: (r.created, r.id))

    def resolve(self, text: str) -> RunRecord:
        """A run by id or a unique id prefix; 'last' or '-' is the newest run. Reads only the runs it names
        (the newest: through the index), so it costs the same with 10 runs or 10,000."""
        if text in ("last", "-"):
            record = self.newest()
            if record is None:
                raise RunNotFound("no runs yet: start one with 'gpumon launch ddp'")
            return record
        if not text.strip():
            raise RunNotFound("an empty run id matches every run: give an id (see 'gpumon runs') or 'last'")
        try:
            names = [p.name for p in self.runs_dir.iterdir()]
        except OSError:
            names = []
        matches = [text] if text in names else [n for n in names if n.startswith(text)]
        records = [r for r in (self.load(self.runs_dir / n) for n in matches) if r is not None]
        if len(records) == 1:
            return records[0]
        if not records:
            raise RunNotFound(f"no run {text!r} (see 'gpumon runs' for the ids)")
        raise RunNotFound(f"{text!r} matches {len(records)} runs; give more of the id (see 'gpumon runs')")

    def newest(self) -> RunRecord | None:
        """The most recently created run: indexed runs by their row, the others (live, new) from their files."""
        from gpumon.core.runs.record.index import RunIndex

        try:
            names = {p.name for p in self.runs_dir.iterdir()}
        except OSError:
            return None
        rows = RunIndex(self.root).rows()
        keys = {n: (float(rows[n]["status"].get("created", 0.0)), n) for n in names if n in rows}
        for name in names - set(keys):  # not indexed yet: live or new runs, read from their files
            record = self.load(self.runs_dir / name)
            if record is not None:
                keys[name] = (record.created, name)
        if not keys:
            return None
        return self.load(self.runs_dir / max(keys.values())[1])
