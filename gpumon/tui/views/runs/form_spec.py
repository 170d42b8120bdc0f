"""What the launch form's fields mean: the RunSpec they describe (checked as the CLI checks it), the fields
a run's spec fills when it is cloned, and the line under the program field (where a relative path leads)."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, fields, replace
from pathlib import Path

from rich.text import Text

from gpumon.core.fleet.hosts import Host, HostError, parse_hosts
from gpumon.core.runs.record.spec import (
    DEFAULT_PROGRAM,
    RunSpec,
    SpecError,
    default_nproc,
    parse_env,
    parse_gpus,
    parse_int,
    validate,
)
from gpumon.core.searches.shipped import resolve_search, shipped_names, shipped_searches
from gpumon.core.slurm.launch import check
from gpumon.core.slurm.submit import options_line, parse_line

PRESETS = ("tiny", "small", "medium", "resnet50")  # the trainers' --preset choices (trainers/model.py)
TRAINER_KINDS = ("ddp", "dp", "model-parallel", "pipeline")  # a preset and a default program
HOST_KINDS = ("ddp", "pipeline", "script")  # torchrun's kinds: several nodes, --max-restarts
DEFAULT_KIND = "ddp"


@dataclass(frozen=True)
class FormValues:
    """The form's fields as typed (strings; preset '' is the trainer's default)."""

    kind: str = DEFAULT_KIND
    preset: str = ""
    program: str = ""
    args: str = ""
    nproc: str = ""
    gpus: str = ""
    hosts: str = ""
    name: str = ""
    env: str = ""
    max_restarts: str = ""
    on_alert: str = ""
    slurm: str = ""  # blank: this machine; "job" or sbatch options: a Slurm job
    queue: str = ""  # blank: start now; "queue" or launch --queue's options: this host's queue


FIELDS = tuple(f.name for f in fields(FormValues))


def _split(text: str, what: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as err:
        raise SpecError(f"{what}: {err}") from None


def build_spec(
    kind: str,
    preset: str | None,
    script: str,
    nproc: str,
    gpus: str,
    extra: str,
    visible: int,
    cwd: str | None = None,
    *,
    name: str = "",
    env: str = "",
    max_restarts: str = "",
    on_alert: str = "",
    keep: RunSpec | None = None,
) -> RunSpec:
    """The RunSpec the form describes, validated; SpecError names the first mistake.

    ``keep``: the cloned run, whose options the form has no field for (--oom-retry, --keep-batch,
    --no-census) carry over.
    """
    where = cwd or os.getcwd()
    gpu_ids = parse_gpus(gpus, visible)
    args = _split(extra, "arguments")
    options = {
        "name": name.strip() or None,
        "env": parse_env(_split(env, "env")),
        "max_restarts": parse_int(max_restarts, "max restarts") if max_restarts.strip() else 0,
        "on_alert": tuple(_split(on_alert, "on alert")),
        "gpus": gpu_ids,
        "cwd": where,
    }
    if keep is not None:
        options.update(oom_retry=keep.oom_retry, keep_batch=keep.keep_batch, no_census=keep.no_census)
    if kind == "tune":
        if not script.strip():
            raise SpecError(f"tune needs a search: a shipped one's name ({shipped_names()}) or a search file")
        if args:
            raise SpecError("arguments: a search takes none (fixed values go in its [space])")
        search = resolve_search(os.path.expanduser(script.strip()), where)
        return validate(RunSpec(kind="tune", search=search, **options), visible)  # type: ignore[arg-type]
    count = parse_int(nproc, "processes", 1) if nproc.strip() else default_nproc(kind, gpu_ids, visible)
    text = script.strip()
    program = (text if text.startswith("-m ") else os.path.expanduser(text)) if text else None
    if preset and kind in TRAINER_KINDS:
        if program is not None:
            raise SpecError("preset is for the kind's own trainer: blank the program or choose 'trainer default'")
        args = ["--preset", preset, *args]
    spec = RunSpec(kind=kind, program=program, args=tuple(args), nproc=count, **options)  # type: ignore[arg-type]
    return validate(spec, visible)


@dataclass(frozen=True)
class QueuedLaunch:
    """A run for this host's queue: its spec and what it waits for (core/queue/submit.py's fields)."""

    spec: RunSpec
    fields: dict[str, object]


@dataclass(frozen=True)
class GroupLaunch:
    """A multi-node run: the spec of each node, and the hosts (node 0 on the first)."""

    spec: RunSpec
    hosts: tuple[Host, ...]


def parse_form_hosts(kind: str, text: str) -> tuple[Host, ...]:
    """The hosts field: blank for this machine, else a comma list (ssh), checked like ``--hosts``."""
    if not text.strip():
        return ()
    if kind not in HOST_KINDS:
        raise SpecError(f"hosts: {kind} runs on one node; leave hosts blank (or choose ddp, pipeline or script)")
    try:
        hosts = tuple(parse_hosts(text))
    except HostError as err:
        raise SpecError(f"hosts: {err}") from None
    if len(hosts) < 2:
        raise SpecError("hosts: name two hosts or more, e.g. gpu1,gpu2 (blank: this machine)")
    return hosts


def clone_name(name: str | None) -> str:
    """'mine' → 'mine-2', 'mine-2' → 'mine-3'; no name stays none (the program labels the run)."""
    if not name:
        return ""
    found = re.fullmatch(r"(.*)-(\d+)", name)
    return f"{found.group(1)}-{int(found.group(2)) + 1}" if found else f"{name}-2"


def values_from_spec(spec: RunSpec) -> FormValues:
    """The fields that launch ``spec`` again (a single-node run: a group's node clones as one run here)."""
    args = list(spec.args)
    preset = ""
    own = spec.kind in TRAINER_KINDS and spec.program is None
    if own and len(args) >= 2 and args[0] == "--preset" and args[1] in PRESETS:
        preset, args = args[1], args[2:]  # the form's own preset: back into its selector
    program = (spec.search if spec.kind == "tune" else spec.program) or ""
    return FormValues(
        kind=spec.kind,
        preset=preset,
        program=program,
        args=shlex.join(args),
        nproc=str(spec.nproc),
        gpus=spec.gpus or "",
        name=clone_name(spec.name),
        env=" ".join(shlex.quote(f"{key}={value}") for key, value in spec.env),
        max_restarts=str(spec.max_restarts) if spec.max_restarts else "",
        on_alert=shlex.join(spec.on_alert),
        slurm=options_line(spec.slurm),
    )


def kept_options(spec: RunSpec) -> str:
    """The cloned run's options that the form carries without a field, as flags."""
    flags = (("--oom-retry", spec.oom_retry), ("--keep-batch", spec.keep_batch), ("--no-census", spec.no_census))
    return " ".join(flag for flag, on in flags if on)


def program_hint(kind: str, text: str, cwd: str) -> Text:
    """Where the program (or search) field leads, before launch: the absolute path and whether it exists."""
    given = text.strip()
    hint = Text(style="dim")
    if kind == "tune":
        if not given:
            return hint.append(f"a shipped search's name ({shipped_names()}) or a search file")
        shipped = shipped_searches().get(given.removesuffix(".toml"))
        path = Path(cwd, os.path.expanduser(given))
        if not path.is_file() and shipped is not None:
            return hint.append(f"→ shipped search {shipped.stem}: {shipped}")
        return _path_line(hint, path)
    if given.startswith("-m "):
        return hint.append(f"module {given[3:].strip()}, imported in the run (from {cwd})")
    if not given:
        default = DEFAULT_PROGRAM.get(kind)
        if default is None:
            return hint.append("a Python file (relative to " + cwd + "), or -m module")
        return hint.append(f"blank: the kind's own trainer, python -m {default[0]} (digits)")
    return _path_line(hint, Path(cwd, os.path.expanduser(given)))


def hint_reads_disk(kind: str, text: str) -> bool:
    """Whether ``program_hint`` looks at files (a path to check, the shipped searches): then the form reads it
    in a thread, never on a key's path (a hung network mount would hang the form)."""
    given = text.strip()
    return kind == "tune" or (bool(given) and not given.startswith("-m "))


def hint_before_disk(kind: str, text: str, cwd: str) -> Text:
    """What the hint says until the files are read: where the path leads, not yet whether it is there."""
    given = text.strip()
    if kind == "tune" and not given:
        return Text("a shipped search's name or a search file", style="dim")
    return Text(f"→ {os.path.normpath(Path(cwd, os.path.expanduser(given)))} …", style="dim")


def _path_line(hint: Text, path: Path) -> Text:
    hint.append(f"→ {os.path.normpath(path)} ")
    if path.is_file():
        hint.append("exists", style="green")
    elif path.exists():
        hint.append("is not a file", style="bold red")
    else:
        hint.append("not found", style="bold red")
    return hint


def spec_values(
    values: FormValues, visible: int, cwd: str, keep: RunSpec | None
) -> RunSpec | GroupLaunch | QueuedLaunch:
    """The form's values as what to launch: a spec, a group when hosts are named, a queued run."""
    hosts = parse_form_hosts(values.kind, values.hosts)
    if values.queue.strip() and (hosts or values.slurm.strip()):
        raise SpecError("queue: this host's queue starts runs here: blank hosts and Slurm job (or the queue)")
    if values.queue.strip() and values.gpus.strip():
        raise SpecError("queue: the queue picks the GPUs: blank GPUs and write --gpus N in the queue field")
    spec = build_spec(
        kind=values.kind,
        preset=values.preset or None,
        script=values.program,
        nproc=values.nproc,
        gpus=values.gpus,
        extra=values.args,
        visible=visible,
        cwd=cwd,
        name=values.name,
        env=values.env,
        max_restarts=values.max_restarts,
        on_alert=values.on_alert,
        keep=keep,
    )
    if values.slurm.strip():
        if hosts:
            raise SpecError("hosts and a Slurm job: choose one (Slurm picks the nodes: --nodes N)")
        spec = replace(spec, slurm=parse_line(values.slurm).to_dict())
        check(spec)
    if values.queue.strip():
        from gpumon.core.queue.submit import parse_line as queue_line
        from gpumon.core.runs.record.store import RunStore

        fields = queue_line(values.queue, RunStore())
        count = fields["gpus"]
        if spec.kind == "ddp" and isinstance(count, int) and count and values.nproc.strip() in ("", str(visible)):
            spec = replace(spec, nproc=count)  # a process per GPU the queue will give, unless typed otherwise
        return QueuedLaunch(spec, fields)
    return GroupLaunch(spec, hosts) if hosts else spec
