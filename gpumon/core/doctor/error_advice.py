"""Advice for failures that are not about memory: device asserts, cuDNN, NCCL, shapes, signals."""

from __future__ import annotations

import re

from gpumon.core.doctor.advice_text import item, logs_command
from gpumon.core.doctor.advice_types import Advice, Context, Scored
from gpumon.core.doctor.failures import Failure

# The assertion's own condition -> what to check in the data.
_ASSERT_CHECKS = (
    ("n_classes", "labels", "assert 0 <= targets.min() and targets.max() < num_classes (ignore_index=-100 aside)"),
    ("srcIndex < srcSelectDimSize", "token ids",
     "assert ids.max() < model.get_input_embeddings().num_embeddings (added tokens need resize_token_embeddings)"),
    ("index_size", "indices", "gather/scatter indices must be in [0, size): assert index.max() < src.size(dim)"),
    ("zero &&", "BCE inputs and targets",
     "BCELoss needs probabilities in [0, 1]: use BCEWithLogitsLoss on raw logits, and targets in [0, 1]"),
)  # fmt: skip


def _run(ctx: Context) -> str:
    """The run's id in an advised command ("RUN" where the caller did not say)."""
    return ctx.run_id or "RUN"


def _line(f: Failure) -> str:
    return f.evidence[-1] if f.evidence else f.title


def device_assert(f: Failure, ctx: Context) -> Scored:
    line = _line(f)
    checked = next((x for x in f.evidence if "Assertion" in x), f.title)  # with the kernel's file:line
    what, check = next(
        ((what, check) for key, what, check in _ASSERT_CHECKS if key in f.title),
        ("labels and indices", "check label ranges and every index against the size of what it indexes"),
    )
    return [
        item(100, "launch_blocking", f"device-side asserts are reported later, at some other call: {line}"),
        item(90, "check_ranges", f"the kernel's check failed: {checked}", what=what, check=check),
        item(60, "cpu_repro", f"on the CPU the same batch fails with a plain Python error ({line})"),
        item(10, "restart", f"the CUDA context is unusable after: {line}"),
    ]  # fmt: skip


def cudnn(f: Failure, ctx: Context) -> Scored:
    line = _line(f)
    if "NOT_INITIALIZED" in f.title:
        return [
            item(90, "treat_as_oom", f"{line}: cuDNN could not create its handle, most often because the GPU was full"),
            item(60, "cudnn_versions", f"{line} also follows a cuDNN/CUDA library mismatch"),
            item(
                50, "cudnn_off", f"if the run then passes, or fails with a plain OOM, cuDNN was the messenger ({line})"
            ),
        ]
    return [
        item(90, "launch_blocking", f"{line} often reports an error raised by an earlier kernel"),
        item(60, "cudnn_off", f"an unsupported shape, dtype or layout also gives {line}"),
    ]


def nccl(f: Failure, ctx: Context) -> Scored:
    line, text = _line(f), " ".join(f.evidence)
    out: Scored = [
        item(95, "first_failure", f"NCCL errors are mostly the echo of another rank's failure ({line})", run=_run(ctx)),
        item(85, "nccl_debug", f"NCCL's error names no cause by itself: {line}"),
    ]
    if re.search(r"socket|network|connect|ncclRemoteError|ncclSystemError|route", text, re.I):
        out.append(item(90, "network", f"the connection failed: {line}"))
    if "UnhandledCuda" in text or "Cuda failure" in text:
        out.append(item(80, "cuda_in_nccl", f"a CUDA call inside NCCL failed: {line}"))
    return out


