"""A run's spec: what to start, checked before anything starts."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

KINDS = ("ddp", "dp", "model-parallel", "pipeline", "script", "tune")
TORCHRUN_KINDS = ("ddp", "pipeline")  # script joins them when nproc > 1
# The kind's own trainer, run when no program is given, and its default options as (flag, value) pairs.
DEFAULT_PROGRAM = {
    "ddp": ("trainers.ddp", []),
    "dp": ("trainers.dp", []),
    "model-parallel": ("trainers.model_parallel", ["--mode", "micro-batch"]),
    "pipeline": ("trainers.model_parallel", ["--mode", "pipeline"]),
    "tune": ("gpumon.tune.runner", []),  # reads the run's copy of the search file
}
# A launcher the user runs as the program (a module, or its command's script) -> what users call it: the
# script it starts is what the run is (its name, not the launcher's, in the PROGRAM column).
LAUNCHERS = {
    "accelerate.commands.launch": "accelerate launch",
    "torch.distributed.run": "torchrun",
    "torchrun": "torchrun",
    "torch.distributed.launch": "torch.distributed.launch",
    "deepspeed.launcher.runner": "deepspeed",
    "deepspeed": "deepspeed",
}
SEARCH_COPY = "search.toml"  # where a tune run keeps its search file
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENDPOINT = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")
_GROUP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class SpecError(ValueError):
    """A user's mistake in a run spec; the message is one line that says what to do."""


@dataclass(frozen=True)
class RunSpec:
    kind: str
    program: str | None = None  # a script path, or a module as "-m name"; None: the kind's trainer
    args: tuple[str, ...] = ()
    nproc: int = 1  # processes per node
    gpus: str | None = None  # CUDA_VISIBLE_DEVICES, e.g. "0,1"; None leaves it as it is
    env: tuple[tuple[str, str], ...] = ()
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None  # the same on every node; default the first node's run id
    max_restarts: int = 0
    cwd: str = field(default_factory=os.getcwd)
    name: str | None = None
    search: str | None = None  # kind tune: the search file (copied into the run directory at launch)
    oom_retry: bool = False  # after an out-of-memory failure, relaunch with half the --batch-size
    keep_batch: bool = False  # ... and twice the --accum-steps, keeping the effective batch
    retry_of: str | None = None  # the run this one retries
    no_census: bool = False  # the supervisor never asks for a census by itself (gpumon launch --no-census)
    on_alert: tuple[str, ...] = ()  # a command (argument list) the supervisor runs with each alert's text
    group: str | None = None  # a multi-node group (core/nodes/group.py): the same id in every node's run
    slurm: dict[str, Any] | None = None  # run as a Slurm job: core/slurm/submit.py's SlurmOptions

    @property
    def uses_torchrun(self) -> bool:
        return self.kind in TORCHRUN_KINDS or (self.kind == "script" and (self.nproc > 1 or self.nnodes > 1))

    @property
    def module(self) -> str | None:
        if self.program is None:
            return DEFAULT_PROGRAM[self.kind][0] if self.kind in DEFAULT_PROGRAM else None
        return self.program[3:] if self.program.startswith("-m ") else None

    @property
    def full_args(self) -> tuple[str, ...]:
        """The program's arguments: the kind's defaults (``--mode micro-batch``) less every option the user gave
        (``-- --mode naive`` runs naive, once), then the user's."""
        extra = DEFAULT_PROGRAM[self.kind][1] if self.program is None and self.kind in DEFAULT_PROGRAM else []
        given = {arg.split("=", 1)[0] for arg in self.args if arg.startswith("--")}
        pairs = zip(extra[::2], extra[1::2], strict=True)
        kept = [word for flag, value in pairs if flag not in given for word in (flag, value)]
        return (*kept, *self.args)

    def label(self) -> str:
        """The PROGRAM column: the name given, the search, else the program; a launcher's script, by it
        ("train.py via accelerate launch")."""
        if self.name:
            return self.name
        if self.search:
            return Path(self.search).stem
        name = self.module or Path(self.program or "?").name
        launcher = LAUNCHERS.get(name)
        script = launched_script(self.args) if launcher else None
        return f"{script} via {launcher}" if script else name

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["args"] = list(self.args)
        data["env"] = dict(self.env)
        data["on_alert"] = list(self.on_alert)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["args"] = tuple(known.get("args", ()))
        known["on_alert"] = tuple(known.get("on_alert", ()))
        known["env"] = tuple(sorted(dict(known.get("env", {})).items()))
        return cls(**known)


def default_nproc(kind: str, gpus: str | None, visible: int) -> int:
    """Processes per node when --nproc is not given: ddp one per chosen (else visible) GPU, or up to 2 on a CPU;
    pipeline 2; the other kinds 1."""
    if kind == "pipeline":
        return 2
    if kind != "ddp":
        return 1
    if gpus:
        return len(gpus.split(","))
    return visible if visible else min(2, os.cpu_count() or 1)


def nproc_limit(visible: int) -> int:
    """The most processes per node ``launch`` starts without --force: 4 x the larger of CPUs and GPUs."""
    return 4 * max(os.cpu_count() or 1, visible)


