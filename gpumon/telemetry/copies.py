"""Host-to-device copies of the counted step (issue 37): seen by flops.py's counter, which sees every op of that
one step, so it costs nothing at any other step.

A copy from pageable (unpinned) host memory is synchronous whatever ``non_blocking`` says: CUDA stages it through
a pinned buffer while the host waits. A DataLoader with ``pin_memory=False`` hands out pageable batches. A copy
from pinned memory on the default stream is asynchronous for the host but serialises with the step's kernels
on that stream. Each ``aten._to_copy``/``aten.copy_`` from the CPU to CUDA adds its bytes here (shapes and a
pinned flag only: no sync).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any


class CopyWatch:
    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        aten = torch.ops.aten
        self.ops = (aten._to_copy, aten.copy_)
        self.h2d: dict[str, int] = {}

    def parts(self, packet: Any, out: Any, args: Any, kwargs: Any) -> tuple[Any, Any, bool] | None:
        """(source, destination, non_blocking) of a copy op (``_to_copy``, ``copy_``), else None."""
        if packet not in self.ops or not args:
            return None
        if packet is self.ops[0]:
            src, dst, non_blocking = args[0], out, kwargs.get("non_blocking", False)
        else:
            dst, src = args[0], args[1] if len(args) > 1 else None
            non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
        tensor = self.torch.Tensor
        return (src, dst, bool(non_blocking)) if isinstance(src, tensor) and isinstance(dst, tensor) else None

    def see(self, packet: Any, out: Any, args: Any, kwargs: Any) -> None:
        """One op of the counted step (FlopCounterMode's ``_count_flops`` arguments)."""
        found = self.parts(packet, out, args, kwargs)
        if found is None:
            return
        src, dst, non_blocking = found
        if src.device.type != "cpu" or dst.device.type != "cuda":
            return
        size = int(src.numel()) * int(src.element_size())
        h2d = self.h2d
        h2d["copies"] = h2d.get("copies", 0) + 1
        h2d["bytes"] = h2d.get("bytes", 0) + size
        if not src.is_pinned():
            h2d["pageable_bytes"] = h2d.get("pageable_bytes", 0) + size
            if non_blocking:  # asked to overlap, cannot: the host waits for it all the same
                h2d["pageable_non_blocking"] = h2d.get("pageable_non_blocking", 0) + 1
        else:
            cuda = self.torch.cuda
            if cuda.current_stream(dst.device) == cuda.default_stream(dst.device):
                h2d["default_stream_bytes"] = h2d.get("default_stream_bytes", 0) + size

    def take(self) -> dict[str, int]:
        h2d, self.h2d = self.h2d, {}
        return h2d
