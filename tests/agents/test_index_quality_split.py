"""The index benchmark's dev/test split: deterministic, covers every judged id once, and scores halves fairly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.index_quality import BATCHES, load_batch, load_before, score_half, score_subset, split_of
from core.types import Category

JUDGED = json.loads((Path(__file__).parent.parent / "data" / "index_judgments.json").read_text())


def test_the_split_depends_only_on_the_id_and_cuts_the_judged_set_in_two_real_halves() -> None:
    assert split_of("Org/Set") == split_of(" org/set ")
    ids = {i for part in ("judgements", "not_relevant") for ids in JUDGED[part].values() for i in ids}
    dev = sum(split_of(i) == "dev" for i in ids)
    assert 0.35 < dev / len(ids) < 0.65
    for category in Category:
        halves = {split_of(i) for i in JUDGED["judgements"][category.value]}
        assert halves == {"dev", "test"}, category


def test_a_half_shares_the_cap_of_a_category_with_more_kept_ids_than_slots() -> None:
    dev = [f"o/d{i}" for i in range(400) if split_of(f"o/d{i}") == "dev"][:30]
    test = [f"o/t{i}" for i in range(400) if split_of(f"o/t{i}") == "test"][:10]
    keep = set(dev) | set(test)  # 40 kept, 20 slots: each half can at best fill its share
    top = dev[:10] + test[:5] + [f"o/x{i}" for i in range(5)]
    assert score_half(top, keep, "test")["recall"] == 1.0  # 5 of its share of 10 × 20/40
    assert score_half(top, keep, "dev")["recall"] == round(10 / 15, 3)
    assert score_half(dev[:20], keep, "test") == {"kept": 0, "kept_judged": 10, "recall": 0.0, "precision": 0.0}


def test_the_frozen_previous_ranking_covers_every_category() -> None:
    before = load_before()
    assert set(before) == {c.value for c in Category}
    assert all(len(top) == 20 for top in before.values())


@pytest.mark.parametrize("name", BATCHES)
def test_each_batch_is_inside_the_combined_set_and_large_enough(name: str) -> None:
    batch = JUDGED["batches"][name]
    pairs = {(c, i) for part in ("judgements", "not_relevant") for c, ids in batch[part].items() for i in ids}
    assert len(pairs) >= 150
    assert set(batch["judgements"]) == {c.value for c in Category}
    for part in ("judgements", "not_relevant"):
        for category, ids in batch[part].items():
            assert set(ids) <= set(JUDGED[part][category]), (part, category)
    relevant, rejected = load_batch(name)
    assert sum(map(len, relevant.values())) + sum(map(len, rejected.values())) == len(pairs)


def test_a_batch_is_scored_on_its_own_ids_with_the_cap_shared_in_proportion() -> None:
    old = {f"o/old{i}" for i in range(30)}
    new = {f"o/new{i}" for i in range(10)}
    keep = old | new  # 40 kept, 20 slots: the batch's share is 10 × 20/40 = 5
    rejected = {"o/bad"}
    top = [*sorted(new)[:4], "o/bad", "o/unjudged", *sorted(old)[:14]]
    scored = score_subset(top, keep, new, new | rejected)
    assert scored["recall"] == round(4 / 5, 3)
    assert scored["precision"] == round(4 / 5, 3)  # of the 5 top ids the batch judged, 4 kept
    assert score_subset(top, keep, set(), rejected)["recall"] is None  # nothing kept: no recall to speak of
    dev_only = score_subset(top, keep, new, new | rejected, "dev")
    assert dev_only["kept_judged"] == sum(split_of(i) == "dev" for i in new)


def test_the_batches_judge_no_pair_twice_and_the_seventh_labels_only_pairs_not_judged_before() -> None:
    pairs = {
        name: {(c, i) for part in ("judgements", "not_relevant") for c, ids in batch[part].items() for i in ids}
        for name, batch in JUDGED["batches"].items()
    }
    assert not pairs["pass5"] & pairs["pass7"]
    for part in ("judgements", "not_relevant"):  # the combined lists hold each id once per category
        for category, ids in JUDGED[part].items():
            assert len(ids) == len(set(ids)), (part, category)
    kept = {(c, i) for c, ids in JUDGED["judgements"].items() for i in ids}
    rejected = {(c, i) for c, ids in JUDGED["not_relevant"].items() for i in ids}
    assert not kept & rejected
    unjudged = {(e["category"], e["id"]) for e in JUDGED["batches"]["pass7"]["left_unjudged"]}
    assert unjudged and not unjudged & pairs["pass7"]
