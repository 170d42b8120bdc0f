"""Runs a search file with Ray Tune: the program of a ``gpumon tune`` run (kind ``tune``).

``python -m gpumon.tune.runner [SEARCH.toml]``; by default the copy that
``gpumon tune`` put in the run directory. Results and checkpoints go to
``<run dir>/ray_results``; events go to the run's event stream through
``GpumonCallback``; ``control/`` files stop a trial or the whole search.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from gpumon.core.searches.search_file import Param, Search, SearchFileError, load


def trainable_function(ref: str, cwd: Path) -> Any:
    """Import ``module:function`` or ``file.py:function``; a file's module travels to workers by value."""
    target, name = ref.rsplit(":", 1)
    if target.endswith(".py"):
        import ray.cloudpickle as cloudpickle

        path = (cwd / target).resolve()
        spec = importlib.util.spec_from_file_location(f"gpumon_trainable_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise SearchFileError(f"trainable: cannot load {target}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        cloudpickle.register_pickle_by_value(module)  # Ray workers cannot import it by name
    else:
        module = importlib.import_module(target)
    function = getattr(module, name, None)
    if not callable(function):
        raise SearchFileError(f"trainable: {target} has no function {name!r}")
    return function


def param_space(search: Search) -> dict[str, Any]:
    from ray import tune

    def one(param: Param) -> Any:
        if param.type == "grid" or (param.type == "choice" and search.algorithm == "grid"):
            return tune.grid_search(list(param.values))
        if param.type == "choice":
            return tune.choice(list(param.values))
        if param.type == "uniform":
            return tune.uniform(param.low, param.high)
        if param.type == "loguniform":
            return tune.loguniform(param.low, param.high)
        return tune.randint(int(param.low), int(param.high))  # randint: high excluded, as in Tune

    return {**search.constants, **{key: one(p) for key, p in search.space.items()}}


def search_algorithm(search: Search) -> Any:
    if search.algorithm in ("random", "grid"):
        from ray.tune.search.basic_variant import BasicVariantGenerator

        # Tune ignores TuneConfig's max_concurrent_trials for this one: it takes its own.
        return BasicVariantGenerator(random_state=search.seed, max_concurrent=search.max_concurrent_trials or 0)
    if search.algorithm == "optuna":
        from ray.tune.search.optuna import OptunaSearch

        return OptunaSearch(seed=search.seed)
    if search.algorithm == "hyperopt":
        from ray.tune.search.hyperopt import HyperOptSearch

        return HyperOptSearch(random_state_seed=search.seed)
    from ray.tune.search.bohb import TuneBOHB

    return TuneBOHB(seed=search.seed)


def scheduler(search: Search) -> Any:
    from ray.tune import schedulers

    if search.scheduler == "asha":
        return schedulers.ASHAScheduler(
            max_t=search.max_t, grace_period=search.grace_period, reduction_factor=search.reduction_factor
        )
    if search.scheduler == "hyperband":
        kind = schedulers.HyperBandForBOHB if search.algorithm == "bohb" else schedulers.HyperBandScheduler
        return kind(max_t=search.max_t, reduction_factor=search.reduction_factor)
    return schedulers.FIFOScheduler()


def start_ray(address: str) -> None:
    import logging

    import ray

    if address == "local":
        # A private Ray for this search: no dashboard, bound to localhost, quiet.
        ray.init(
            include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=True, logging_level=logging.WARNING
        )
    else:
        ray.init(address=address, logging_level=logging.WARNING)


def run(search: Search, run_dir: Path, cwd: Path) -> int:
    from ray import tune

    from gpumon.tune.callback import GpumonCallback
    from gpumon.tune.stopper import GpumonStopper

    function = trainable_function(search.trainable, cwd)
    start_ray(search.ray_address)
    resources = {"cpu": search.cpu, "gpu": search.gpu}
    tuner = tune.Tuner(
        tune.with_resources(function, resources),
        param_space=param_space(search),
        tune_config=tune.TuneConfig(
            metric=search.metric,
            mode=search.mode,
            search_alg=search_algorithm(search),
            scheduler=scheduler(search),
            num_samples=search.num_samples,
            max_concurrent_trials=None if search.algorithm in ("random", "grid") else search.max_concurrent_trials,
            time_budget_s=search.time_budget_s,
        ),
        run_config=tune.RunConfig(
            name="search",
            storage_path=str(run_dir / "ray_results"),
            stop=GpumonStopper(run_dir, search.stop),
            callbacks=[
                GpumonCallback(
                    run_dir,
                    metric=search.metric,
                    mode=search.mode,
                    search_alg=search.algorithm,
                    scheduler=search.scheduler,
                    space=sorted(search.space),
                )
            ],
            verbose=0,
        ),
    )
    results = tuner.fit()
    errors = sum(1 for i in range(len(results)) if results[i].error is not None)
    try:
        best = results.get_best_result()
        metrics = best.metrics or {}
        print(f"best trial: {metrics.get('trial_id')} {search.metric}={metrics.get(search.metric)}")
        print(f"best config: {best.config}")
    except RuntimeError as err:  # no trial reported the metric
        print(f"no best trial: {err}")
    print(f"{len(results)} trials, {errors} failed; results in {run_dir / 'ray_results' / 'search'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    run_dir = Path(os.environ.get("GPUMON_RUN_DIR") or ".")
    path = Path(args[0]) if args else run_dir / "search.toml"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_COLOR_PREFIX", "0")  # the output goes to a log file, not a terminal
    try:
        search = load(path, cwd=Path.cwd())
        return run(search, run_dir, Path.cwd())
    except SearchFileError as err:
        print(f"gpumon tune: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
