"""A run as a Slurm job: the batch script in the run's directory, submitted with ``sbatch --parsable``.

The batch script only starts the run's supervisor (so events, logs, the doctor and stop work as for any run);
the supervisor starts the ranks with ``srun`` + torchrun (step.py). The options go on sbatch's command line
(an argument list: nothing is quoted for a shell) and are copied into the script's comments for the reader.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from gpumon.core.runs.record.spec import SpecError
from gpumon.core.slurm.commands import missing, run

SCRIPT = "job.sbatch"
_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$|^\d+-\d+$")  # sbatch's forms: M, M:S, H:M:S, D-H, D-H:M(:S)


class SlurmError(SpecError):
    """A user's mistake or Slurm's refusal, in one line."""


@dataclass(frozen=True)
class SlurmOptions:
    nodes: int = 1
    gpus_per_node: int = 0
    partition: str | None = None
    time: str | None = None
    account: str | None = None
    sbatch_args: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sbatch_args": list(self.sbatch_args)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SlurmOptions:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["sbatch_args"] = tuple(known.get("sbatch_args") or ())
        return cls(**known)


def with_defaults(given: dict[str, Any]) -> SlurmOptions:
    """The options given on the command line over ``[slurm]`` in config.toml. Raises SlurmError."""
    from gpumon.core.config import ConfigError, config_section

    try:
        table = config_section("slurm")
    except ConfigError as err:
        raise SlurmError(str(err)) from None
    values: dict[str, Any] = {}
    for key in ("nodes", "gpus_per_node", "partition", "time", "account", "sbatch_args"):
        value = given.get(key)
        if value in (None, (), []):
            value = table.get(key)
        if value is not None:
            values[key] = value
    for key in ("nodes", "gpus_per_node"):
        if key in values and (isinstance(values[key], bool) or not isinstance(values[key], int) or values[key] < 0):
            raise SlurmError(f"[slurm] {key} must be a whole number, not {values[key]!r}")
    for key in ("partition", "time", "account"):
        if key in values and not isinstance(values[key], str):
            raise SlurmError(f"[slurm] {key} must be a string, not {values[key]!r}")
    extra = values.get("sbatch_args", ())
    if isinstance(extra, str) or not all(isinstance(a, str) for a in extra):
        raise SlurmError('[slurm] sbatch_args is a list of strings, e.g. ["--qos=normal"]')
    values["sbatch_args"] = tuple(extra)
    options = SlurmOptions(**values)
    if options.nodes < 1:
        raise SlurmError(f"--nodes must be at least 1, got {options.nodes}")
    if options.time is not None and not _TIME.match(options.time):
        raise SlurmError(f"--time {options.time!r}: give minutes, H:MM:SS or D-HH:MM:SS, as sbatch takes it")
    for arg in options.sbatch_args:
        if not arg.startswith("-") or "\n" in arg:
            raise SlurmError(
                f"--sbatch-arg {arg!r}: give one sbatch option with its value, e.g. --sbatch-arg=--qos=high"
            )
    return options


def sbatch_argv(options: SlurmOptions, run_dir: Path, label: str, cwd: str, cpus_per_node: int) -> list[str]:
    argv = ["sbatch", "--parsable", f"--job-name=gpumon-{label}"[:64], f"--output={run_dir}/slurm-%j.out"]
    argv += [f"--chdir={cwd}", f"--nodes={options.nodes}", "--ntasks-per-node=1"]
    if options.gpus_per_node:
        argv.append(f"--gpus-per-node={options.gpus_per_node}")
    argv.append(f"--cpus-per-task={max(1, cpus_per_node)}")  # the ranks of a node share its one task's CPUs
    for flag, value in (("partition", options.partition), ("time", options.time), ("account", options.account)):
        if value:
            argv.append(f"--{flag}={value}")
    return [*argv, *options.sbatch_args, str(run_dir / SCRIPT)]


def batch_script(run_dir: Path, argv: list[str]) -> str:
    """The script sbatch runs on the first node: a check that the state dir is shared, then the supervisor."""
    where = shlex.quote(str(run_dir))
    return "\n".join(
        [
            "#!/bin/bash",
            f"# A gpumon run, submitted with: {shlex.join(argv[:-1])} {SCRIPT}",
            "# The supervisor owns the run in the allocation: it starts the ranks with srun + torchrun",
            "# (command.json) and records the run in this directory, which the login node reads.",
            f"if [ ! -w {where}/status.json ]; then",
            f'  echo "gpumon: {run_dir} is not on this node ($(hostname)): the state dir must be on a filesystem'
            ' the nodes share (set GPUMON_HOME to one, e.g. under your home directory)" >&2',
            "  exit 3",
            "fi",
            f"exec {shlex.quote(sys.executable)} -m gpumon.core.runs.supervision.supervisor {where}",
            "",
        ]
    )


def submit(argv: list[str]) -> str:
    """Submit; the job id. Raises SlurmError with sbatch's own reason."""
    if problem := missing("sbatch"):
        raise SlurmError(problem)
    answer = run(argv, timeout=60)
    if not answer.ok:
        raise SlurmError(answer.why or "sbatch failed")
    job = answer.out.strip().split(";")[0]  # --parsable: "ID" or "ID;CLUSTER"
    if not job.isdigit():
        raise SlurmError(f"sbatch answered {answer.out.strip()[:80]!r}, not a job id")
    return job


_WORDS = {"--nodes": "nodes", "--gpus-per-node": "gpus_per_node", "--partition": "partition", "--time": "time"}
_WORDS["--account"] = "account"


def parse_line(text: str) -> SlurmOptions:
    """The launch form's Slurm field: ``job`` (the [slurm] defaults), or options as ``gpumon launch`` takes them
    (--nodes, --gpus-per-node, --partition, --time, --account); any other option goes to sbatch as it is."""
    if problem := missing("sbatch"):
        raise SlurmError(problem)
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise SlurmError(f"Slurm job: {err}") from None
    given: dict[str, Any] = {}
    extra: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        flag, sep, value = word.partition("=")
        if word == "job" and i == 0:
            i += 1
            continue
        if flag in _WORDS:
            if not sep:
                if i + 1 >= len(words):
                    raise SlurmError(f"Slurm job: {flag} needs a value")
                value, i = words[i + 1], i + 1
            key = _WORDS[flag]
            if key in ("nodes", "gpus_per_node"):
                if not value.isdigit():
                    raise SlurmError(f"Slurm job: {flag} takes a whole number, not {value!r}")
                given[key] = int(value)
            else:
                given[key] = value
        elif word.startswith("-"):
            extra.append(word)
        else:
            raise SlurmError(f"Slurm job: {word!r} is not an option: write job, or options like --time 4:00:00")
        i += 1
    options = with_defaults({**given, "sbatch_args": tuple(extra)})
    return replace(options, sbatch_args=tuple(extra) or options.sbatch_args)


def options_line(data: dict[str, Any] | None) -> str:
    """The form's Slurm field that gives these options again ("" for a run on this machine)."""
    if not data:
        return ""
    options = SlurmOptions.from_dict(data)
    words = ["job"]
    for flag, key in _WORDS.items():
        value = getattr(options, key)
        if value not in (None, 0) and not (key == "nodes" and value == 1):
            words += [flag, str(value)]
    return shlex.join([*words, *options.sbatch_args])
