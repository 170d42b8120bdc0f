"""The core's log window and search (gpumon/core/logs): bounded reads of real files of any size."""

from __future__ import annotations

from pathlib import Path

from gpumon.core.logs.search import Needle, scan
from gpumon.core.logs.window import MAX_LINE, LogWindow


def numbered(path: Path, count: int, start: int = 0) -> None:
    with path.open("a") as fh:
        fh.writelines(f"line {i} [rank0] loss {i / 1000:.3f}\n" for i in range(start, start + count))


def test_the_window_opens_at_the_tail_and_slides_a_chunk_at_a_time(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    numbered(log, 100_000)  # about 3 MB
    window = LogWindow(log, keep=5_000, chunk=64 * 1024)  # a chunk holds about 2,000 lines
    page = window.tail()
    assert page.lines[-1] == "line 99999 [rank0] loss 99.999" and page.at_end and not page.at_start
    assert window.bytes_read == 64 * 1024
    first = page.lines[0]
    page = window.older()
    assert page.lines.index(first) > 1_000 and page.at_end  # older lines came before it
    for _ in range(5):
        page = window.older()
    assert len(page.lines) == 5_000 and not page.at_end  # the newest were dropped past keep
    assert window.bytes_read == 7 * 64 * 1024
    newest = page.lines[-1]
    page = window.newer()
    assert page.lines.index(newest) < len(page.lines) - 1
    page = window.around(0)
    assert page.at_start and page.lines[0] == "line 0 [rank0] loss 0.000"
    assert all(page.offsets[i] < page.offsets[i + 1] for i in range(len(page.offsets) - 1))


def test_follow_reads_from_the_last_offset_and_sees_a_line_grow(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    numbered(log, 10)
    window = LogWindow(log)
    window.tail()
    before = window.bytes_read
    with log.open("a") as fh:
        fh.write("epoch 1 [=====")
    page = window.follow()
    assert page.lines[-1] == "epoch 1 [=====" and window.bytes_read - before == len("epoch 1 [=====")
    with log.open("a") as fh:
        fh.write("=====] done\nnext\n")
    page = window.follow()
    assert page.lines[-2:] == ("epoch 1 [==========] done", "next")
    assert page.lines.count("line 9 [rank0] loss 0.009") == 1


def test_a_truncated_or_replaced_log_is_read_again_from_its_end(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    numbered(log, 50)
    window = LogWindow(log)
    window.tail()
    log.write_text("restarted\n")
    page = window.follow()
    assert page.lines == ("restarted",) and "read again" in page.note
    replacement = tmp_path / "new.log"
    replacement.write_text("a new file\n" * 30)
    replacement.replace(log)
    page = window.follow()
    assert page.lines[-1] == "a new file" and "replaced" in page.note


def test_far_behind_follow_jumps_to_the_tail_and_says_what_it_skipped(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    numbered(log, 10)
    window = LogWindow(log, chunk=64 * 1024)
    window.tail()
    numbered(log, 300_000, start=10)  # about 10 MB at once
    before = window.bytes_read
    page = window.follow()
    assert page.lines[-1].startswith("line 300009 ") and "skipped" in page.note
    assert window.bytes_read - before == 64 * 1024


def test_a_line_longer_than_max_line_is_held_in_pieces(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_bytes(b"short\n" + b"x" * (MAX_LINE * 2 + 10) + b"\nend\n")
    page = LogWindow(log).tail()
    assert page.lines[0] == "short" and page.lines[-1] == "end"
    assert [len(line) for line in page.lines[1:-1]] == [MAX_LINE, MAX_LINE, 10]


def test_a_missing_log_is_no_output_yet_until_it_appears(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    window = LogWindow(log)
    assert window.tail().note == "no output yet"
    numbered(log, 3)
    assert window.follow().lines[-1] == "line 2 [rank0] loss 0.002"


def test_search_is_literal_smart_case_and_scans_backwards_in_chunks(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    numbered(log, 20_000)
    steps = list(scan(log, Needle("[RANK0] loss 1"), chunk=64 * 1024))
    assert steps == [] or not any(s.found for s in steps)  # a capital: exact case, and "[RANK0]" never occurs
    steps = list(scan(log, Needle("[rank0] loss 19.99"), chunk=64 * 1024))
    assert len(steps) > 5 and steps[-1].scanned == steps[-1].total == log.stat().st_size
    found = [offset for step in steps for offset in step.found]
    assert len(found) == 10  # 19.990 .. 19.999: the lines' starts, newest chunk first
    text = log.read_bytes()
    assert all(text[o:].startswith(b"line 1999") for o in found)
    assert next(s.found for s in steps if s.found) == tuple(sorted(found))  # all in the last chunk, ascending
    assert len([o for s in scan(log, Needle("LOSS"), chunk=4096) for o in s.found]) == 0
    assert sum(len(s.found) for s in scan(log, Needle("loss"), chunk=4096)) == 20_000
    limited = list(scan(log, Needle("loss"), chunk=4096, limit=500))
    assert sum(len(s.found) for s in limited) == 500 and limited[-1].limited
    assert limited[-1].scanned < log.stat().st_size // 10  # it stopped: the newest 500 lines only


def test_a_needle_highlights_spans_and_searches_a_streamed_buffer() -> None:
    needle = Needle("err")
    assert needle.spans("Error: err [x]") == [(0, 3), (7, 10)]
    assert Needle("Err").spans("Error: err") == [(0, 3)]
    assert needle.in_lines(("ok", "an ERROR", "fine")) == [1]
