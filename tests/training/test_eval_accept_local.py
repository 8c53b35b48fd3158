"""eval-accept's local branch: one run and one table per batch, the break-even beside the AL, --help explains it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from server.cli import app

runner = CliRunner()


def _prompts(path: Path) -> Path:
    rows = [{"conversations": [{"role": "user", "content": f"w{i} w{i + 3} w{2 * i}"}]} for i in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_one_table_per_batch_with_the_break_even(llama_dir: Path, tiny_draft: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["eval-accept", "--draft", str(tiny_draft), "--target", str(llama_dir),
                                 "--prompts", str(_prompts(tmp_path / "p.jsonl")), "--steps", "3", "--max-new", "8",
                                 "--batch", "1", "--batch", "2"])
    assert result.exit_code == 0, result.output
    reports = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [r["batch"] for r in reports] == [1, 2]
    assert all(r["identical_to_target_greedy"] and r["prompts"] == 3 and r["k"] == 3 for r in reports)
    assert reports[0]["accept_length"] == reports[1]["accept_length"]  # same rounds, batched or not
    assert all(r["break_even_accept_length"] > 0 and r["expected_speedup"] > 0 for r in reports)
    assert "greedy, batch 1, k=3" in result.stderr and "greedy, batch 2 (continuous), k=3" in result.stderr
    assert reports[1]["schedule"] == "continuous" and "schedule" not in reports[0]
    assert result.stderr.count("vs break-even") == 2 and "identical to target greedy" in result.stderr


def test_a_static_schedule_is_run_and_a_bad_one_refused(llama_dir: Path, tiny_draft: Path, tmp_path: Path) -> None:
    args = ["eval-accept", "--draft", str(tiny_draft), "--target", str(llama_dir), "--prompts",
            str(_prompts(tmp_path / "p.jsonl")), "--steps", "3", "--max-new", "8", "--batch", "2"]
    result = runner.invoke(app, [*args, "--schedule", "static"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip())["schedule"] == "static" and "batch 2 (static)" in result.stderr
    bad = runner.invoke(app, [*args, "--schedule", "round-robin"])
    assert bad.exit_code == 1 and "schedule must be one of continuous, static" in bad.output


def test_a_sampled_batch_is_refused_in_one_line(llama_dir: Path, tiny_draft: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["eval-accept", "--draft", str(tiny_draft), "--target", str(llama_dir),
                                 "--prompts", str(_prompts(tmp_path / "p.jsonl")), "--temperature", "0.7",
                                 "--batch", "4"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1].startswith("error: batched speculative decoding is greedy")


def test_help_explains_the_break_even() -> None:
    result = runner.invoke(app, ["eval-accept", "--help"], terminal_width=200)
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "breaks even at AL = c" in text and "--batch" in text


def test_several_chain_lengths_are_run_and_the_k_to_run_recommended(llama_dir: Path, tiny_draft: Path,
                                                                   tmp_path: Path) -> None:
    result = runner.invoke(app, ["eval-accept", "--draft", str(tiny_draft), "--target", str(llama_dir),
                                 "--prompts", str(_prompts(tmp_path / "p.jsonl")), "--steps", "2", "--steps", "4",
                                 "--max-new", "8"], terminal_width=400)
    assert result.exit_code == 0, result.output
    reports = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [r["k"] for r in reports] == [2, 4]
    best = max(reports, key=lambda r: r["speedup"])
    line = next(x for x in result.stderr.splitlines() if x.startswith("batch 1: run k="))
    # The JSON carries the speedup rounded; the line prints the unrounded one to 2 places: equal within 0.01.
    shown = re.match(r"batch 1: run k=(\d+) \(([0-9.]+)x measured, best of k=2, 4\)", line)
    assert shown is not None, line
    assert int(shown[1]) == best["k"] and abs(float(shown[2]) - best["speedup"]) <= 0.0051, (line, best)
    assert "from the acceptance per position and the measured round costs k=" in line


def test_several_chain_lengths_against_a_server_are_refused() -> None:
    result = runner.invoke(app, ["eval-accept", "--prompts", "nothing.jsonl", "--server", "http://127.0.0.1:9",
                                 "--steps", "2", "--steps", "4"])
    assert result.exit_code != 0 and "pass one --steps" in result.output
