"""The prompts of benchmarks/gpu_speculative.py: eval-accept's rows (conversations/messages, the eval sets'
{"set", "prompt"}, or {"text": ...}) rendered as eval-accept renders them and taken in turn from each file and
each eval set. Read here, with the standard library and the tokenizer only, so the GPU machine needs nothing of
the project's dependencies beyond torch and transformers.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def prompt_rows(path: Path) -> list[dict[str, Any]]:
    """JSONL rows (gzip where the name ends .gz): read here, so the GPU machine needs only torch and transformers."""
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def encode(tokenizer: Any, row: dict[str, Any]) -> list[int]:
    """A row as eval-accept renders it: 'text' literally, else the turns before the first answer, templated."""
    if "text" in row:
        return list(tokenizer(row["text"], add_special_tokens=False)["input_ids"])
    if "prompt" in row:  # the eval sets' rows ({"set", "id", "prompt"}): one user turn
        row = {"messages": [{"role": "user", "content": row["prompt"]}]}
    turns = row.get("conversations") or row.get("messages") or []
    first = next((i for i, t in enumerate(turns) if t.get("role", t.get("from")) in {"assistant", "gpt"}), len(turns))
    turns = [{"role": t.get("role", "user"), "content": t.get("content", t.get("value", ""))} for t in turns[:first]]
    if not turns:
        return []
    encoded = tokenizer.apply_chat_template(turns, tokenize=True, add_generation_prompt=True)
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


def read_prompts(files: list[Path], tokenizer: Any, count: int, max_prompt: int) -> list[list[int]]:
    """`count` prompts taken in turn from each file and, within one, from each eval set ('set' field), at most
    max_prompt tokens long (longer ones are skipped)."""
    groups: dict[tuple[str, str], list[list[int]]] = {}
    for f in files:
        for row in prompt_rows(f):
            groups.setdefault((str(f), str(row.get("set", ""))), []).append(encode(tokenizer, row))
    per_file = [[p for p in ids if 0 < len(p) <= max_prompt] for ids in groups.values()]
    out: list[list[int]] = []
    i = 0
    while len(out) < count and any(i < len(ids) for ids in per_file):
        out += [ids[i] for ids in per_file if i < len(ids)]
        i += 1
    return out[:count]
