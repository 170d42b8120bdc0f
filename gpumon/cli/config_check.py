"""config.toml checked whole before a command acts on it: a mistake is one line naming the file, the table, the
key and the value, and exit 2, before any run is made (issue 49: ``log_cap = "abc"`` once started a run whose
supervisor then died on the config, and the run read ``lost`` with no word of why).

Each table is checked by the code that reads it (``load_settings`` for ``[alerts]``, ``parse_size`` for
``log_cap``, ...), so the check and the use never disagree; this module only calls them all, and names the keys
no table knows.
"""

from __future__ import annotations

from pathlib import Path

from gpumon.core.alerts.settings import KEYS as ALERT_KEYS

# table -> the keys gpumon reads there
TABLES: dict[str, tuple[str, ...]] = {
    "alerts": ALERT_KEYS,
    "runs": ("log_cap", "stall_after", "stall_steps", "stall_pause_after", "straggler_after"),
    "queue": ("settle", "backfill", "interval"),
    "slurm": ("nodes", "gpus_per_node", "partition", "time", "account", "sbatch_args", "gpumon"),
    "fleet": ("hosts", "ssh", "gpumon"),
}
# keymap.toml holds [keymap]; a [keymap] here is a file mixed up, said as such
ELSEWHERE = {"keymap": "keymap.toml"}


def config_problem(path: Path | None = None) -> str | None:
    """What is wrong with config.toml, in one line naming the file; None when nothing is (or it is missing)."""
    from gpumon.core.config import ConfigError, config_path, read_config

    path = path or config_path()
    try:
        data = read_config(path)
    except ConfigError as err:
        return str(err)
    for table, value in data.items():
        if table in ELSEWHERE:
            return f"{path}: [{table}] belongs in {ELSEWHERE[table]} beside it, not in config.toml"
        if table not in TABLES:
            return f"{path}: unknown table [{table}]; known: {', '.join(f'[{t}]' for t in TABLES)}"
        if not isinstance(value, dict):
            return f"{path}: {table} must be a table ([{table}] then key = value lines), not {value!r}"
        unknown = sorted(set(value) - set(TABLES[table]))
        if unknown:
            return f"{path}: [{table}] unknown key {unknown[0]!r}; known: {', '.join(TABLES[table])}"
    problem = _values(path, data)
    if problem is None:
        return None
    return problem if problem.startswith(str(path)) else f"{path}: {problem}"


def _values(path: Path, data: dict[str, object]) -> str | None:
    """The first value the code that reads it refuses; each reader's own words."""
    from gpumon.core.alerts.settings import load_settings
    from gpumon.core.config import ConfigError
    from gpumon.core.fleet.hosts import HostError, load_fleet_config
    from gpumon.core.runs.supervision.output import parse_size
    from gpumon.core.runs.supervision.stall import load_rule
    from gpumon.core.slurm.submit import SlurmError, with_defaults

    runs = data.get("runs", {})
    assert isinstance(runs, dict)
    try:
        load_settings(path)
        if "log_cap" in runs:
            parse_size(runs["log_cap"])
        load_fleet_config(path)
        if "slurm" in data:
            with_defaults({})
    except (ConfigError, HostError, SlurmError) as err:
        return str(err)
    _rule, problem = load_rule(path)
    if problem and problem.startswith(("[runs]", str(path))):  # not GPUMON_STALL_AFTER's: no file's mistake
        return problem
    from gpumon.core.doctor.straggler import straggler_after

    if (problem := straggler_after(path)[1]) is not None:
        return problem
    queue = data.get("queue", {})
    assert isinstance(queue, dict)
    for key, value in queue.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            return f"[queue] {key} = {value!r} must be a number of seconds >= 0"
    return None
