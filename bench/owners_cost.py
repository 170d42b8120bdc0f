"""What attributing GPU processes to their owners (core/owners.py) costs the sampler per sample.

A recorded machine (a temp GPUMON_SYS_ROOT) holds ``--procs`` processes in Kubernetes pods (cgroup v2, systemd
driver, with the kubelet's log links for their names). Prints the first sample's cost (every process read) and
the median of ``--repeat`` later samples with the same processes (all cached).

Usage: PYTHONPATH=. python bench/owners_cost.py [--procs 64] [--repeat 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gpumon.core.model import GpuDevice, GpuProcess, GpuSample
from gpumon.core.owners import Owners


def recorded(root: Path, procs: int) -> None:
    for pid in range(1000, 1000 + procs):
        cid = f"{pid:064x}"
        uid = f"5e2f8c1a-7b3d-4e9f-a6c0-{pid:012x}"
        (root / f"proc/{pid}").mkdir(parents=True)
        (root / f"proc/{pid}/cgroup").write_text(
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice/"
            f"cri-containerd-{cid}.scope\n"
        )
        (root / f"proc/{pid}/environ").write_bytes(b"HOME=/root\0")
        logs = root / "var/log/containers"
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"trainer-{pid}_ml_pytorch-{cid}.log").touch()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--procs", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as where:
        root = Path(where)
        recorded(root, args.procs)
        procs = tuple(GpuProcess(0, pid, 1 << 30, None, "compute") for pid in range(1000, 1000 + args.procs))
        sample = GpuSample("nvml", (GpuDevice(0, "GPU", "GPU-0", processes=procs),), 0.0)
        owners = Owners(root)
        started = time.perf_counter()
        first = owners.attribute(sample)
        cold = time.perf_counter() - started
        assert all(p.pod for p in first.devices[0].processes)
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            owners.attribute(sample)
            times.append(time.perf_counter() - started)
    print(f"{args.procs} processes: first sample {cold * 1000:.1f} ms, then {statistics.median(times) * 1000:.3f} ms")


if __name__ == "__main__":
    main()
