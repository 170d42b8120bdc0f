"""What a failed run died of, from its error text: the exception event, stderr, torchrun's report.

``classify`` tries the kinds from the most specific root cause to the most generic symptom: a CUDA OOM
on one rank also shows up as NCCL errors and "connection closed by peer" on the others, so the OOM wins.
torchrun's "Root Cause (first observed failure)" block is read before the rest of the text. A text that
matches nothing is ``unknown`` and its last exception line is the title; ``Failure.text`` always keeps
the whole text unchanged, so nothing is hidden. The patterns live in ``detect``, the types in ``failures``.
"""

from __future__ import annotations

import re
import signal as _signal
from dataclasses import replace

from gpumon.core.doctor.detect import DETECTORS, OOM_KILLER, SIGKILLED, rank_of
from gpumon.core.doctor.ended import exited, said_by_slurm, worker
from gpumon.core.doctor.failures import Failure

_ROOT = re.compile(r"Root Cause \(first observed failure\):(.*?)(?:\n=+|\Z)", re.S)
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)", re.M)
_EXC_LINE = re.compile(
    r"^\s*(?:\[\w+\]:\s*)?((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)\b.*"
    r"|Fatal Python error: .*)$",
    re.M,
)
_FATAL = {"Segmentation fault": "SIGSEGV", "Bus error": "SIGBUS", "Aborted": "SIGABRT"}
_SIGNAL_TITLES = {
    "SIGTERM": "Stopped by SIGTERM: a user, a scheduler's time limit or preemption, or a memory daemon",
    "SIGINT": "Interrupted (SIGINT)",
    "SIGSEGV": "Crashed: segmentation fault in native code (SIGSEGV)",
    "SIGABRT": "Aborted (SIGABRT): a C++ exception or a watchdog abort; the reason is printed above it",
    "SIGBUS": "Bus error (SIGBUS): often /dev/shm exhausted by DataLoader workers",
}


def classify(
    text: str,
    exit_code: int | None = None,
    signal: int | str | None = None,
    *,
    state: str | None = None,
    oom: tuple[str, ...] = (),
) -> Failure:
    """Classify a failed run from its error text and exit.

    ``signal`` is a number or a name ("SIGKILL", as status.json holds it); a negative ``exit_code`` (Popen) or
    128+n (a shell) also names one. ``state`` is the run's state: "stopped"/"killed" mean the user ended it,
    so a SIGKILL is not blamed on the OOM killer. ``oom``: the lines that show the OOM killer sent a SIGKILL
    (``oom_evidence``); without them a SIGKILL is only a SIGKILL.
    """
    sig = _signal_name(signal)
    if sig is None and exit_code is not None and (exit_code < 0 or 128 < exit_code < 160):
        sig = _signal_name(-exit_code if exit_code < 0 else exit_code - 128)
    if sig is None and (fatal := re.search(r"Fatal Python error: (Segmentation fault|Bus error|Aborted)", text)):
        sig = _FATAL[fatal.group(1)]
    by_user = state in ("stopped", "killed")
    root = _ROOT.search(text)
    for part in (root.group(1), text) if root else (text,):
        for detect in (*DETECTORS, worker):
            found = detect(part)
            if found is None or (by_user and found.signal == "SIGKILL"):  # gpumon stop --kill explains a SIGKILL
                continue
            in_root = _ROOT_RANK.search(part) if part is not text else None
            rank = int(in_root.group(1)) if in_root else rank_of(found.evidence)
            if found.collective and len(found.collective.ranks) != 1:
                rank = None  # every rank reports a timed-out collective: none of them is "the" rank
            code = found.exit_code if found.exit_code is not None else exit_code  # a worker's own, said in text
            found = replace(found, text=text, rank=rank, exit_code=code, signal=found.signal or sig)
            return _oom_killed(found, oom) if found.kind == "killed" and found.signal == "SIGKILL" else found
    line = headline(text)
    evidence = (line,) if line else ()
    if by_user:  # a stop, not a failure: no log line stands as its evidence
        return Failure("stopped", f"Stopped by the user ({sig or state})", text, (), exit_code=exit_code, signal=sig)
    if sig == "SIGKILL":
        title = "Killed by SIGKILL (sent by someone or something else)"
        detail = f"{_shell(exit_code, sig)} {SIGKILLED}".strip()
        return _oom_killed(Failure("killed", title, text, evidence, detail, exit_code=exit_code, signal=sig), oom)
    if sig:
        title = _SIGNAL_TITLES.get(sig, f"Killed by {sig}")
        return Failure("killed", title, text, evidence, _shell(exit_code, sig), exit_code=exit_code, signal=sig)
    if exit_code and exit_code > 0 and "Traceback (most recent call last)" not in text:
        return replace(exited(text, exit_code), rank=rank_of(evidence))  # a reason printed, not raised
    title = line or (f"exit code {exit_code}" if exit_code is not None else "no error text")
    source = next((raw for raw in text.splitlines() if line and line in raw), "")
    return Failure("unknown", title, text, evidence, exit_code=exit_code, rank=rank_of((source,)))


def _oom_killed(found: Failure, oom: tuple[str, ...]) -> Failure:
    """A SIGKILL becomes the OOM killer's only with evidence (the kernel log, memory.events, memory at its limit)."""
    if not oom:
        return found
    title = found.title.split(" (sent by")[0].replace("by SIGKILL", "by the kernel's OOM killer") + " (host memory)"
    return replace(found, kind="host_oom", title=title, evidence=oom + found.evidence, detail=OOM_KILLER)


def _shell(exit_code: int | None, sig: str) -> str:
    """A shell reports a death by signal N as status 128 + N: say so, 137 reads as a number otherwise."""
    if exit_code is None or not 128 < exit_code < 160:
        return ""
    return f"Exit status {exit_code} is 128 + {exit_code - 128}: the process died of {sig}."


def headline(text: str) -> str:
    """The error's own line: the last exception line that is not torchrun's wrapper, else the last line that
    is not Slurm's (srun's "Terminating StepId" says how the step ended, not why)."""
    found = [m.group(1).strip() for m in _EXC_LINE.finditer(text) if "ChildFailedError" not in m.group(1)]
    if found:
        return found[-1][:300]
    rest = [line.strip() for line in text.splitlines() if line.strip() and not said_by_slurm(line)]
    return rest[-1][:300] if rest else ""


def _signal_name(value: int | str | None) -> str | None:
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        name = str(value).upper()
        return name if name.startswith("SIG") else f"SIG{name}"
    try:
        return _signal.Signals(abs(number)).name
    except ValueError:
        return f"signal {number}"
