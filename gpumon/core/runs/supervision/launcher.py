"""Start, find and stop runs. A run is a detached supervisor process that owns the training command.

The supervisor (``supervisor.py``) starts in its own session, so the run
survives gpumon closing and the ssh session dropping; it waits for the
command and writes the exit into ``status.json`` even when no gpumon is open.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

from gpumon.core.placement.record import elsewhere, name_of
from gpumon.core.runs.record import cgroup
from gpumon.core.runs.record.spec import SEARCH_COPY, RunSpec, SpecError, endpoint_port, validate
from gpumon.core.runs.record.store import RunRecord, RunStore, process_alive, write_json, write_text
from gpumon.core.runs.supervision.control import request_stop_experiment, stop_requested
from gpumon.core.runs.supervision.liveness import frozen
from gpumon.core.runs.supervision.reserve import reserve
from gpumon.core.safefs import open_own

BOOTSTRAP_DIR = str(Path(__file__).resolve().parents[3] / "telemetry" / "bootstrap")
STOP_GRACE_S = 10.0
ANSWER_S = 10.0  # a supervisor that has not taken a stop by then does not answer: stop goes round it
# A search asked to stop ends its trials at their next results, then Ray shuts down: 10 s was passed under load.
TUNE_STOP_GRACE_S = 30.0


def build_command(spec: RunSpec, run_id: str) -> list[str]:
    """The argument list a supervisor on this host starts (never a shell string); gpumon.core.placement's
    ``command`` gives any place's."""
    target = ["-m", spec.module] if spec.module else [str(spec.program)]
    if not spec.uses_torchrun:
        return [sys.executable, "-u", *target, *spec.full_args]
    argv = [sys.executable, "-m", "torch.distributed.run"]
    if spec.nnodes == 1:
        argv += ["--standalone"]  # c10d rendezvous on a free port: concurrent runs never collide
    else:
        argv += ["--nnodes", str(spec.nnodes), "--node-rank", str(spec.node_rank)]
        argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", str(spec.rdzv_endpoint)]
        argv += ["--rdzv-id", spec.rdzv_id or run_id]
        # Node 0 hosts the rendezvous store, whatever name the others reach it by (torch guesses from the
        # host name otherwise, and a node that guesses wrong waits for a store nobody serves).
        argv += ["--rdzv-conf", f"is_host={int(spec.node_rank == 0)}"]
    argv += ["--nproc-per-node", str(spec.nproc), "--max-restarts", str(spec.max_restarts)]
    return [*argv, *target, *spec.full_args]


TUNE_CALLBACKS_ENV = "RAY_TUNE_CALLBACKS"
TUNE_CALLBACK = "gpumon.tune.callback.GpumonCallback"


def build_env(spec: RunSpec, run_id: str, run_dir: Path) -> dict[str, str]:
    """What the run's environment adds to gpumon's own."""
    path = os.environ.get("PYTHONPATH")
    env = dict(spec.env)
    env.update(
        GPUMON_RUN_DIR=str(run_dir),
        GPUMON_RUN_ID=run_id,
        PYTHONPATH=BOOTSTRAP_DIR + (os.pathsep + path if path else ""),
        PYTHONUNBUFFERED="1",  # logs stream as they are written
    )
    if spec.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = spec.gpus
    # Ray Tune (>= 2.48) builds the callbacks this names in the driver: a user's own Tune script feeds the
    # Trials view with no code change. Added to the user's list, never replacing it; the callback keeps
    # one instance per run when the script adds it too.
    callbacks = [c for c in os.environ.get(TUNE_CALLBACKS_ENV, "").split(",") if c.strip()]
    if TUNE_CALLBACK not in callbacks:
        env[TUNE_CALLBACKS_ENV] = ",".join([*callbacks, TUNE_CALLBACK])
    env.update(flight_recorder(run_dir, {**os.environ, **env}))
    if spec.uses_torchrun:
        env["GPUMON_TORCHRUN"] = "1"
        env["GPUMON_RANK_LOGS"] = "1"
        env["TORCHELASTIC_ERROR_FILE"] = str(run_dir / "error.json")
        if spec.max_restarts > 0:
            env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"  # gloo restarts hang without it (torch 2.13)
    return env


FR_DIR = "fr"
FR_ENTRIES = "2000"  # the Flight Recorder's ring: its memory is bounded by it (bench/collective_ledger.py)


