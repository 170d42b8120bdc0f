"""Out-of-memory retries: the same run again with half the batch size (opt-in: ``--oom-retry``).

The supervisor of a failed run calls ``retry_after_oom``. With ``--keep-batch`` the
accumulation steps double as the batch halves, so the effective batch (and the
optimisation) stays the same. Each retry is a new run whose spec names the one it
retries; the chain stops once a run fits, fails otherwise, or the batch reaches 1.
"""

from __future__ import annotations

from dataclasses import replace

from gpumon.core.runs.record.spec import RunSpec, arg_value

OOM_KINDS = ("cuda_oom", "host_oom")
DEFAULT_BATCH = 64  # the trainers' --batch-size default (trainers/cli.py)


def halved(spec: RunSpec) -> tuple[RunSpec, int, int] | None:
    """The spec with half the batch size (and twice --accum-steps with keep_batch); None at batch 1."""
    size = int(arg_value(spec.args, "--batch-size") or DEFAULT_BATCH)
    if size <= 1:
        return None
    args = _set(spec.args, "--batch-size", str(size // 2))
    if spec.keep_batch:
        accum = int(arg_value(spec.args, "--accum-steps") or 1)
        # an odd batch halves to less than half: round the steps up so no sample is lost per step
        args = _set(args, "--accum-steps", str(-(-accum * size // (size // 2))))
    return replace(spec, args=args), size, size // 2


def _set(args: tuple[str, ...], flag: str, value: str) -> tuple[str, ...]:
    out: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == flag and i + 1 < len(args):
            skip = True
            continue
        if arg.startswith(flag + "="):
            continue
        out.append(arg)
    return (*out, flag, value)