def endpoint_port(endpoint: str | None) -> int:
    """The port of HOST:PORT (0: node 0 picks a free one at launch); -1 without one."""
    _, sep, port = (endpoint or "").rpartition(":")
    return int(port) if sep and port.isdigit() else -1


def parse_int(text: str | int, what: str, minimum: int = 0) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise SpecError(f"{what} takes a whole number, not {str(text)!r}") from None
    if value < minimum:
        raise SpecError(f"{what} must be at least {minimum}, got {value}")
    return value


def parse_gpus(text: str | None, visible: int) -> str | None:
    """'0,1' → '0,1', checked against the GPUs this machine shows. '' or None: leave as is."""
    if text is None or not text.strip():
        return None
    ids = []
    for part in text.replace(" ", "").split(","):
        if not part.isdigit():
            raise SpecError(f"GPUs are indexes like 0,1, not {text!r}")
        ids.append(int(part))
    if len(set(ids)) != len(ids):
        raise SpecError(f"GPU list {text!r} names a GPU twice")
    if visible == 0:
        raise SpecError(f"asked for GPU {text} but this machine shows no GPU; leave GPUs empty to run on the CPU")
    wrong = [i for i in ids if i >= visible]
    if wrong:
        raise SpecError(f"asked for GPU {wrong[0]} but this machine shows {visible} GPU(s): 0-{visible - 1}")
    return ",".join(map(str, ids))


def parse_env(items: list[str] | tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.match(key):
            raise SpecError(f"environment settings are NAME=VALUE, not {item!r}")
        pairs.append((key, value))
    return tuple(pairs)


NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    # kind -> (module, what installs it): checked in the run's own Python before anything starts
    "ddp": (("torch", "torch"), ("sklearn", "train")),
    "dp": (("torch", "torch"), ("sklearn", "train")),
    "model-parallel": (("torch", "torch"), ("sklearn", "train")),
    "pipeline": (("torch", "torch"), ("sklearn", "train")),
    "tune": (("ray", "tune"),),  # find_spec of a submodule would import ray itself
}
INSTALL = {
    "torch": "pip install torch==2.13.0 && pip install -e '.[train]' (CPU; for a GPU: torch from pytorch.org)",
    "train": "pip install -e '.[train]'",
    "tune": "pip install -e '.[tune]'",
}


def _check_imports(spec: RunSpec) -> None:
    """A kind's trainer (or torchrun, or Ray Tune) missing from this Python fails here in one line, not in the run."""
    import importlib.util
    import sys

    needs = NEEDS.get(spec.kind, ())
    if spec.kind == "script" and spec.uses_torchrun:
        needs = (("torch", "torch"),)  # torchrun is torch's
    if spec.kind in ("ddp", "dp", "model-parallel", "pipeline") and spec.program is not None:
        needs = (("torch", "torch"),)  # the user's own program: its other imports are its own business
    for module, extra in needs:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise SpecError(
                f"{spec.kind} runs need {module.split('.')[0]}, which {sys.executable} cannot import: {INSTALL[extra]}"
            )


