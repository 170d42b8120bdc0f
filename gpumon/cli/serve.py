"""``gpumon serve``: /metrics for Prometheus, a JSON API and a read-only page, from one sampler for all viewers."""

from __future__ import annotations

import argparse
import errno
from pathlib import Path
from typing import Any

from gpumon.cli.common import fail, whole
from gpumon.serve import DEFAULT_BIND, DEFAULT_PORT


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    from gpumon.cli.fleet import add_fleet_options
    from gpumon.cli.ray_fleet import add_ray_option
    from gpumon.cli.slurm_fleet import add_slurm_option

    serve = sub.add_parser(
        "serve",
        parents=[parent],
        help="serve /metrics (Prometheus), a JSON API and a read-only page over HTTP",
        description=(
            f"One process samples once for every viewer. Listens on {DEFAULT_BIND}:{DEFAULT_PORT} by default; "
            "any other address needs --token-file. Read-only: GET and HEAD only."
        ),
        epilog=f"example: gpumon serve  (then http://{DEFAULT_BIND}:{DEFAULT_PORT}/ and /metrics)",
    )
    serve.add_argument("--port", type=whole(0), default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    serve.add_argument(
        "--bind", default=DEFAULT_BIND, metavar="ADDR", help=f"address to listen on (default {DEFAULT_BIND})"
    )
    serve.add_argument(
        "--token-file",
        type=Path,
        metavar="F",
        help="a file (mode 0600) holding the token every request must carry; needed for any --bind beyond localhost",
    )
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a name requests may be addressed to beyond localhost and the bound address (a proxy's, a DNS name); "
        "repeat for more. Requests for any other Host are refused (DNS rebinding)",
    )
    add_fleet_options(serve, in_command=True)
    add_ray_option(serve, in_command=True)
    add_slurm_option(serve, in_command=True)


def cmd_serve(args: argparse.Namespace) -> int:
    from gpumon.serve.http import TokenError, bind_problem, make_server, read_token

    if args.port > 65535:
        return fail(f"--port takes 0 to 65535, got {args.port}")
    problem = bind_problem(args.bind, args.token_file)
    if problem:
        return fail(problem)
    token = None
    if args.token_file is not None:
        try:
            token = read_token(args.token_file)
        except TokenError as err:
            return fail(str(err))
    fleet = _fleet(args)
    if isinstance(fleet, int):
        return fleet
    from gpumon.core.gpu import open_gpu_source
    from gpumon.core.host import HostSource
    from gpumon.core.sampler import Sampler
    from gpumon.serve.state import ServeState

    sampler = Sampler(open_gpu_source(args.simulate, args.seed), HostSource(), interval=args.interval)
    state = ServeState(sampler, fleet=fleet, interval=max(1.0, args.interval))
    try:
        server = make_server(state, args.bind, args.port, token, tuple(args.allow_host))
    except OSError as err:
        sampler.gpu.close()
        return fail(_listen_problem(args.bind, args.port, err))
    from gpumon.serve.guard import open_urls

    first, *more = open_urls(args.bind, int(server.server_address[1]))  # never 0.0.0.0: no browser opens it
    state.start()
    state.polled.wait(30)  # the first view is ready before serve says where it listens
    print(f"gpumon serve: {first}  (metrics: /metrics, JSON: /api/)", flush=True)
    if more:
        print(f"gpumon serve: also {' '.join(more)}", flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        state.stop()
    return 0


def _listen_problem(bind: str, port: int, err: OSError) -> str:
    if err.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {bind} is taken (another gpumon serve?): choose another with --port N, "
            "or --port 0 for any free port"
        )
    if err.errno == errno.EACCES and 0 < port < 1024:
        return f"port {port} needs root (below 1024): choose another with --port N, or --port 0 for any free port"
    return f"cannot listen on {bind}:{port}: {err.strerror or str(err)}"


def _fleet(args: argparse.Namespace) -> Any:
    """The hosts, Ray nodes and Slurm jobs asked for, as one fleet (None: this host only), or an exit code."""
    from gpumon.cli.monitor import _fleet as ray_fleet
    from gpumon.cli.monitor import _slurm
    from gpumon.core.fleet.hosts import HostError

    ray = ray_fleet(args)
    if isinstance(ray, int):
        return ray
    slurm = _slurm(args)
    if isinstance(slurm, int):
        return slurm
    from gpumon.cli.fleet import settings

    try:
        found = settings(args)
    except HostError as err:
        return fail(str(err))
    ssh = None
    if found is not None:
        from gpumon.core.fleet.monitor import FleetMonitor

        # alerts=False: a host going down is the app's alert; serve shows the link and Prometheus rules alert
        ssh = FleetMonitor(found.hosts, found.ssh, args.interval, found.gpumon, args.simulate, args.seed, alerts=False)
    parts = [p for p in (ssh, ray, slurm) if p is not None]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    from gpumon.core.fleet.combined import CombinedFleet

    return CombinedFleet(parts)
