"""The strict run config: unknown keys rejected, values checked, saved as train_config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.config import ConfigError, load_config, make_config, save_config


def test_unknown_keys_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="ttt_step"):
        make_config({"data": "d.jsonl", "target": "t", "out": "o", "ttt_step": 5})


def test_bad_values_are_rejected() -> None:
    with pytest.raises(ConfigError, match="messages_field"):
        make_config({"data": "d", "target": "t", "out": "o", "messages_field": "answers"})


def test_defaults_follow_the_recipe_and_round_trip(tmp_path: Path) -> None:
    cfg = make_config({"data": "d.jsonl", "target": "t", "out": "o"})
    assert (cfg.ttt_steps, cfg.step_decay, cfg.lr, cfg.grad_clip, cfg.draft_vocab_size) == (7, 0.8, 1e-4, 0.5, 32000)
    path = save_config(cfg, tmp_path)
    assert path.name == "train_config.json"
    again = load_config(path, {"ttt_steps": 3})
    assert again.ttt_steps == 3 and again.data == Path("d.jsonl")
    assert json.loads(path.read_text())["messages_field"] == "conversations"


def test_a_config_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "train.json"
    path.write_bytes(b'{"data": "\xff"}')
    with pytest.raises(ConfigError, match="cannot read training config"):
        load_config(path)
