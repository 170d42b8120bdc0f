"""``gpumon tune SEARCH.toml`` starts a search; ``gpumon trials`` prints a run's trial table (scripts, plain ssh)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from gpumon.cli.common import announce_start, fail, print_table
from gpumon.core import format as fmt
from gpumon.core.visible import visible


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    tune = sub.add_parser(
        "tune",
        parents=[parent],
        help="start a Ray Tune search from a search file (prints its run id last)",
        description="Start a hyper-parameter search in the background, as a run of kind tune. "
        "The search file is checked before Ray starts; see docs/tune.md.",
        epilog="examples: gpumon tune digits-asha --follow | gpumon tune my-search.toml | gpumon tune --list",
    )
    tune.add_argument("search", nargs="?", help="the search file (TOML), or the name of one gpumon ships (see --list)")
    tune.add_argument("--list", action="store_true", help="list the search files gpumon ships, by name")
    tune.add_argument("--name", help="a label shown beside the id (default: the file's name)")
    tune.add_argument("--gpus", metavar="IDS", help="GPU indexes for CUDA_VISIBLE_DEVICES, e.g. 0,1")
    tune.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="extra environment")
    tune.add_argument("--check", action="store_true", help="only check the search file, start nothing")
    tune.add_argument("--follow", "-f", action="store_true", help="then follow the search's log until it ends")

    trials = sub.add_parser("trials", parents=[parent], help="print the Ray Tune trial table of a run")
    trials.add_argument("run", nargs="?", help="run id or unique prefix (default: the newest run with trials)")
    trials.add_argument("--json", action="store_true", help="print JSON: the experiment and every trial")


def cmd_tune(args: argparse.Namespace) -> int:
    from gpumon.core.gpu import visible_gpu_count
    from gpumon.core.runs.record.spec import RunSpec, SpecError, parse_env, parse_gpus, validate
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import launch

    if args.list:
        return list_shipped()
    if not args.search:
        return fail("name a search file or a shipped search, e.g. gpumon tune digits-asha (gpumon tune --list)")
    visible = visible_gpu_count()
    try:
        spec = RunSpec(
            kind="tune",
            search=args.search,
            gpus=parse_gpus(args.gpus, visible),
            env=parse_env(args.env),
            name=args.name,  # else the search file's name
        )
        if args.check:
            validate(spec, visible)
            print(f"{args.search}: ok")
            return 0
        record = launch(spec, RunStore(), visible)
    except SpecError as err:
        return fail(str(err))
    except OSError as err:
        return fail(f"could not start the search: {err}")
    print(f"trials:  gpumon trials {record.id}   (or t in gpumon)")
    return announce_start(record, "search", args.follow)


def list_shipped() -> int:
    """``gpumon tune --list``: each shipped search's name and file."""
    from gpumon.core.searches.shipped import shipped_searches

    found = shipped_searches()
    if not found:
        return fail("no shipped search files found: reinstall gpumon (they come with its trainers package)")
    print_table([["NAME", "FILE"], *([name, str(path)] for name, path in found.items())])
    return 0


def stop_trial(record: Any, trial_id: str) -> int:
    """``gpumon stop RUN --trial ID``: ask the search to stop one trial (at its next result)."""
    from gpumon.core.runs.reading.telemetry import RunTelemetry
    from gpumon.core.runs.supervision.control import request_stop_trial

    tele = RunTelemetry(record.dir, use_summary=False)  # Tune events are not in summaries
    tele.update()
    if tele.tune is None:
        return fail(f"{record.id} has no Ray Tune trials: --trial goes with a search's run")
    trial = tele.tune.trials.get(trial_id)
    if trial is None:
        known = ", ".join(sorted(tele.tune.trials)[:8]) or "none yet"
        return fail(f"{record.id} has no trial {trial_id!r} (trials: {known})")
    if not record.live or trial.status not in ("RUNNING", "PENDING", "PAUSED"):
        print(f"trial {trial_id} is not running ({trial.status if record.live else record.state})")
        return 0
    request_stop_trial(record.dir, trial_id)
    print(f"asked {record.id} to stop trial {trial_id} (at its next result)")
    return 0


def cmd_trials(args: argparse.Namespace) -> int:
    from gpumon.core.runs.reading.telemetry import RunTelemetry
    from gpumon.core.runs.reading.trials import over_status, trial_status
    from gpumon.core.runs.record.store import RunNotFound, RunStore
    from gpumon.core.runs.supervision.control import stop_requested_at, trials_to_stop

    store = RunStore()
    if args.run:
        try:
            records = [store.resolve(args.run)]
        except RunNotFound as err:
            return fail(str(err))
    else:
        records = list(reversed(store.list()))
    for record in records:
        tele = RunTelemetry(record.dir, use_summary=False)  # Tune events are not in summaries
        tele.update()
        if tele.tune is not None:
            break
    else:
        where = f"run {records[0].id}" if args.run else "any run"
        hint = (
            "start a search with 'gpumon tune SEARCH.toml', or run your own Tune script, unchanged, with "
            "'gpumon launch script' (gpumon adds its callback through Ray's RAY_TUNE_CALLBACKS)"
        )
        return fail(f"no Ray Tune trials in {where}: {hint}")
    exp = tele.tune
    over = over_status(exp.ended, record.live)  # once the search is over no trial reads RUNNING
    stops, stop_all_at = trials_to_stop(record.dir), stop_requested_at(record.dir)
    status = {t.id: trial_status(t, over, stops, stop_all_at) for t in exp.trials.values()}  # STOPPED: by the user
    if args.json:
        doc = exp.to_dict()
        for trial in doc["trials"]:
            trial["status"] = status[trial["id"]]
        print(json.dumps({"schema": 1, "run": record.id, **doc}, indent=2))
        return 0
    best = exp.best_trial()
    total = exp.num_samples if exp.num_samples is not None else "?"
    print(
        f"{record.id}  {exp.search_alg or '?'} / {exp.scheduler or '?'}  metric {exp.metric or '?'} ({exp.mode or '?'})"
        f"  trials {exp.done}/{total}{'  ended' if exp.ended else ''}"
    )
    if best is not None:
        last = best.metrics.get(exp.metric or "")
        print(f"best: {best.id}  {exp.metric}={last:.6g} (last result, as Tune ranks)  {_config(best.config)}")
    params = sorted({k for t in exp.trials.values() for k in t.config})
    metrics = sorted({k for t in exp.trials.values() for k in t.metrics})
    rows = [["TRIAL", "STATUS", *params, "ITER", *metrics, "TIME"]]
    for t in exp.trials.values():
        mark = "*" if best is not None and t.id == best.id else ""
        rows.append(
            [
                t.id + mark,
                status[t.id],
                *(fmt.value(t.config.get(p)) for p in params),
                "" if t.iteration is None else str(t.iteration),
                *(fmt.value(t.metrics.get(m)) for m in metrics),
                fmt.duration(t.time_total_s) if t.time_total_s is not None else "",
            ]
        )
    print_table(rows)
    for t in exp.trials.values():
        if t.error:
            print(f"\n{t.id} failed:\n{visible(t.error.strip().splitlines()[-1])}")
    return 0


def _config(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={fmt.value(v)}" for k, v in sorted(config.items()))
