"""Host CPU, load, memory and swap through psutil."""

from __future__ import annotations

import os
import socket
import time

import psutil

from gpumon.core.model import HostSample


class HostSource:
    def __init__(self) -> None:
        self.hostname = socket.gethostname()
        psutil.cpu_percent(percpu=True)  # primes the counters; the first reading is 0 otherwise

    def sample(self) -> HostSample:
        per_cpu = tuple(psutil.cpu_percent(percpu=True))
        vm = psutil.virtual_memory()
        sw = psutil.swap_memory()
        try:
            load: tuple[float, float, float] | None = os.getloadavg()
        except OSError:
            load = None
        return HostSample(
            hostname=self.hostname,
            cpu_percent=sum(per_cpu) / len(per_cpu) if per_cpu else 0.0,
            per_cpu=per_cpu,
            load=load,
            mem_used=vm.total - vm.available,
            mem_total=vm.total,
            swap_used=sw.used,
            swap_total=sw.total,
            time=time.time(),
        )
