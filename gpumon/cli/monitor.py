"""``gpumon`` with no command opens the live monitor; ``gpumon snapshot`` prints one sample and exits.

Textual is imported only when the monitor opens, so ``gpumon snapshot`` never pays for it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def cmd_snapshot(args: argparse.Namespace) -> int:
    import json
    import time

    from gpumon.core.gpu import open_gpu_source
    from gpumon.core.host import HostSource
    from gpumon.core.model import Snapshot
    from gpumon.core.report import snapshot_text

    started = time.monotonic()
    host = HostSource()
    source = open_gpu_source(args.simulate, args.seed)
    try:
        gpu = source.sample()
    finally:
        source.close()
    # CPU percent is a rate: it needs a short window since the priming call.
    time.sleep(max(0.0, 0.1 - (time.monotonic() - started)))
    snap = Snapshot(gpu=gpu, host=host.sample())
    if args.json:
        print(json.dumps(snap.to_dict(), indent=2))
    else:
        import shutil

        print(snapshot_text(snap, width=shutil.get_terminal_size((100, 24)).columns))
    return 0


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
    fleet = _fleet(args)
    if isinstance(fleet, int):
        return fleet
    # NVML starts and the first sample is taken while Textual imports.
    sampler = Sampler(open_gpu_source(args.simulate, args.seed), HostSource(), interval=args.interval)
    sampler.start()
    if fleet is not None:
        fleet.start()  # Ray's driver joins the cluster while Textual imports
    try:
        from gpumon.core.config import keymap_path
        from gpumon.tui.app import GpumonApp, keymap_problems

        problems = keymap_problems(keymap)
        if problems:
            print(f"gpumon: error: {keymap_path()}: {problems[0]}", file=sys.stderr)
            return 2
        GpumonApp(sampler, readonly=args.readonly, keymap=keymap, fleet=fleet).run()
    finally:
        if fleet is not None:
            fleet.stop()
        sampler.stop()
    return 0


def _fleet(args: argparse.Namespace) -> Any:
    """The fleet the app shows (None: this machine only), or the exit code of a user's mistake."""
    from gpumon.cli.ray_fleet import build_ray_fleet, ray_problem

    if not getattr(args, "ray", None):
        return None
    problem = ray_problem(args.ray)
    if problem:
        print(f"gpumon: error: {problem}", file=sys.stderr)
        return 2
    from gpumon.core.fleet.combined import CombinedFleet

    return CombinedFleet([build_ray_fleet(args)])