def nccl_timeout(f: Failure, ctx: Context) -> Scored:
    c = f.collective
    if c is None:
        return []
    seen = f"{', '.join(c.ops) or c.backend} ran {c.ran_ms or c.timeout_ms} ms against a {c.timeout_ms} ms timeout"
    if c.ranks:
        seen += f" (ranks {', '.join(map(str, c.ranks))})"
    out: Scored = []
    if ctx.stall:  # gpumon saw the hang itself and took every rank's stack: that names the rank
        why = f"the run stalled before the timeout: {ctx.stall}"
        logs = logs_command(ctx.run_id, ctx.stall_ranks)
        out.append(item(105, "stalled_rank", why, ranks=ctx.stall_ranks or "named above", logs=logs))
    if len(c.ops) > 1:
        out.append(item(100, "diverged", f"the ranks wait in different collectives: {seen}"))
    if ctx.world_size and c.ranks and len(c.ranks) < ctx.world_size:
        silent = ", ".join(map(str, sorted(set(range(ctx.world_size)) - set(c.ranks))))
        out.append(
            item(
                95,
                "stalled_rank",
                f"only {len(c.ranks)} of {ctx.world_size} ranks reported: {seen}",
                ranks=silent,
                logs=logs_command(ctx.run_id, silent),
            )
        )
    minutes = f"{c.timeout_ms / 60000:g} min" if c.timeout_ms else "the timeout"
    out.append(item(80, "uneven_batches", f"a rank that runs out of batches leaves the others waiting: {seen}"))
    out.append(item(70, "slow_phase", seen, minutes=minutes))
    out.append(item(50, "flight_recorder", seen))
    return out


def shape(f: Failure, ctx: Context) -> Scored:
    a, b = f.shapes or ("?", "?")
    what = f.title.removeprefix("Shape mismatch: ")
    if what.startswith("matmul"):
        given, wanted = re.findall(r"\d+", a)[-1], re.findall(r"\d+", b)
        why = f"the layer expects {wanted[0]} input features but gets {given} ({a} by {b})"
        change = (
            f"make it nn.Linear({given}, {wanted[-1]}) (or nn.LazyLinear({wanted[-1]})), or fix the reshape before it"
        )
    elif what.startswith("checkpoint"):
        why = f"the {what}: the model was built with another configuration"
        change = ("build the model with the checkpoint's configuration (its number of classes...), or drop the "
                  "mismatched keys before load_state_dict: strict=False does not skip shape mismatches")  # fmt: skip
    elif what.startswith("input batch"):
        why = f"{what}: a reshape changed the batch dimension, or the targets belong to another batch"
        change = "use x.flatten(1) (or x.view(x.size(0), -1)) instead of x.view(-1, N); keep inputs and targets paired"
    else:
        why = f"{what} ({_line(f)})"
        change = (
            f"print both shapes ({a} and {b}) before the failing line; reshape, unsqueeze or resize a layer to match"
        )
    return [item(100, "shapes", why, a=a, b=b, change=change)]


def killed(f: Failure, ctx: Context) -> Scored:
    key = {"SIGSEGV": "faulthandler", "SIGABRT": "abort_reason", "SIGBUS": "shm", "SIGTERM": "who_stopped",
           "SIGKILL": "who_killed"}  # fmt: skip
    why = f"the run ended by {f.signal or 'a signal'} (exit code {f.exit_code}): {_line(f)}"
    return [item(80, key.get(f.signal or "", "signal"), why)]


def worker(f: Failure, ctx: Context) -> Scored:
    where = f.detail or f.title
    out: Scored = [item(95, "workers_zero", f"worker {f.worker}'s exception: {f.title}")]
    if f.sample is not None:
        out.append(item(90, "bad_sample", f"the traceback shows sample index {f.sample} ({where})", index=f.sample))
    return out


def exit_status(f: Failure, ctx: Context) -> Scored:
    reason = f.evidence[-1] if f.evidence else f.title
    if f.exit_code == 2:
        return [item(90, "usage", f"{f.detail}: {reason}")]
    if f.exit_code in (126, 127):
        return [item(90, "not_found", f"{f.detail}: {reason}")]
    return [item(60, "exit_reason", f"{f.detail}; its last line: {reason}", status=f.exit_code, run=_run(ctx))]


def unknown(f: Failure, ctx: Context) -> Scored:
    if "CUDA_LAUNCH_BLOCKING" in f.text or "CUDA error:" in f.text:
        return [item(50, "launch_blocking", f"CUDA reports kernel errors asynchronously: {f.title}")]
    return []


