"""The advice's words: each key's title and change, formatted with the numbers a rule found."""

from __future__ import annotations

import re

from gpumon.core.doctor.advice_types import Advice


def logs_command(run_id: str, ranks: object) -> str:
    """ "gpumon logs 0901-ab --rank 1" (one per rank, ';'-joined): the command, with the run's id, that shows
    each named rank's output; "gpumon logs RUN --rank N" where neither is known."""
    numbers = [int(n) for n in re.findall(r"\d+", str(ranks))] if ranks is not None else []
    run = run_id or "RUN"
    return "; ".join(f"gpumon logs {run} --rank {n}" for n in numbers) or f"gpumon logs {run} --rank N"


def item(score: int, key: str, why: str, **fields: object) -> tuple[int, Advice]:
    """A scored Advice whose title and change come from ``TEXT[key]``, formatted with ``fields``."""
    title, change = TEXT[key]
    return score, Advice(key, title.format(**fields), why, change.format(**fields))


TEXT: dict[str, tuple[str, str]] = {
    # GPU memory
    "gpu_occupied": ("Check what else holds the GPU's memory",
                     "look at the GPU's processes (gpumon's GPU view, nvidia-smi); stop them or pick an idle GPU "
                     "(gpumon launch --gpus N)"),
    "memory_fraction": ("Lift the per-process memory cap",
                        "raise or remove torch.cuda.set_per_process_memory_fraction()"),
    "other_processes": ("Free the GPU from other processes",
                        "stop them (gpumon's GPU view lists them) or run on an idle GPU (gpumon launch --gpus N)"),
    "outside_memory": ("Find what holds the GPU outside PyTorch",
                       "look for other processes on the GPU (gpumon's GPU view, nvidia-smi); a CUDA context alone "
                       "takes about 0.3-1 GiB per process"),
    "non_pytorch": ("Account for the process's memory outside PyTorch's allocator",
                    "compare torch.cuda.memory_reserved() with the process's usage; NCCL buffers (NCCL_BUFFSIZE) and "
                    "other libraries' pools count here"),
    "oom_blocks": ("Shrink what held the GPU at the OOM: the largest block, {size}, was allocated at {where}",
                   "{look}; then make what that line allocates smaller (a smaller batch, bf16) or free it sooner"),
    "expandable_segments": ("Stop the cache from fragmenting: expandable segments",
                            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                            "(gpumon launch --env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ...)"),
    "empty_cache": ("Release the cache between phases: torch.cuda.empty_cache()",
                    "call torch.cuda.empty_cache() after evaluation or between phases whose tensor sizes differ; it "
                    "cannot prevent an OOM inside one step (the allocator already returns its cache before failing), "
                    "so pair it with expandable_segments"),
    "item": ("Keep no tensors alive from one step to the next",
             "log loss.item() or float(loss), not the loss tensor (total += loss keeps every step's graph); "
             "del intermediates kept in lists; .detach() what you store"),
    "no_grad": ("Evaluate without autograd{where}",
                "wrap evaluation in `with torch.inference_mode():` (or torch.no_grad()) and call model.eval(): "
                "otherwise activations are kept for a backward that never comes"),
    "batch_size": ("Lower the batch size to {size}", "{change}"),
    "grad_accum": ("Keep the effective batch with {steps} accumulation steps",
                   "(loss / {steps}).backward() every batch; optimizer.step() and zero_grad() every {steps} batches"),
    "model_too_big": ("Even one sample does not fit: shrink what the model holds",
                      "bf16 weights with autocast, a smaller model, or shard it across GPUs (FSDP)"),
    "mixed_precision": ("Train in bf16 with autocast",
                        "with torch.autocast('cuda', dtype=torch.bfloat16): loss = model(x)  (fp16 also needs "
                        "torch.amp.GradScaler); activations take about half the memory"),
    "checkpointing": ("Recompute activations: gradient checkpointing",
                      "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) around the big blocks "
                      "(Hugging Face: model.gradient_checkpointing_enable())"),
    # host memory
    "confirm_oom_killer": ("Confirm that the kernel's OOM killer sent the SIGKILL",
                           "dmesg -T | grep -i -E 'out of memory|killed process' (or journalctl -k | grep -i oom) "
                           "names the pid it killed and the memory it held"),
    "census_holder": ("Stop keeping what the census saw grow",
                      "{fix}"),
    "memory_limit": ("Raise the rank's memory limit, or hold less under it",
                     "{how}"),
    "shm": ("Give the DataLoader workers more shared memory",
            "docker run --shm-size=16g (or --ipc=host); fewer workers; or "
            "torch.multiprocessing.set_sharing_strategy('file_system')"),
    "tensor_size": ("Check the shape behind the {size} allocation",
                    "print the shape before the failing line: a size built from a wrong dimension gives such numbers"),
    "host_leak": ("Stop the host memory from growing every step",
                  "log loss.item(), not tensors; keep no tensors or batches in lists; store results as numpy "
                  "(.detach().cpu().numpy())"),
    "dataloader_workers": ("{when}se fewer DataLoader workers, and share the dataset instead of copying it",
                           "lower num_workers (and prefetch_factor); keep samples in numpy arrays or tensors, not in "
                           "lists of Python objects, whose reference counts make every worker copy them"),
    "pin_memory": ("Try without pinned memory", "DataLoader(..., pin_memory=False), or drop --pin-memory"),
    "host_batch": ("Hold less in host memory per step",
                   "lower --batch-size; read data lazily (memory-mapped files) instead of loading the whole set; "
                   "watch each rank's RSS per step in gpumon's Runs view"),
    # CUDA errors
    "launch_blocking": ("Find the failing kernel with CUDA_LAUNCH_BLOCKING=1",
                        "rerun with CUDA_LAUNCH_BLOCKING=1 (gpumon launch --env CUDA_LAUNCH_BLOCKING=1 ...): slower, "
                        "but the traceback then points at the failing op"),
    "check_ranges": ("Check the {what} against their valid range", "{check}"),
    "cpu_repro": ("Run the failing batch on the CPU",
                  "model.cpu(); model(batch.cpu()): the same check becomes a Python error, e.g. "
                  "'IndexError: Target 10 is out of bounds.'"),
    "restart": ("Restart the run after the fix",
                "a device-side assert cannot be caught and continued: the CUDA context is unusable"),
    "treat_as_oom": ("Treat it as out of memory first",
                     "lower --batch-size, and check the GPU's other processes (gpumon's GPU view)"),
    "cudnn_versions": ("Check the cuDNN and CUDA libraries",
                       "python -c 'import torch; print(torch.version.cuda, torch.backends.cudnn.version())'; "
                       "no other libcudnn on LD_LIBRARY_PATH"),
    "cudnn_off": ("Confirm with cuDNN off",
                  "torch.backends.cudnn.enabled = False (slower, for the diagnosis only)"),
    # distributed
    "first_failure": ("Read the first failing rank's log",
                      "gpumon logs {run} --rank N for each rank: the earliest traceback is the cause"),
    "nccl_debug": ("Rerun with NCCL's own log", "gpumon launch --env NCCL_DEBUG=INFO --env NCCL_DEBUG_SUBSYS=INIT,NET"),
    "network": ("Pin NCCL to the network interface that reaches the other nodes",
                "NCCL_SOCKET_IFNAME=<interface> (see ip addr); to rule out InfiniBand, NCCL_IB_DISABLE=1"),
    "cuda_in_nccl": ("Check each rank's GPU, driver and NCCL",
                     "torch.cuda.set_device(local_rank) before init_process_group; the same driver, CUDA and NCCL "
                     "versions on every node"),
    "diverged": ("Make every rank run the same collectives in the same order",
                 "no collective inside `if rank == 0:`; the same code path on every rank (conditional layers, "
                 "find_unused_parameters)"),
    "collective_mismatch": ("Make {ranks} call the same collective as the others ({where})",
                            "every rank runs the same collectives in the same order: no collective under `if rank "
                            "== ...:` or in a branch only some ranks take"),
    "size_mismatch": ("Give every rank the same size in {op} ({where})",
                      "the same shape on every rank: pad the last shard to the others' length, or exchange the "
                      "sizes first (all_gather_object) and pad to the largest"),
    "loader_timeout": ("Make a stuck DataLoader worker raise instead of hanging the run",
                       "DataLoader(..., timeout=120): the rank raises 'DataLoader timed out' after 120 s; to see the "
                       "stuck sample, num_workers=0 runs __getitem__ in the main process"),
    "resume_rank": ("Resume the stopped process", "kill -CONT {pids} (a SIGSTOP, or Ctrl-Z in its terminal)"),
    "stalled_rank": ("Look at rank {ranks}: it never reached the collective",
                     "read its log ({logs}): a crash, a hang in data loading, or work only it does"),
    "uneven_batches": ("Give every rank the same number of batches",
                       "DistributedSampler(dataset, drop_last=True), or `with model.join():` for uneven inputs"),
    "slow_phase": ("Keep rank-0-only work under {minutes}, or raise the timeout for it",
                   "checkpointing or evaluating on rank 0 alone makes the others wait: move it out, or "
                   "init_process_group(..., timeout=datetime.timedelta(minutes=30))"),
    "flight_recorder": ("Record what each rank was doing",
                        "gpumon launch --env TORCH_NCCL_TRACE_BUFFER_SIZE=2000 --env TORCH_NCCL_DUMP_ON_TIMEOUT=1 "
                        "--env NCCL_DEBUG=INFO ..."),
    # shapes and signals
    "shapes": ("Make the shapes agree: {a} vs {b}", "{change}"),
    "faulthandler": ("Get a Python traceback at the crash",
                     "PYTHONFAULTHANDLER=1 prints the stack; check that torch and its extensions come from one build"),
    "abort_reason": ("Read the lines just above the abort",
                     "'terminate called after throwing...' or a watchdog message there names the reason"),
    "who_stopped": ("Find who stopped the run",
                    "a scheduler's time limit or preemption, systemd-oomd or earlyoom (they send SIGTERM), "
                    "or gpumon stop"),
    "signal": ("Find what sent the signal", "check the scheduler's log and the kernel's (dmesg -T)"),
    "who_killed": ("Find who sent the SIGKILL",
                   "a kill -9, a scheduler's hard limit (Slurm after its grace period), a container runtime; to rule "
                   "out the OOM killer where gpumon could not read the kernel log: dmesg -T | grep -i oom"),
    # DataLoader workers and exit statuses
    "workers_zero": ("Debug it in the main process: DataLoader(..., num_workers=0)",
                     "with num_workers=0 the exception is raised where it happens, so pdb and breakpoints work "
                     "(gpumon launch ... -- --num-workers 0 where the script takes it)"),
    "bad_sample": ("Look at sample {index}",
                   "dataset[{index}] in a Python shell reproduces it without the DataLoader"),
    "usage": ("Fix the script's arguments",
              "run it with --help: status 2 is argparse's answer to arguments it does not know or misses"),
    "not_found": ("Check the command and its permissions",
                  "127: the program is not on PATH (or a typo); 126: it is not executable (chmod +x) or not a program"),
    "exit_reason": ("Read why the script stopped (status {status})",
                    "the script chose to exit; its last lines say why: gpumon logs {run}"),
}  # fmt: skip
