"""Where ranks wait, from faulthandler dumps in the form Python 3.11 writes them (copied from real stalls
on this machine, paths shortened), and a gloo timeout read with what the stall had seen."""

from __future__ import annotations

from pathlib import Path

from gpumon.core.doctor import hang
from gpumon.core.doctor.advice import advise
from gpumon.core.doctor.advice_types import Context
from gpumon.core.doctor.classifier import classify
from gpumon.core.doctor.stall_text import stall_advice

SITE = "/venv/lib/python3.11/site-packages"
STD = "/usr/lib/python3.11"
BOOT = f"""  File "{SITE}/torch/multiprocessing/spawn.py", line 87 in _wrap
  File "{STD}/multiprocessing/process.py", line 108 in run
  File "{STD}/multiprocessing/spawn.py", line 122 in spawn_main
  File "<string>", line 1 in <module>
"""
BACKWARD = f"""Thread 0x00007f0b1a9fe640 (most recent call first):
  File "{STD}/threading.py", line 327 in wait
  File "{STD}/threading.py", line 1002 in _bootstrap

Current thread 0x00007f0b22a02b80 (most recent call first):
  File "{SITE}/torch/autograd/graph.py", line 979 in _engine_run_backward
  File "{SITE}/torch/autograd/__init__.py", line 395 in backward
  File "{SITE}/torch/_tensor.py", line 623 in backward
  File "/tmp/job/train.py", line 22 in worker
{BOOT}"""
BARRIER = f"""Current thread 0x00007f0b22a02b80 (most recent call first):
  File "{SITE}/torch/distributed/distributed_c10d.py", line 4871 in barrier
  File "{SITE}/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "/tmp/job/train.py", line 31 in worker
{BOOT}"""
ALL_REDUCE = BARRIER.replace("4871 in barrier", "3252 in all_reduce").replace("line 31", "line 25")
QUEUE = f"""Current thread 0x00007f0b22a02b80 (most recent call first):
  File "{STD}/threading.py", line 331 in wait
  File "{STD}/queue.py", line 180 in get
  File "/tmp/job/train.py", line 12 in next_batch
  File "/tmp/job/train.py", line 19 in worker
{BOOT}"""


def where(rank: int, dump: str, world: int = 2) -> hang.RankWhere:
    return hang.describe(rank, 100 + rank, hang.parse_dump(dump)[0], world)


def test_the_main_thread_is_read_and_ddp_backward_is_the_gradient_all_reduce() -> None:
    place = where(0, BACKWARD)
    assert (place.collective, place.text) == ("all_reduce", "rank 0 waits in all_reduce (DDP backward) at train.py:22")
    assert where(0, BACKWARD, world=1).collective == ""  # one process: a backward is no collective
    assert where(1, QUEUE).text == "rank 1 waits in next_batch at train.py:12 (get in queue.py)"


def test_ranks_in_different_collectives_and_a_rank_that_left_are_diverged() -> None:
    kind, line = hang.verdict([where(0, ALL_REDUCE), where(1, BARRIER)])
    assert kind == "diverged" and "rank 0 in all_reduce, rank 1 in barrier" in line
    places = [where(0, ALL_REDUCE), hang.gone(1, 101)]
    kind, line = hang.verdict(places)
    assert kind == "diverged" and line.startswith("diverged-rank hang: rank 1 never reached the all_reduce")
    assert hang.lines(places)[0] == "rank 0 waits in all_reduce at train.py:25, for rank 1"
    assert hang.verdict([where(0, ALL_REDUCE), where(1, ALL_REDUCE)])[0] == "collective"


def test_a_gloo_timeout_says_what_it_means_and_names_the_rank_the_stall_saw() -> None:
    text = (Path(__file__).parent / "data" / "errors" / "nccl_timeout__gloo_recv_torch2_13.txt").read_text()
    failure = classify(text)
    assert failure.kind == "nccl_timeout" and failure.title == "gloo collective timed out after 5000 ms"
    assert "A rank never reached this collective" in failure.detail
    stalled = "rank 1 waits in next_batch at train.py:10 (time.sleep)"
    first = advise(failure, Context(world_size=2, stall=stalled, stall_ranks="1"))[0]
    assert first.title == "Look at rank 1: it never reached the collective" and stalled in first.why
    assert advise(failure, Context(world_size=2))[0].key != "stalled_rank"  # without a stall: not claimed


WORKER_IDLE = f"""Current thread 0x00007f97a722cb80 (most recent call first):
  File "{STD}/threading.py", line 331 in wait
  File "{STD}/multiprocessing/queues.py", line 113 in get
  File "{SITE}/torch/utils/data/_utils/worker.py", line 334 in _worker_loop
  File "{STD}/multiprocessing/process.py", line 108 in run
  File "{STD}/multiprocessing/popen_fork.py", line 71 in _launch
  File "{SITE}/torch/utils/data/dataloader.py", line 505 in __iter__
  File "/tmp/job/train.py", line 18 in <module>
"""
WORKER_STUCK = f"""Current thread 0x00007f97a722cb80 (most recent call first):
  File "/tmp/job/train.py", line 12 in __getitem__
  File "{SITE}/torch/utils/data/_utils/fetch.py", line 54 in fetch
  File "{SITE}/torch/utils/data/_utils/worker.py", line 374 in _worker_loop
  File "{STD}/multiprocessing/process.py", line 108 in run
  File "{SITE}/torch/utils/data/dataloader.py", line 505 in __iter__
  File "/tmp/job/train.py", line 18 in <module>
"""


def test_a_workers_place_leaves_out_the_parents_frames_from_the_fork_and_an_idle_one_is_not_named() -> None:
    assert hang.worker_place(7, hang.parse_dump(WORKER_IDLE)[0]) == ""
    assert hang.worker_place(8, hang.parse_dump(WORKER_STUCK)[0]) == "its worker 8 waits in __getitem__ at train.py:12"


def test_a_stalls_fix_fits_what_the_stall_saw() -> None:
    rank = "rank 0 waits in <module> at train.py:18 (DataLoader)"
    stopped = {"where": [f"{rank}: its worker (pid 41) is stopped (SIGSTOP): `kill -CONT 41`"]}
    assert [(a.key, a.change.split(" (")[0]) for a in stall_advice(stopped)] == [("resume_rank", "kill -CONT 41")]
    stuck = {"where": [f"{rank}: its worker 41 waits in __getitem__ at train.py:12 (time.sleep)"]}
    assert [a.key for a in stall_advice(stuck)] == ["loader_timeout"]
    diverged = {"verdict": "diverged", "blame": [1], "where": ["rank 0 waits in all_reduce", "rank 1 waits in f"]}
    assert [a.title for a in stall_advice(diverged)] == ["Look at rank 1: it never reached the collective"]
