"""Ranked advice for a classified failure, each item citing the numbers it rests on.

Each rule scores itself by how strongly the evidence points at it (the OOM message's numbers, the run's
arguments, its per-step memory series) and ``advise`` returns the items best first. A rule whose
evidence is absent stays silent (no ``empty_cache`` without a large unused reserve) or ranks low.
The rules live in ``memory_advice`` and ``error_advice``; their titles and changes are in ``advice_text``,
the types they share in ``advice_types``: the rules import those, this registry imports the rules.
"""

from __future__ import annotations

from collections.abc import Callable

from gpumon.core.doctor import error_advice, memory_advice
from gpumon.core.doctor.advice_types import Advice, Context, Scored
from gpumon.core.doctor.failures import Failure

Rule = Callable[[Failure, Context], Scored]


def advise(failure: Failure, context: Context | None = None) -> list[Advice]:
    """The changes worth trying for ``failure``, best first; [] when nothing is known to help."""
    rules: dict[str, Rule] = {
        "cuda_oom": memory_advice.cuda_oom,
        "host_oom": memory_advice.host_oom,
        "device_assert": error_advice.device_assert,
        "cudnn": error_advice.cudnn,
        "nccl": error_advice.nccl,
        "nccl_timeout": error_advice.nccl_timeout,
        "shape": error_advice.shape,
        "import": error_advice.missing_module,
        "no_gpu": error_advice.no_gpu,
        "checkpoint": error_advice.checkpoint,
        "no_launcher": error_advice.no_launcher,
        "removed_api": error_advice.removed_api,
        "killed": error_advice.killed,
        "worker": error_advice.worker,
        "exit": error_advice.exit_status,
        "stopped": lambda failure, context: [],  # the user asked for it: nothing to change
    }
    scored = rules.get(failure.kind, error_advice.unknown)(failure, context or Context())
    return [entry for _, entry in sorted(scored, key=lambda pair: -pair[0])]
