"""How a process ended when no error kind matched: a DataLoader worker's exception, a plain non-zero exit.

An exit status is a number the script chose (``sys.exit(3)``) or one its runner set (2 for argparse, 126/127
for a shell that could not run it): its reason is whatever the script printed last, kept literally.
"""

from __future__ import annotations

import os
import re

from gpumon.core.doctor.failures import Failure

# What an exit status conventionally means; 128+N (a shell's way of saying "signal N") is handled by the caller.
EXIT_MEANINGS = {
    1: "a generic error (also Python's sys.exit('message'))",
    2: "a usage error (argparse exits 2 on bad arguments)",
    126: "the command was found but is not executable",
    127: "command not found",
}
_WORKER = re.compile(r"Caught (\w+) in DataLoader worker process (\d+)\.")
_INDEX = re.compile(r"\b(?:idx|index|sample_idx)\b\W{0,4}(\d+)")
_ORIGINAL = "Original Traceback (most recent call last):"
# A rank that failed only because a peer went away: gloo/NCCL lose the connection, or the rendezvous store (hosted
# by node 0) is gone. The root cause is elsewhere.
PEER_LOSS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "RendezvousConnectionError",
    "RendezvousClosedError",
    "DistNetworkError",
    "remote process exited",
    "Socket Timeout",
    "Broken pipe",
    "Timed out waiting",  # gloo: the rank waited for a peer that never came (hung, or gone)
    "collective operation timeout",  # NCCL's watchdog, the same
)
REASON_LINES = 3  # the last lines a script printed, shown as its reason
# Slurm's own lines in a job's output ("srun: error: node1: task 0: Exited with exit code 3", "srun: launch/slurm:
# _step_signal: Terminating StepId=5.0", "slurmstepd-node1: error: *** STEP 5.0 ON node1 CANCELLED AT ..."): they
# say how the step ended, never why the script did, so they are no script's last line.
_SLURM = re.compile(r"^\s*(?:srun|salloc|sbatch|slurmstepd(?:-[\w.-]+)?)(?:\[\d+\])?: ")
# gpumon's own package: its hooks wrap the script's calls (telemetry/collectives.py's wrapper of dist.all_reduce),
# so their frames sit between the script's line and torch's in a traceback. Never the user's line. A traceback
# from another host names its own install: its telemetry folder is told by name.
_OURS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_OURS_ELSEWHERE = f"{os.sep}gpumon{os.sep}telemetry{os.sep}"


def worker(text: str) -> Failure | None:
    """torch re-raises a worker's exception in the main process: "Caught ValueError in DataLoader worker process 1."
    The worker's own traceback follows "Original Traceback"; its last frame is the user's ``__getitem__``."""
    found = list(_WORKER.finditer(text))
    if not found:
        return None
    last = found[-1]
    original = text[text.find(_ORIGINAL, last.end()) :] if _ORIGINAL in text[last.end() :] else ""
    error = _last_exception_line(original) or last.group(1)
    where, index = user_frame(original)
    title = f"DataLoader worker {last.group(2)} raised {error}"[:300]
    detail = f"raised in {where}" + (f", at sample index {index}" if index is not None else "") if where else ""
    evidence = tuple(dict.fromkeys(x for x in (last.group(0), where, error) if x))
    sample = int(index) if index is not None else None
    return Failure("worker", title, text, evidence, detail, worker=int(last.group(2)), sample=sample)


def exited(text: str, exit_code: int) -> Failure:
    """A non-zero exit that no pattern explains: the status, what it means, and the script's last lines."""
    reason = last_lines(text)
    meaning = EXIT_MEANINGS.get(exit_code)
    title = f"the script exited with status {exit_code}" + (f": {' | '.join(reason)}" if reason else "")
    detail = f"status {exit_code}: {meaning}" if meaning else f"status {exit_code} is the script's own choice"
    return Failure("exit", title[:300], text, reason or (f"exit status {exit_code}",), detail, exit_code=exit_code)


def last_lines(text: str, count: int = REASON_LINES) -> tuple[str, ...]:
    """The script's last ``count`` non-empty lines, literal (stripped of surrounding blanks only); Slurm's
    own lines left out."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not said_by_slurm(line)]
    return tuple(line[:300] for line in lines[-count:])


def peer_lost(text: str) -> bool:
    """The error only says a peer went away (a symptom of another rank's failure)."""
    return any(sign in text for sign in PEER_LOSS)


def said_by_slurm(line: str) -> bool:
    """A line srun or slurmstepd wrote into the job's output, not the script."""
    return _SLURM.match(line) is not None


def _last_exception_line(trace: str) -> str:
    lines = [line.strip() for line in trace.splitlines() if line.strip()]
    return next((line for line in reversed(lines) if re.match(r"[\w.]+(?:Error|Exception|Warning)\b", line)), "")


def user_frame(trace: str) -> tuple[str, str | None]:
    """The last frame outside torch's and gpumon's own files ("dataset.py:11 in __getitem__") and an index its
    line shows."""
    frames = list(re.finditer(r'File "([^"]+)", line (\d+), in (\S+)\n(.*)', trace))
    user = [f for f in frames if not _library(f.group(1))]
    if not user:
        return "", None
    frame = user[-1]
    where = f"{frame.group(1).rsplit('/', 1)[-1]}:{frame.group(2)} in {frame.group(3)}"
    index = _INDEX.search(frame.group(4)) or _INDEX.search(trace[frame.end() :])
    return where, index.group(1) if index else None


def _library(path: str) -> bool:
    """torch's or gpumon's own file: not the line the user wrote."""
    return "/torch/" in path or path.startswith(_OURS) or _OURS_ELSEWHERE in path
