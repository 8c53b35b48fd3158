"""PII scrubbing for traffic sources: e-mails, API keys and tokens (and IPs, phone numbers) become typed placeholders.

The patterns live in one data file (`curation/pii_patterns.json`), applied in its order: private keys, JWTs,
the providers' key shapes (OpenAI `sk-…`, Hugging Face `hf_…`, GitHub `ghp_…`/`github_pat_…`, AWS `AKIA…`,
Slack `xox?-…`, Google, Stripe), bearer tokens, `key=`/`token=`/`secret:` assignments whose value looks random
(at least 12 characters with letters and digits and `min_entropy` bits per character, so `token = tokenizer`
stays), then e-mails, IPv4 addresses (not loopback) and phone numbers in international or US form. Each match
is replaced by its placeholder (`<EMAIL>`, `<API_KEY>`, `<TOKEN>`, `<SECRET>`, …) and counted by kind.
`scrub_record` walks a whole JSON record (every string value at any depth), so a record is clean before any
step reads it: the adapters, the drop files, the staging cache and the shards only ever see scrubbed text.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

PATTERNS_FILE = "pii_patterns.json"


@dataclass(frozen=True)
class Pattern:
    """One kind of PII: its regex, the placeholder it becomes, and the checks a match must pass."""

    kind: str
    regex: re.Pattern[str]
    placeholder: str
    group: str | None = None
    min_entropy: float | None = None
    needs_digit: bool = False
    hints: tuple[str, ...] = ()  # lower-case substrings one of which must occur for the regex to be tried

    def accepts(self, value: str) -> bool:
        """True when a matched value passes this pattern's shape checks (entropy, a digit)."""
        if self.needs_digit and not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
            return False
        return self.min_entropy is None or entropy(value) >= self.min_entropy


def entropy(text: str) -> float:
    """Return the Shannon entropy of `text` in bits per character."""
    if not text:
        return 0.0
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _raw_patterns() -> str:
    return resources.files("curation").joinpath(PATTERNS_FILE).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def patterns() -> tuple[Pattern, ...]:
    """Return the shipped patterns, compiled, in the order they are applied."""
    data = json.loads(_raw_patterns())
    return tuple(
        Pattern(p["kind"], re.compile(p["regex"]), p["placeholder"], p.get("group"), p.get("min_entropy"),
                bool(p.get("needs_digit", False)), tuple(p.get("hints", ())))
        for p in data["patterns"]
    )


def patterns_version() -> str:
    """Return a short hash of the pattern file: part of a traffic source's cache key, so new patterns re-scrub."""
    return hashlib.sha256(_raw_patterns().encode("utf-8")).hexdigest()[:12]


def scrub_text(text: str, counts: Counter[str] | None = None) -> str:
    """Return `text` with every PII match replaced by its placeholder; add the matches per kind to `counts`."""
    lowered = text.lower()
    for pattern in patterns():
        if pattern.hints and not any(h in lowered for h in pattern.hints):
            continue

        def replace(match: re.Match[str], pattern: Pattern = pattern) -> str:
            span = match.group(pattern.group) if pattern.group else match.group(0)
            if not pattern.accepts(span):
                return match.group(0)
            if counts is not None:
                counts[pattern.kind] += 1
            if not pattern.group:
                return pattern.placeholder
            start, end = match.span(pattern.group)
            whole = match.group(0)
            return whole[: start - match.start()] + pattern.placeholder + whole[end - match.start():]

        text = pattern.regex.sub(replace, text)
    return text


def scrub_record(value: Any, counts: Counter[str]) -> Any:
    """Return `value` (a JSON record: dicts, lists, strings, numbers) with every string scrubbed; counts per kind."""
    if isinstance(value, str):
        return scrub_text(value, counts)
    if isinstance(value, dict):
        return {key: scrub_record(item, counts) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_record(item, counts) for item in value]
    return value
