"""The command line, run as a real subprocess like a user or a script would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

import gpumon
from gpumon.core.gpu.simulated import SIM_PID_BASE
from tests.conftest import needs_no_gpu


def gpumon_run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def snapshot_json(*args: str) -> dict[str, Any]:
    result = gpumon_run("snapshot", "--json", *args)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


@needs_no_gpu
def test_snapshot_json_without_gpu_says_why() -> None:
    doc = snapshot_json()
    assert doc["schema"] == 1
    assert doc["source"] == "none"
    assert doc["simulated"] is False
    assert doc["devices"] == [] and doc["processes"] == []
    assert doc["reason"] and "NVML library not found" in doc["reason"]
    assert doc["host"]["mem_total"] > 0
    assert len(doc["host"]["per_cpu"]) == os.cpu_count()


def test_snapshot_json_simulated() -> None:
    doc = snapshot_json("--simulate", "2")
    assert doc["source"] == "simulated" and doc["simulated"] is True
    assert [d["index"] for d in doc["devices"]] == [0, 1]
    assert doc["processes"]
    assert all(p["simulated"] is True and p["pid"] >= SIM_PID_BASE for p in doc["processes"])


def test_snapshot_json_simulated_seed_is_reproducible() -> None:
    def devices(seed: str) -> list[dict[str, Any]]:
        return snapshot_json("--simulate", "3", "--seed", seed)["devices"]

    assert devices("4") == devices("4")
    assert devices("4") != devices("5")


# Regression: the subcommand's own --simulate/--seed defaults once overwrote values given before it.
@pytest.mark.parametrize(
    "args",
    [
        ["--simulate", "2", "snapshot", "--json"],
        ["--simulate", "2", "--seed", "4", "snapshot", "--json"],
    ],
)
def test_global_simulate_before_the_command_is_honoured(args: list[str]) -> None:
    result = gpumon_run(*args)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["source"] == "simulated"
    assert len(doc["devices"]) == 2
    if "--seed" in args:
        assert doc["devices"] == snapshot_json("--simulate", "2", "--seed", "4")["devices"]


@needs_no_gpu
def test_snapshot_text_without_gpu() -> None:
    result = gpumon_run("snapshot")
    assert result.returncode == 0, result.stderr
    assert "source none" in result.stdout
    assert "no GPU shown: NVML library not found" in result.stdout
    assert result.stdout.splitlines()[1].startswith("host  CPU")


def test_snapshot_text_simulated() -> None:
    result = gpumon_run("snapshot", "--simulate", "2")
    assert result.returncode == 0, result.stderr
    assert "[SIMULATED]" in result.stdout
    assert "[0] " in result.stdout and "[1] " in result.stdout
    assert str(SIM_PID_BASE) in result.stdout


def test_version() -> None:
    result = gpumon_run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"gpumon {gpumon.__version__}"
    assert gpumon.__version__.count(".") >= 2


def test_help_exits_zero_and_lists_snapshot() -> None:
    result = gpumon_run("--help")
    assert result.returncode == 0
    assert "snapshot" in result.stdout and "--simulate" in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--bogus"],
        ["--interval", "0.1"],
        ["--interval", "abc"],
        ["--interval", "nan"],
        ["--simulate", "0"],
        ["--simulate", "x"],
        ["--simulate", "65"],
        ["--seed", "x"],
        ["snapshot", "--nope"],
        ["--simulat", "4"],  # no abbreviations: once taken for --simulate
        ["snapshot", "--jso"],
        ["launch", "ddp", "--npro", "2"],
        ["snapshot", "--simulate", "0"],
        ["nosuchcommand"],
    ],
    ids=lambda a: " ".join(a),
)
def test_bad_arguments_exit_2_with_one_error_line(args: list[str]) -> None:
    result = gpumon_run(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpumon")
    assert "error" in lines[0]
    assert "Traceback" not in result.stderr


def test_an_abbreviated_option_is_named_with_its_full_spelling() -> None:
    result = gpumon_run("--simulat", "4")
    assert result.returncode == 2
    assert "unknown option --simulat: did you mean --simulate?" in result.stderr  # not "invalid choice: '4'"


def _monitor_without_terminal(
    *args: str, stdout: Any = subprocess.PIPE
) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "gpumon", *args],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        timeout=120,  # the app it once started never ended: a generous deadline, not a measure
    )
    return result, time.monotonic() - started


@pytest.mark.parametrize("args", [[], ["--simulate", "4"], ["--hosts", "local", "--simulate", "2"], ["--readonly"]])
def test_the_monitor_without_a_terminal_says_what_to_use_instead_and_exits_2(args: list[str]) -> None:
    result, took = _monitor_without_terminal(*args)  # stdout a pipe, as `gpumon | less`, cron or ssh without -t
    assert result.returncode == 2 and result.stdout == ""  # no escape codes
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "needs a terminal and stdout is not one" in lines[0] and "gpumon snapshot --json [--watch]" in lines[0]
    assert took < 20  # it ends at once (before, never)


def test_the_monitor_with_stdin_not_a_terminal_is_refused_too() -> None:
    import pty

    main, tty = pty.openpty()  # stdout a terminal, stdin not: no key (not even q) would reach the app
    try:
        result, _ = _monitor_without_terminal("--simulate", "1", stdout=tty)
    finally:
        os.close(tty)
        os.close(main)
    assert result.returncode == 2
    assert "needs a terminal and stdin is not one" in result.stderr and result.stderr.count("\n") == 1


def test_snapshot_imports_no_tui_torch_or_ray() -> None:
    script = textwrap.dedent(
        """
        import contextlib, io, json, sys
        import gpumon.cli, gpumon.core, gpumon.core.gpu, gpumon.core.report, gpumon.core.sampler
        from gpumon.cli import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            codes = [main(["snapshot", "--json"]), main(["snapshot", "--json", "--simulate", "2"]),
                     main(["snapshot"])]
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in {"textual", "torch", "ray"})
        print(json.dumps({"codes": codes, "heavy": heavy}))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["codes"] == [0, 0, 0]
    assert report["heavy"] == []
