"""The stuck collective in words, from each rank's last collective started and finished (``collective_ledger``).

At a stall every rank's ledger says which collective it is in, by number in its process group, with its op,
bytes and the script's line; the ranks' stacks (``hang.py``) say where the others wait. Three verdicts:

- "a collective mismatch: rank 1 is in broadcast #41 (train.py:31) while rank 0 is in all_reduce #41";
- "ranks 0-2 are in all_reduce #812 with 4 MiB, rank 3 with 2 MiB: a size mismatch";
- "rank 3 never reached all_reduce #812: it waits in next_batch at data.py:88".

None when the ledgers say nothing more than the stacks (every rank in the same call, or no records: DDP's
gradient all-reduce runs in C++, where only the stacks see it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpumon.core.collective_ledger import P2P, in_flight, read_ranks
from gpumon.core.format import size as human_bytes

Ledgers = dict[int, tuple[dict[str, Any], dict[str, Any] | None]]  # rank -> (last started, last finished)


@dataclass(frozen=True)
class Stuck:
    kind: str  # "mismatch", "size_mismatch", "missing"
    headline: str  # the doctor's sentence
    alert: str  # "hang: collective mismatch at #41, rank 1 in broadcast at train.py:31"
    op: str
    seq: int
    group: str
    ranks: list[int] = field(default_factory=list)  # the odd ones out: what the others wait for
    where: str = ""  # the first odd rank's call (train.py:31), or where it waits


def ranks_text(ranks: list[int]) -> str:
    """ "rank 3", "ranks 0-2", "ranks 0, 2 and 5"."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return f"ranks {', '.join(map(str, ranks[:-1]))} and {ranks[-1]}"


def _size(nbytes: int | None) -> str:
    return "unknown bytes" if nbytes is None else human_bytes(nbytes)


def _are(ranks: list[int]) -> str:
    return "is" if len(ranks) == 1 else "are"


def rank_lines(ledgers: Ledgers, world: list[int]) -> list[str]:
    """Each rank's last collective started and finished: "rank 0: in all_reduce #41 (default, 4.0 KiB,
    train.py:30); last finished all_reduce #40"."""
    out = []
    for rank in sorted(set(world) | ledgers.keys()):
        if rank not in ledgers:
            out.append(f"rank {rank}: no collective recorded")
            continue
        started, finished = ledgers[rank]
        done = f"last finished {finished['op']} #{finished['seq']}" if finished else "none finished"
        about = f"({started['group']}, {_size(started['bytes'])}, {started['where']})"
        if in_flight(started, finished):
            out.append(f"rank {rank}: in {started['op']} #{started['seq']} {about}; {done}")
        else:
            out.append(f"rank {rank}: not in a collective; {done} {about}")
    return out


def verdict(ledgers: Ledgers, world: list[int], places: dict[int, str] | None = None) -> Stuck | None:
    """The stuck collective of a stalled run; ``places``: rank -> where its stack says it waits ("waits in
    next_batch at data.py:88 (time.sleep)").

    The ranks' last collectives started are compared, returned or not: NCCL's calls return once enqueued, so
    there a rank that called broadcast where the others called all_reduce blocks later, at its next sync."""
    starts = {r: s for r, (s, _) in ledgers.items() if s["op"] not in P2P}
    inside = {r for r, (s, f) in ledgers.items() if r in starts and in_flight(s, f)}
    if not starts:
        return None
    group = Counter(starts[r]["group"] for r in (inside or starts)).most_common(1)[0][0]
    members = {r: s for r, s in starts.items() if s["group"] == group}
    top = max(s["seq"] for s in members.values())
    judged = {r: s for r, s in members.items() if s["seq"] == top or r in inside}  # blocked in an earlier one too
    calls = Counter((s["seq"], s["op"]) for s in judged.values())
    first_rank = {call: min(r for r, s in judged.items() if (s["seq"], s["op"]) == call) for call in calls}
    seq, op = min(calls, key=lambda call: (-calls[call], first_rank[call]))  # the most ranks, then rank 0's
    common = sorted(r for r, s in judged.items() if (s["seq"], s["op"]) == (seq, op))
    odd = sorted(set(judged) - set(common))
    if odd:
        return _mismatch(judged, common, odd, op, seq, group)
    sizes = Counter(judged[r]["bytes"] for r in common)
    if len(sizes) > 1:
        return _size_mismatch(judged, sizes, op, seq, group)
    behind = set(members) - set(judged)
    if group == "default":  # a subgroup's members are not known: only the default group's absent are named
        behind |= set(world) - set(ledgers)
    if not behind or not (inside or len(ledgers) > 1):
        return None
    return _missing(sorted(behind), op, seq, group, places or {})


