"""``gpumon`` with no command opens the live monitor; ``gpumon snapshot`` prints one sample and exits.

Textual is imported only when the monitor opens, so ``gpumon snapshot`` never pays for it.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from gpumon.cli.common import fail


def cmd_snapshot(args: argparse.Namespace) -> int:
    import json
    import time

    if getattr(args, "runs", None) is not None and not getattr(args, "watch", False):
        return fail("--runs goes with the stream: gpumon snapshot --json --watch --runs N")
    if getattr(args, "watch", False) or getattr(args, "fields", None):
        if not args.json:
            return fail("--watch and --fields print JSON Lines: add --json (gpumon snapshot --json --watch)")
        if args.watch:
            return _watch(args)

    from gpumon.core.gpu import open_gpu_source
    from gpumon.core.host import HostSource
    from gpumon.core.model import Snapshot
    from gpumon.core.report import snapshot_text

    started = time.monotonic()
    host = HostSource()
    source = open_gpu_source(args.simulate, args.seed)
    try:
        prime = getattr(source, "prime", None)  # NVML GPM: a metric is two samples apart (core/gpu/gpm.py)
        if prime is not None:
            prime()
        # CPU percent and GPM's SM activity are rates: they need a short window since the priming calls.
        time.sleep(max(0.0, 0.1 - (time.monotonic() - started)))
        gpu = source.sample()
    finally:
        source.close()
    snap = Snapshot(gpu=gpu, host=host.sample())
    if getattr(args, "record", None):
        _record(source, args.record)
    if args.json:
        print(json.dumps(snap.to_dict(), indent=2))
    else:
        import shutil

        print(snapshot_text(snap, width=shutil.get_terminal_size((100, 24)).columns))
    return 0


def _record(source: Any, dest: str) -> None:
    """Copy the files the readers used (``GPUMON_SYS_ROOT=DEST`` replays them), saying where and how many."""
    from gpumon.core.gpu import sys_files

    files = sys_files(source)
    if files is None:
        print(
            "gpumon: no /sys or /proc file was read: no AMD or Intel GPU here (NVML is not recorded)", file=sys.stderr
        )
        return
    count = files.record(dest)
    print(f"gpumon: recorded {count} files under {dest}: replay with GPUMON_SYS_ROOT={dest}", file=sys.stderr)


def _watch(args: argparse.Namespace) -> int:
    """One compact document per line every interval, until Ctrl-C or the reader goes away (exit 0, quietly).

    The GPU source stays open across samples: NVML is initialised once, not once a line."""
    import time

    from gpumon.core.fleet.runs_delta import RunsDelta
    from gpumon.core.fleet.stream import encode_line, stream_doc
    from gpumon.core.gpu import open_gpu_source
    from gpumon.core.host import HostSource
    from gpumon.core.model import Snapshot

    interval = getattr(args, "watch_interval", None) or args.interval
    fields = args.fields or "full"
    host = HostSource()
    source = open_gpu_source(args.simulate, args.seed)
    runs: RunsDelta | None = None
    next_at = time.monotonic() + 0.1  # host CPU percent is a rate: the first line waits for a short window
    try:
        while True:
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            snap = Snapshot(gpu=source.sample(), host=host.sample())
            doc = stream_doc(snap, fields)
            if runs is not None:
                changed = runs.next()
                if changed is not None:
                    doc["runs"] = changed
            elif args.runs is not None:  # from the second line: the first (the fleet's first frame) waits for nothing
                runs = RunsDelta(args.runs)
            sys.stdout.write(encode_line(doc) + "\n")
            sys.stdout.flush()
            next_at += interval
            if next_at < time.monotonic():  # fell behind (a slow GPU read): skip ticks, never burst
                next_at = time.monotonic() + interval
    except (BrokenPipeError, KeyboardInterrupt):
        # The reader left (`| head -1`, ssh closed) or Ctrl-C: both are the normal end of a stream.
        # stdout goes to /dev/null so the interpreter's last flush cannot raise again at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    finally:
        source.close()


def cmd_monitor(args: argparse.Namespace) -> int:
    from gpumon.core.config import ConfigError, load_keymap
    from gpumon.core.gpu import open_gpu_source
    from gpumon.core.host import HostSource
    from gpumon.core.sampler import Sampler

    try:
        keymap = load_keymap()
    except ConfigError as err:
        print(f"gpumon: error: {err}", file=sys.stderr)
        return 2
    from gpumon.cli.fleet import build_monitor, settings
    from gpumon.core.fleet.hosts import HostError

    ray = _fleet(args)
    if isinstance(ray, int):
        return ray
    slurm = _slurm(args)
    if isinstance(slurm, int):
        return slurm
    no_terminal = terminal_problem()
    if no_terminal is not None:  # every mistake above and below is said first: it is the one to fix
        try:
            settings(args)
        except HostError as err:
            return fail(str(err))
        return fail(_keymap_problem(keymap) or no_terminal)
    # NVML starts and the first sample is taken while Textual imports.
    sampler = Sampler(open_gpu_source(args.simulate, args.seed), HostSource(), interval=args.interval)
    try:
        ssh_fleet = build_monitor(args, sampler)  # None without hosts; `local` reads this sampler
    except HostError as err:
        sampler.gpu.close()
        return fail(str(err))
    fleet: Any = ssh_fleet
    if ray is not None or slurm is not None:
        from gpumon.core.fleet.combined import CombinedFleet

        fleet = CombinedFleet([p for p in (ssh_fleet, ray, slurm) if p is not None])
    sampler.start()
    if fleet is not None:
        fleet.start()  # ssh links connect, Ray's driver joins and squeue is read while Textual imports
    try:
        from gpumon.tui.app import GpumonApp
        from gpumon.tui.textual_private.escape import quick_escape

        problem = _keymap_problem(keymap)
        if problem:
            return fail(problem)
        quick_escape()
        GpumonApp(sampler, readonly=args.readonly, keymap=keymap, fleet=fleet).run()
    finally:
        if fleet is not None:
            fleet.stop()
        sampler.stop()
    return 0


def terminal_problem() -> str | None:
    """Why the full-screen monitor cannot run here (None: it can). Without a terminal on stdout it would
    write escape codes into a pipe or file and never end; without one on stdin no key reaches it (not even q)."""
    for name, stream in (("stdout", sys.stdout), ("stdin", sys.stdin)):
        try:
            tty = stream is not None and stream.isatty()
        except (ValueError, OSError):  # closed
            tty = False
        if not tty:
            return (
                f"the live monitor needs a terminal and {name} is not one (a pipe, a file, cron, ssh without -t): "
                "for scripts use gpumon snapshot --json [--watch], over ssh use ssh -t HOST gpumon"
            )
    return None


def _keymap_problem(keymap: dict[str, str]) -> str | None:
    """The user's keymap checked against the app's keys (imports Textual: only with a keymap)."""
    if not keymap:
        return None
    from gpumon.core.config import keymap_path
    from gpumon.tui.app_keys import keymap_problems

    problems = keymap_problems(keymap)
    return f"{keymap_path()}: {problems[0]}" if problems else None


def _fleet(args: argparse.Namespace) -> Any:
    """The Ray cluster's fleet (None without --ray), or the exit code of a user's mistake."""
    from gpumon.cli.ray_fleet import build_ray_fleet, ray_problem

    if not getattr(args, "ray", None):
        return None
    problem = ray_problem(args.ray)
    if problem:
        print(f"gpumon: error: {problem}", file=sys.stderr)
        return 2
    return build_ray_fleet(args)


def _slurm(args: argparse.Namespace) -> Any:
    """The Slurm jobs' fleet (None without --slurm), or the exit code of a user's mistake (no Slurm here)."""
    from gpumon.cli.slurm_fleet import build_slurm_fleet, slurm_problem

    if not getattr(args, "slurm", False):
        return None
    problem = slurm_problem()
    if problem:
        return fail(problem)
    return build_slurm_fleet(args)
