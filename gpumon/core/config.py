"""User configuration: ~/.config/gpumon/keymap.toml (or $GPUMON_CONFIG_DIR) remaps keys.

[keymap]
terminate = "x"          # binding id = key, or several keys "x,ctrl+t"
"""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

#: Binding ids the TUI declares; the keymap may name only these.
BINDING_IDS = (
    "quit", "help", "gpu_prev", "gpu_next", "gpu_up", "gpu_down", "sort", "reverse", "all_gpus",
    "sort_prev", "sort_next", "process_filter", "process_tree", "compact", "trial_sort_prev", "trial_sort_next",
    "process_search", "sort_menu", "kill_menu", "run_kill_menu",
    "terminate", "kill", "interrupt", "nice_down", "nice_up", "setup", *(f"gpu_{i}" for i in range(10)),
    "view_gpus", "view_runs", "new_run", "stop_run", "kill_run", "log_next", "log_prev", "run_filter",
    "clone_run",
    "view_trials", "trial_sort", "trial_reverse", "trial_filter", "experiment_next", "experiment_prev",
    "trial_metric", "stop_trial", "stop_experiment", "view_doctor", "census",
    "view_fleet", "host_prev", "host_next", "host_first", "host_last", "open_host", "host_close",
    "remote_terminate", "remote_kill",
    "log_open", "run_mark", "run_compare", "loss_log_scale", "log_close", "log_search", "log_match_next",
    "log_match_prev", "log_follow", "log_rank_next", "log_rank_prev", "log_up", "log_down", "log_page_up",
    "log_page_down", "log_start", "log_end", "log_wrap", "log_left", "log_right", "log_starts", "log_ends",
    "compare_close", "compare_log_scale",
    "view_alerts", "alert_open", "queue_up", "queue_down", "queue_start",
)  # fmt: skip


class ConfigError(Exception):
    """A mistake in the user's configuration; the message says where and what to do."""


def config_dir() -> Path:
    explicit = os.environ.get("GPUMON_CONFIG_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpumon"


def keymap_path() -> Path:
    return config_dir() / "keymap.toml"


def load_keymap(path: Path | None = None) -> dict[str, str]:
    path = path or keymap_path()
    table = _read_toml(path).get("keymap", {})
    if not isinstance(table, dict):
        raise ConfigError(f'{path}: [keymap] must be a table of binding = "key" lines')
    keymap: dict[str, str] = {}
    for name, keys in table.items():
        if name not in BINDING_IDS:
            raise ConfigError(f"{path}: unknown binding {name!r}; known: {', '.join(BINDING_IDS)}")
        if not isinstance(keys, str) or not keys.strip():
            raise ConfigError(f'{path}: binding {name!r} needs a key string, e.g. {name} = "x"')
        keymap[name] = keys
    return keymap


def config_path() -> Path:
    """config.toml: ``[fleet]``, ``[alerts]``, ``[runs]``, ``[slurm]``, ``[queue]`` (keys stay in keymap.toml)."""
    return config_dir() / "config.toml"


def config_section(name: str, path: Path | None = None) -> dict[str, object]:
    """One table of config.toml (empty when the file or the table is missing). Raises ConfigError with the
    file's name and what to write when the file cannot be read or the table is not a table."""
    path = path or config_path()
    table = _read_toml(path).get(name, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [{name}] must be a table of key = value lines")
    return table


MAX_BYTES = 1024 * 1024  # a config file larger than this is not one


def _read_toml(path: Path) -> dict[str, object]:
    """The file's tables; empty when it is missing; ConfigError naming the file when it cannot be read. Opened
    without blocking and read only when it is a regular file: a FIFO or a device there never holds a command
    (a link is followed: dotfiles are often links)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise ConfigError(f"{path}: cannot read it ({err.strerror or err})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ConfigError(f"{path}: is a directory, not a file: remove it or write the file there")
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: is not a regular file (a FIFO or a device): replace it with a file")
        data = os.read(fd, MAX_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read it ({err.strerror or err})") from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_BYTES // 1024} KiB: not a gpumon config")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start}): save it as UTF-8") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err})") from None


def read_config(path: Path | None = None) -> dict[str, object]:
    """Every table of config.toml (empty when it is missing). Raises ConfigError."""
    return _read_toml(path or config_path())
