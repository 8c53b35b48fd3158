"""Planted duplicates: known copies of real rows (exact, re-cased, re-spaced, lightly reworded) to measure dedup.

`plant_copies(rows, seed)` returns copies with their origin, deterministic by seed; `near_scores` runs the
near-duplicate stage alone over originals plus copies and returns its precision and recall on the
reworded copies (the kind only the near stage can catch) and on all copies.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from curation.conversation import Message, Row

KINDS = ("exact", "recased", "respaced", "reworded")
_SWAPS = ("really", "quite", "also", "then", "just", "simply", "now", "please")


@dataclass(frozen=True)
class Planted:
    """A planted copy: the new row, the index of the row it copies, and how it was changed."""

    row: Row
    origin: int
    kind: str


def reword(text: str, rng: random.Random, every: int = 30) -> str:
    """Return `text` with about one word in `every` replaced or dropped (at least one change)."""
    words = text.split(" ")
    changes = max(1, len(words) // every)
    for _ in range(changes):
        i = rng.randrange(len(words))
        if rng.random() < 0.5 and len(words) > 3:
            del words[i]
        else:
            words[i] = rng.choice(_SWAPS)
    return " ".join(words)


def _change(text: str, kind: str, rng: random.Random) -> str:
    if kind == "recased":
        return text.upper() if rng.random() < 0.5 else text.title()
    if kind == "respaced":
        return "  " + text.replace(" ", "  ").replace("\n", "\n\n") + "\n"
    if kind == "reworded":
        return reword(text, rng)
    return text


def plant_copies(rows: list[Row], *, per_kind: int, seed: int = 0) -> list[Planted]:
    """Return `per_kind` copies of distinct random rows for each kind, changing every user turn."""
    rng = random.Random(seed)
    picks = rng.sample(range(len(rows)), min(len(rows), per_kind * len(KINDS)))
    planted: list[Planted] = []
    for n, origin in enumerate(picks):
        kind = KINDS[n % len(KINDS)]
        src = rows[origin]
        messages: list[Message] = [
            {
                "role": m["role"],
                "content": _change(m["content"], kind, rng) if m["role"] == "user" else m["content"],
            }
            for m in src.messages
        ]
        copy = Row(
            src.source_key + "#planted", 1_000_000 + n, messages, src.category, False, src.source_order + 1
        )
        planted.append(Planted(copy, origin, kind))
    return planted


def scores(flagged: dict[int, int], truth: dict[int, int]) -> tuple[float, float]:
    """Return (precision, recall) of flagged {dup index: kept index} against planted {copy index: origin index}.

    A flag is right when it pairs a copy with its origin (in either direction); recall counts the copies found.
    """
    right = sum(1 for d, k in flagged.items() if truth.get(d) == k or truth.get(k) == d)
    found = sum(1 for c, o in truth.items() if flagged.get(c) == o or flagged.get(o) == c)
    precision = right / len(flagged) if flagged else 1.0
    recall = found / len(truth) if truth else 1.0
    return precision, recall
