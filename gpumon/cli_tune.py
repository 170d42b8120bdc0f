"""``gpumon trials``: the trial table of a run that holds Ray Tune events, for scripts and plain ssh."""

from __future__ import annotations

import argparse
import json
from typing import Any

from gpumon.cli_runs import fail
from gpumon.core import format as fmt


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    trials = sub.add_parser("trials", parents=[parent], help="print the Ray Tune trial table of a run")
    trials.add_argument("run", nargs="?", help="run id or unique prefix (default: the newest run with trials)")
    trials.add_argument("--json", action="store_true", help="print JSON: the experiment and every trial")


def cmd_trials(args: argparse.Namespace) -> int:
    from gpumon.core.runs.store import RunNotFound, RunStore
    from gpumon.core.runs.telemetry import RunTelemetry

    store = RunStore()
    if args.run:
        try:
            records = [store.resolve(args.run)]
        except RunNotFound as err:
            return fail(str(err))
    else:
        records = list(reversed(store.list()))
    for record in records:
        tele = RunTelemetry(record.dir)
        tele.update()
        if tele.tune is not None:
            break
    else:
        where = f"run {records[0].id}" if args.run else "any run"
        hint = "add GpumonCallback() to a Tune script and run it with 'gpumon launch script'"
        return fail(f"no Ray Tune trials in {where}: {hint}")
    exp = tele.tune
    if args.json:
        print(json.dumps({"schema": 1, "run": record.id, **exp.to_dict()}, indent=2))
        return 0
    best = exp.best_trial()
    total = exp.num_samples if exp.num_samples is not None else "?"
    print(
        f"{record.id}  {exp.search_alg or '?'} / {exp.scheduler or '?'}  metric {exp.metric or '?'} ({exp.mode or '?'})"
        f"  trials {exp.done}/{total}{'  ended' if exp.ended else ''}"
    )
    if best is not None:
        print(f"best: {best.id}  {exp.metric}={best.best:.6g}  {_config(best.config)}")
    params = sorted({k for t in exp.trials.values() for k in t.config})
    metrics = sorted({k for t in exp.trials.values() for k in t.metrics})
    rows = [["TRIAL", "STATUS", *params, "ITER", *metrics, "TIME"]]
    for t in exp.trials.values():
        mark = "*" if best is not None and t.id == best.id else ""
        rows.append(
            [
                t.id + mark,
                t.status,
                *(_value(t.config.get(p)) for p in params),
                "" if t.iteration is None else str(t.iteration),
                *(_value(t.metrics.get(m)) for m in metrics),
                fmt.duration(t.time_total_s) if t.time_total_s is not None else "",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    for t in exp.trials.values():
        if t.error:
            print(f"\n{t.id} failed:\n{t.error.strip().splitlines()[-1]}")
    return 0


def _value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _config(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={_value(v)}" for k, v in sorted(config.items()))
