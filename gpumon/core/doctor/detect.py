"""The patterns behind ``classify``: one detector per kind, in the order of ``DETECTORS``.

Each detector reads a text and returns a ``Failure`` (title, evidence lines, parsed numbers) or None.
The texts they match come from PyTorch's own sources and from real logs (tests/data/errors/).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gpumon.core.doctor.ended import EXIT_MEANINGS
from gpumon.core.doctor.failures import Collective, Failure
from gpumon.core.doctor.oom import MemoryNumbers, fmt_size, parse_cuda_oom, to_bytes

OOM_KILLER = (
    "The kernel's OOM killer ends a process with SIGKILL, which leaves no Python traceback. Confirm with "
    "`dmesg -T | grep -i -E 'out of memory|killed process'` or `journalctl -k | grep -i oom`."
)

SIGKILLED = (
    "SIGKILL leaves no traceback and names no sender: a `kill -9`, a scheduler or container runtime, or the "
    "kernel's OOM killer, which gpumon found no trace of (kernel log, the cgroup's memory.events, memory samples)."
)

_RANK = re.compile(r"\[[Rr]ank ?(\d+)\]|^\s*\[default(\d+)\]:")
_CUDA_OOM = re.compile(
    r"(?:CUDA|HIP) out of memory|CUDA error: out of memory|Cuda failure \d* ?'out of memory'"
    r"|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED"
)
_ASSERT = re.compile(r"device-side assert triggered|Assertion `.+` failed|cudaErrorAssert")
_CPU_ALLOC = re.compile(r"DefaultCPUAllocator: (?:can't allocate|not enough) memory: you tried to allocate (\d+) bytes")
_MEMORY_ERROR = re.compile(  # MemoryError, numpy's _ArrayMemoryError; not torch.OutOfMemoryError: CUDA ...
    r"^\s*(?:\[\w+\]:\s*)?(?:[\w.]+\.)?_?\w*MemoryError\b(?!: (?:CUDA|HIP))"
    r"(?:: (?:Unable to allocate ([\d.]+ \w+))?.*)?$",
    re.M,
)
_WORKER_KILLED = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: Killed")
_SIGKILL = re.compile(r"Signal 9 \(SIGKILL\) received by PID (\d+)|exitcode\s*:\s*-9\b|failed \(exitcode: -9\)")
_SHM = re.compile(r"insufficient shared memory \(shm\)|killed by signal: Bus error|unable to write to file </torch_")
_CUDNN = re.compile(r"CUDNN_STATUS_(\w+)")
_WATCHDOG = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\((.*?)\) ran for (\d+) milliseconds")
_GLOO_TIMEOUT = re.compile(r"Timed out waiting (\d+)ms for (?:recv|send) operation to complete")
_NCCL = re.compile(r"NCCL error in: |nccl\w+Error\b|DistBackendError|NCCL WARN ")
_TORCH_SIZE = r"torch\.Size\((\[[\d, ]*\])\)"
_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"mat1 and mat2 shapes cannot be multiplied \((\d+x\d+) and (\d+x\d+)\)"), "matmul {} by {}"),
    (re.compile(r"size mismatch, m1: \[(\d+ x \d+)\], m2: \[(\d+ x \d+)\]"), "matmul {} by {}"),  # before 1.9
    (
        re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) "
                   r"at non-singleton dimension (\d+)"),
        "tensor sizes {} and {} differ at dimension {}",
    ),
    (
        re.compile(rf"size mismatch for ([\w.]+): copying a param with shape {_TORCH_SIZE} from checkpoint, "
                   rf"the shape in current model is {_TORCH_SIZE}"),
        "checkpoint's {} is {}, the model's is {}",
    ),
    (re.compile(r"Expected input batch_size \((\d+)\) to match target batch_size \((\d+)\)"),
     "input batch {}, target batch {}"),
    (re.compile(r"weight of size (\[[\d, ]+\]), expected input(\[[\d, ]+\]) to have \d+ channels"),
     "weight {}, input {}"),
    (re.compile(r"shape '(\[[-\d, ]+\])' is invalid for input of size (\d+)"), "view {} of {} elements"),
    (re.compile(rf"target size \({_TORCH_SIZE}\) that is different to the input size \({_TORCH_SIZE}\)"),
     "target {}, input {}"),
)  # fmt: skip


def lines_matching(text: str, pattern: re.Pattern[str], limit: int = 3) -> tuple[str, ...]:
    """The last ``limit`` distinct lines (stripped, cut at 300 characters) where ``pattern`` matches."""
    found: list[str] = []
    for line in text.splitlines():
        clean = _ANSI.sub("", line).strip()[:300]  # PyTorch bolds parts of some messages: no escapes in evidence
        if pattern.search(line) and clean not in found:
            found.append(clean)
    return tuple(found[-limit:])


def rank_of(lines: tuple[str, ...]) -> int | None:
    """The rank a line names: torchrun's "[rank3]:" prefix, "[Rank 3]", or --tee's "[default3]:" (local rank)."""
    for line in lines:
        if found := _RANK.search(line):
            return int(found.group(1) or found.group(2))
    return None


def cuda_oom(text: str) -> Failure | None:
    lines = lines_matching(text, _CUDA_OOM)
    if not lines:
        return None
    m = parse_cuda_oom(text)
    if m and m.requested is not None:
        where = f" on GPU {m.gpu}" if m.gpu is not None else ""
        free = f" with {fmt_size(m.free)} free of {fmt_size(m.total)}" if m.free is not None and m.total else ""
        title = f"CUDA out of memory{where}: tried to allocate {fmt_size(m.requested)}{free}"
        return Failure("cuda_oom", title, text, lines, memory=m)
    if "ALLOC_FAILED" in lines[-1]:
        lib = "cuBLAS" if "CUBLAS" in lines[-1] else "cuDNN"
        detail = f"{lib} allocates its workspace outside PyTorch's cache; it fails when the GPU is already full."
        return Failure("cuda_oom", f"CUDA out of memory: {lib} could not allocate its workspace", text, lines, detail)
    detail = "Raised by a CUDA call outside PyTorch's allocator (context creation, a library, NCCL): the GPU was full."
    return Failure("cuda_oom", "CUDA out of memory (CUDA error: out of memory)", text, lines, detail)


def device_assert(text: str) -> Failure | None:
    lines = lines_matching(text, _ASSERT)
    if not lines:
        return None
    condition = next((m.group(1) for line in lines if (m := re.search(r"Assertion `(.+?)` failed", line))), "")
    title = f"CUDA device-side assert: {condition}" if condition else "CUDA device-side assert triggered"
    detail = "A kernel checked an index or a label and stopped; the traceback may point at a later call."
    return Failure("device_assert", title, text, lines, detail)


def host_oom(text: str) -> Failure | None:
    if found := _CPU_ALLOC.search(text):
        size = int(found.group(1))
        title = f"Host out of memory: the CPU allocator could not get {fmt_size(size)}"
        return Failure("host_oom", title, text, lines_matching(text, _CPU_ALLOC), memory=MemoryNumbers(requested=size))
    if found := _MEMORY_ERROR.search(text):
        numbers = MemoryNumbers(requested=to_bytes(*found.group(1).split())) if found.group(1) else None
        title = "Host out of memory: " + found.group(0).strip().split(": ", 1)[-1][:200]
        return Failure("host_oom", title, text, lines_matching(text, _MEMORY_ERROR), memory=numbers)
    if found := _WORKER_KILLED.search(text):
        title = f"DataLoader worker (pid {found.group(1)}) was killed by SIGKILL (sent by someone or something else)"
        return Failure("killed", title, text, lines_matching(text, _WORKER_KILLED), SIGKILLED, signal="SIGKILL")
    if _SHM.search(text):
        return Failure(
            "host_oom", "Shared memory (/dev/shm) exhausted by DataLoader workers", text, lines_matching(text, _SHM)
        )
    if lines := lines_matching(text, _SIGKILL):
        pid = re.search(r"PID (\d+)|\(pid: (\d+)\)", " ".join(lines))
        where = f" (pid {pid.group(1) or pid.group(2)})" if pid else ""
        title = f"Killed by SIGKILL{where} (sent by someone or something else)"
        return Failure("killed", title, text, lines, SIGKILLED, signal="SIGKILL")
    return None


def cudnn(text: str) -> Failure | None:
    found = _CUDNN.search(text)
    if not found:
        return None
    detail = {
        "NOT_INITIALIZED": "Often a disguised out-of-memory (cuDNN could not create its handle because the GPU was "
        "full), otherwise a cuDNN/CUDA library mismatch.",
        "EXECUTION_FAILED": "Often an earlier asynchronous CUDA error surfacing in a cuDNN call.",
        "INTERNAL_ERROR": "Often an earlier asynchronous CUDA error, or out of memory inside cuDNN.",
    }.get(found.group(1), "")
    return Failure("cudnn", f"cuDNN error: CUDNN_STATUS_{found.group(1)}", text, lines_matching(text, _CUDNN), detail)


def shape(text: str) -> Failure | None:
    for pattern, template in _SHAPES:
        if found := pattern.search(text):
            parts = found.groups()
            pair = (parts[1], parts[2]) if len(parts) == 3 and not parts[2].isdigit() else (parts[0], parts[1])
            title = "Shape mismatch: " + template.format(*parts)
            return Failure("shape", title, text, lines_matching(text, pattern), shapes=pair)
    return None


HUNG = (
    "A rank never reached this collective (it hung in its own code, was stopped, or left the loop early), so "
    "the others waited until the timeout; the rank that reports the error is often one that only waited. "
    "gpumon marks such a run stalled long before the timeout and keeps each rank's stack: gpumon doctor RUN "
    "says where each one waits."
)


def nccl_timeout(text: str) -> Failure | None:
    if watchdog := list(_WATCHDOG.finditer(text)):
        ranks: set[int] = set()
        ops: list[str] = []
        timeout: int | None = None
        for found in watchdog:
            fields = dict(re.findall(r"([\w()]+)=(\w+)", found.group(1)))
            op = f"{fields.get('OpType', '?')}(SeqNum={fields.get('SeqNum', '?')})"
            ops += [op] if op not in ops else []
            timeout = int(fields["Timeout(ms)"]) if fields.get("Timeout(ms)", "").isdigit() else timeout
            rank = rank_of((text[text.rfind("\n", 0, found.start()) + 1 : found.end()],))
            ranks |= {rank} if rank is not None else set()
        ran = int(watchdog[-1].group(2))
        collective = Collective("nccl", timeout, ran, tuple(sorted(ranks)), tuple(ops))
        title = f"NCCL collective timed out: {ops[0]} ran {ran} ms (timeout {timeout} ms)"
        evidence = lines_matching(text, _WATCHDOG)
        return Failure("nccl_timeout", title, text, evidence, HUNG, collective=collective)
    if gloo := _GLOO_TIMEOUT.search(text):
        title = f"gloo collective timed out after {gloo.group(1)} ms"
        collective = Collective("gloo", int(gloo.group(1)))
        return Failure("nccl_timeout", title, text, lines_matching(text, _GLOO_TIMEOUT), HUNG, collective=collective)
    return None


def nccl(text: str) -> Failure | None:
    lines = lines_matching(text, _NCCL, limit=4)
    if not lines:
        return None
    code = re.search(r"(nccl\w+Error)", text)
    what = re.search(r"NCCL error in: [^,]+, ([^,(\n]+)", text)
    title = "NCCL error: " + ", ".join(x for x in (what and what.group(1).strip(), code and code.group(1)) if x)
    last = re.search(r"Last error:\s*\n?(?:\[\w+\]:\s*)?(.+)", text)
    evidence = lines + ((last.group(1).strip()[:300],) if last else ())
    detail = "NCCL errors are often the echo of another rank's failure: read the first failing rank's log first."
    return Failure("nccl", title.rstrip(": "), text, evidence, detail)


# Root causes before their echoes: an OOM or an assert on one rank makes the others fail in NCCL or gloo.
_NO_GPU = re.compile(
    r"Torch not compiled with CUDA enabled|No CUDA GPUs are available|has no attribute '_cuda_setDevice'"
    r"|Distributed package doesn't have NCCL built in|Found no NVIDIA driver on your system"
    r"|NCCL is not available|ProcessGroupNCCL is only supported with GPUs"
    r"|Cannot access accelerator device when none is available"  # .to(rank), an int device, on a CPU build
)
_WEIGHTS_ONLY = re.compile(r"Weights only load failed")
_UNSAFE_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def no_gpu(text: str) -> Failure | None:
    """A script written for CUDA (or nccl) on a machine or torch build without a GPU."""
    if not _NO_GPU.search(text):
        return None
    return Failure("no_gpu", "The script needs a GPU; this machine or this torch build has none", text,
                   lines_matching(text, _NO_GPU))  # fmt: skip


def checkpoint(text: str) -> Failure | None:
    """torch >= 2.6's torch.load(weights_only=True) refusing a checkpoint that pickles other objects."""
    if not _WEIGHTS_ONLY.search(text):
        return None
    found = _UNSAFE_GLOBAL.search(text)
    name = found.group(1) if found else ""
    title = "torch.load refused the checkpoint (weights_only=True since torch 2.6)" + (
        f": it holds {name}" if name else ""
    )
    evidence = lines_matching(text, _UNSAFE_GLOBAL) or lines_matching(text, _WEIGHTS_ONLY)
    return Failure("checkpoint", title, text, evidence, module=name)


