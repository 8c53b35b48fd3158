"""Category similarity: each category's anchors are embedded once, however many subagents ask at the same time."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from agents.categories import load_category, semantic_anchors
from agents.search.embedding import default_encoder
from agents.semantic import CategorySimilarity
from core.types import Category


class CountingEncoder:
    """The real encoder, slowed a little so concurrent callers overlap, counting the texts it is asked for."""

    def __init__(self, fail_first: bool = False) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.fail_first = fail_first
        self._lock = threading.Lock()

    def encode(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            self.calls.append(tuple(texts))
            fail, self.fail_first = self.fail_first, False
        time.sleep(0.05)
        if fail:
            raise RuntimeError("encoder broke")
        return default_encoder().encode(texts)


def test_concurrent_subagents_embed_each_categorys_anchors_once() -> None:
    encoder = CountingEncoder()
    similarity = CategorySimilarity(encoder)  # type: ignore[arg-type]
    definitions = [load_category(c) for c in Category] * 4
    start = threading.Barrier(8)

    def anchors(index: int) -> np.ndarray | None:
        if index < 8:
            start.wait()
        return similarity.anchors(definitions[index])

    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(anchors, range(len(definitions))))
    assert sorted(encoder.calls) == sorted(tuple(semantic_anchors(load_category(c))) for c in Category)
    for definition, vectors in zip(definitions, got, strict=True):
        assert vectors is got[definitions.index(definition)]  # one array per category, shared
        assert vectors is not None and np.array_equal(vectors, default_encoder().encode(semantic_anchors(definition)))


def test_a_failed_anchor_encode_is_not_cached() -> None:
    encoder = CountingEncoder(fail_first=True)
    similarity = CategorySimilarity(encoder)  # type: ignore[arg-type]
    math = load_category(Category.MATH)
    with pytest.raises(RuntimeError, match="encoder broke"):
        similarity.anchors(math)
    assert similarity.anchors(math) is not None
    assert len(encoder.calls) == 2
