"""The queue's rules as a pure function: entries + GPUs + reservations → who starts, and why the others wait."""

from __future__ import annotations

from gpumon.core.queue.entry import QueueEntry, move
from gpumon.core.queue.plan import GIB, GpuState, Inputs, plan

TOTAL = 80 * GIB


def gpu(index: int, used_gib: int = 0, settled: bool = True, user: str = "alice", pid: int = 1234) -> GpuState:
    used = used_gib * GIB
    procs = ((user, pid, "python train.py", used),) if used else ()
    return GpuState(
        index=index,
        total=TOTAL,
        used=used,
        settled_free=TOTAL - used if settled else None,
        settled_idle=settled and not used,
        settling_s=3.0,
        procs=procs,
    )


def entry(run: str, gpus: int = 1, gib: int | None = 20, seq: int = 0, **kw: object) -> QueueEntry:
    return QueueEntry(run=run, gpus=gpus, gpu_mem=None if gib is None else gib * GIB, seq=seq, **kw)  # type: ignore[arg-type]


def test_the_reason_names_who_uses_each_gpu_in_words() -> None:
    out = plan(Inputs(entries=[entry("a", gpus=2)], gpus=[gpu(0), gpu(3, 71)], now=100.0))
    assert [d.action for d in out] == ["wait"]
    assert out[0].reason == (
        "waiting for 2 GPUs with 20 GiB free: GPU 3 is used by alice's pid 1234, python train.py (71 GiB)"
    )
    assert out[0].position == 1


def test_priority_then_submission_and_no_gpu_given_twice() -> None:
    entries = sorted(
        [entry("late", seq=2), entry("early", seq=1), entry("urgent", seq=3, priority=5)], key=lambda e: e.key
    )
    out = plan(Inputs(entries=entries, gpus=[gpu(0, 10), gpu(1, 10)], now=0.0))
    assert [(d.run, d.action, d.gpus) for d in out] == [
        ("urgent", "start", (0,)),
        ("early", "start", (1,)),
        ("late", "wait", ()),
    ]
    assert "GPU 0 goes to urgent" in out[2].reason


def test_a_gpu_free_for_less_than_the_settle_time_does_not_fit_yet() -> None:
    out = plan(Inputs(entries=[entry("a")], gpus=[gpu(0, settled=False)], now=0.0, settle_s=10))
    assert out[0].action == "wait"
    assert out[0].reason.endswith("GPU 0 is free, settling (3 of 10 s)")


def test_reservations_of_runs_just_started_count_as_used() -> None:
    gpus = [gpu(0, 10)]  # 70 GiB free
    out = plan(Inputs(entries=[entry("a", gib=40)], gpus=gpus, now=0.0, reserved={0: ("b", 35 * GIB)}))
    assert out[0].action == "wait"
    assert "GPU 0 is reserved for b, which started on it (35 GiB to come)" in out[0].reason
    out = plan(Inputs(entries=[entry("a", gib=30)], gpus=gpus, now=0.0, reserved={0: ("b", 35 * GIB)}))
    assert out[0].action == "start"


def test_without_gpu_mem_a_run_wants_a_gpu_no_process_uses() -> None:
    out = plan(Inputs(entries=[entry("a", gib=None)], gpus=[gpu(0, 1), gpu(1)], now=0.0))
    assert out[0].gpus == (1,)
    out = plan(Inputs(entries=[entry("a", gib=None)], gpus=[gpu(0, 1)], now=0.0))
    assert out[0].reason.startswith("waiting for 1 GPU no process uses: GPU 0 is used by alice's pid 1234")


