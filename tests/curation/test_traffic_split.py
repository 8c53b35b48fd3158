"""`datahunt traffic-split`: a request log cut in its own time order, the latest records held out as scrubbed
prompt rows the gate reads, the earlier ones kept as logged for a `kind: traffic` source."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from server.cli import app
from training.curve.evaluate import load_eval_prompts


def _record(n: int, when: Any, route: str = "support") -> dict[str, Any]:
    return {"timestamp": when, "metadata": {"route": route},
            "request": {"model": "m", "messages": [{"role": "user", "content": f"question {n} from bob@example.com"}]},
            "response": {"choices": [{"message": {"role": "assistant", "content": f"answer {n}"}}]}}


def _write(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_the_latest_records_by_their_own_time_are_held_out(tmp_path: Path) -> None:
    # Written out of order, as a log merged from several replicas is; times in ISO and epoch forms.
    records = [_record(3, "2026-11-03T10:00:00Z", "code"), _record(1, 1793491200),
               _record(5, "2026-11-05T09:00:00+00:00"),
               _record(2, 1793577600000), _record(4, "2026-11-04T12:00:00Z", "code"),
               {"timestamp": "2026-11-06T00:00:00Z", "request": {"prompt": "a completions request"}}]
    log = _write(tmp_path / "requests.jsonl", records)
    out = tmp_path / "split"
    result = CliRunner().invoke(app, ["traffic-split", str(log), "--out", str(out), "--heldout", "0.5",
                                      "--set-field", "metadata.route"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["ordered_by"], summary["records"], summary["train"]) == ("record time", 6, 3)
    assert summary["heldout"] == 2 and summary["heldout_dropped"] == {"not_chat": 1}
    assert summary["heldout_scrubbed"] == {"email": 2} and summary["train_until"] < summary["heldout_from"]
    train = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert [r["request"]["messages"][0]["content"].split()[1] for r in train] == ["1", "2", "3"]
    assert "bob@example.com" in (out / "train.jsonl").read_text()  # as logged: curation scrubs it on load
    held = (out / "heldout.jsonl").read_text()
    assert "bob@example.com" not in held and "<EMAIL>" in held
    prompts = load_eval_prompts(out / "heldout.jsonl")  # what `gate` and `curve` read
    assert [(p.set, p.turns[0][1].split()[1]) for p in prompts] == [("code", "4"), ("support", "5")]


def test_without_times_the_file_order_is_the_time_order(tmp_path: Path) -> None:
    records = [{"messages": [{"role": "user", "content": f"q{n}"}]} for n in range(10)]
    out = tmp_path / "split"
    result = CliRunner().invoke(app, ["traffic-split", str(_write(tmp_path / "log.jsonl", records)), "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["ordered_by"], summary["train"], summary["heldout"]) == ("file order", 8, 2)
    assert summary["heldout_sets"] == {"traffic": 2}
    held = [json.loads(line) for line in (out / "heldout.jsonl").read_text().splitlines()]
    assert [h["messages"][0]["content"] for h in held] == ["q8", "q9"]


def test_time_order_asked_of_a_log_without_times_is_one_line(tmp_path: Path) -> None:
    log = _write(tmp_path / "log.jsonl", [_record(1, "2026-11-01T00:00:00Z"), {"messages": []}])
    result = CliRunner().invoke(app, ["traffic-split", str(log), "--out", str(tmp_path / "o"), "--order", "time"])
    assert result.exit_code == 1
    assert result.output.strip() == ("error: 1 of 2 records have no readable time (keys timestamp, time, created_at, "
                                     "created, ts, start_time or response.created): pass --order file")
    missing = CliRunner().invoke(app, ["traffic-split", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
