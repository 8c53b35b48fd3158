"""A random-weight target of SmolLM2-135M's shape and a random draft over it, saved as folders, with eval-shaped
prompts: a timing rehearsal of benchmarks/gpu_speculative.py on a GPU before the real models are there.

The weights change no kernel, so the timings (round cost, tok/s) are those of the real shape; acceptance is a
random draft's (about none). The tokenizer is a word-level one over `w0`..`w999` (the model keeps its 49,152
rows), so no model file is needed:

    python benchmarks/random_spec_pair.py --out /tmp/pair   # then --target /tmp/pair/target --draft /tmp/pair/draft
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Run as `python benchmarks/random_spec_pair.py` on a GPU machine where the project is not installed.
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
            "{% if add_generation_prompt %}<|assistant|> {% endif %}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--prompt-words", type=int, default=120)
    args = parser.parse_args()
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from benchmarks.gpu_spec_round import SMOLLM2, build
    from training.export import export_draft

    special = ["<pad>", "<bos>", "<|end|>", "<|user|>", "<|assistant|>", "<unk>"]
    words = [f"w{i}" for i in range(1000)]
    tok = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(special + words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<|end|>",
                                        pad_token="<pad>", unk_token="<unk>", chat_template=TEMPLATE)  # type: ignore[no-untyped-call]
    target, draft, layers = build(torch.device("cpu"), {**SMOLLM2, "bos_token_id": 1, "eos_token_id": 2})
    folder = args.out / "target"
    target.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    export_draft(draft, layers, args.out / "draft", dtype="bfloat16")
    rng = random.Random(0)
    rows = [{"set": f"set{i % 5}", "id": str(i), "prompt": " ".join(rng.choices(words, k=args.prompt_words))}
            for i in range(args.prompts)]
    (args.out / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"random pair in {args.out}")


if __name__ == "__main__":
    main()
