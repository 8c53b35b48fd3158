"""The fixed-width records the engine's tasks exchange through files: row refs, keep ranks, hash and band keys.

A row is named across the whole run by its ref, `source_order << 40 | row_index`, so sorting refs sorts rows
into the in-process pipeline's input order (manifest order, then row index). The keep-best rule of
`curation.dedup.keep_rank` becomes three sortable columns: `native` (0 for target-native rows, else 1),
`negchars` (minus the assistant characters) and the ref; `rank_order` sorts by them. Prompt hashes are the
first 128 bits of `content_hash` (two uint64), band keys the uint64 of `curation.dedup.band_keys`.

Partition files are raw little-endian arrays of these dtypes, appended batch by batch (`append`) and read
whole by the partition's task (`read_all`): the on-disk bucket layout of datatrove's own MinHash stages.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

ROW_BITS = 40

EXACT = np.dtype(
    [("hi", "<u8"), ("lo", "<u8"), ("native", "u1"), ("negchars", "<i8"), ("ref", "<i8")]
)
BAND = np.dtype(
    [
        ("band", "u1"),
        ("key", "<u8"),
        ("hi", "<u8"),
        ("lo", "<u8"),
        ("native", "u1"),
        ("negchars", "<i8"),
        ("ref", "<i8"),
    ]
)
DUP = np.dtype([("ref", "<i8"), ("kept", "<i8"), ("similarity", "<f8")])
PAIR = np.dtype(
    [("a", "<i8"), ("b", "<i8"), ("a_native", "u1"), ("a_negchars", "<i8"), ("b_native", "u1"), ("b_negchars", "<i8")]
)
CLEAN = np.dtype([("row", "<i8"), ("digest", "S32")])


def make_ref(source_order: int, row_index: int) -> int:
    """Return the run-wide ref of a row."""
    return (source_order << ROW_BITS) | row_index


def split_refs(refs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (source orders, row indices) of an array of refs."""
    return refs >> ROW_BITS, refs & ((1 << ROW_BITS) - 1)


def hash_words(hex_digest: str) -> tuple[int, int]:
    """Return the first 128 bits of a hex digest as two uint64."""
    return int(hex_digest[:16], 16), int(hex_digest[16:32], 16)


def rank_order(native: np.ndarray, negchars: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Return the permutation that sorts rows best-first by the keep-best rule."""
    return np.lexsort((ref, negchars, native))


def group_starts(*columns: np.ndarray) -> np.ndarray:
    """Return a boolean mask, True where a sorted array's row starts a new group of equal `columns`."""
    n = len(columns[0])
    starts = np.zeros(n, dtype=bool)
    if n:
        starts[0] = True
        for col in columns:
            starts[1:] |= col[1:] != col[:-1]
    return starts


def append(path: Path, records: np.ndarray) -> None:
    """Append records to a partition file."""
    with path.open("ab") as handle:
        handle.write(records.tobytes())


def read_all(paths: Iterable[Path], dtype: np.dtype) -> np.ndarray:
    """Return the concatenated records of partition files (empty when there are none)."""
    parts = [np.fromfile(p, dtype=dtype) for p in sorted(paths)]
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)
