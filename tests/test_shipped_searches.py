"""The shipped search files survive a plain (non-editable) install and are found by name from any directory."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.core.runs.record.spec import RunSpec, SpecError, validate

REPO = Path(__file__).resolve().parent.parent
SHIPPED = sorted(p.name for p in (REPO / "trainers" / "searches").glob("*.toml"))


@pytest.mark.skipif(importlib.util.find_spec("setuptools") is None, reason="building needs setuptools here")
def test_a_plain_install_carries_the_searches_and_gpumon_tune_finds_them_by_name(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy: the build's own folders never land in the checkout
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("gpumon", "trainers"):
        shutil.copytree(REPO / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-compile"]
    pip += ["--target", str(target)]  # no .pyc: the files installed are what this test reads
    subprocess.run([*pip, str(source)], check=True, capture_output=True, timeout=300)
    assert sorted(p.name for p in (target / "trainers" / "searches").glob("*.toml")) == SHIPPED
    elsewhere = tmp_path / "elsewhere"  # neither the checkout nor the install
    elsewhere.mkdir()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(target), "GPUMON_HOME": str(tmp_path / "home")}

    def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "gpumon.cli", *args]
        return subprocess.run(argv, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)

    listed = gpumon("tune", "--list")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert rows == [[name[:-5], str(target / "trainers" / "searches" / name)] for name in SHIPPED]
    checked = gpumon("tune", "digits-asha", "--check")
    assert checked.returncode == 0 and checked.stdout.strip() == "digits-asha: ok", checked
    bare = gpumon("tune")
    assert bare.returncode == 2 and bare.stderr.strip() == (
        "gpumon: error: name a search file or a shipped search, e.g. gpumon tune digits-asha (gpumon tune --list)"
    )
    wrong = gpumon("tune", "digits-ashaa", "--check")
    assert wrong.returncode == 2
    assert wrong.stderr.strip() == (
        "gpumon: error: digits-ashaa: no such search file "
        "(or a shipped search's name: digits-asha, digits-grid, digits-optuna)"
    )


def test_a_name_resolves_to_the_shipped_file_but_a_file_here_wins(tmp_path: Path) -> None:
    spec = validate(RunSpec(kind="tune", search="digits-grid", cwd=str(tmp_path)), 0)
    assert spec.search == str(REPO / "trainers" / "searches" / "digits-grid.toml") and spec.name == "digits-grid"
    (tmp_path / "digits-grid").write_text('name = "mine"\nnum_samples = 1\n')
    assert validate(RunSpec(kind="tune", search="digits-grid", cwd=str(tmp_path)), 0).name == "mine"
    with pytest.raises(SpecError, match=r"^tune needs a search file, or a shipped search's name \(digits-asha"):
        validate(RunSpec(kind="tune", search="", cwd=str(tmp_path)), 0)


def test_max_restarts_without_torchrun_is_refused_not_ignored(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="--max-restarts is torchrun's"):
        validate(RunSpec(kind="dp", max_restarts=2, cwd=str(tmp_path)), 0)
