"""Search files: the validator's messages (before Ray starts), `gpumon tune --check`, the Tune objects built."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpumon.core.searches.search_file import DEFAULT_SPACE, SearchFileError, load, parse

REPO = Path(__file__).resolve().parents[1]
SPACE = '[space]\nlr = { type = "loguniform", low = 1e-4, high = 1e-1 }\n'


def check(text: str, visible_gpus: int | None = None, cwd: Path = REPO) -> str:
    """The validator's message for a search file's text ('' when it is accepted)."""
    import tomllib

    try:
        parse(tomllib.loads(textwrap.dedent(text)), visible_gpus, cwd)
    except SearchFileError as err:
        return str(err)
    return ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("colour = 'red'\n" + SPACE, "unknown key 'colour'"),
        ("mode = 'lowest'\n" + SPACE, "mode: must be 'min' or 'max', got 'lowest'"),
        ("num_samples = 0\n" + SPACE, "num_samples: must be at least 1, got 0"),
        ("num_samples = 'four'\n" + SPACE, "num_samples: must be a whole number, got 'four'"),
        ("max_concurrent_trials = 0\n" + SPACE, "max_concurrent_trials: must be at least 1"),
        ("time_budget_s = -5\n" + SPACE, "time_budget_s: must be more than 0, got -5"),
        ("algorithm = 'genetic'\n" + SPACE, "algorithm: 'genetic' is not one of random, grid, optuna, hyperopt, bohb"),
        ("scheduler = 'median'\n" + SPACE, "scheduler: 'median' is not one of fifo, asha, hyperband"),
        ("scheduler = { type = 'asha', patience = 3 }\n" + SPACE, "scheduler.patience: unknown"),
        ("scheduler = { type = 'asha', max_t = 4, grace_period = 8 }\n" + SPACE, "grace_period: must not exceed"),
        ("trainable = 'train'\n" + SPACE, "trainable: expected 'module:function' or 'file.py:function'"),
        ("trainable = 'no_such_module_x:train'\n" + SPACE, "trainable: module 'no_such_module_x' not found"),
        ("trainable = 'missing.py:train'\n" + SPACE, "trainable: file 'missing.py' not found"),
        ("trainable = 'trainers.model:build_model'\n", "space: missing"),
        ("[space]\nepochs = 3\n", "space: no parameter to search"),
        ("[space]\nlr = { type = 'gauss', low = 0, high = 1 }\n", "space.lr.type: 'gauss' is not one of choice"),
        ("[space]\nlr = { type = 'uniform', low = 0.1 }\n", "space.lr: type 'uniform' needs high"),
        ("[space]\nlr = { type = 'uniform', low = 0.5, high = 0.1 }\n", "space.lr: low (0.5) must be below high (0.1)"),
        ("[space]\nlr = { type = 'loguniform', low = 0, high = 0.1 }\n", "space.lr.low: loguniform needs low > 0"),
        ("[space]\nlr = { type = 'uniform', values = [1], low = 0, high = 1 }\n", "space.lr.values: not used by"),
        ("[space]\nbs = { type = 'choice', values = [] }\n", "space.bs.values: must be a non-empty list"),
        ("[space]\nl1 = { type = 'pow2', low = 3, high = 64 }\n", "space.l1: pow2 needs powers of two"),
        ("[space]\nn = { type = 'randint', low = 1.5, high = 4 }\n", "space.n: randint needs whole numbers"),
        ("algorithm = 'grid'\n" + SPACE, "space.lr: algorithm 'grid' needs finite values"),
        ("[resources]\ngpu = -1\n" + SPACE, "resources.gpu: must be 0 or more"),
        ("[resources]\ngpu = 1.5\n" + SPACE, "resources.gpu: above 1 it must be whole GPUs"),
        ("[resources]\ncpu = 0\n" + SPACE, "resources.cpu: must be more than 0"),
        ("[resources]\nmemory = 4\n" + SPACE, "resources.memory: unknown (known: cpu, gpu)"),
        ("ray_address = 'ray://head:10001'\n" + SPACE, "ray_address: Ray Client (ray://) runs the search on the head"),
        ("ray_address = 'my cluster'\n" + SPACE, "ray_address: expected 'local', 'auto' or HOST:PORT"),
        ("[stop]\ntraining_iteration = 'ten'\n" + SPACE, "stop.training_iteration: must be a number, got 'ten'"),
    ],
)
def test_a_bad_search_file_names_the_key_and_the_reason(text: str, message: str) -> None:
    assert message in check(text)


def test_a_gpu_fraction_on_a_machine_without_gpus_is_refused_unless_joining_a_cluster() -> None:
    text = "[resources]\ngpu = 0.25\n" + SPACE
    assert "resources.gpu: 0.25 asked but this machine shows no GPU" in check(text, visible_gpus=0)
    assert check(text, visible_gpus=1) == ""
    assert check("ray_address = 'auto'\n" + text, visible_gpus=0) == ""


def test_the_default_trainable_gets_the_tutorial_space_and_pow2_expands() -> None:
    search = parse({"num_samples": 4})
    assert set(search.space) == set(DEFAULT_SPACE)
    assert search.space["l1"].values == (4, 8, 16, 32, 64, 128, 256)
    assert (search.metric, search.mode, search.algorithm, search.scheduler) == ("loss", "min", "random", "fifo")
    assert parse({"algorithm": "bohb"}).scheduler == "hyperband" if importlib.util.find_spec("hpbandster") else True


@pytest.mark.parametrize(
    ("algorithm", "modules", "extra"),
    [("optuna", ["optuna"], "optuna"), ("hyperopt", ["hyperopt"], "hyperopt"),
     ("bohb", ["hpbandster", "ConfigSpace"], "bohb")],
)  # fmt: skip
def test_a_missing_search_package_names_the_extra(algorithm: str, modules: list[str], extra: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        pytest.skip(f"{algorithm}'s packages are installed here")
    message = check(f"algorithm = '{algorithm}'\n" + SPACE)
    assert message == f"algorithm: '{algorithm}' needs {' and '.join(missing)}: pip install 'gpumon[{extra}]'"


def test_the_example_search_files_are_valid() -> None:
    for path in sorted((REPO / "trainers" / "searches").glob("*.toml")):
        try:
            load(path, visible_gpus=0, cwd=REPO)
        except SearchFileError as err:
            assert "pip install 'gpumon[" in str(err), err  # only a missing optional package may stop one


def run_cli(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {"GPUMON_HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "gpumon.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_gpumon_tune_rejects_a_bad_file_in_one_line_with_exit_2(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("num_samples = 3\n[space]\nlr = { type = 'uniform', low = 1 }\n")
    (tmp_path / "broken.toml").write_text("num_samples = \n")
    cases = {
        "bad.toml": "gpumon: error: bad.toml: space.lr: type 'uniform' needs high",
        "broken.toml": "gpumon: error: broken.toml: not valid TOML",
        "nothere.toml": "gpumon: error: nothere.toml: no such search file",
    }
    for name, message in cases.items():
        result = run_cli("tune", name, cwd=tmp_path, home=tmp_path / "home")
        assert result.returncode == 2, result
        assert result.stderr.startswith(message), result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "home" / "runs").exists() or not any((tmp_path / "home" / "runs").iterdir())


def test_gpumon_tune_check_accepts_a_good_file(tmp_path: Path) -> None:
    result = run_cli("tune", str(REPO / "trainers/searches/digits-asha.toml"), "--check", cwd=REPO, home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("digits-asha.toml: ok")


def test_tune_objects_from_a_search_file() -> None:
    pytest.importorskip("ray.tune")
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    from ray.tune.search.sample import Categorical, Float, Integer

    from gpumon.tune.runner import param_space, scheduler

    search = parse(
        {
            "algorithm": "grid",
            "space": {"l1": {"type": "pow2", "low": 8, "high": 32}, "lr": {"type": "grid", "values": [0.1, 0.2]}},
        }
    )
    space = param_space(search)
    assert space["l1"] == {"grid_search": [8, 16, 32]}  # grid turns a choice into every value
    assert space["lr"] == {"grid_search": [0.1, 0.2]}
    assert isinstance(scheduler(search), FIFOScheduler)
    search = parse(
        {
            "scheduler": {"type": "asha", "max_t": 5, "grace_period": 2},
            "space": {
                "bs": {"type": "choice", "values": [16, 32]},
                "lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1},
                "n": {"type": "randint", "low": 1, "high": 4},
                "epochs": 3,
            },
        }
    )
    space = param_space(search)
    assert isinstance(space["bs"], Categorical) and space["bs"].categories == [16, 32]
    assert isinstance(space["lr"], Float) and (space["lr"].lower, space["lr"].upper) == (1e-4, 1e-1)
    assert isinstance(space["n"], Integer) and (space["n"].lower, space["n"].upper) == (1, 4)
    assert space["epochs"] == 3
    asha = scheduler(search)
    assert isinstance(asha, ASHAScheduler) and asha._max_t == 5


def test_the_launch_form_starts_a_search_from_a_search_file(tmp_path: Path) -> None:
    from gpumon.core.runs.record.spec import SpecError
    from gpumon.tui.views.runs.launch_form import build_spec

    spec = build_spec("tune", None, "trainers/searches/digits-asha.toml", "1", "", "", visible=0, cwd=str(REPO))
    assert (spec.kind, spec.search, spec.name, spec.nproc) == (
        "tune",
        "trainers/searches/digits-asha.toml",
        "digits-asha",
        1,
    )
    (tmp_path / "bad.toml").write_text("mode = 'up'\n" + SPACE)
    for script, extra, message in [
        ("", "", "tune needs a search: a shipped one's name"),
        ("trainers/searches/digits-asha.toml", "--lr 1", "arguments: a search takes none"),
        ("bad.toml", "", "bad.toml: mode: must be 'min' or 'max', got 'up'"),
    ]:
        with pytest.raises(SpecError) as err:
            build_spec(
                "tune", None, script, "1", "", extra, visible=0, cwd=str(tmp_path if script == "bad.toml" else REPO)
            )
        assert str(err.value).startswith(message)
