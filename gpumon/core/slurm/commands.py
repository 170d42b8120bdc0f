"""Slurm's commands, run with argument lists and a timeout; a missing command or a failing controller is a
reason in words, never an exception out of here."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Answer:
    ok: bool
    out: str
    why: str | None = None  # a failure in one line


def missing(command: str = "sbatch") -> str | None:
    """One line when a Slurm command is not on PATH (everything else of gpumon works without Slurm)."""
    if shutil.which(command):
        return None
    return f"{command} not found: Slurm's commands must be on PATH (run gpumon on a Slurm cluster's login node)"


def run(argv: list[str], timeout: float = TIMEOUT_S) -> Answer:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return Answer(False, "", missing(argv[0]) or f"{argv[0]} not found")
    except subprocess.TimeoutExpired:
        return Answer(False, "", f"{argv[0]} did not answer in {timeout:.0f} s (is slurmctld up?)")
    except OSError as err:
        return Answer(False, "", f"{argv[0]}: {err}")
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        text = lines[-1] if lines else f"exit status {done.returncode}"
        return Answer(False, done.stdout, f"{argv[0]}: {text.removeprefix(argv[0] + ': ')}")
    return Answer(True, done.stdout)