def validate(spec: RunSpec, visible_gpus: int) -> RunSpec:
    """Raise SpecError for anything that would fail after the start; return the spec to run.

    A search without a name takes its search file's ``name``.
    """
    if spec.kind not in KINDS:
        raise SpecError(f"unknown kind {spec.kind!r}: choose one of {', '.join(KINDS)}")
    if spec.nproc < 1:
        raise SpecError(f"--nproc must be at least 1, got {spec.nproc}")
    if spec.kind in ("dp", "model-parallel", "tune") and spec.nproc != 1:
        raise SpecError(f"{spec.kind} runs in one process: drop --nproc (use ddp or pipeline for several)")
    if spec.kind == "pipeline" and spec.nproc != 2:
        raise SpecError("pipeline runs one process per stage: the trainer has 2 stages, so --nproc 2")
    if spec.gpus is not None:
        parse_gpus(spec.gpus, visible_gpus)
        count = len(spec.gpus.split(","))
        if spec.kind == "ddp" and spec.nproc > count:
            raise SpecError(f"--nproc {spec.nproc} needs {spec.nproc} GPUs but --gpus gives {count}")
    if spec.nnodes < 1:
        raise SpecError(f"--nnodes must be at least 1, got {spec.nnodes}")
    if spec.nnodes > 1:
        if not spec.uses_torchrun:
            raise SpecError(f"{spec.kind} runs on one node: --nnodes needs ddp, pipeline or script")
        if not spec.rdzv_endpoint or not _ENDPOINT.match(spec.rdzv_endpoint):
            raise SpecError("several nodes need --rdzv-endpoint HOST:PORT (the first node's address)")
        if not 0 <= spec.node_rank < spec.nnodes:
            raise SpecError(f"--node-rank must be 0 to {spec.nnodes - 1}, got {spec.node_rank}")
        if endpoint_port(spec.rdzv_endpoint) == 0 and spec.node_rank != 0:
            raise SpecError("only node 0 picks its port (HOST:0): give the other nodes the port node 0 printed")
        if not 0 <= endpoint_port(spec.rdzv_endpoint) < 65536:
            raise SpecError(f"--rdzv-endpoint {spec.rdzv_endpoint}: the port must be 0 (pick one) to 65535")
    elif spec.node_rank or spec.rdzv_endpoint:
        raise SpecError("--node-rank and --rdzv-endpoint go with --nnodes 2 or more")
    if spec.name is not None and not spec.name.strip():
        raise SpecError("--name is empty: give the run a name, or leave --name out (gpumon names it)")
    if spec.group is not None and not _GROUP.match(spec.group):
        raise SpecError(f"--group takes an id of letters, digits, '.', '_' and '-', not {spec.group!r}")
    if spec.max_restarts < 0:
        raise SpecError(f"--max-restarts must be at least 0, got {spec.max_restarts}")
    if spec.max_restarts and not spec.uses_torchrun:  # else it would be ignored without a word
        raise SpecError("--max-restarts is torchrun's: it needs ddp, pipeline, or script with 2 processes or more")
    _check_imports(spec)
    if spec.on_alert and shutil.which(spec.on_alert[0]) is None:
        raise SpecError(f"--on-alert: no program {spec.on_alert[0]!r} on PATH (give its full path, or install it)")
    if spec.kind == "tune":
        if spec.search:  # a shipped search's name, where no such file is here
            from gpumon.core.searches.shipped import resolve_search

            spec = replace(spec, search=resolve_search(spec.search, spec.cwd))
        name = _check_search(spec, visible_gpus)
        if spec.name is None and name:
            spec = replace(spec, name=name)
    if spec.oom_retry or spec.keep_batch:
        _check_retry(spec)
    if spec.kind == "script" and spec.program is None:
        raise SpecError("script needs a program: gpumon launch script PATH [-- args]")
    if spec.program is not None and not spec.program.startswith("-m "):
        path = Path(spec.cwd, spec.program)
        if path.is_dir():
            raise SpecError(f"{spec.program} is a folder: give the script in it, e.g. {path / 'train.py'}")
        if not path.is_file():
            hint = " (a module? pass -m NAME)" if shutil.which(spec.program) is None else " (it must be a Python file)"
            raise SpecError(f"program not found: {spec.program}{hint}")
    for key, _ in spec.env:
        if not _ENV_NAME.match(key):
            raise SpecError(f"bad environment name {key!r}")
    return spec


def _check_search(spec: RunSpec, visible_gpus: int) -> str | None:
    """Check the search file like `gpumon tune` will; returns its name."""
    from gpumon.core.searches.search_file import SearchFileError, load  # no ray import: it only reads TOML
    from gpumon.core.searches.shipped import shipped_names

    if not spec.search:
        raise SpecError(f"tune needs a search file, or a shipped search's name ({shipped_names()})")
    path = Path(spec.cwd, spec.search)
    if not path.is_file():
        raise SpecError(f"{spec.search}: no such search file (or a shipped search's name: {shipped_names()})")
    try:
        return load(path, visible_gpus, cwd=spec.cwd).name
    except SearchFileError as err:
        raise SpecError(str(err).replace(str(path), spec.search, 1)) from None


def arg_value(args: tuple[str, ...], flag: str) -> str | None:
    """The value of ``--flag V`` or ``--flag=V`` in an argument list (the last one wins, as in argparse)."""
    found = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(flag + "="):
            found = arg[len(flag) + 1 :]
    return found


def _check_retry(spec: RunSpec) -> None:
    if spec.keep_batch and not spec.oom_retry:
        raise SpecError("--keep-batch goes with --oom-retry")
    if spec.kind == "tune":
        raise SpecError("--oom-retry is for training runs; a search's trials are retried by Tune (max_failures)")
    size = arg_value(spec.args, "--batch-size")
    if size is None and spec.module not in ("trainers.ddp", "trainers.dp", "trainers.model_parallel"):
        raise SpecError(
            "--oom-retry halves --batch-size: pass the program's batch size after --, e.g. -- --batch-size 64"
        )
    if size is not None and not size.isdigit():
        raise SpecError(f"--oom-retry: --batch-size must be a whole number, got {size!r}")
    if spec.keep_batch and spec.kind == "pipeline":
        raise SpecError("--keep-batch needs --accum-steps, which the pipeline trainer does not take")
    accum = arg_value(spec.args, "--accum-steps")
    if spec.keep_batch and accum is None and spec.program is not None:
        raise SpecError("--keep-batch doubles --accum-steps: pass the program's value after --, e.g. --accum-steps 1")


def launched_script(args: tuple[str, ...] | list[str]) -> str | None:
    """The script a launcher's arguments start: the first ``*.py`` (its file name), or the module after
    ``-m``/``--module`` (torchrun's and accelerate's flag for a module); None when neither is there."""
    for i, arg in enumerate(args):
        if arg in ("-m", "--module") and i + 1 < len(args) and not args[i + 1].startswith("-"):
            return args[i + 1]
        if arg.endswith(".py") and not arg.startswith("-"):
            return Path(arg).name
    return None
