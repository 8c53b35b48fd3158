"""Text keys shared by dedup and decontamination: normalisation, content hashes and per-word hash arrays.

Normalisation is NFKC, case folding and collapsed whitespace, so re-cased and re-spaced copies compare
equal. Words are `\\w+` runs of the normalised text, hashed with CRC-32 (stable across processes, unlike
Python's `hash`, so every run makes the same decisions).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
import zlib

import numpy as np

_WS = re.compile(r"\s+")
_WORD = re.compile(r"\w+")


def normalise(text: str) -> str:
    """Return `text` NFKC-normalised, case-folded, with whitespace runs collapsed to one space."""
    return _WS.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def content_hash(text: str, *, normalised: bool = False) -> str:
    """Return the sha256 hex digest of the normalised text (`normalised=True`: `text` already is)."""
    norm = text if normalised else normalise(text)
    return hashlib.sha256(norm.encode("utf-8", errors="surrogatepass")).hexdigest()


def word_hashes(text: str, *, normalised: bool = False) -> np.ndarray:
    """Return the CRC-32 of every word of the normalised text, as uint64 (`normalised=True`: it already is)."""
    crc = zlib.crc32
    words = _WORD.findall(text if normalised else normalise(text))
    return np.fromiter(
        (crc(w.encode("utf-8", errors="surrogatepass")) for w in words), dtype=np.uint64, count=len(words)
    )


def ngram_hashes(words: np.ndarray, n: int) -> np.ndarray:
    """Return a 64-bit polynomial hash of every contiguous n-gram of `words` (empty when fewer than n)."""
    count = len(words) - n + 1
    if count <= 0:
        return np.empty(0, dtype=np.uint64)
    out = np.zeros(count, dtype=np.uint64)
    base = np.uint64(0x100000001B3)
    for j in range(n):
        out = out * base + words[j : j + count] + np.uint64(1)
    return out