_NO_LAUNCHER = re.compile(r"environment variable (RANK|WORLD_SIZE|MASTER_ADDR|MASTER_PORT|LOCAL_RANK) expected")


def no_launcher(text: str) -> Failure | None:
    """A distributed script started with plain python: torchrun's environment (RANK, WORLD_SIZE, ...) is missing."""
    found = _NO_LAUNCHER.search(text)
    if found is None:
        return None
    title = f"The script expects torchrun: {found.group(1)} is not set"
    return Failure("no_launcher", title, text, lines_matching(text, _NO_LAUNCHER))


_NUMPY_ALIAS = re.compile(
    r"AttributeError: module 'numpy' has no attribute '(int|float|bool|object|str|long|unicode|complex)'"
)


def removed_api(text: str) -> Failure | None:
    """Old code on a newer library: NumPy 1.24 removed the aliases np.int, np.float, np.bool, np.object, ..."""
    found = _NUMPY_ALIAS.search(text)
    if found is None:
        return None
    title = f"The code uses np.{found.group(1)}, removed in NumPy 1.24"
    return Failure("removed_api", title, text, lines_matching(text, _NUMPY_ALIAS), module=found.group(1))


_IMPORT = re.compile(
    r"^\s*(?:\[\w+\]:\s*)?(ModuleNotFoundError: No module named '([\w.]+)'.*"
    r"|ImportError: cannot import name '(\w+)' from '([\w.]+)'.*"
    r"|ImportError: (?!cannot import name).*)$",
    re.M,
)


