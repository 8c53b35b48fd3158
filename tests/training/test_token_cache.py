"""Tokenized rows kept in the run folder: a resumed run loads them instead of rendering and tokenizing again, and
any change to what decides them (data, field, tokenizer, max_length) or a damaged file is a miss, never reuse."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from training import tokenized
from training.config import make_config
from training.data import TokenizedRow
from training.token_cache import CACHE_FILE, cache_key, cached_rows, load_rows, save_rows
from training.trainer import train


def _rows() -> list[TokenizedRow]:
    return [TokenizedRow(id="a", input_ids=[1, 2, 3], loss_mask=[0, 1, 1]),
            TokenizedRow(id="b#s1", input_ids=[49151, 7], loss_mask=[1, 1]),
            TokenizedRow(id="c", input_ids=[5], loss_mask=[0])]


def test_rows_come_back_as_they_were_written_and_only_under_their_key(tmp_path: Path) -> None:
    save_rows(tmp_path, "k1", _rows())
    assert load_rows(tmp_path, "k1") == _rows()
    assert load_rows(tmp_path, "k2") is None
    save_rows(tmp_path, "k2", _rows()[:1])  # one cache file a run folder: the newer key replaces the older
    assert load_rows(tmp_path, "k1") is None and load_rows(tmp_path, "k2") == _rows()[:1]
    assert [p.name for p in tmp_path.iterdir()] == [CACHE_FILE]


def test_a_cut_or_foreign_cache_file_is_a_miss_and_is_made_again(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    save_rows(tmp_path, "k", _rows())
    blob = (tmp_path / CACHE_FILE).read_bytes()
    (tmp_path / CACHE_FILE).write_bytes(blob[: len(blob) // 2])
    with caplog.at_level(logging.WARNING, logger="training"):
        assert load_rows(tmp_path, "k") is None
    assert "unreadable" in caplog.text
    (tmp_path / CACHE_FILE).write_text("not numpy at all\n")
    assert load_rows(tmp_path, "k") is None
    made = []
    assert cached_rows(tmp_path, "k", lambda: made.append(1) or _rows()) == _rows() and made == [1]
    assert cached_rows(tmp_path, "k", lambda: pytest.fail("made again")) == _rows()


def test_a_link_in_place_of_the_cache_file_is_not_read(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    save_rows(elsewhere, "k", _rows())
    run = tmp_path / "run"
    run.mkdir()
    (run / CACHE_FILE).symlink_to(elsewhere / CACHE_FILE)
    assert load_rows(run, "k") is None


def test_the_key_follows_the_data_the_field_the_tokenizer_and_max_length(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a", "conversations": []}\n')
    key = cache_key(data, "conversations", "tok1", 1024)
    assert key == cache_key(data, "conversations", "tok1", 1024)
    assert len({key, cache_key(data, "messages", "tok1", 1024), cache_key(data, "conversations", "tok2", 1024),
                cache_key(data, "conversations", "tok1", 512)}) == 4
    data.write_text('{"id": "b", "conversations": []}\n')
    assert cache_key(data, "conversations", "tok1", 1024) != key


def test_a_resumed_run_loads_its_rows_and_a_changed_file_is_tokenized_again(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path],
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "train.jsonl"
    data.write_bytes(regenerated_data["train"].read_bytes())
    base = {"data": str(data), "target": str(llama_dir), "out": str(tmp_path / "run"), "draft_vocab_size": 150,
            "ttt_steps": 2, "batch_size": 4, "device": "cpu", "save_every": 2}
    train(make_config({**base, "max_steps": 2}))
    assert (tmp_path / "run" / CACHE_FILE).is_file()

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("tokenized again")

    monkeypatch.setattr(tokenized, "tokenize_rows", refuse)  # no memo is shared: only the run folder's file answers
    with caplog.at_level(logging.INFO, logger="training"):
        assert train(make_config({**base, "max_steps": 4})).steps == 4
    assert "reusing 300 tokenized rows" in caplog.text and "resumed from" in caplog.text
    lines = data.read_text().splitlines()
    data.write_text("\n".join(lines[:-1]) + "\n")  # one row fewer: the same run folder must not reuse the rows
    with pytest.raises(AssertionError, match="tokenized again"):
        train(make_config({**base, "max_steps": 6}))


def test_runs_sharing_a_memo_render_each_conversation_once(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """What a data-scaling sweep does: runs in other folders, on a subset of the same rows, with one memo; the
    memo answers the subset (nothing rendered again), and a run without it renders its rows itself."""
    from training.tokenized import RenderedRows, tokenize_file

    lines = regenerated_data["train"].read_text().splitlines()
    (tmp_path / "all.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "half.jsonl").write_text("\n".join(lines[: len(lines) // 2]) + "\n")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(llama_dir))
    memo = RenderedRows()

    def config(name: str) -> Any:
        return make_config({"data": str(tmp_path / f"{name}.jsonl"), "target": str(llama_dir),
                            "out": str(tmp_path / name), "draft_vocab_size": 150, "device": "cpu"})

    everything = tokenize_file(config("all"), tokenizer, memo)
    assert len(memo) == len(lines) and everything

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("rendered again")

    monkeypatch.setattr(tokenized, "tokenize_rows", refuse)
    half = tokenize_file(config("half"), tokenizer, memo)
    assert [r.input_ids for r in half] == [r.input_ids for r in everything[: len(half)]]
    with pytest.raises(AssertionError, match="rendered again"):
        tokenize_file(config("half").model_copy(update={"out": tmp_path / "alone"}), tokenizer)
