"""The stuck collective's verdict from the ranks' ledgers (core/doctor/stuck.py), in the cases the live tests
(test_stuck_collective.py) cannot make on gloo: NCCL's calls that return once enqueued, ranks at different
numbers, point-to-point sends, a subgroup, and a ledger file with odd names in it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpumon.core.collective_ledger import decode, encode, read_ranks
from gpumon.core.doctor.stuck import verdict


def rec(op: str, seq: int, nbytes: int | None = 4096, where: str = "train.py:30", group: str = "default") -> Any:
    return decode(encode(op, seq, group, nbytes, where, 1.0))


def test_nccl_ranks_that_returned_from_different_collectives_are_a_mismatch() -> None:
    ledgers = {0: (rec("all_reduce", 41), rec("all_reduce", 41)), 1: (rec("broadcast", 41, where="t.py:31"),) * 2}
    found = verdict(ledgers, [0, 1])
    assert found is not None and found.headline == (
        "a collective mismatch: rank 1 is in broadcast #41 (t.py:31) while rank 0 is in all_reduce #41"
    )


def test_ranks_blocked_at_different_numbers_are_a_mismatch_and_ranks_done_alike_are_none() -> None:
    ahead = {0: (rec("all_reduce", 41), rec("all_reduce", 40)), 1: (rec("all_reduce", 42), rec("all_reduce", 41))}
    found = verdict(ahead, [0, 1])
    assert found is not None and found.kind == "mismatch" and "rank 1 is in all_reduce #42" in found.headline
    idle = {r: (rec("all_reduce", 9), rec("all_reduce", 9)) for r in range(4)}  # all in their own code
    assert verdict(idle, [0, 1, 2, 3]) is None


def test_a_rank_with_no_record_in_a_four_rank_job_never_reached_it() -> None:
    ledgers = {r: (rec("all_reduce", 812, 4 << 20), rec("all_reduce", 811, 4 << 20)) for r in range(3)}
    found = verdict(ledgers, [0, 1, 2, 3], {3: "waits in next_batch at data.py:88"})
    assert found is not None
    assert found.headline == "rank 3 never reached all_reduce #812: it waits in next_batch at data.py:88"
    assert found.alert == "hang: rank 3 never reached all_reduce #812; it waits in next_batch at data.py:88"


def test_sends_and_subgroups_never_name_a_missing_rank() -> None:
    sends = {0: (rec("send", 5), None), 1: (rec("all_reduce", 3), rec("all_reduce", 3))}
    assert verdict(sends, [0, 1]) is None
    sub = {0: (rec("all_reduce", 7, group="tp"), rec("all_reduce", 6, group="tp"))}
    assert verdict(sub, [0, 1, 2, 3]) is None  # the group's members are not known


def test_a_ledger_with_tabs_and_long_names_reads_back(tmp_path: Path) -> None:
    (tmp_path / "stacks").mkdir()
    long = "/a/" + "x" * 400 + ".py:12"
    (tmp_path / "stacks" / "7.coll").write_bytes(encode("all\treduce", 3, "g\nroup", None, long, 2.0) * 2)
    (started, finished) = read_ranks(tmp_path, {7: 0})[0]
    assert (started["op"], started["group"], started["bytes"]) == ("all reduce", "g roup", None)
    assert started["where"].endswith("xx.py:12") and finished == started