def _mismatch(members: dict[int, Any], common: list[int], odd: list[int], op: str, seq: int, group: str) -> Stuck:
    calls: dict[tuple[int, str], list[int]] = {}
    for rank in odd:
        calls.setdefault((members[rank]["seq"], members[rank]["op"]), []).append(rank)
    theirs = "; ".join(
        f"{ranks_text(rs)} {_are(rs)} in {o} #{n} ({members[rs[0]]['where']})" for (n, o), rs in calls.items()
    )
    head = f"a collective mismatch: {theirs} while {ranks_text(common)} {_are(common)} in {op} #{seq}"
    first = members[odd[0]]
    alert = f"hang: collective mismatch at #{first['seq']}, rank {odd[0]} in {first['op']} at {first['where']}"
    return Stuck("mismatch", head, alert, op, seq, group, odd, first["where"])


def _size_mismatch(members: dict[int, Any], sizes: Counter[int | None], op: str, seq: int, group: str) -> Stuck:
    ordered = [size for size, _ in sizes.most_common()]
    by_size = {size: sorted(r for r, s in members.items() if s["bytes"] == size) for size in ordered}
    main, *rest = ordered
    parts = [f"{ranks_text(by_size[main])} {_are(by_size[main])} in {op} #{seq} with {_size(main)}"]
    parts += [f"{ranks_text(by_size[size])} with {_size(size)}" for size in rest]
    odd = sorted(r for size in rest for r in by_size[size])
    head = ", ".join(parts) + ": a size mismatch"
    first = members[odd[0]]
    alert = (f"hang: size mismatch in {op} #{seq}, {ranks_text(odd)} with {_size(first['bytes'])} against "
             f"{_size(main)} at {first['where']}")  # fmt: skip
    return Stuck("size_mismatch", head, alert, op, seq, group, odd, first["where"])


def _missing(missing: list[int], op: str, seq: int, group: str, places: dict[int, str]) -> Stuck:
    where = "; ".join(f"{'it' if len(missing) == 1 else f'rank {r}'} {places[r]}" for r in missing if places.get(r))
    head = f"{ranks_text(missing)} never reached {op} #{seq}" + (f": {where}" if where else "")
    alert = f"hang: {ranks_text(missing)} never reached {op} #{seq}" + (f"; {where}" if where else "")
    return Stuck("missing", head, alert, op, seq, group, missing, places.get(missing[0], ""))


def judge(run_dir: Path, pids: dict[int, int], places: dict[int, str] | None = None) -> dict[str, Any]:
    """A run's ``collectives`` (each rank's line) and ``collective`` (the verdict, when there is one), from the
    ledgers of its processes (pid -> rank); ``places``: rank -> where its stack says it waits."""
    ledgers = read_ranks(run_dir, pids)
    if not ledgers:
        return {}
    world = sorted(set(pids.values()))
    found = verdict(ledgers, world, places)
    fields: dict[str, Any] = {
        "collectives": rank_lines(ledgers, world),
        "last_collectives": {str(r): {"started": s, "finished": f} for r, (s, f) in sorted(ledgers.items())},
    }
    if found is not None:
        fields["collective"] = asdict(found)
    return fields