def test_backfill_skips_the_gpus_the_head_could_use_then_stops_at_the_bound() -> None:
    # The head needs two 60 GiB GPUs: GPU 0 fits it (held for it), GPU 1 is busy. A small run may not take
    # GPU 0, but may take GPU 2, which the head cannot use.
    gpus = [gpu(0), gpu(1, 70), gpu(2, 50)]
    entries = [entry("head", gpus=2, gib=60, seq=1), entry("small", gib=20, seq=2)]
    out = plan(Inputs(entries=entries, gpus=gpus, now=100.0, backfill_s=600))
    assert [(d.run, d.action, d.gpus) for d in out] == [("head", "wait", ()), ("small", "start", (2,))]
    assert out[0].blocked_since == 100.0
    # GPU 2 gone: the small run waits rather than take the head's GPU 0.
    out = plan(Inputs(entries=entries, gpus=gpus[:2], now=100.0))
    assert out[1].action == "wait" and "GPU 0 is held for head, first in line" in out[1].reason
    # The head has waited past the bound: nothing behind it starts on a GPU, CPU runs still do.
    late = [
        entry("head", gpus=2, gib=60, seq=1, blocked_since=0.0),
        entry("small", gib=20, seq=2),
        entry("cpu", gpus=0, seq=3),
    ]
    out = plan(Inputs(entries=late, gpus=gpus, now=601.0, backfill_s=600))
    assert [(d.run, d.action) for d in out] == [("head", "wait"), ("small", "wait"), ("cpu", "start")]
    assert "until it does" in out[1].reason


def test_impossible_and_dependencies() -> None:
    entries = [
        entry("big", gpus=3),
        entry("dep_ok", gpus=0, after=("a",)),
        entry("dep_wait", gpus=0, after=("a", "b")),
        entry("dep_bad", gpus=0, after=("c",)),
        entry("dep_gone", gpus=0, after=("zz",)),
    ]
    states = {"a": "finished", "b": "running", "c": "failed"}
    out = {d.run: d for d in plan(Inputs(entries=entries, gpus=[gpu(0), gpu(1)], now=0.0, dep_states=states))}
    assert out["big"].action == "fail" and out["big"].impossible
    assert out["big"].reason == "it needs 3 GPUs and this host has 2 GPUs: it can never start"
    assert out["dep_ok"].action == "start"
    assert out["dep_wait"].action == "wait" and out["dep_wait"].reason == "waiting for b (running) to finish"
    assert out["dep_bad"].reason == "dependency c ended failed, not finished"
    assert out["dep_gone"].action == "fail"


def test_slots_and_start_now() -> None:
    entries = [entry(f"c{i}", gpus=0, seq=i, slots=1) for i in range(3)]
    out = plan(Inputs(entries=entries, gpus=[], now=0.0, cpu_running=0))
    assert [d.action for d in out] == ["start", "wait", "wait"]
    assert out[1].reason == "waiting for a CPU slot: 1 queued CPU run running, --slots 1"
    forced = [entry("f", gib=79, force=True)]
    out = plan(Inputs(entries=forced, gpus=[gpu(0, 70), gpu(1, 60)], now=0.0))
    assert out[0].action == "start" and out[0].gpus == (1,)  # the GPU with the most room, fit or not


def test_moving_a_run_swaps_it_with_its_neighbour() -> None:
    def moved(entries: list[QueueEntry], run: str, step: int) -> list[str]:
        pair = move(entries, run, step)
        assert pair is not None
        changed = {e.run: e for e in pair}
        return [e.run for e in sorted((changed.get(e.run, e) for e in entries), key=lambda e: e.key)]

    entries = [entry("a", seq=1), entry("b", seq=2), entry("c", seq=3)]
    assert moved(entries, "c", -1) == ["a", "c", "b"]
    assert moved(entries, "a", 1) == ["b", "a", "c"]
    assert move(entries, "a", -1) is None and move(entries, "c", 1) is None
    # Up then down again never ties two runs (an earlier rule gave the moved run its neighbour's number +- 1).
    pair = move(entries, "c", -1)
    assert pair is not None
    after = sorted([entries[0], *pair], key=lambda e: e.key)
    assert [e.run for e in after] == ["a", "c", "b"]
    assert moved(after, "a", 1) == ["c", "a", "b"]
    assert len({e.key for e in after}) == 3
    top = sorted([entry("x", priority=3, seq=5), entry("y", seq=1)], key=lambda e: e.key)
    assert moved(top, "y", -1) == ["y", "x"]