def flight_recorder(run_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """PyTorch's Flight Recorder on in the ranks: each rank's last collectives, dumped as ``fr/rank_<rank>`` in
    the run's folder (what ``fr_trace`` reads) when NCCL times out (``TORCH_NCCL_DUMP_ON_TIMEOUT``, with each
    one's duration: set only where a GPU may be visible). A variable the user set stays theirs. Gloo has no
    dump on timeout: there the verdict comes from gpumon's own ledger (``core/collective_ledger.py``)."""
    wanted = {"TORCH_FR_BUFFER_SIZE": FR_ENTRIES, "TORCH_FR_DUMP_TEMP_FILE": str(run_dir / FR_DIR / "rank_")}
    with contextlib.suppress(OSError):  # torch writes its dumps there and makes no folder (fr_trace reads it whole)
        os.makedirs(run_dir / FR_DIR, mode=0o700, exist_ok=True)
    if env.get("CUDA_VISIBLE_DEVICES") != "":
        wanted.update(TORCH_NCCL_DUMP_ON_TIMEOUT="1", TORCH_NCCL_ENABLE_TIMING="1")
    if "TORCH_NCCL_TRACE_BUFFER_SIZE" in env:  # its older name: the user's
        wanted.pop("TORCH_FR_BUFFER_SIZE")
    return {key: value for key, value in wanted.items() if key not in env}


def other_node_commands(spec: RunSpec, run_id: str) -> list[list[str]]:
    """The gpumon command to run on each other node of a multi-node run."""
    return [node_argv(spec, rank, spec.rdzv_id or run_id) for rank in range(spec.nnodes) if rank != spec.node_rank]


def node_argv(
    spec: RunSpec, rank: int, rdzv_id: str, gpumon: tuple[str, ...] = ("gpumon",), extra: tuple[str, ...] = ()
) -> list[str]:
    """``gpumon launch ...`` that starts node ``rank`` of the multi-node run ``spec`` describes (``extra``:
    more launch options, before the program)."""
    # The script right after the kind: argparse takes an optional positional at the first one it meets.
    script = [spec.program] if spec.program is not None and not spec.module else []
    argv = [*gpumon, "launch", spec.kind, *script, "--nproc", str(spec.nproc), "--nnodes", str(spec.nnodes)]
    argv += ["--node-rank", str(rank), "--rdzv-endpoint", str(spec.rdzv_endpoint), "--rdzv-id", rdzv_id]
    if spec.max_restarts:
        argv += ["--max-restarts", str(spec.max_restarts)]
    if spec.gpus is not None:
        argv += ["--gpus", spec.gpus]
    for key, value in spec.env:
        argv += ["--env", f"{key}={value}"]
    if spec.name:
        argv += ["--name", spec.name]
    if spec.group:
        argv += ["--group", spec.group]
    argv += extra
    if spec.program is not None and spec.module:
        argv += ["--module", spec.module]
    if spec.args:
        argv += ["--", *spec.args]
    return argv


def free_port() -> int:
    """A TCP port free on every interface of this machine now (node 0's rendezvous; bound, never listened on)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def open_private(path: Path) -> BinaryIO:
    """A file of the state dir to append to, 0600 whatever the umask."""
    return os.fdopen(open_own(path, os.O_WRONLY | os.O_APPEND), "ab")


def launch(
    spec: RunSpec, store: RunStore, visible_gpus: int, wait_s: float = 5.0, grace_s: float = STOP_GRACE_S
) -> RunRecord:
    """Validate, create the run directory and start the supervisor here; raise SpecError for bad input.
    A run that lives elsewhere starts through gpumon.core.placement.launch."""
    here(spec)
    spec = validate(spec, visible_gpus)
    if spec.nnodes > 1 and endpoint_port(spec.rdzv_endpoint) == 0:  # node 0 picks the port the others join
        host = str(spec.rdzv_endpoint).rpartition(":")[0]
        spec = replace(spec, rdzv_endpoint=f"{host}:{free_port()}")
    _, run_dir = store.new_run_dir(spec)
    try:
        (run_dir / "logs").mkdir(mode=0o700)
    except OSError:
        _unmake(run_dir)
        raise
    try:
        if spec.search:  # the run keeps the file it started from, whatever happens to the original
            write_text(run_dir / SEARCH_COPY, Path(spec.cwd, spec.search).read_text())
        write_json(run_dir / "spec.json", spec.to_dict())
        write_command(spec, run_dir, grace_s)
        if not reserve(run_dir):  # a run that could not record its end would read 'starting' for ever
            free = os.statvfs(run_dir).f_bavail * os.statvfs(run_dir).f_frsize // 1024
            why = f"the state dir is full ({free} KiB free on {store.root}; a run keeps 64 KiB for its end)"
            raise OSError(errno.ENOSPC, f"{why}: free space and launch again")
    except OSError:  # e.g. a full state dir: no half-made run is left behind to be listed as unreadable
        _unmake(run_dir)
        raise
    return start_supervisor(spec, store, run_dir, {"created": time.time()}, wait_s, grace_s, written=True)


def _unmake(run_dir: Path) -> None:
    import shutil

    shutil.rmtree(run_dir, ignore_errors=True)


def write_command(spec: RunSpec, run_dir: Path, grace_s: float) -> None:
    """``command.json``: what the supervisor starts."""
    command = {
        "argv": build_command(spec, run_dir.name),
        "env": build_env(spec, run_dir.name, run_dir),
        "cwd": spec.cwd,
        "grace_s": grace_s,
    }
    write_json(run_dir / "command.json", command)


def here(spec: RunSpec, status: Mapping[str, Any] | None = None) -> None:
    """Refuse a run whose place is not this host: a pid in its status is not one of ours to signal."""
    if elsewhere(spec, status):
        raise ValueError(f"a {name_of(spec, status)} run: start and stop it through gpumon.core.placement")


def start_supervisor(
    spec: RunSpec,
    store: RunStore,
    run_dir: Path,
    status: dict[str, object],
    wait_s: float = 5.0,
    grace_s: float = STOP_GRACE_S,
    written: bool = False,
) -> RunRecord:
    """Write the run's command (unless ``written``) and a ``starting`` status (over ``status``'s fields), start
    its supervisor and wait up to ``wait_s`` for it to start the command. Also how the queue's keeper starts a
    queued run."""
    run_id = run_dir.name
    if not written:
        write_command(spec, run_dir, grace_s)
    try:
        write_json(run_dir / "status.json", {**status, "state": "starting", "start_asked": time.time()})
        log = open_private(run_dir / "supervisor.log")
    except OSError:
        if written:  # a launch's own run dir: nothing of it is left (a queued run keeps its place)
            _unmake(run_dir)
        raise
    with log as err:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "gpumon.core.runs.supervision.supervisor", str(run_dir)],
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=err,
            start_new_session=True,  # not in gpumon's session: closing the terminal does not reach it
            close_fds=True,
        )
    # Reap it when it ends, so a long-lived gpumon that launched it keeps no zombie.
    threading.Thread(target=supervisor.wait, name=f"reap-{run_id}", daemon=True).start()
    deadline = time.monotonic() + wait_s
    record = store.load(run_dir)
    while record is not None and record.status.get("state") == "starting" and time.monotonic() < deadline:
        time.sleep(0.05)
        record = store.load(run_dir)
    if record is None:
        raise OSError(f"run directory {run_dir} vanished")
    return record


def stop(record: RunRecord, kill: bool = False) -> str:
    """Ask the run's supervisor to stop it: SIGTERM to the whole run, SIGKILL after a grace period.

    ``kill`` sends SIGKILL at once. A search (kind tune) is first asked to end its
    trials itself, which keeps their results; stopping it again sends SIGTERM.
    Returns a line for the user.
    """
    if not record.live:
        return f"{record.id} is not running ({record.state})"
    if record.spec.kind == "tune" and not kill and not stop_requested(record.dir):
        request_stop_experiment(record.dir)
        return f"asked {record.id} to stop its trials (stop again to end it now)"
    here(record.spec, record.status)  # a supervisor elsewhere is not signalled from here
    supervisor = record.supervisor_pid()  # status.json's, else the lock's holder (an unreadable status)
    if supervisor and not frozen(supervisor):
        os.kill(supervisor, signal.SIGUSR1 if kill else signal.SIGTERM)
        return f"{'killing' if kill else 'stopping'} {record.id}"
    if supervisor:  # SIGSTOPped: it cannot answer, and resumed later it would act on a run that ended
        return dismiss_supervisor(record, supervisor, "was stopped (SIGSTOP)", kill)
    return stop_directly(record, kill)


def answering_supervisor(record: RunRecord) -> int | None:
    """The run's supervisor when it can answer a stop (alive, not stopped by SIGSTOP); else None."""
    supervisor = record.supervisor_pid()
    return supervisor if supervisor and not frozen(supervisor) else None


