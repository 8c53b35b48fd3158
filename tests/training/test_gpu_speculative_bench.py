"""The speculative benchmark end to end on CPU at toy size: every run measured, the file written, the table printed."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # its prompt reader lies beside it

import gpu_speculative  # noqa: E402


def _prompts(path: Path, n: int, offset: int) -> Path:
    """n chat rows (messages), or with an offset the eval sets' shape ({"set", "prompt"}) over two sets."""
    words = [" ".join(f"w{(offset + i * 7 + j) % 200}" for j in range(5)) for i in range(n)]
    rows: list[dict[str, Any]] = [{"messages": [{"role": "user", "content": w}]} for w in words]
    if offset:
        rows = [{"set": f"s{i % 2}", "id": str(i), "prompt": w} for i, w in enumerate(words)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_every_mode_is_measured_and_written(tmp_path: Path, llama_dir: Path, tiny_draft: Path,
                                            capsys: Any) -> None:
    out = tmp_path / "speculative.json"
    files = [_prompts(tmp_path / "a.jsonl", 3, 0), _prompts(tmp_path / "b.jsonl", 3, 50)]
    doc = gpu_speculative.main(["--target", str(llama_dir), "--draft", str(tiny_draft), "--prompts", *map(str, files),
                                "--out", str(out), "--prompts-per-run", "5", "--max-new", "12", "--k", "3",
                                "--batches", "1", "2", "4", "--sweep", "1", "2", "--cost-repeats", "2"])
    written = json.loads(out.read_text())
    assert written == doc and written["device"] == "cpu"
    runs = {(r["mode"], r["batch"], r["k"], r.get("schedule")): r for r in written["runs"]}
    assert set(runs) == {("greedy", 1, 3, None), ("greedy", 2, 3, "continuous"), ("greedy", 2, 3, "static"),
                         ("greedy", 4, 3, "continuous"), ("greedy", 4, 3, "static"), ("sampled", 1, 3, None),
                         ("greedy", 1, 1, None), ("greedy", 1, 2, None)}
    for key, r in runs.items():
        # Continuous batches run on 4 x B prompts where there are that many (six here), the rest on five.
        assert r["prompts"] == (min(6, max(5, 4 * key[1])) if key[3] == "continuous" else 5)
        assert r["accept_length"] >= 1.0 and len(r["per_position_accept"]) == key[2]
        assert r["speculative_tok_s"] > 0 and r["baseline_tok_s"] > 0 and r["round_cost_target_steps"] > 0
        assert r["break_even_accept_length"] == r["round_cost_target_steps"]
        assert r["expected_speedup"] == pytest.approx(r["accept_length"] / r["round_cost_target_steps"], abs=2e-3)
    assert runs[("greedy", 1, 3, None)]["identical"]
    assert all(runs[("greedy", b, 3, s)]["identical"] for b in (2, 4) for s in ("continuous", "static"))
    sampled = runs[("sampled", 1, 3, None)]
    assert "identical" not in sampled and sampled["temperature"] == 0.7 and sampled["round_cost_source"] == "replayed"
    assert written["recommended_k"]["k"] in {1, 2, 3}
    printed = capsys.readouterr().out
    assert "break-even" in printed and "recommended k=" in printed and printed.count("\ngreedy") >= 7
