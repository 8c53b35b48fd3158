"""Fixtures for the regeneration tests: the fault-injecting fake server, curated input, a tiny tokenizer."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from regen_fake_server import FakeServer  # noqa: E402

TINY_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    "{% if enable_thinking is defined and not enable_thinking %}NOTHINK{% endif %}"
)


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


@pytest.fixture
def bos_tokenizer_dir(tmp_path: Path) -> Path:
    """A Llama-like tokenizer: its chat template starts with BOS and tokenizing with special tokens adds one."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, "<|user|>": 3, "<|assistant|>": 4, "<|system|>": 5, "<|end|>": 6}
    for word in ("hello", "world", "be", "brief", "Be", "brief."):
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="[UNK]")
    fast.add_special_tokens({"additional_special_tokens": ["<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]})
    fast.chat_template = "{{ bos_token }}" + TINY_TEMPLATE
    out = tmp_path / "bos-tokenizer"
    fast.save_pretrained(out)
    return out
