"""The status file: counts, ETA range from the completion-length distribution, atomic writes, the monitor view."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from inference.monitor import format_duration, render
from inference.status import STATUS_FILE, UnreadableStatusError, read_status, write_json_atomic
from inference.status_tracker import StatusTracker


def test_eta_range_follows_the_observed_completion_lengths() -> None:
    tracker = StatusTracker(total=110, already_done=5, already_failed=5)
    for length in [100] * 8 + [10, 1000]:
        tracker.add_turn(20, length)
        tracker.row_done(length)
    tracker.row_failed()
    status = tracker.snapshot([{"url": "http://a", "healthy": True, "in_flight": 1, "limit": 4, "ok": 10,
                                "errors": 0, "ejections": 0, "tokens": 1810, "last_error": None}])
    assert status["rows"] == {**status["rows"], "total": 110, "done": 15, "failed": 6, "pending": 89}
    assert status["tokens"] == {"prompt": 200, "completion": 1810, "in_flight": 0}
    per_row = status["completion_tokens_per_row"]
    assert per_row["p10"] == 100 and per_row["p90"] == 100 and per_row["mean"] == 181
    eta = status["eta"]
    # The mean carries the 1000 above the 90th percentile: the range still holds the estimate it prints.
    assert eta["low_s"] <= eta["expected_s"] == eta["high_s"]
    rate = status["tok_s"]["last_minute"]
    assert rate > 0 and abs(eta["expected_s"] - 89 * 181 / rate) < 1e-6 * eta["expected_s"] + 1e-3


def test_status_without_finished_rows_has_no_eta_yet() -> None:
    status = StatusTracker(total=3).snapshot()
    assert status["eta"] == {"expected_s": None, "low_s": None, "high_s": None, "unknown": "no row answered yet"}
    assert status["rows"]["pending"] == 3


def test_atomic_write_and_read_back(tmp_path: Path) -> None:
    assert read_status(tmp_path) is None
    write_json_atomic(tmp_path / STATUS_FILE, {"state": "running"})
    assert read_status(tmp_path) == {"state": "running"}
    assert [p.name for p in tmp_path.iterdir()] == [STATUS_FILE]


def test_monitor_renders_rows_endpoints_and_eta() -> None:
    tracker = StatusTracker(total=4, info={"run_id": "demo"})
    tracker.add_turn(5, 50)
    tracker.row_done(50)
    status = tracker.snapshot([{"url": "http://gpu-1:30000", "healthy": False, "in_flight": 0, "limit": 8,
                                "ok": 1, "errors": 3, "ejections": 1, "tokens": 50, "last_error": "refused"}])
    console = Console(record=True, width=160)
    console.print(render(status))
    text = console.export_text()
    assert "demo" in text and "1 done · 0 failed · 3 pending" in text
    assert "down" in text and "err 3" in text and "ETA" in text
    assert format_duration(90061) == "1d 01h" and format_duration(3725) == "1h 02m" and format_duration(None) == "?"


def test_monitor_says_when_the_running_process_is_gone(tmp_path: Path) -> None:
    import subprocess
    import sys

    from inference.monitor import process_gone, watch

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    status = StatusTracker(total=2, info={"run_id": "dead", "pid": child.pid}).snapshot()
    assert process_gone(status)
    write_json_atomic(tmp_path / STATUS_FILE, status)
    console = Console(record=True, width=160)
    last = watch(tmp_path, console=console)  # returns at once instead of waiting forever
    assert last["state"] == "running" and "process gone" in console.export_text()
    import os

    assert not process_gone({**status, "pid": os.getpid()})


def test_quality_is_counted_per_category_and_loops_are_found() -> None:
    from inference.quality import record_flags, repeats_ngram

    assert repeats_ngram("one two three four five six seven eight one two three four five six seven eight")
    assert not repeats_ngram("one two three four five six seven eight nine ten eleven twelve thirteen")
    looping = {"meta": {"regenerated": True, "category": "math", "turns": [{"finish_reason": "stop"},
                                                                              {"finish_reason": "length"}]},
               "conversations": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a b " * 8}]}
    assert record_flags(looping) == (True, True)
    tracker = StatusTracker(total=3)
    tracker.count_quality(looping)
    tracker.count_quality({"meta": {"regenerated": True}, "conversations": [{"role": "assistant", "content": "x"}]})
    quality = tracker.snapshot()["quality"]
    assert quality["math"]["cut_share"] == 1.0 and quality["unknown"] == {
        "rows": 1, "cut_at_limit": 0, "cut_share": 0.0, "repetitive": 0, "repetition_share": 0.0}
    from inference.monitor import quality_table

    console = Console(width=80, record=True)
    console.print(quality_table(quality))
    shown = console.export_text()
    assert "(none)" in shown and "unknown" not in shown  # the JSON key stays; the table says what it means


def test_live_status_draws_on_a_terminal_only(tmp_path: Path) -> None:
    import io

    from inference.monitor import LiveStatus

    write_json_atomic(tmp_path / STATUS_FILE, StatusTracker(total=4, info={"run_id": "live"}).snapshot())
    terminal, piped = io.StringIO(), io.StringIO()
    with LiveStatus(tmp_path, Console(file=terminal, force_terminal=True, width=120), interval_s=0.05):
        pass
    with LiveStatus(tmp_path, Console(file=piped, width=120), interval_s=0.05):
        pass
    assert "0 done · 0 failed · 4 pending" in terminal.getvalue() and piped.getvalue() == ""


def test_a_damaged_status_file_is_one_clear_error(tmp_path: Path) -> None:
    assert read_status(tmp_path) is None  # not started yet
    for damage in (b"\xff\xfe", b"not json", b"[1, 2]"):
        (tmp_path / STATUS_FILE).write_bytes(damage)
        with pytest.raises(UnreadableStatusError, match=r"status\.json"):
            read_status(tmp_path)


def test_quality_warnings_name_rows_without_a_category_in_words() -> None:
    from inference.quality import UNKNOWN_CATEGORY, warnings

    cut = {"rows": 6, "cut_at_limit": 2, "cut_share": 0.33, "repetitive": 0, "repetition_share": 0.0}
    assert warnings({UNKNOWN_CATEGORY: cut, "math": cut}, max_tokens=96) == [
        "math: 2 of 6 answers cut at the token limit (--max-tokens 96)",
        "rows without a category: 2 of 6 answers cut at the token limit (--max-tokens 96)",
    ]
