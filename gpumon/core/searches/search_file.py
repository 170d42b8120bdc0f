"""A search file (TOML), read and checked before Ray starts. No ray import here.

Every mistake raises ``SearchFileError`` with one line naming the key and the
reason. ``runner.py`` turns a checked ``Search`` into Ray Tune objects.
See docs/tune.md for the format; ``trainers/searches/`` holds commented examples.
"""

from __future__ import annotations

import importlib.util
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_TRAINABLE = "trainers.tune_digits:train_digits"
# The classic CIFAR tutorial's space, used when the default trainable is given no [space].
DEFAULT_SPACE: dict[str, Any] = {
    "l1": {"type": "pow2", "low": 4, "high": 256},
    "l2": {"type": "pow2", "low": 4, "high": 256},
    "lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1},
    "batch_size": {"type": "choice", "values": [8, 16, 32, 64]},
}
ALGORITHMS = ("random", "grid", "optuna", "hyperopt", "bohb")
SCHEDULERS = ("fifo", "asha", "hyperband")
# algorithm -> (modules it needs, the gpumon extra that installs them)
ALGORITHM_PACKAGES = {
    "optuna": (("optuna",), "optuna"),
    "hyperopt": (("hyperopt",), "hyperopt"),
    "bohb": (("hpbandster", "ConfigSpace"), "bohb"),
}
PARAM_TYPES = {  # type -> its required keys
    "choice": ("values",),
    "grid": ("values",),
    "uniform": ("low", "high"),
    "loguniform": ("low", "high"),
    "randint": ("low", "high"),
    "pow2": ("low", "high"),
}
TOP_KEYS = {
    "name", "trainable", "metric", "mode", "num_samples", "max_concurrent_trials", "time_budget_s",
    "ray_address", "seed", "algorithm", "scheduler", "resources", "stop", "space",
}  # fmt: skip
SCHEDULER_KEYS = {"type", "max_t", "grace_period", "reduction_factor"}
_ADDRESS = re.compile(r"^[A-Za-z0-9_.\-]+:\d{1,5}$")
_TRAINABLE = re.compile(r"^(?P<target>[^:]+):(?P<func>[A-Za-z_][A-Za-z0-9_]*)$")


class SearchFileError(ValueError):
    """A mistake in a search file; the message is one line with the key and the reason."""


@dataclass(frozen=True)
class Param:
    type: str
    values: tuple[Any, ...] = ()  # choice / grid (pow2 is expanded into a choice)
    low: float = 0.0
    high: float = 0.0


@dataclass(frozen=True)
class Search:
    trainable: str = DEFAULT_TRAINABLE  # "module:function" or "path/file.py:function"
    metric: str = "loss"
    mode: str = "min"
    num_samples: int = 1
    algorithm: str = "random"
    scheduler: str = "fifo"
    max_t: int = 10  # ASHA/HyperBand: the most iterations a trial gets
    grace_period: int = 1
    reduction_factor: int = 2
    space: dict[str, Param] = field(default_factory=dict)
    constants: dict[str, Any] = field(default_factory=dict)
    cpu: float = 1.0
    gpu: float = 0.0
    max_concurrent_trials: int | None = None
    time_budget_s: float | None = None
    stop: dict[str, float] = field(default_factory=dict)
    ray_address: str = "local"  # "local", "auto" or host:port
    seed: int | None = None
    name: str | None = None

    @property
    def packages(self) -> tuple[str, ...]:
        return ALGORITHM_PACKAGES.get(self.algorithm, ((), ""))[0]


def load(path: str | Path, visible_gpus: int | None = None, cwd: str | Path = ".") -> Search:
    """Read and check a search file. ``visible_gpus`` (when known) rejects GPU requests on a GPU-less local run."""
    where = Path(path)
    try:
        data = tomllib.loads(where.read_text())
    except FileNotFoundError:
        raise SearchFileError(f"{path}: no such search file") from None
    except OSError as err:
        raise SearchFileError(f"{path}: cannot read it ({err.strerror})") from None
    except tomllib.TOMLDecodeError as err:
        raise SearchFileError(f"{path}: not valid TOML: {err}") from None
    except UnicodeDecodeError:
        raise SearchFileError(f"{path}: not a text file") from None
    try:
        return parse(data, visible_gpus, Path(cwd))
    except SearchFileError as err:
        raise SearchFileError(f"{path}: {err}") from None


