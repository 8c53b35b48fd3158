"""Tokenized training rows kept in the run folder, so a resumed run does not render and tokenize its data again.

Rendering and masking 96,876 conversations took about a minute of every resumed call on one GPU machine (the
chat template renders each row three times in Python); the rows themselves load from this file in about a
second. The file is keyed by what decides the rows: the data file's bytes, the messages field, the tokenizer
(vocabulary and chat template) and max_length. A different key, a damaged file or a file of another format is a
miss: the rows are made again and the file replaced, never trusted half. One cache file per run folder.

Layout (`numpy.savez`, no pickles): `ids` (int32, every row's tokens back to back), `mask` (uint8, the same
length), `ends` (int64, where each row ends), `row_ids` (unicode) and `key` (the key it was written for).
"""

from __future__ import annotations

import hashlib
import io
import logging
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from training import data as rendering
from training.atomic_files import read_own, staged_file
from training.data import TokenizedRow

logger = logging.getLogger(__name__)

CACHE_FILE = "tokenized_rows.npz"
FORMAT = "datahunt-tokenized-rows-1"


def cache_key(data: Path, field: str, tokenizer_fingerprint: str, max_length: int) -> str:
    """The key of `data` tokenized this way: its bytes, the field, the tokenizer, max_length and the rendering
    code itself (`training/data.py`), so rows made by another version of it are never reused."""
    digest = hashlib.sha256()
    with data.open("rb") as fh:
        for block in iter(lambda: fh.read(8 << 20), b""):
            digest.update(block)
    digest.update(f"|{FORMAT}|{field}|{tokenizer_fingerprint}|{max_length}|".encode())
    digest.update(Path(rendering.__file__).read_bytes())  # the code that renders and masks: changed, a miss
    return digest.hexdigest()[:32]


def load_rows(folder: Path, key: str) -> list[TokenizedRow] | None:
    """The rows cached under `key` in `folder`, or None (no file, another key, or a file that does not hold up)."""
    blob = read_own(folder / CACHE_FILE, root=folder)
    if blob is None:
        return None
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as arrays:
            if str(arrays["key"]) != key:
                return None
            ids, mask, ends, row_ids = arrays["ids"], arrays["mask"], arrays["ends"], arrays["row_ids"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:  # a cut or foreign file
        logger.warning("ignoring the tokenized-rows cache %s: unreadable (%s)", folder / CACHE_FILE, exc)
        return None
    if not _consistent(ids, mask, ends, row_ids):
        logger.warning("ignoring the tokenized-rows cache %s: its arrays do not agree", folder / CACHE_FILE)
        return None
    cuts = ends[:-1]
    return [TokenizedRow(id=str(rid), input_ids=i.tolist(), loss_mask=m.tolist())
            for rid, i, m in zip(row_ids.tolist(), np.split(ids, cuts), np.split(mask, cuts), strict=True)]


def _consistent(ids: np.ndarray, mask: np.ndarray, ends: np.ndarray, row_ids: np.ndarray) -> bool:
    if ids.ndim != 1 or mask.shape != ids.shape or ends.ndim != 1 or row_ids.shape != ends.shape or not len(ends):
        return False
    return bool(ends[-1] == len(ids) and np.all(np.diff(ends) >= 0) and ends[0] >= 0 and mask.max(initial=0) <= 1)


def save_rows(folder: Path, key: str, rows: list[TokenizedRow]) -> None:
    """Write `rows` under `key` into `folder` (whole or not at all), replacing any earlier cache file."""
    lengths = np.fromiter((len(r.input_ids) for r in rows), dtype=np.int64, count=len(rows))
    ids = np.fromiter((t for r in rows for t in r.input_ids), dtype=np.int32, count=int(lengths.sum()))
    mask = np.fromiter((m for r in rows for m in r.loss_mask), dtype=np.uint8, count=int(lengths.sum()))
    folder.mkdir(parents=True, exist_ok=True)
    with staged_file(folder / CACHE_FILE, root=folder) as fh:
        np.savez(fh, ids=ids, mask=mask, ends=np.cumsum(lengths), row_ids=np.array([r.id for r in rows]),
                 key=np.array(key))


def cached_rows(folder: Path, key: str, make: Callable[[], list[TokenizedRow]]) -> list[TokenizedRow]:
    """The rows under `key` from `folder`'s cache, else `make()`'s, cached for the next run in `folder`."""
    rows = load_rows(folder, key)
    if rows is not None:
        logger.info("reusing %d tokenized rows from %s", len(rows), folder / CACHE_FILE)
        return rows
    rows = make()
    if rows:
        save_rows(folder, key, rows)
    return rows
