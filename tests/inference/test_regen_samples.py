"""`regen --samples 4..6` through the command: more target answers per prompt, each its own seed, grown on resume."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from regen_fake_server import FakeServer, write_samples
from typer.testing import CliRunner

from server.cli import app


def test_five_then_six_answers_per_multi_turn_prompt(tmp_path: Path, fake_server: FakeServer) -> None:
    write_samples(tmp_path / "in.jsonl", 4, turns=2)
    run = tmp_path / "run"
    args = ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", fake_server.url, "--out", str(run),
            "--seed", "10", "--no-progress"]
    five = CliRunner().invoke(app, [*args, "--samples", "5"])
    assert five.exit_code == 0, five.output
    assert "20 regenerated, 0 failed, 0 already finished of 20 rows" in five.output
    rows = [json.loads(line) for line in (run / "regenerated.jsonl").read_text().splitlines()]
    per_prompt = Counter(r["meta"].get("prompt_id", r["id"]) for r in rows)
    assert sorted(per_prompt.values()) == [5, 5, 5, 5]
    for prompt, group in ((p, [r for r in rows if r["meta"].get("prompt_id", r["id"]) == p]) for p in per_prompt):
        assert sorted(r["meta"]["sampling"]["seed"] for r in group) == [10, 11, 12, 13, 14], prompt
        assert all(len(r["conversations"]) >= 4 for r in group)  # both user turns answered in every sample
    asked = fake_server.requests["/v1/chat/completions"]
    assert asked == 40  # 4 prompts x 5 answers x 2 turns
    six = CliRunner().invoke(app, [*args, "--samples", "6"])
    assert six.exit_code == 0, six.output
    assert "4 regenerated, 0 failed, 20 already finished of 24 rows" in six.output
    assert fake_server.requests["/v1/chat/completions"] - asked == 8  # only the sixth answers
    ids = [json.loads(line)["id"] for line in (run / "regenerated.jsonl").read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 24 and sum(i.endswith("#s5") for i in ids) == 4