def parse(data: dict[str, Any], visible_gpus: int | None = None, cwd: Path = Path(".")) -> Search:
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise SearchFileError(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(TOP_KEYS))})")
    out: dict[str, Any] = {}
    out["trainable"] = _trainable(data.get("trainable", DEFAULT_TRAINABLE), cwd)
    out["metric"] = _string(data, "metric", "loss")
    out["mode"] = _string(data, "mode", "min")
    if out["mode"] not in ("min", "max"):
        raise SearchFileError(f"mode: must be 'min' or 'max', got {out['mode']!r}")
    out["num_samples"] = _int(data, "num_samples", 1, minimum=1)
    if "name" in data:
        out["name"] = _string(data, "name", "")
    if "seed" in data:
        out["seed"] = _int(data, "seed", 0, minimum=0)
    if "max_concurrent_trials" in data:
        out["max_concurrent_trials"] = _int(data, "max_concurrent_trials", 1, minimum=1)
    if "time_budget_s" in data:
        out["time_budget_s"] = _number(data, "time_budget_s", positive=True)
    out.update(_algorithm(data))
    out.update(_resources(data.get("resources", {}), visible_gpus, data.get("ray_address", "local")))
    out["ray_address"] = _address(data.get("ray_address", "local"))
    out["stop"] = _stop(data.get("stop", {}))
    raw_space = data.get("space", DEFAULT_SPACE if out["trainable"] == DEFAULT_TRAINABLE else None)
    if not isinstance(raw_space, dict) or not raw_space:
        raise SearchFileError("space: missing: give [space] with at least one parameter")
    space, constants = {}, {}
    for key, spec in raw_space.items():
        if isinstance(spec, dict):
            space[key] = _param(f"space.{key}", spec, out["algorithm"])
        else:
            constants[key] = spec  # a fixed value passed to every trial
    if not space:
        raise SearchFileError("space: no parameter to search: give at least one a type (choice, uniform, ...)")
    out["space"], out["constants"] = space, constants
    return Search(**out)


def _string(data: dict[str, Any], key: str, default: str) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or not value:
        raise SearchFileError(f"{key}: must be a non-empty string, got {value!r}")
    return value


