"""The numbers in an out-of-memory message: PyTorch's CUDA/HIP allocator (every format since 1.0) and host ones.

PyTorch prints sizes with ``format_size``: "n bytes" up to 1 KiB, else "%.2f KiB|MiB|GiB". So a parsed
size is exact for bytes and good to about 0.005 of its unit otherwise. ``fmt_size`` prints the same way,
so advice can quote a number exactly as the user saw it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

_SCALE = {
    "bytes": 1,
    "B": 1,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
    "PiB": 1024**5,
    "EiB": 1024**6,
}
SIZE = r"(\d+(?:\.\d+)?) ?(bytes|B|KiB|MiB|GiB|TiB|PiB|EiB)\b"

OOM_START = re.compile(r"(?:CUDA|HIP) out of memory\. Tried to allocate " + SIZE)
_NEW = re.compile(r"GPU (\d+) has a total capac(?:i)?ty of " + SIZE + r" of which " + SIZE + r" is free")
_OLD = re.compile(
    r"\(GPU (\d+); " + SIZE + r" total capacity; " + SIZE + r" already allocated; " + SIZE + r" free; "
    r"(?:" + SIZE + r" allowed; )?" + SIZE + r" (reserved in total by PyTorch|cached)\)",
    re.IGNORECASE,
)
_PROCESS = re.compile(r"(?:Including non-PyTorch memory, this process|Process (\d+)) has " + SIZE + " memory in use")
_ALLOWED = re.compile(SIZE + r" allowed;")
_BY_PYTORCH = re.compile(r"Of the allocated memory " + SIZE + r" is allocated by PyTorch")
_POOLS = re.compile(r"with " + SIZE + r" allocated in private pools")
_UNALLOCATED = re.compile(SIZE + r" is reserved by PyTorch but unallocated")
_LINE_PREFIX = re.compile(r"^\s*(?:\[(?:rank|default)\d+\]:|\d+: )\s?", re.MULTILINE)


def to_bytes(value: str, unit: str) -> int:
    return round(float(value) * _SCALE[unit])


def fmt_size(n: int | float) -> str:
    """PyTorch's own format ("132.00 MiB", "0 bytes"), with TiB past 1024 GiB."""
    if n <= 1024:
        return f"{int(n)} bytes"
    for unit in ("KiB", "MiB", "GiB"):
        if n <= _SCALE[unit] * 1024:
            return f"{n / _SCALE[unit]:.2f} {unit}"
    return f"{n / 1024**4:.2f} TiB"


@dataclass(frozen=True)
class MemoryNumbers:
    """Bytes as an out-of-memory message printed them; None where that message format has no such number."""

    requested: int | None = None
    total: int | None = None
    free: int | None = None
    process_in_use: int | None = None  # the failing process, non-PyTorch memory (CUDA context, libraries) included
    allocated: int | None = None  # by PyTorch's allocator, private pools (CUDA graphs) included
    reserved_unallocated: int | None = None  # cached by PyTorch, not handed out: the fragmentation signal
    private_pools: int | None = None
    allowed: int | None = None  # torch.cuda.set_per_process_memory_fraction's cap
    others: tuple[tuple[int, int], ...] = ()  # (pid, bytes) of the other processes the message listed
    gpu: int | None = None
    fmt: str = ""  # "2.1+" (GPU d has a total capacity...), "1.5-2.0" (reserved in total), "1.0-1.4" (cached)

    @property
    def reserved(self) -> int | None:
        if self.allocated is None or self.reserved_unallocated is None:
            return None
        return self.allocated + self.reserved_unallocated

    @property
    def capacity(self) -> int | None:
        """What PyTorch could have held at that moment: its reserve plus the device's free memory, capped."""
        if self.reserved is None or self.free is None:
            return self.allowed
        room = self.reserved + self.free
        return min(room, self.allowed) if self.allowed else room

    @property
    def outside(self) -> int | None:
        """Bytes of the GPU neither free nor in PyTorch's reserve: other processes, CUDA contexts, libraries."""
        if self.total is None or self.free is None or self.reserved is None:
            return None
        return max(0, self.total - self.free - self.reserved)


def parse_cuda_oom(text: str) -> MemoryNumbers | None:
    """The numbers of the last CUDA/HIP allocator OOM message in ``text``; None if there is none."""
    starts = list(OOM_START.finditer(text))
    if not starts:
        return None
    start = starts[-1]
    # A message may be wrapped over lines, each with a launcher prefix: read it as one line.
    window = " ".join(_LINE_PREFIX.sub("", text[start.start() : start.start() + 1500]).split())
    requested = to_bytes(start.group(1), start.group(2))
    old = _OLD.search(window)
    if old and old.start() < 120:
        g = old.groups()
        allocated = to_bytes(g[3], g[4])
        reserved = to_bytes(g[9], g[10])
        cached = g[11].lower() == "cached"  # 1.0-1.4 printed reserved-minus-allocated as "cached"
        return MemoryNumbers(
            requested=requested,
            total=to_bytes(g[1], g[2]),
            free=to_bytes(g[5], g[6]),
            allocated=allocated,
            reserved_unallocated=reserved if cached else max(0, reserved - allocated),
            allowed=to_bytes(g[7], g[8]) if g[7] else None,
            gpu=int(g[0]),
            fmt="1.0-1.4" if cached else "1.5-2.0",
        )
    new = _NEW.search(window)
    by_pytorch = _BY_PYTORCH.search(window)
    unallocated = _UNALLOCATED.search(window)
    pools = _POOLS.search(window)
    allowed = _ALLOWED.search(window)
    numbers = MemoryNumbers(
        requested=requested,
        total=to_bytes(new.group(2), new.group(3)) if new else None,
        free=to_bytes(new.group(4), new.group(5)) if new else None,
        allocated=to_bytes(*by_pytorch.groups()) if by_pytorch else None,
        reserved_unallocated=to_bytes(*unallocated.groups()) if unallocated else None,
        private_pools=to_bytes(*pools.groups()) if pools else None,
        allowed=to_bytes(*allowed.groups()) if allowed else None,
        gpu=int(new.group(1)) if new else None,
        fmt="2.1+" if new else "",
    )
    return _with_processes(numbers, window)


def _with_processes(numbers: MemoryNumbers, window: str) -> MemoryNumbers:
    mine: int | None = None
    listed: list[tuple[int, int]] = []
    for found in _PROCESS.finditer(window):
        size = to_bytes(found.group(2), found.group(3))
        if found.group(1) is None:
            mine = size
        else:
            listed.append((int(found.group(1)), size))
    if mine is None and listed:
        # In a container the message names our own process by its host pid: it is the listed process whose
        # usage covers PyTorch's reserve most tightly (or the biggest one when the reserve is unknown).
        floor = numbers.reserved or 0
        covering = [p for p in listed if p[1] >= floor] or listed
        ours = min(covering, key=lambda p: p[1]) if numbers.reserved else max(listed, key=lambda p: p[1])
        mine = ours[1]
        listed.remove(ours)
    return replace(numbers, process_in_use=mine, others=tuple(listed))