def missing_module(text: str) -> Failure | None:
    """``ModuleNotFoundError``/``ImportError``: the Python that ran the script lacks a package (or a name)."""
    found = _IMPORT.search(text)
    if found is None:
        return None
    if found.group(2):
        title = f"Missing module: {found.group(2)}"
        module = found.group(2)
    elif found.group(3):
        title = f"Cannot import {found.group(3)} from {found.group(4)}"
        module = found.group(4)
    else:
        title = found.group(1).strip()
        module = ""
    return Failure("import", title, text, (found.group(1).strip(),), module=module)


_USAGE_ERROR = re.compile(r"^(?:\[\w+\]:\s*)?(\S(?:.*\S)?): error: .+$", re.M)


def usage(text: str) -> Failure | None:
    """argparse's answer to bad arguments: "usage: PROG ..." then "PROG: error: MESSAGE", status 2. PROG may hold
    spaces (``python -m trainers.ddp``). Under torchrun the run's own status is 1 (a worker failed), so the text
    says it, not the status."""
    for error in reversed(list(_USAGE_ERROR.finditer(text))):
        prog = re.escape(error.group(1))
        shown = list(re.finditer(rf"^(?:\[\w+\]:\s*)?usage: {prog}(?:\s.*)?$", text[: error.start()], re.M))
        if shown:
            found = shown[-1]  # the last usage line before the error
            line = error.group(0).strip()
            line = re.sub(r"^\[\w+\]:\s*", "", line)[:300]
            evidence = (found.group(0).strip(), line)
            return Failure("exit", line, text, evidence, f"status 2: {EXIT_MEANINGS[2]}", exit_code=2)
    return None


DETECTORS: tuple[Callable[[str], Failure | None], ...] = (
    cuda_oom,
    no_gpu,
    checkpoint,
    no_launcher,
    removed_api,
    device_assert,
    host_oom,
    cudnn,
    shape,
    nccl_timeout,
    nccl,
    missing_module,
    usage,
)
