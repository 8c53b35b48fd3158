"""Regeneration quality: per category, the share of answers cut at the token limit and the share that loop.

A regenerated row is *cut* when any of its turns stopped at the token limit (`finish_reason == "length"`):
the draft would learn answers that never end. It is *repetitive* when one of its assistant answers holds a
word 8-gram twice or more, the loop a base model falls into (docs/results/scaling.md measured 83 % of a base
target's answers). `QualityCounts` are kept per category in `status.json`; `warnings` turns shares above
CUT_WARN_SHARE / REPEAT_WARN_SHARE into sentences for the end of a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

LOOP_NGRAM = 8
CUT_WARN_SHARE = 0.10
REPEAT_WARN_SHARE = 0.20
UNKNOWN_CATEGORY = "unknown"


def repeats_ngram(text: str, n: int = LOOP_NGRAM) -> bool:
    """True when some run of `n` words occurs twice or more in `text` (overlaps count)."""
    words = text.split()
    seen: set[tuple[str, ...]] = set()
    for start in range(len(words) - n + 1):
        gram = tuple(words[start : start + n])
        if gram in seen:
            return True
        seen.add(gram)
    return False


def record_flags(record: Mapping[str, Any]) -> tuple[bool, bool]:
    """Return (cut at the token limit, repetitive) for a regenerated record (a `RegeneratedRecord`, or a journal
    line as read back, whose keys an older version may not all have written)."""
    meta = record.get("meta") or {}
    turns = meta.get("turns") or [meta]
    cut = any(t.get("finish_reason") == "length" for t in turns)
    answers = (t.get("content", "") for t in record.get("conversations") or [] if t.get("role") == "assistant")
    return cut, any(repeats_ngram(str(a)) for a in answers)


class QualityShares(TypedDict):
    """One category's quality as the status file holds it: counts, and their shares of the rows."""

    rows: int
    cut_at_limit: int
    cut_share: float
    repetitive: int
    repetition_share: float


@dataclass
class QualityCounts:
    """Regenerated rows of one category and how many were cut or repetitive."""

    rows: int = 0
    cut: int = 0
    repetitive: int = 0

    def add(self, cut: bool, repetitive: bool) -> None:
        """Count one regenerated row."""
        self.rows += 1
        self.cut += cut
        self.repetitive += repetitive

    def merge(self, other: QualityCounts) -> None:
        """Add another set of counts to these."""
        self.rows += other.rows
        self.cut += other.cut
        self.repetitive += other.repetitive

    def as_json(self) -> QualityShares:
        """Return the counts and shares as the status file holds them."""
        return {
            "rows": self.rows,
            "cut_at_limit": self.cut,
            "cut_share": round(self.cut / self.rows, 4) if self.rows else 0.0,
            "repetitive": self.repetitive,
            "repetition_share": round(self.repetitive / self.rows, 4) if self.rows else 0.0,
        }


def category_of(record: Mapping[str, Any]) -> str:
    """Return the category a journal record was curated under (`unknown` when the input had none)."""
    return str((record.get("meta") or {}).get("category") or UNKNOWN_CATEGORY)


def warnings(quality: Mapping[str, QualityShares], max_tokens: int | None = None) -> list[str]:
    """Return one sentence per category whose cut or repetition share is above its warning level."""
    limit = f" (--max-tokens {max_tokens})" if max_tokens else ""
    lines: list[str] = []
    for category, q in sorted(quality.items()):
        # Rows curated without a category (a hand-written prompt file) are keyed `unknown`; say what that means.
        category = "rows without a category" if category == UNKNOWN_CATEGORY else category
        if q["rows"] and q["cut_share"] > CUT_WARN_SHARE:
            lines.append(f"{category}: {q['cut_at_limit']} of {q['rows']} answers cut at the token limit{limit}")
        if q["rows"] and q["repetition_share"] > REPEAT_WARN_SHARE:
            lines.append(
                f"{category}: {q['repetitive']} of {q['rows']} answers repeat a phrase of {LOOP_NGRAM} words (looping)"
            )
    return lines