# The usual pip names of modules whose import name differs (and gpumon's own extras).
PACKAGES = {"sklearn": "scikit-learn", "cv2": "opencv-python", "PIL": "pillow", "yaml": "pyyaml"}
EXTRAS = {"torch": "pip install torch==2.13.0 && pip install -e '.[train]' (CPU; for a GPU, torch from pytorch.org)",
          "sklearn": "pip install -e '.[train]'", "ray": "pip install -e '.[tune]'"}  # fmt: skip


def missing_module(f: Failure, ctx: Context) -> Scored:
    top = f.module.split(".")[0]
    if not top:
        why = f"{f.evidence[-1]}: a package is missing, or too old or too new for this code"
        change = "read the import on the failing line and install (or upgrade) the package it names"
        return [(60, Advice("import_other", "Install what the import needs", why, change))]
    if f.title.startswith("Cannot import"):
        why = f"{f.evidence[-1]}: the installed {top} is older or newer than the code expects (or a typo)"
        change = f"check the version the script needs and `pip install -U {PACKAGES.get(top, top)}` (or pin it)"
        return [(80, Advice("import_version", "Install the version the script expects", why, change))]
    install = EXTRAS.get(top, f"pip install {PACKAGES.get(top, top)}")
    why = f"{f.evidence[-1]}: the run's Python cannot import it (a typo in the import fails the same way)"
    return [
        (
            90,
            Advice("import_install", f"Install {PACKAGES.get(top, top)} where the run's Python finds it", why, install),
        )
    ]


def no_gpu(f: Failure, ctx: Context) -> Scored:
    why = f"{f.evidence[-1]}: the code asks for CUDA (or nccl), and this machine or torch build has no GPU"
    return [
        (90, Advice("gpu_machine", "Run it where there is a GPU", why,
                    "launch it on a GPU server (gpumon snapshot there shows the GPUs), with a CUDA build of torch")),
        (70, Advice("cpu_fallback", "Or let it fall back to the CPU", why,
                    "device = 'cuda' if torch.cuda.is_available() else 'cpu'; .to(device) instead of .cuda(); "
                    "init_process_group('nccl' if torch.cuda.is_available() else 'gloo')")),
    ]  # fmt: skip


def checkpoint(f: Failure, ctx: Context) -> Scored:
    name = f.module or "the class it names"
    why = f"{f.evidence[-1]}: since torch 2.6 torch.load only unpickles tensors and allowlisted types"
    return [
        (90, Advice("safe_globals", f"Allowlist {name} for torch.load", why,
                    f"torch.serialization.add_safe_globals([{name}]) before torch.load (import it first), or "
                    f"`with torch.serialization.safe_globals([{name}]):` around the load")),
        (60, Advice("weights_only_false", "Or load the whole pickle, for a file you trust", why,
                    "torch.load(path, weights_only=False): it can run code from the file, so only for your own "
                    "checkpoints")),
    ]  # fmt: skip


def no_launcher(f: Failure, ctx: Context) -> Scored:
    why = f"{f.evidence[-1]}: init_process_group reads the rank and world size torchrun sets"
    change = "launch it with gpumon launch ddp SCRIPT --nproc N [-- args] (torchrun under gpumon), not as a script"
    return [(95, Advice("use_torchrun", "Start it through torchrun", why, change))]


def removed_api(f: Failure, ctx: Context) -> Scored:
    alias = f.module or "int"
    builtin = {"long": "int", "unicode": "str"}.get(alias, alias)
    why = f"{f.evidence[-1]}: np.{alias} was only another name for Python's {builtin}"
    return [
        (90, Advice("builtin_alias", f"Write {builtin} instead of np.{alias}", why,
                    f"replace np.{alias} by {builtin} (or a sized type such as np.{builtin}64 where one is meant); "
                    "in a library you cannot change, upgrade it")),
        (50, Advice("pin_numpy", "Or run old code with the NumPy it was written for", why,
                    'pip install "numpy<1.24" in this environment (other packages may need a newer one)')),
    ]  # fmt: skip
