"""Tiny targets for the training tests: a word-level tokenizer with a chat template, random Llama/Gemma models.

Nothing is downloaded. The tokenizer knows `w0`..`w199` plus turn markers; the chat template renders
`<bos><|user|> ... <|end|> <|assistant|> ... <|end|>`. `regenerate` writes what the regeneration stage would
produce for a target: user prompts answered by the target's own greedy decoding.
"""

from __future__ import annotations

from typing import Any

import torch

WORDS = [f"w{i}" for i in range(200)]
SPECIAL = ["<pad>", "<bos>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
PROMPT_WORDS = 6
LOGIT_SHARPNESS = 40.0


def make_tokenizer() -> Any:
    """A PreTrainedTokenizerFast over a WordLevel vocab, with the chat template above."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL + WORDS + ["<unk>"])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece()  # joins tokens with spaces
    tok.add_special_tokens(SPECIAL)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<|end|>", pad_token="<pad>", unk_token="<unk>",
        chat_template=CHAT_TEMPLATE,
    )


def make_llama(vocab_size: int, layers: int = 4, seed: int = 0) -> Any:
    """A random tiny Llama (hidden 64, 4 heads, 2 kv heads)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(hidden_size=64, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=128, vocab_size=vocab_size, max_position_embeddings=512,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(LOGIT_SHARPNESS)  # same greedy choices, a peaked (learnable) distribution
    return model


def make_gemma(vocab_size: int, layers: int = 3, seed: int = 0) -> Any:
    """A random tiny Gemma-3-text model (scaled embeddings, softcapping off, sliding + full attention)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    cfg = Gemma3TextConfig(hidden_size=64, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=16, intermediate_size=128, vocab_size=vocab_size, max_position_embeddings=512,
                           sliding_window=16, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return Gemma3ForCausalLM(cfg).eval()


@torch.no_grad()
def regenerate(model: Any, tokenizer: Any, n: int, new_tokens: int, seed: int) -> list[dict[str, Any]]:
    """Rows whose answers are the model's greedy continuation (special tokens suppressed), as regen writes."""
    rng = torch.Generator().manual_seed(seed)
    prompts = [" ".join(WORDS[int(i)] for i in torch.randint(0, len(WORDS), (PROMPT_WORDS,), generator=rng))
               for _ in range(n)]
    ids = torch.tensor([tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=True,
                                                      add_generation_prompt=True)["input_ids"] for p in prompts])
    special = torch.tensor(tokenizer.convert_tokens_to_ids([*SPECIAL, "<unk>"]))
    for _ in range(new_tokens):
        logits = model(input_ids=ids).logits[:, -1]
        logits[:, special] = float("-inf")
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    width = ids.shape[1] - new_tokens
    return [{"id": f"r{i}", "conversations": [{"role": "user", "content": p},
                                              {"role": "assistant", "content": tokenizer.decode(ids[i, width:])}],
             "meta": {"finish_reason": "length"}} for i, p in enumerate(prompts)]
