"""The command a Slurm run's supervisor starts inside the allocation: ``srun`` with one task per node, each a
torchrun (or the script itself), the rendezvous taken from the ``SLURM_*`` variables.

``python -m gpumon.core.slurm.step --nodes N -- ARGV...`` fills ARGV's ``@HEAD@`` (the allocation's first
node), ``@PORT@`` (a port from the job id, the same on every node) and ``@JOB@`` (the job id), then becomes
srun (exec: the supervisor's child is srun itself, so a stop reaches it, and srun forwards it to the step).
"""

from __future__ import annotations

import os
import subprocess
import sys

HEAD, PORT, JOB = "@HEAD@", "@PORT@", "@JOB@"


def torchrun_args(nodes: int, nproc: int, max_restarts: int) -> list[str]:
    """torchrun's options for a run of ``nodes`` nodes inside a job (placeholders filled by ``main``)."""
    if nodes == 1:
        argv = ["--standalone"]
    else:
        argv = ["--nnodes", str(nodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{HEAD}:{PORT}"]
        argv += ["--rdzv-id", JOB]
    return [*argv, "--nproc-per-node", str(nproc), "--max-restarts", str(max_restarts)]


def step_argv(nodes: int, inner: list[str]) -> list[str]:
    return [sys.executable, "-m", "gpumon.core.slurm.step", "--nodes", str(nodes), "--", *inner]


def head_node(nodelist: str) -> str:
    done = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
    names = done.stdout.split()
    return names[0] if names else nodelist.split(",")[0]


def fill(inner: list[str], job: str, head: str) -> list[str]:
    port = str(20000 + int(job) % 20000 if job.isdigit() else 29400)
    return [a.replace(HEAD, head).replace(PORT, port).replace(JOB, job) for a in inner]


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] != "--nodes" or argv[2] != "--":
        print("usage: python -m gpumon.core.slurm.step --nodes N -- ARGV...", file=sys.stderr)
        return 2
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        print("gpumon: a Slurm run's step runs inside its job (no SLURM_JOB_ID here)", file=sys.stderr)
        return 2
    nodes, inner = argv[1], argv[3:]
    if any(HEAD in a for a in inner):
        inner = fill(inner, job, head_node(os.environ.get("SLURM_JOB_NODELIST", "")))
    else:
        inner = fill(inner, job, "")
    srun = ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    srun += ["--cpu-bind=none", "--export=ALL"]
    sys.stdout.flush()
    os.execvp("srun", [*srun, *inner])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