def _int(data: dict[str, Any], key: str, default: int, minimum: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SearchFileError(f"{key}: must be a whole number, got {value!r}")
    if value < minimum:
        raise SearchFileError(f"{key}: must be at least {minimum}, got {value}")
    return value


def _number(data: dict[str, Any], key: str, positive: bool = False, table: str = "") -> float:
    value, label = data.get(key), f"{table}{key}"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SearchFileError(f"{label}: must be a number, got {value!r}")
    if positive and value <= 0:
        raise SearchFileError(f"{label}: must be more than 0, got {value:g}")
    return float(value)


def _trainable(value: Any, cwd: Path) -> str:
    match = _TRAINABLE.match(value) if isinstance(value, str) else None
    if match is None:
        raise SearchFileError(f"trainable: expected 'module:function' or 'file.py:function', got {value!r}")
    target = match["target"]
    if target.endswith(".py"):
        if not (cwd / target).is_file():
            raise SearchFileError(f"trainable: file {target!r} not found (relative to {cwd})")
        return value
    try:  # finds the module without running it (a parent package is imported)
        found = importlib.util.find_spec(target)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise SearchFileError(f"trainable: module {target!r} not found (is it installed or in the current folder?)")
    return value


def _algorithm(data: dict[str, Any]) -> dict[str, Any]:
    algorithm = data.get("algorithm", "random")
    if algorithm not in ALGORITHMS:
        raise SearchFileError(f"algorithm: {algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    scheduler = data.get("scheduler", "hyperband" if algorithm == "bohb" else "fifo")
    options: dict[str, Any] = {}
    if isinstance(scheduler, dict):
        unknown = sorted(set(scheduler) - SCHEDULER_KEYS)
        if unknown:
            raise SearchFileError(f"scheduler.{unknown[0]}: unknown (known: {', '.join(sorted(SCHEDULER_KEYS))})")
        for key in ("max_t", "grace_period", "reduction_factor"):
            if key in scheduler:
                options[key] = _int(scheduler, key, 1, minimum=2 if key == "reduction_factor" else 1)
        scheduler = scheduler.get("type", "hyperband" if algorithm == "bohb" else "fifo")
    if scheduler not in SCHEDULERS:
        raise SearchFileError(f"scheduler: {scheduler!r} is not one of {', '.join(SCHEDULERS)}")
    if algorithm == "bohb" and scheduler != "hyperband":
        raise SearchFileError(f"scheduler: bohb works with 'hyperband' (HyperBandForBOHB), not {scheduler!r}")
    if options.get("grace_period", 1) > options.get("max_t", 10):
        raise SearchFileError("scheduler.grace_period: must not exceed scheduler.max_t")
    modules, extra = ALGORITHM_PACKAGES.get(algorithm, ((), ""))
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise SearchFileError(f"algorithm: {algorithm!r} needs {' and '.join(missing)}: pip install 'gpumon[{extra}]'")
    return {"algorithm": algorithm, "scheduler": scheduler, **options}


def _resources(value: Any, visible_gpus: int | None, address: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        raise SearchFileError("resources: must be a table, e.g. [resources] cpu = 1, gpu = 0.5")
    unknown = sorted(set(value) - {"cpu", "gpu"})
    if unknown:
        raise SearchFileError(f"resources.{unknown[0]}: unknown (known: cpu, gpu)")
    cpu = _number(value, "cpu", positive=True, table="resources.") if "cpu" in value else 1.0
    gpu = _number(value, "gpu", table="resources.") if "gpu" in value else 0.0
    if gpu < 0:
        raise SearchFileError(f"resources.gpu: must be 0 or more, got {gpu:g}")
    if gpu > 1 and gpu != int(gpu):
        raise SearchFileError(f"resources.gpu: above 1 it must be whole GPUs, got {gpu:g}")
    if gpu > 0 and visible_gpus == 0 and address in ("local", None):
        raise SearchFileError(
            f"resources.gpu: {gpu:g} asked but this machine shows no GPU: set 0, or join a cluster with ray_address"
        )
    return {"cpu": cpu, "gpu": gpu}


def _address(value: Any) -> str:
    if value in ("local", "auto"):
        return str(value)
    if isinstance(value, str) and value.startswith("ray://"):
        raise SearchFileError(
            "ray_address: Ray Client (ray://) runs the search on the head node, out of gpumon's sight: "
            "run gpumon on a cluster node with ray_address = 'auto'"
        )
    if not isinstance(value, str) or not _ADDRESS.match(value):
        raise SearchFileError(f"ray_address: expected 'local', 'auto' or HOST:PORT, got {value!r}")
    return value


def _stop(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        raise SearchFileError("stop: must be a table of metric = limit, e.g. [stop] training_iteration = 10")
    return {k: _number(value, k, table="stop.") for k in value}


def _param(key: str, spec: dict[str, Any], algorithm: str) -> Param:
    kind = spec.get("type")
    if kind not in PARAM_TYPES:
        raise SearchFileError(f"{key}.type: {kind!r} is not one of {', '.join(PARAM_TYPES)}")
    allowed = {"type", *PARAM_TYPES[kind]}
    extra = sorted(set(spec) - allowed)
    if extra:
        raise SearchFileError(f"{key}.{extra[0]}: not used by type {kind!r} (it takes {', '.join(PARAM_TYPES[kind])})")
    missing = [k for k in PARAM_TYPES[kind] if k not in spec]
    if missing:
        raise SearchFileError(f"{key}: type {kind!r} needs {' and '.join(missing)}")
    if kind == "grid" and algorithm not in ("random", "grid"):
        raise SearchFileError(f"{key}: type 'grid' works with algorithm random or grid, not {algorithm!r}")
    if kind in ("choice", "grid"):
        values = spec["values"]
        if not isinstance(values, list) or not values:
            raise SearchFileError(f"{key}.values: must be a non-empty list")
        return Param(kind, tuple(values))
    low, high = _number(spec, "low", table=f"{key}."), _number(spec, "high", table=f"{key}.")
    where = f"{key}: low ({low:g}) must be below high ({high:g})"
    if low >= high and not (kind == "pow2" and low == high):
        raise SearchFileError(where)
    if kind == "loguniform" and low <= 0:
        raise SearchFileError(f"{key}.low: loguniform needs low > 0, got {low:g}")
    if kind in ("randint", "pow2") and (low != int(low) or high != int(high)):
        raise SearchFileError(f"{key}: {kind} needs whole numbers for low and high")
    if kind == "pow2":
        if low < 1 or not _is_pow2(int(low)) or not _is_pow2(int(high)):
            raise SearchFileError(f"{key}: pow2 needs powers of two for low and high, got {low:g} and {high:g}")
        return Param("choice", tuple(2**i for i in range(int(low).bit_length() - 1, int(high).bit_length())))
    if algorithm == "grid":
        raise SearchFileError(f"{key}: algorithm 'grid' needs finite values: use choice, grid or pow2, not {kind}")
    return Param(kind, (), low, high)


def _is_pow2(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0
