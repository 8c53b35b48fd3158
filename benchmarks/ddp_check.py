"""Prepare a small, self-contained DDP check of the draft trainer: a tiny target and its own regenerated data.

The loss-curve comparison itself is `benchmarks/gpu_scaling.py ddp` (one process at batch 2b vs `torchrun`
with two processes at b each, same data and steps). This script makes what it needs without the 253 MB Gemma
GGUF, so the comparison fits in a few minutes of a two-GPU machine: a randomly initialised Llama target (hidden
256, 4 layers, peaked output distribution so the draft has something to learn) with a word-level tokenizer and
chat template, and `--rows` conversations whose answers are the target's own greedy continuations.

Usage (CPU machine): `.venv/bin/python benchmarks/ddp_check.py --out .carry/ddp`; then on the GPU machine
`python3 benchmarks/gpu_scaling.py ddp --work /tmp/ddp --target .carry/ddp/target --draft-vocab 240 ...` with
`.carry/ddp/regen.jsonl` copied to `/tmp/ddp/regen_x10.jsonl`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

WORDS = [f"w{i}" for i in range(240)]
SPECIAL = ["<pad>", "<bos>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"]
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


def make_tokenizer():  # noqa: ANN201 - transformers type
    """A word-level tokenizer over w0..w239 plus turn markers, with the chat template above."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL + WORDS + ["<unk>"])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(SPECIAL)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<|end|>", pad_token="<pad>",
                                   unk_token="<unk>", chat_template=TEMPLATE)


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".carry/ddp")
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--new-tokens", type=int, default=48)
    args = parser.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(args.out)
    tokenizer = make_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=512, vocab_size=len(tokenizer), max_position_embeddings=1024,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(cfg).eval()
    model.lm_head.weight.mul_(40.0)  # same greedy choices, a peaked (learnable) distribution
    model.save_pretrained(out / "target")
    tokenizer.save_pretrained(out / "target")
    gen = torch.Generator().manual_seed(1)
    rows = []
    for i in range(args.rows):
        prompt = " ".join(WORDS[j] for j in torch.randint(0, len(WORDS), (8,), generator=gen).tolist())
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)["input_ids"]
        full = model.generate(ids, max_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0)
        answer = tokenizer.decode(full[0, ids.shape[1]:], skip_special_tokens=True).strip()
        if not answer:  # the target ended its turn at once: no assistant tokens to learn from
            continue
        rows.append({"id": f"ddp-{i}", "conversations": [{"role": "user", "content": prompt},
                                                         {"role": "assistant", "content": answer}]})
    (out / "regen.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(json.dumps({"target": str(out / "target"), "rows": len(rows)}))


if __name__ == "__main__":
    main()
