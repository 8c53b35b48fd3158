"""benchmarks/outputs_unchanged.py's comparison: what it may mask (timings, times, the run's own path, digests
over masked content) and what it must still catch (any other changed byte, a file only one side wrote)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from outputs_unchanged import compare  # noqa: E402


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_timings_times_paths_and_digests_are_masked_and_nothing_else(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    row = {"id": "a", "meta": {"latency_s": 1.5, "model": "m"}}
    _write(old, {
        "same.txt": "x",
        "timed.jsonl": json.dumps(row) + "\n",
        "status.json": json.dumps({"started_at": "2026-12-07T15:53:00.984046+00:00", "pid": 7, "input": f"{old}/in"}),
        "marker.json": json.dumps({"rows": 1, "journal": {"bytes": 50, "sha256": "a" * 64}}),
        "answer.jsonl": json.dumps({"id": "a", "text": "four"}),
        "rows.json": json.dumps({"rows": 8}),
        "only_old.txt": "gone",
    })
    _write(new, {
        "same.txt": "x",
        "timed.jsonl": json.dumps({**row, "meta": {**row["meta"], "latency_s": 19.25}}) + "\n",
        "status.json": json.dumps({"started_at": "2026-12-07T16:01:20.923882+00:00", "pid": 9, "input": f"{new}/in"}),
        "marker.json": json.dumps({"rows": 1, "journal": {"bytes": 52, "sha256": "b" * 64}}),
        "answer.jsonl": json.dumps({"id": "a", "text": "five"}),
        "rows.json": json.dumps({"rows": 9}),
    })
    verdicts = dict(compare(old, new))
    assert verdicts["same.txt"] == "byte-identical"
    assert verdicts["timed.jsonl"] == verdicts["status.json"] == "identical once timings, times and paths are masked"
    assert verdicts["marker.json"] == "identical once timings, times, paths and the digests over them are masked"
    assert verdicts["answer.jsonl"] == verdicts["rows.json"] == "DIFFERS"  # content, and a count that is no timing
    assert verdicts["only_old.txt"] == "written by one revision only"
