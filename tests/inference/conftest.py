"""Fixtures for the regeneration tests: the fault-injecting fake server, curated input, a tiny tokenizer."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_server import FakeServer  # noqa: E402

TINY_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    "{% if enable_thinking is defined and not enable_thinking %}NOTHINK{% endif %}"
)


def write_samples(path: Path, count: int, *, turns: int = 1, prefix: str = "q") -> list[dict]:
    """Write `count` curated samples (every third without an id) to `path`; return them."""
    rows = []
    for i in range(count):
        messages = [{"role": "system", "content": "Be brief."}] if i % 4 == 0 else []
        for t in range(turns):
            messages.append({"role": "user", "content": f"{prefix}{i} turn{t}"})
            messages.append({"role": "assistant", "content": f"dataset answer {i}.{t}"})
        row = {"messages": messages, "needs_regeneration": True, "category": "general_chat", "source": {"row": i}}
        if i % 3:
            row["id"] = f"row-{i}"
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    server = FakeServer().start()
    yield server
    server.stop()


@pytest.fixture
def tiny_tokenizer_dir(tmp_path: Path) -> Path:
    """A word-level tokenizer with a small chat template, saved like a Hub tokenizer folder (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "<|user|>": 1, "<|assistant|>": 2, "<|system|>": 3, "<|end|>": 4}
    for word in ("hello", "world", "be", "brief"):
        vocab[word] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
    fast.add_special_tokens({"additional_special_tokens": ["<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]})
    fast.chat_template = TINY_TEMPLATE
    out = tmp_path / "tiny-tokenizer"
    fast.save_pretrained(out)
    return out