def answered(record: RunRecord, since: float, timeout_s: float = ANSWER_S) -> bool:
    """Whether the run's supervisor took a stop asked at ``since`` within ``timeout_s``: it wrote the request
    (``stop_requested``), or the run ended, or its processes are gone."""
    deadline = time.monotonic() + timeout_s
    while True:
        current = record.reread()
        asked = current.status.get("stop_requested")
        if isinstance(asked, (int, float)) and asked >= since - 1.0:
            return True
        if not current.live or not current.live_processes():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def dismiss_supervisor(record: RunRecord, supervisor: int, why: str, kill: bool) -> str:
    """A supervisor that cannot answer is SIGKILLed (the run's runner keeps its output flowing and records its
    exit: runner.py), and the run's processes are signalled directly."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(supervisor, signal.SIGKILL)
    started = record.status.get("supervisor_create_time")
    deadline = time.monotonic() + 2.0
    while process_alive(supervisor, started) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not record.status_unreadable:  # the stop as it would have written it: the run reads stopped when it ends
        with contextlib.suppress(OSError):
            stopping = {**record.status, "state": "stopping", "stop_requested": time.time()}
            write_json(record.dir / "status.json", stopping)
    return stop_directly(record, kill, f"its supervisor, pid {supervisor}, {why}: killed it")


def stop_directly(record: RunRecord, kill: bool = False, why: str = "its supervisor was gone") -> str:
    """No supervisor to ask: signal every process of the run ourselves, each checked by start time."""
    status = record.status
    sig = signal.SIGKILL if kill else signal.SIGTERM
    sent = 0
    if process_alive(status.get("pid"), status.get("pid_create_time")) and status.get("pgid"):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(status["pgid"]), sig)
            sent += 1
    from gpumon.core.runs.record.marks import descendants, marked

    targets = {pid: t for pid, t in record.processes() if t is not None}
    targets.update(marked(record.dir, record.created or None))  # those its status never named (marks.py)
    targets.update(descendants(status.get("runner_pid"), status.get("runner_create_time")))  # no mark needed
    targets.update(cgroup.members(status.get("cgroup"), status.get("runner_pid")))  # whatever left both
    for pid, started in targets.items():
        if process_alive(pid, started):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
                sent += 1
    if not sent:
        return f"{record.id} has no live process left"
    return f"sent {sig.name} to {record.id} ({why})"


def adopt(record: RunRecord) -> None:
    """Start a new supervisor for an unsupervised run: it records the end and obeys stop (no-op if one lives)."""
    with open_private(record.dir / "supervisor.log") as err:
        child = subprocess.Popen(
            [sys.executable, "-m", "gpumon.core.runs.supervision.supervisor", "--adopt", str(record.dir)],
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=err,
            start_new_session=True,
            close_fds=True,
        )
    threading.Thread(target=child.wait, name=f"reap-adopt-{record.id}", daemon=True).start()


def record_end(record: RunRecord, state: str, why: str) -> None:
    """Write the end of a run that no supervisor will write (its processes are gone), with the exit code its
    runner recorded when there is one."""
    from gpumon.core.runs.supervision.runner import read_exit

    found = read_exit(record.dir, record.status.get("pid")) or {}
    status = {**record.status, "state": state, "ended": found.get("ended", time.time()), "ended_by": why}
    status["exit_code"] = found.get("exit_code")
    if found.get("signal"):
        status["signal"] = found["signal"]
    write_json(record.dir / "status.json", status)
    cgroup.remove(status.get("cgroup"))  # its processes are gone: so is its group


def wait(record: RunRecord, store: RunStore, timeout: float) -> RunRecord:
    """Poll until the run has ended or ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    current = record
    while time.monotonic() < deadline:
        loaded = store.load(record.dir)
        if loaded is not None:
            current = loaded
            if not current.live:
                return current
        time.sleep(0.1)
    return current


__all__ = [
    "STOP_GRACE_S",
    "TUNE_STOP_GRACE_S",
    "SpecError",
    "adopt",
    "answered",
    "answering_supervisor",
    "build_command",
    "build_env",
    "dismiss_supervisor",
    "launch",
    "record_end",
    "start_supervisor",
    "stop",
    "stop_directly",
    "wait",
]
