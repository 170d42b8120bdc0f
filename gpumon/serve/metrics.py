"""``/metrics``: a ``View`` as Prometheus families, by a custom collector (rendered once a poll: exposition.py).

Names take the ``gpumon_`` prefix and base units (bytes, seconds, hertz, watts, ratios 0-1); label sets are
fixed per family (docs/metrics.md). A process is never labelled with its command line (secrets live there);
ended runs drop out. The exposition is ``prometheus_client``'s, never written by hand here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from gpumon import __version__
from gpumon.core.runs.reading.ledger import PARTS
from gpumon.serve.view import View

GPU_LABELS = ["host", "gpu", "uuid", "name", "vendor"]
PROC_LABELS = ["host", "gpu", "pid", "user", "run", "container", "pod", "namespace", "slurm_job"]
RUN_LABELS = ["host", "run", "kind"]
RANK_LABELS = ["host", "run", "kind", "rank"]
MAX_AGE_S = 30.0  # a view older than this (the poll thread stuck) makes gpumon_up 0


def _pct(v: Any) -> float | None:
    return None if v is None else float(v) / 100.0


def _mhz(v: Any) -> float | None:
    return None if v is None else float(v) * 1e6


def _num(v: Any) -> float | None:
    return None if v is None or isinstance(v, bool) else float(v)


# (name, help, the device's key, conversion): one gauge per GPU each
GPU_GAUGES: tuple[tuple[str, str, str, Callable[[Any], float | None]], ...] = (
    ("gpumon_gpu_memory_used_bytes", "GPU memory in use, bytes.", "mem_used", _num),
    ("gpumon_gpu_memory_total_bytes", "GPU memory in all, bytes.", "mem_total", _num),
    (
        "gpumon_gpu_utilization_ratio",
        "Share of the last sample period a kernel ran (NVML utilization), 0-1.",
        "gpu_util",
        _pct,
    ),
    ("gpumon_gpu_memory_utilization_ratio", "Share of time the memory controller was busy, 0-1.", "mem_util", _pct),
    ("gpumon_gpu_temperature_celsius", "GPU core temperature, degrees Celsius.", "temperature", _num),
    ("gpumon_gpu_power_watts", "Power draw, watts.", "power_draw", _num),
    ("gpumon_gpu_power_limit_watts", "Enforced power limit, watts.", "power_limit", _num),
    ("gpumon_gpu_fan_ratio", "Fan speed, 0-1 of its maximum.", "fan", _pct),
    ("gpumon_gpu_sm_clock_hertz", "SM clock, hertz.", "sm_clock", _mhz),
    ("gpumon_gpu_memory_clock_hertz", "Memory clock, hertz.", "mem_clock", _mhz),
    (
        "gpumon_gpu_ecc_uncorrected_errors",
        "Volatile uncorrected ECC errors since the driver loaded.",
        "ecc_errors",
        _num,
    ),
)

# (name, help, the run's key): one gauge per live run each
RUN_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("gpumon_run_loss", "The run's latest loss (NaN or Inf as the program had it).", "loss"),
    ("gpumon_run_samples_per_second", "Samples a second, as the run's telemetry measured them.", "samples_per_s"),
    ("gpumon_run_tokens_per_second", "Tokens a second, where the run's tokens are known.", "tokens_per_s"),
    ("gpumon_run_mfu_ratio", "Model FLOPs utilisation, 0-1, where known.", "mfu"),
    (
        "gpumon_run_step_time_seconds",
        "Seconds per step by the wall clock over about the last 2 minutes (pace).",
        "step_time_s",
    ),
    ("gpumon_run_median_step_seconds", "The median of the latest steps, long waits left out.", "median_step_s"),
    (
        "gpumon_run_data_wait_ratio",
        "Share of a step the most-waiting rank spends waiting on its DataLoader, 0-1.",
        "data_wait",
    ),
    (
        "gpumon_run_memory_bytes",
        "The largest rank's latest memory: CUDA allocated, or the live heap on CPU.",
        "memory_bytes",
    ),
    ("gpumon_run_progress_ratio", "Steps done over the run's total, 0-1, where the total is known.", "progress"),
    ("gpumon_run_total_steps", "The run's total steps (its plan, else a framework's), where known.", "total_steps"),
    ("gpumon_run_eta_seconds", "Seconds left at the run's pace, where the total is known.", "eta_s"),
    (
        "gpumon_run_last_step_timestamp_seconds",
        "Unix time of the run's latest step (time() - x: how long since).",
        "last_step_t",
    ),
)


class ViewCollector(Collector):
    """Reads ``source()`` (the serve state's latest view) at each scrape."""

    def __init__(self, source: Callable[[], View], max_age: float = MAX_AGE_S) -> None:
        self.source = source
        self.max_age = max_age

    def describe(self) -> list[Metric]:
        return []  # the families depend on the view: no registration-time collect

    def collect(self) -> Iterator[Metric]:
        view = self.source()
        up = GaugeMetricFamily("gpumon_up", "1 while serve's latest poll is fresh and succeeded.")
        up.add_metric([], 0.0 if view.error or time.time() - view.time > self.max_age else 1.0)
        yield up
        polled = GaugeMetricFamily(
            "gpumon_poll_timestamp_seconds",
            "Unix time of serve's poll these numbers are from (time() - x: their age; they change once a poll).",
        )
        polled.add_metric([], view.time)
        yield polled
        info = InfoMetricFamily("gpumon_build", "The gpumon that serves these metrics.")
        info.add_metric([], {"version": __version__})
        yield info
        yield from _hosts(view)
        yield from _gpus(view)
        yield from _processes(view)
        yield from _runs(view)


def _hosts(view: View) -> Iterator[Metric]:
    link = GaugeMetricFamily(
        "gpumon_host_up", "1 while the host answers (serve's own, or a live fleet link).", labels=["host"]
    )
    state = GaugeMetricFamily(
        "gpumon_host_link_info",
        "The host's link state as a label (local, connecting, live, stale, down).",
        labels=["host", "link"],
    )
    queue = GaugeMetricFamily("gpumon_queue_length", "Runs waiting in the host's GPU queue.", labels=["host"])
    alerts = CounterMetricFamily(
        "gpumon_alerts", "Alerts raised, by kind (counted since serve started).", labels=["host", "kind"]
    )
    for host in view.hosts:
        link.add_metric([host.name], 1.0 if host.link in ("local", "live") else 0.0)
        state.add_metric([host.name, host.link], 1.0)
        queue.add_metric([host.name], float(host.queue))
    for (host_name, kind), n in sorted(view.alert_counts.items()):
        alerts.add_metric([host_name, kind], float(n))
    yield from (link, state, queue, alerts)


def _gpus(view: View) -> Iterator[Metric]:
    families = [(GaugeMetricFamily(name, text, labels=GPU_LABELS), key, conv) for name, text, key, conv in GPU_GAUGES]
    ok = GaugeMetricFamily("gpumon_gpu_ok", "1 while the GPU answers; 0 when lost or in error.", labels=GPU_LABELS)
    procs = GaugeMetricFamily("gpumon_gpu_processes", "Processes holding the GPU.", labels=GPU_LABELS)
    for host in view.hosts:
        held: dict[int, int] = {}
        for proc in host.processes:
            held[proc["gpu_index"]] = held.get(proc["gpu_index"], 0) + 1
        for dev in host.devices:
            labels = [host.name, str(dev.get("index")), str(dev.get("uuid") or ""), str(dev.get("name") or "")]
            labels.append(str(dev.get("vendor") or "nvidia"))  # a host on an older gpumon: NVIDIA's only
            ok.add_metric(labels, 1.0 if dev.get("state", "ok") == "ok" else 0.0)
            procs.add_metric(labels, float(held.get(dev.get("index", -1), 0)))
            for family, key, conv in families:
                value = conv(dev.get(key))
                if value is not None:
                    family.add_metric(labels, value)
    yield ok
    yield procs
    yield from (family for family, _, _ in families)


def _container_label(proc: dict[str, Any]) -> str:
    """Its name where the runtime said it, else the short id (12 characters, as ``docker ps``); '' for none."""
    return str(proc.get("container_name") or (proc.get("container_id") or "")[:12])


def _processes(view: View) -> Iterator[Metric]:
    memory = GaugeMetricFamily(
        "gpumon_process_gpu_memory_bytes", "GPU memory a process holds, bytes.", labels=PROC_LABELS
    )
    sm = GaugeMetricFamily(
        "gpumon_process_sm_utilization_ratio", "A process's share of the SMs (NVML's samples), 0-1.", labels=PROC_LABELS
    )
    for host in view.hosts:
        for proc in host.processes:
            labels = [
                host.name,
                str(proc["gpu_index"]),
                str(proc["pid"]),
                str(proc.get("user") or ""),
                str(proc.get("run") or ""),
                _container_label(proc),
                str(proc.get("pod") or ""),
                str(proc.get("namespace") or ""),
                str(proc.get("slurm_job") or ""),
            ]
            if proc.get("used_memory") is not None:
                memory.add_metric(labels, float(proc["used_memory"]))
            if proc.get("sm_util") is not None:
                sm.add_metric(labels, float(proc["sm_util"]) / 100.0)
    yield from (memory, sm)


def _runs(view: View) -> Iterator[Metric]:
    info = GaugeMetricFamily(
        "gpumon_run_info", "1 per live run; its name and state as labels.", labels=[*RUN_LABELS, "name", "state"]
    )
    steps = CounterMetricFamily("gpumon_run_steps", "The run's latest optimizer step.", labels=RUN_LABELS)
    nonfinite = CounterMetricFamily("gpumon_run_nonfinite_loss", "Loss values that were NaN or Inf.", labels=RUN_LABELS)
    restarts = CounterMetricFamily(
        "gpumon_run_restarts", "Times torchrun started the run's ranks again after a failure.", labels=RUN_LABELS
    )
    seconds = CounterMetricFamily(
        "gpumon_run_seconds",
        "Seconds of the run's wall time by part (core/runs/reading/ledger.py): startup, steps, checkpoint, eval, "
        "stall, restart, end. steps over their sum is the run's goodput.",
        labels=[*RUN_LABELS, "part"],
    )
    hist = HistogramMetricFamily(
        "gpumon_run_step_seconds",
        "Seconds per step between serve's polls (about 1 s): each poll's n steps observe dt/n, n times.",
        labels=RUN_LABELS,
    )
    gauges = [(GaugeMetricFamily(name, text, labels=RUN_LABELS), key) for name, text, key in RUN_GAUGES]
    rank_step = GaugeMetricFamily("gpumon_run_rank_step", "A rank's latest optimizer step.", labels=RANK_LABELS)
    rank_mem = GaugeMetricFamily(
        "gpumon_run_rank_memory_bytes",
        "A rank's latest memory (what the leak detector reads), bytes.",
        labels=RANK_LABELS,
    )
    growth = GaugeMetricFamily(
        "gpumon_run_rank_memory_growth_bytes_per_step",
        "A rank's memory growth per step (robust slope), bytes.",
        labels=RANK_LABELS,
    )
    leak = GaugeMetricFamily(
        "gpumon_run_rank_memory_leak",
        "1 when gpumon's leak detector says the rank's memory fills before the run's end, else 0.",
        labels=RANK_LABELS,
    )
    lanes = [
        GaugeMetricFamily(name, text, labels=RANK_LABELS)
        for name, text in (
            ("gpumon_run_rank_straggler_score", "The fastest rank's own work a step over this rank's (1: as fast)."),
            ("gpumon_run_rank_own_seconds", "A rank's own work a step (data, compute, optimizer), seconds."),
            ("gpumon_run_rank_wait_seconds", "A rank's wait a step for its peers (collectives, backward), seconds."),
        )
    ]
    for host in view.hosts:
        for run in host.runs:
            if not run.get("live"):
                continue  # ended runs drop out
            labels = [run.get("host") or host.name, run["id"], str(run.get("kind") or "")]
            info.add_metric([*labels, str(run.get("name") or ""), str(run.get("state") or "")], 1.0)
            if run.get("step") is not None:
                steps.add_metric(labels, float(run["step"]))
            if run.get("nonfinite") is not None:
                nonfinite.add_metric(labels, float(run["nonfinite"]))
            restarts.add_metric(labels, float(len(run.get("restarts") or ())))
            ledger = run.get("ledger") or {}
            for part in PARTS if ledger.get("wall") else ():
                seconds.add_metric([*labels, part], float(ledger.get(part) or 0.0))
            for family, key in gauges:
                value = _num(run.get(key))
                if value is not None:
                    family.add_metric(labels, value)
            histogram = view.steps.get(run["id"])
            if histogram is not None:
                hist.add_metric(labels, histogram.cumulative(), histogram.total)
            for rank in run.get("ranks") or ():
                rl = [str(rank.get("host") or labels[0]), run["id"], labels[2], str(rank["rank"])]
                for family, key in ((rank_step, "step"), (rank_mem, "memory_bytes"), (growth, "growth_bytes_per_step")):
                    value = _num(rank.get(key))
                    if value is not None:
                        family.add_metric(rl, value)
                if rank.get("memory_leak") is not None:
                    leak.add_metric(rl, 1.0 if rank["memory_leak"] else 0.0)
                for family, key in zip(lanes, ("score", "own_s", "wait_s"), strict=True):
                    if (value := _num(rank.get(key))) is not None:
                        family.add_metric(rl, value)
    yield from _stuck(view)
    yield from (info, steps, nonfinite, restarts, seconds, hist)
    yield from (family for family, _ in gauges)
    yield from (rank_step, rank_mem, growth, leak, *lanes)


def _stuck(view: View) -> Iterator[Metric]:
    """A stalled run's stuck collective (core/doctor/stuck.py) and each rank's last collective."""
    stuck = GaugeMetricFamily(
        "gpumon_run_stuck_collective",
        "1 while the run is stalled in a collective gpumon names: its verdict, op, number, odd ranks and line.",
        labels=[*RUN_LABELS, "verdict", "op", "seq", "ranks", "where"],
    )
    seqs = {
        state: GaugeMetricFamily(
            f"gpumon_run_rank_collective_{state}_seq",
            f"While stalled: the number (in its process group) of the rank's last collective {state}.",
            labels=[*RANK_LABELS, "group", "op"],
        )
        for state in ("started", "finished")
    }
    for host in view.hosts:
        for run in host.runs:
            stall = run.get("stall")
            if not run.get("live") or not isinstance(stall, dict):
                continue
            labels = [run.get("host") or host.name, run["id"], str(run.get("kind") or "")]
            odd = stall.get("collective")
            if isinstance(odd, dict):
                ranks = ",".join(str(r) for r in odd.get("ranks") or ())
                said = [str(odd.get(k, "")) for k in ("kind", "op", "seq")]
                stuck.add_metric([*labels, *said, ranks, str(odd.get("where", ""))], 1.0)
            for rank, last in (stall.get("last_collectives") or {}).items():
                for state, family in seqs.items():
                    record = last.get(state)
                    if isinstance(record, dict):
                        where = [str(record.get("group", "")), str(record.get("op", ""))]
                        family.add_metric([*labels, str(rank), *where], float(record.get("seq", 0)))
    yield from (stuck, *seqs.values())


def registry(source: Callable[[], View]) -> CollectorRegistry:
    """A registry of its own (never the process's default: no Python process metrics of serve's)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ViewCollector(source))
    return reg
