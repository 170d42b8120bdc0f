"""The doctor's classifier over real error texts (tests/data/errors/), and its ranked advice.

Each corpus file is named <expected kind>__<origin>.txt; its '#' header says where the text came from
(a GitHub issue, PyTorch's sources, or this machine's torch 2.13). Some texts are also produced live.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from gpumon.core.doctor import KINDS, Context, MemoryNumbers, advise, classify, exception_text, fmt_size
from gpumon.core.doctor.failures import STATE_KINDS
from gpumon.core.doctor.memory_advice import fitting_batch
from gpumon.core.doctor.oom import SIZE

CORPUS = Path(__file__).parent / "data" / "errors"
FILES = sorted(CORPUS.glob("*.txt"))
MiB, GiB = 1024**2, 1024**3


def corpus(name: str) -> str:
    """A corpus text without its '#' source header."""
    lines = (CORPUS / name).read_text().splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


def keys(items: list) -> list[str]:
    return [a.key for a in items]


def test_the_corpus_covers_every_kind_and_names_its_sources() -> None:
    kinds = {p.name.split("__")[0] for p in FILES}
    assert kinds == set(KINDS) - STATE_KINDS  # a stop, or Slurm's end, is told by a state, not by a text
    assert "stopped" in STATE_KINDS and "slurm_timeout" in STATE_KINDS and "killed" not in STATE_KINDS
    for path in FILES:
        source = (
            r"# (source: https://github\.com/|produced on this machine: torch 2\.13|produced on an H100: torch 2\.11)"
        )
        assert re.match(source, path.read_text())
    versions = " ".join(p.read_text().split("\n", 1)[0] for p in FILES if p.name.startswith("cuda_oom"))
    assert len(FILES) >= 50 and "2019" in versions and "2.13" in versions


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_corpus_text_is_classified_as_its_name_says(path: Path) -> None:
    text = corpus(path.name)
    exit_code = -11 if path.name.startswith("killed__segfault") else 3 if path.name.startswith("exit__") else None
    failure = classify(text, exit_code=exit_code)
    assert failure.kind == path.name.split("__")[0], failure.title
    assert failure.text == text  # kept whole, never rewritten
    assert failure.title and "\n" not in failure.title and failure.evidence
    for item in advise(failure, Context(batch_size=32)):  # every item cites what it rests on
        assert re.search(r"\d", item.why) or failure.evidence[-1] in item.why or failure.title in item.why, item


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # 1.0-1.4: "cached" is reserved-minus-allocated; sizes up to 1 KiB print as bytes, then KiB
        ("cuda_oom__torch1_0_cached_kib.txt",
         {"requested": 1024 * 1024, "free": 576 * 1024, "reserved_unallocated": round(30.96 * MiB), "fmt": "1.0-1.4"}),
        ("cuda_oom__torch1_0_chained.txt", {"requested": GiB, "reserved_unallocated": 607 * 1024, "gpu": 0}),
        ("cuda_oom__torch1_12_zero_free.txt", {"free": 0, "total": 4 * GiB, "fmt": "1.5-2.0"}),
        ("cuda_oom__torch1_10_fragmented_gpu5.txt",
         {"gpu": 5, "requested": 648 * MiB, "allocated": round(22.96 * GiB),
          "reserved_unallocated": round(36.19 * GiB) - round(22.96 * GiB)}),
        ("cuda_oom__torch2_0_wrapped.txt",
         {"requested": round(2.11 * GiB), "free": 0, "allocated": round(19.84 * GiB)}),
        ("cuda_oom__torch2_1_capacty.txt",
         {"requested": 3 * GiB, "total": round(23.65 * GiB), "free": round(1.66 * GiB), "fmt": "2.1+",
          "process_in_use": round(20.81 * GiB), "allocated": round(12.09 * GiB),
          "reserved_unallocated": round(4.84 * GiB)}),
        ("cuda_oom__torch2_1_other_process.txt",
         {"process_in_use": round(22.90 * GiB), "others": ((250345, 662 * MiB),)}),
        ("cuda_oom__torch2_4_private_pools.txt",
         {"private_pools": 46 * MiB, "process_in_use": round(15.25 * GiB), "others": ()}),
        ("cuda_oom__torch2_9_hip_allowed.txt", {"allowed": round(1.05 * GiB), "requested": 2 * MiB}),
        ("cuda_oom__torchrun_report_torch2_13.txt", {"requested": 138412032, "gpu": 3, "free": 98 * MiB}),
        ("cuda_oom__torchrun_error_json_torch2_13.txt", {"requested": 138412032, "gpu": 3}),
        ("host_oom__cpu_allocator_torch2_13.txt", {"requested": 140737488355328}),
        ("host_oom__cpu_allocator_torch1_8.txt", {"requested": 1178729664}),
        ("host_oom__cpu_allocator_windows.txt", {"requested": 1981808640}),
        ("host_oom__numpy_memoryerror_torch2_13.txt", {"requested": round(7.28 * 1024**4)}),
    ],
)  # fmt: skip
def test_memory_numbers_are_parsed_to_the_byte(name: str, expected: dict) -> None:
    memory = classify(corpus(name)).memory
    assert memory is not None
    for field, value in expected.items():
        assert getattr(memory, field) == value, field


def test_sizes_print_as_pytorch_prints_them() -> None:
    assert [fmt_size(n) for n in (0, 1024, 1025, GiB, 138412032, 2**47)] == [
        "0 bytes", "1024 bytes", "1.00 KiB", "1024.00 MiB", "132.00 MiB", "128.00 TiB",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "rank", "signal", "detail"),
    [
        ("cuda_oom__torchrun_report_torch2_13.txt", 1, None, ""),  # from torchrun's Root Cause block
        ("cuda_oom__torch2_4_rank_prefix_fragmented.txt", 0, None, ""),
        ("killed__torchrun_sigkill_torch2_13.txt", 1, "SIGKILL", "kill -9"),
        ("killed__torchrun_sigkill_report.txt", 0, "SIGKILL", "no trace"),
        ("killed__dataloader_worker_sigkill_torch2_13.txt", None, "SIGKILL", "OOM killer"),
        ("device_assert__torch2_x_rank_nll.txt", 0, None, "index or a label"),
        ("nccl__unhandled_cuda_error_rank.txt", 7, None, "another rank"),
        ("nccl__remote_error_rank.txt", 3, None, "another rank"),
        ("cudnn__not_initialized_conv2d.txt", None, None, "disguised out-of-memory"),
        ("unknown__gloo_peer_closed_torch2_13.txt", 0, None, ""),
    ],
)
def test_rank_signal_and_detail(name: str, rank: int | None, signal: str | None, detail: str) -> None:
    failure = classify(corpus(name))
    assert (failure.rank, failure.signal) == (rank, signal)
    assert detail in failure.detail


def test_shapes_and_collectives_are_parsed() -> None:
    assert classify(corpus("shape__mat1_mat2_torch2_13.txt")).shapes == ("64x512", "256x10")
    assert classify(corpus("shape__broadcast_torch2_13.txt")).title.endswith("sizes 3 and 4 differ at dimension 1")
    state = classify(corpus("shape__state_dict_torch2_13.txt"))
    assert state.shapes == ("[10, 16]", "[5, 16]") and "1.weight" in state.title
    assert classify(corpus("shape__batch_size_torch2_13.txt")).shapes == ("32", "16")
    watchdog = classify(corpus("nccl_timeout__watchdog_torch2_4.txt"))
    assert watchdog.collective is not None and watchdog.rank is None  # every rank timed out
    assert (watchdog.collective.timeout_ms, watchdog.collective.ranks) == (600000, (0, 1, 2))
    assert watchdog.collective.ops == ("ALLREDUCE(SeqNum=808)",)
    diverged = classify(corpus("nccl_timeout__diverged_ops.txt")).collective
    assert diverged is not None and diverged.ops == ("BROADCAST(SeqNum=80078)", "ALLREDUCE(SeqNum=80078)")
    nccl = classify(corpus("nccl__unhandled_cuda_error_rank.txt"))
    assert nccl.title == "NCCL error: unhandled cuda error, ncclUnhandledCudaError"
    assert "Cuda failure 1 'invalid argument'" in nccl.evidence


def test_the_root_cause_wins_over_its_echoes() -> None:
    # rank 1's OOM makes the others time out in NCCL: the OOM is the failure
    echoes = corpus("nccl_timeout__watchdog_torch2_4.txt") + corpus("nccl__remote_error_rank.txt")
    assert classify(echoes + corpus("cuda_oom__torch2_4_rank_prefix_fragmented.txt")).kind == "cuda_oom"
    assert classify(corpus("device_assert__torch2_x_rank_nll.txt") + echoes).kind == "device_assert"
    assert classify(echoes).kind == "nccl_timeout"
    # the gloo error of rank 0 is an echo of rank 1's SIGKILL in torchrun's report
    killed = classify(corpus("killed__torchrun_sigkill_torch2_13.txt"))
    assert killed.kind == "killed" and "pid 24409" in killed.title
    # "CUDA error: out of memory" also suggests CUDA_LAUNCH_BLOCKING: it is still an OOM, without numbers
    plain = classify(corpus("cuda_oom__cuda_error_out_of_memory.txt"))
    assert plain.kind == "cuda_oom" and plain.memory is None


def test_exit_status_alone() -> None:
    assert classify("", exit_code=-9).kind == "killed"  # a SIGKILL names no sender
    assert classify("Killed", exit_code=137).signal == "SIGKILL"  # a shell's 128 + 9
    assert "137 is 128 + 9" in classify("Killed", exit_code=137).detail
    assert "143 is 128 + 15" in classify("", exit_code=143).detail
    assert classify("", signal="SIGKILL").title == "Killed by SIGKILL (sent by someone or something else)"
    assert (classify("", signal=15).kind, classify("", signal=15).signal) == ("killed", "SIGTERM")
    segv = classify(corpus("killed__segfault_faulthandler_torch2_13.txt"))  # no exit code: faulthandler's line
    assert (segv.kind, segv.signal) == ("killed", "SIGSEGV")
    assert advise(segv)[0].key == "faulthandler"
    assert classify("", exit_code=1).title == "the script exited with status 1"


def test_a_user_stop_is_not_blamed_on_the_oom_killer() -> None:
    text = corpus("killed__torchrun_sigkill_torch2_13.txt")
    stopped = classify(text, exit_code=-9, signal="SIGKILL", state="killed")
    assert stopped.kind == "stopped" and stopped.title.startswith("Stopped by the user")
    assert advise(stopped) == [] and stopped.evidence == ()  # a stop, not a failure: no log line as its evidence
    oom = classify(corpus("cuda_oom__torch2_1_capacty.txt"), exit_code=-15, state="stopped")
    assert oom.kind == "cuda_oom"  # an error before the stop still shows


def test_unknown_errors_are_shown_as_they_are() -> None:
    text = corpus("unknown__file_not_found_torch2_13.txt")
    failure = classify(text, exit_code=1)
    assert failure.kind == "unknown" and failure.text == text and failure.exit_code == 1
    assert failure.title == "FileNotFoundError: [Errno 2] No such file or directory: " + repr(
        "/data/imagenet/train/n01440764/missing.JPEG"
    )
    assert advise(failure) == []
    cuda = classify(corpus("unknown__illegal_memory_access.txt"))
    assert keys(advise(cuda)) == ["launch_blocking"]
    assert classify("").title == "no error text"


def test_an_exception_event_reads_like_the_traceback() -> None:
    event = {
        "type": "exception",
        "exc_type": "torch.OutOfMemoryError",
        "message": corpus("cuda_oom__torch2_2_this_process.txt").split(": ", 1)[1],
        "traceback": '  File "train.py", line 40, in validate\n    out = model(x)\n',
    }
    text = exception_text(event)
    assert text.startswith("Traceback (most recent call last):\n") and "\ntorch.OutOfMemoryError: CUDA out" in text
    failure = classify(text)
    assert failure.kind == "cuda_oom" and failure.memory and failure.memory.requested == 22 * MiB
    items = advise(failure)  # 194.87 MiB cached could not serve 22.00 MiB: fragmentation first, then evaluation
    assert keys(items)[:2] == ["expandable_segments", "no_grad"]
    assert items[1].title == "Evaluate without autograd: the OOM was in validate()"
    assert exception_text({"exc_type": "MemoryError", "message": ""}) == "MemoryError"


# --- live: the same messages produced by this machine's torch ------------------------------------


def _raised(fn: Callable[[], object]) -> str:
    try:
        fn()
    except (RuntimeError, ValueError, MemoryError):
        return traceback.format_exc()
    raise AssertionError("no exception")


def test_live_shape_and_host_memory_errors() -> None:
    torch = pytest.importorskip("torch")
    nn = torch.nn
    mat = classify(_raised(lambda: nn.Linear(256, 10)(torch.randn(64, 512))))
    assert (mat.kind, mat.shapes) == ("shape", ("64x512", "256x10"))
    assert "nn.Linear(512, 10)" in advise(mat)[0].change
    loss = classify(_raised(lambda: nn.CrossEntropyLoss()(torch.randn(32, 10), torch.zeros(16, dtype=torch.long))))
    assert (loss.kind, loss.shapes) == ("shape", ("32", "16"))
    view = classify(_raised(lambda: torch.randn(64, 512).view(-1, 100)))
    assert view.kind == "shape" and "32768" in view.title
    huge = classify(_raised(lambda: torch.empty(2**45)))  # 128 TiB: more than x86-64's user address space
    assert huge.kind == "host_oom" and huge.memory == MemoryNumbers(requested=2**47)
    assert advise(huge)[0].key == "tensor_size"
    assert classify(_raised(lambda: bytearray(2**50))).kind == "host_oom"


# --- advice ---------------------------------------------------------------------------------------


def test_fragmentation_puts_expandable_segments_first_and_adds_empty_cache() -> None:
    for name, cached in [
        ("cuda_oom__torch2_4_rank_prefix_fragmented.txt", "6.39 GiB"),
        ("cuda_oom__torch1_10_fragmented_gpu5.txt", "13.23 GiB"),  # old format: reserved - allocated
        ("cuda_oom__torch1_5_fragmented.txt", "11.47 GiB"),  # more cached than allocated
    ]:
        items = advise(classify(corpus(name)), Context(batch_size=32))
        assert items[0].key == "expandable_segments" and cached in items[0].why
        assert "expandable_segments:True" in items[0].change
        assert keys(items).index("empty_cache") > 0 and cached in items[keys(items).index("empty_cache")].why
        batch = [a.title for a in items if a.key == "batch_size"]  # it would have fitted in one piece: no estimate
        assert batch in ([], ["Lower the batch size to leave headroom"])


def test_no_fragmentation_no_empty_cache() -> None:
    items = advise(classify(corpus("cuda_oom__torch2_0_outside.txt")), Context(batch_size=32))
    assert "empty_cache" not in keys(items) and "expandable_segments" not in keys(items)
    # some cached memory, but neither a quarter of the GPU nor more than allocated: segments yes, empty_cache no
    items = advise(classify(corpus("cuda_oom__torch1_5_reserved.txt")))
    assert "expandable_segments" in keys(items) and "empty_cache" not in keys(items)


def test_batch_size_from_the_numbers() -> None:
    failure = classify(corpus("cuda_oom__torch2_0_outside.txt"))
    items = advise(failure, Context(batch_size=32))
    # need >= 27.91 GiB + 1.63 GiB = 29.54 GiB; PyTorch could have had 27.93 GiB + 565.31 MiB = 28.48 GiB;
    # 32 * 0.9 * 28.48 / 29.54 = 27.8 -> down to a multiple of 8
    batch = items[keys(items).index("batch_size")]
    assert batch.title == "Lower the batch size to 24 (estimate)" and batch.change == "--batch-size 24"
    assert "29.54 GiB" in batch.why and "28.48 GiB" in batch.why and "estimate" in batch.why
    accum = items[keys(items).index("grad_accum")]
    assert "2 accumulation steps" in accum.title and "24 x 2 = 48 >= 32" in accum.why
    assert items[0].key == "outside_memory" and "16.08 GiB" in items[0].why  # something else holds 16 GiB
    unknown_batch = advise(failure)
    assert "about 86% of the current one" in unknown_batch[keys(unknown_batch).index("batch_size")].title


def test_fitting_batch_rounding() -> None:
    m = MemoryNumbers(requested=2 * GiB, total=12 * GiB, free=GiB // 2, allocated=10 * GiB, reserved_unallocated=0)
    assert fitting_batch(64, m) == 48  # 64 * 0.9 * 10.5 / 12 = 50.4
    assert fitting_batch(64, m, fixed=4 * GiB) == 40  # the fixed part does not scale: 64 * 5.45 / 8 = 43.6
    assert fitting_batch(8, m) == 4  # 6.3: a power of two below 16
    assert fitting_batch(1, m) == 0  # not even one sample
    roomy = MemoryNumbers(requested=GiB, total=12 * GiB, free=2 * GiB, allocated=8 * GiB, reserved_unallocated=0)
    assert fitting_batch(64, roomy) is None  # it would have fitted: not a batch-size problem
    assert fitting_batch(64, MemoryNumbers(requested=GiB)) is None  # no numbers, no estimate


def test_device_assert_advice_starts_with_cuda_launch_blocking() -> None:
    for name, what in [
        ("device_assert__torch2_x_rank_nll.txt", "labels"),
        ("device_assert__index_select.txt", "token ids"),
        ("device_assert__torch1_x_scatter.txt", "indices"),
        ("device_assert__bce_range.txt", "BCE"),
        ("device_assert__accelerator_error.txt", "labels and indices"),
    ]:
        items = advise(classify(corpus(name)))
        assert items[0].key == "launch_blocking" and "CUDA_LAUNCH_BLOCKING=1" in items[0].change
        assert items[1].key == "check_ranges" and what in items[1].title


def test_host_oom_advice() -> None:
    text = corpus("killed__dataloader_worker_sigkill_torch2_13.txt")
    assert classify(text).kind == "killed"  # no evidence of the OOM killer in the text alone
    failure = classify(text, oom=("Out of memory: Killed process 24386 (pt_data_worker)",))
    assert failure.title == "DataLoader worker (pid 24386) was killed by the kernel's OOM killer (host memory)"
    ctx = Context(num_workers=8, pin_memory=True, rss=tuple(GiB * (4 + i) for i in range(10)))
    items = advise(failure, ctx)
    assert keys(items)[:2] == ["confirm_oom_killer", "host_leak"]
    assert "dmesg" in items[0].change and "pid 24386" in items[0].why
    assert "from 4.00 GiB to 13.00 GiB over 10 steps" in items[1].why
    assert {"dataloader_workers", "pin_memory"} <= set(keys(items))
    assert "num_workers=8" in items[keys(items).index("dataloader_workers")].why
    shm = advise(classify(corpus("host_oom__shm_bus_error.txt")))
    assert shm[0].key == "shm" and "--shm-size" in shm[0].change


def test_gpu_memory_advice_follows_the_evidence() -> None:
    capped = advise(classify(corpus("cuda_oom__torch2_9_hip_allowed.txt")))
    assert capped[0].key == "memory_fraction" and "1.05 GiB" in capped[0].why
    neighbour = advise(classify(corpus("cuda_oom__torch2_1_other_process.txt")))
    assert neighbour[0].key == "other_processes" and "pid 250345 holds 662.00 MiB" in neighbour[0].why
    leak = Context(batch_size=32, allocated=tuple(GiB * 10 + i * 200 * MiB for i in range(20)))
    leaking = advise(classify(corpus("cuda_oom__torch2_2_this_process.txt")), leak)
    assert leaking[0].key == "item" and "from 10.00 GiB to 13.71 GiB over 20 steps" in leaking[0].why
    assert ".item()" in leaking[0].change
    full = advise(classify(corpus("cuda_oom__torchrun_report_torch2_13.txt")), Context(batch_size=32))
    assert full[0].key == "expandable_segments" and "765.81 MiB" in full[0].why
    assert "98.00 MiB free of 79.10 GiB" in full[keys(full).index("batch_size")].why  # nearly full anyway
    assert "8.02 GiB is elsewhere" in full[keys(full).index("non_pytorch")].why
    amp = advise(classify(corpus("cuda_oom__torch2_0_outside.txt")), Context(batch_size=32, amp=True))
    assert "mixed_precision" not in keys(amp)
    for path in FILES:  # every GPU OOM item quotes sizes
        failure = classify(corpus(path.name))
        if failure.kind == "cuda_oom" and failure.memory:
            assert all(re.search(SIZE, item.why) for item in advise(failure, Context(batch_size=64))), path.name


def test_distributed_and_shape_advice() -> None:
    diverged = advise(classify(corpus("nccl_timeout__diverged_ops.txt")), Context(world_size=8))
    assert keys(diverged)[:2] == ["diverged", "stalled_rank"]
    assert "0, 1, 2, 4, 5, 6" in diverged[1].title and "BROADCAST(SeqNum=80078)" in diverged[0].why
    timeout = advise(classify(corpus("nccl_timeout__watchdog_torch1_x.txt")))
    assert "uneven_batches" in keys(timeout) and "30 min" in timeout[keys(timeout).index("slow_phase")].title
    assert "drop_last=True" in timeout[keys(timeout).index("uneven_batches")].change
    network = advise(classify(corpus("nccl__system_error_no_route.txt")))
    assert keys(network)[:2] == ["first_failure", "network"] and "No route to host" in network[1].why
    state = advise(classify(corpus("shape__state_dict_torch2_13.txt")))
    assert state[0].title == "Make the shapes agree: [10, 16] vs [5, 16]" and "strict=False" in state[0].change
    cudnn = advise(classify(corpus("cudnn__not_initialized_conv2d.txt")))
    assert cudnn[0].key == "treat_as_oom"


def test_context_from_the_run_arguments() -> None:
    ctx = Context.from_argv(["train.py", "--batch-size", "64", "--num-workers", "4", "--pin-memory"])
    assert (ctx.batch_size, ctx.num_workers, ctx.pin_memory, ctx.amp) == (64, 4, True, None)
    hf = Context.from_argv(["run.py", "--per_device_train_batch_size=8", "--bf16", "--gradient_checkpointing"])
    assert (hf.batch_size, hf.amp, hf.checkpointing) == (8, True, True)
    assert Context.from_argv(["x.py", "--precision", "bf16-mixed"], world_size=4).amp is True
    assert Context.from_argv(["x.py"], batch_size=16).batch_size == 16


def test_import_errors_name_the_module_and_the_install_command() -> None:
    missing = classify(corpus("import__no_torch_in_venv.txt"))
    assert (missing.kind, missing.title, missing.module) == ("import", "Missing module: torch", "torch")
    (first, *_) = advise(missing, Context())
    assert (
        first.key == "import_install" and first.change.startswith("pip install torch==") and "[train]" in first.change
    )
    name = classify(corpus("import__cannot_import_name_torch2_13.txt"))
    assert name.title == "Cannot import AdamWW from torch.optim" and advise(name, Context())[0].key == "import_version"
    typo = classify(corpus("import__typo_module.txt"))
    assert advise(typo, Context())[0].change == "pip install torchvison" and "typo" in advise(typo, Context())[0].why


def test_a_cuda_script_on_a_machine_without_a_gpu_is_told_so() -> None:
    for name in ("no_gpu__cuda_tensor_cpu_build_torch2_13.txt", "no_gpu__set_device_cpu_build_torch2_13.txt",
                 "no_gpu__nccl_backend_cpu_build_torch2_13.txt", "no_gpu__no_cuda_build_torch2_13.txt",
                 "no_gpu__to_rank_mp_spawn_torch2_13.txt"):  # fmt: skip
        failure = classify(corpus(name))
        assert failure.kind == "no_gpu" and "needs a GPU" in failure.title, name
        assert keys(advise(failure, Context())) == ["gpu_machine", "cpu_fallback"]


def test_a_weights_only_refusal_names_the_class_and_both_ways_out_without_escape_codes() -> None:
    failure = classify(corpus("checkpoint__weights_only_torch2_13.txt"))
    assert failure.kind == "checkpoint" and failure.title.endswith("it holds __main__.Cfg")
    assert not any("\x1b" in line for line in failure.evidence)
    first, second = advise(failure, Context())
    assert "add_safe_globals([__main__.Cfg])" in first.change and "weights_only=False" in second.change


def test_a_distributed_script_started_without_torchrun_is_told_to_use_it() -> None:
    failure = classify(corpus("no_launcher__rank_not_set_torch2_13.txt"))
    assert failure.kind == "no_launcher" and failure.title == "The script expects torchrun: RANK is not set"
    (first,) = advise(failure, Context())
    assert first.change.startswith("launch it with gpumon launch ddp SCRIPT --nproc N")


def test_old_code_on_a_newer_numpy_names_the_removed_alias_and_the_fix() -> None:
    failure = classify(corpus("removed_api__numpy_int_labelmodels.txt"))
    assert failure.kind == "removed_api" and failure.title == "The code uses np.int, removed in NumPy 1.24"
    first, second = advise(failure, Context())
    assert first.change.startswith("replace np.int by int") and "numpy<1.24" in second.change


def test_a_sigkill_is_the_oom_killers_only_with_evidence() -> None:
    text = corpus("killed__torchrun_sigkill_torch2_13.txt")
    assert "OOM" not in classify(text).title and keys(advise(classify(text))) == ["who_killed"]
    line = "Out of memory: Killed process 24409 (python) total-vm:31285772kB, anon-rss:22904216kB"
    oom = classify(text, oom=(line,))  # the kernel log names the pid
    assert (oom.kind, oom.title) == ("host_oom", "Killed by the kernel's OOM killer (pid 24409) (host memory)")
    assert oom.evidence[0] == line
    assert classify("", exit_code=-9, oom=("the cgroup's memory.events oom_kill rose from 0 to 1",)).kind == "host_oom"


def test_an_exit_status_names_its_reason_and_meaning() -> None:
    failure = classify(corpus("exit__status3_reason_torch2_13.txt"), exit_code=3)
    assert failure.title == (
        "the script exited with status 3: loading config | error: config.yaml has no 'model' section"
        " | see --help for the expected layout"
    )
    usage = "usage: train.py [-h] --data DATA\ntrain.py: error: the following arguments are required: --data\n"
    assert "argparse" in classify(usage, exit_code=2).detail and keys(advise(classify(usage, exit_code=2))) == ["usage"]
    assert "command not found" in classify("bash: trian.sh: command not found", exit_code=127).detail
    assert "sys.exit" in classify("no GPU left for this job", exit_code=1).detail  # sys.exit("message")
    assert classify(corpus("unknown__file_not_found_torch2_13.txt"), exit_code=1).kind == "unknown"  # a traceback


def test_a_dataloader_worker_exception_names_the_worker_and_the_sample() -> None:
    failure = classify(corpus("worker__getitem_valueerror_torch2_13.txt"), exit_code=1)
    assert (failure.kind, failure.worker, failure.sample) == ("worker", 1, 7)
    assert failure.title == "DataLoader worker 1 raised ValueError: corrupt sample at index 7"
    assert failure.detail == "raised in worker_raise.py:11 in __getitem__, at sample index 7"
    assert keys(advise(failure)) == ["workers_zero", "bad_sample"]


@pytest.mark.parametrize("kind", ["ddp", "dp", "model-parallel", "pipeline"])
def test_a_bad_argument_to_a_shipped_trainer_gets_the_usage_fix_and_alert(tmp_path: Path, kind: str) -> None:
    """Issue 50: our own trainers' argparse prog is ``python -m trainers.ddp`` (spaces): the doctor missed its
    "argument --epochs: not an integer: 'x'" and said "not a known pattern"."""
    import json
    import os
    import subprocess
    import sys

    from tests.conftest import wait_ended

    pytest.importorskip("torch")
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "CUDA_VISIBLE_DEVICES": ""}

    def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gpumon", *args], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)  # fmt: skip

    launched = gpumon("launch", kind, *(["--nproc", "1"] if kind == "ddp" else []), "--", "--epochs", "x")
    assert launched.returncode == 0, launched.stderr
    run_id = launched.stdout.split()[-1]
    wait_ended(tmp_path / "home", run_id)
    doc = json.loads(gpumon("doctor", run_id, "--json").stdout)
    assert "not an integer: 'x'" in doc["headline"], doc["headline"]
    assert doc["advice"] and doc["advice"][0]["key"] == "usage", doc["advice"]
    (row,) = json.loads(gpumon("runs", "--json").stdout)["runs"]
    assert any("Fix the script's arguments" in alert for alert in row["alerts"]), row["alerts"]
