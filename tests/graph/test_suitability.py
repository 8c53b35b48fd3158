"""What a dataset is: benchmarks are kept out of training; raw corpora, other-language and multimodal sets are
flagged."""

from __future__ import annotations

import pytest

from agents.search.offline import OfflineIndex, record_metadata
from core.candidates import Candidate, DatasetMetadata
from core.types import Category, Decision, ReasonCode
from graph.suitability import check_benchmark, check_language, check_multimodal, check_raw_corpus
from graph.verifier import VerifyContext, judge_candidate

CONTEXT = VerifyContext()


def candidate(hub_id: str, description: str = "", **metadata: object) -> Candidate:
    return Candidate(hub_id=hub_id, description=description, categories=[Category.BUG_FIXING],
                     metadata=DatasetMetadata.model_validate(metadata))


def snapshot_candidate(hub_id: str) -> Candidate:
    record = OfflineIndex.default().record(hub_id)
    assert record is not None, hub_id
    return Candidate(hub_id=record["id"], description=record["description"] or "", categories=[Category.MATH],
                     metadata=record_metadata(record))


def codes(reasons: list[dict]) -> list[tuple[str, bool]]:
    return [(r["code"], r["blocking"]) for r in reasons]


# The eval-only sets the issue found offered as plain training sources, straight from the shipped snapshot.
@pytest.mark.parametrize(
    "hub_id",
    ["princeton-nlp/SWE-bench_Verified", "HuggingFaceH4/MATH-500", "bigcode/bigcodebench",
     "ronantakizawa/codereview-bench", "devarshidev/codra-review-evals", "HuggingFaceH4/aime_2024",
     "openai/openai_humaneval", "google-research-datasets/mbpp", "lmsys/mt_bench_human_judgments",
     "Idavidrein/gpqa", "google/IFEval"],
)
def test_eval_only_benchmarks_are_blocked_and_labelled_benchmark(hub_id: str) -> None:
    if OfflineIndex.default().record(hub_id) is None:
        pytest.skip(f"{hub_id} is not in this snapshot")
    reasons = check_benchmark(snapshot_candidate(hub_id), CONTEXT)
    assert codes(reasons) == [("benchmark", True)], reasons
    assert "eval set" in reasons[0]["detail"]


@pytest.mark.parametrize("hub_id", ["openai/gsm8k", "EleutherAI/hendrycks_math", "argilla/ifeval-like-data"])
def test_benchmarks_with_a_training_split_are_flagged_not_blocked(hub_id: str) -> None:
    reasons = check_benchmark(snapshot_candidate(hub_id), CONTEXT)
    assert codes(reasons) == [("benchmark", False)], reasons
    assert "train" in reasons[0]["detail"]


@pytest.mark.parametrize(
    "hub_id",
    ["SWE-bench/SWE-smith-trajectories", "nebius/SWE-agent-trajectories", "sahil2801/CodeAlpaca-20k",
     "tatsu-lab/alpaca", "meta-math/MetaMathQA"],
)
def test_training_sets_are_not_called_benchmarks(hub_id: str) -> None:
    if OfflineIndex.default().record(hub_id) is None:
        pytest.skip(f"{hub_id} is not in this snapshot")
    assert check_benchmark(snapshot_candidate(hub_id), CONTEXT) == []


def test_tags_and_descriptions_are_evidence_too() -> None:
    tagged = candidate("org/review-cases", "Pull-request review comments.", tags=["code-review", "evaluation"])
    described = candidate("org/patches", "A benchmark of 300 real-world program repair tasks.")
    assert codes(check_benchmark(tagged, CONTEXT)) == [("benchmark", True)]
    assert codes(check_benchmark(described, CONTEXT)) == [("benchmark", True)]
    assert check_benchmark(candidate("org/patches", "Bug-fix commits deduplicated against benchmarks."), CONTEXT) == []


def test_traces_distilled_from_a_model_are_training_data_even_beside_a_benchmark() -> None:
    # A release note of chain-of-thought solutions "distilled from R1" that also announces a new benchmark.
    released = candidate("org/contest-cots", "100k solutions distilled from R1. We also release a new benchmark.")
    assert codes(check_benchmark(released, CONTEXT)) == [("benchmark", False)]
    assert codes(check_benchmark(candidate("org/contest", "A new benchmark of hard problems."), CONTEXT)) == [
        ("benchmark", True)
    ]


def test_a_blocked_benchmark_is_rejected_by_the_verifier_with_reason_benchmark() -> None:
    verified = snapshot_candidate("princeton-nlp/SWE-bench_Verified").model_copy(update={"relevance": 0.9})
    decision, reasons = judge_candidate(verified, VerifyContext(existence={verified.hub_id: "found"}))
    assert decision == Decision.REJECT
    assert [r["code"] for r in reasons if r["blocking"]] == [ReasonCode.BENCHMARK]


def test_raw_corpora_block_on_known_columns_and_flag_on_their_description() -> None:
    dump = candidate("org/code-dump", features=["content", "repo_name", "path", "license"])
    pairs = candidate("org/commits", features=["content", "message", "diff"])
    assert codes(check_raw_corpus(dump, CONTEXT)) == [("raw_corpus", True)]
    assert check_raw_corpus(pairs, CONTEXT) == []
    assert codes(check_raw_corpus(snapshot_candidate("bigcode/the-stack"), CONTEXT)) == [("raw_corpus", False)]
    chat = candidate("org/chat", "Instruction conversations distilled from a pre-training corpus.")
    assert check_raw_corpus(chat, CONTEXT) == []
    book = snapshot_candidate("transformersbook/codeparrot")  # "CodeParrot Python code corpus used in ..."
    assert codes(check_raw_corpus(book, CONTEXT)) == [("raw_corpus", False)]


def test_language_mismatch_blocks_stated_languages_and_flags_hints() -> None:
    chinese = candidate("org/alpaca-zh", languages=["zh"])
    english = candidate("org/alpaca", languages=["English", "code"])
    mixed = candidate("org/bilingual", languages=["English Chinese"])
    code_only = candidate("org/snippets", languages=["Python", "code"])
    assert codes(check_language(chinese, CONTEXT)) == [("language_mismatch", True)]
    assert check_language(english, CONTEXT) == []
    assert check_language(mixed, CONTEXT) == []
    assert check_language(code_only, CONTEXT) == []
    hinted = candidate("org/generated_chat", "generated_chat 2023-4 | All | ZH | MC | Github")
    assert codes(check_language(hinted, CONTEXT)) == [("language_mismatch", False)]
    assert codes(check_language(candidate("org/HC3-Chinese"), CONTEXT)) == [("language_mismatch", False)]
    assert check_language(chinese, VerifyContext(target_language="zh")) == []
    for hub_id in ("BelleGroup/train_1M_CN", "jaja7744/dolly-15k-cn", "hails/agieval-logiqa-zh"):  # a code as a word
        assert codes(check_language(candidate(hub_id), CONTEXT)) == [("language_mismatch", False)], hub_id
    assert check_language(candidate("shareAI/ShareGPT-Chinese-English-90k"), CONTEXT) == []
    assert check_language(candidate("org/cnn_dailymail"), CONTEXT) == []  # `cnn` is no language code


@pytest.mark.parametrize("hub_id", ["liuhaotian/LLaVA-Instruct-150K", "OpenGVLab/VideoChat2-IT",
                                    "multimodal-reasoning-lab/Zebra-CoT", "speechcolab/gigaspeech"])
def test_image_video_and_speech_sets_of_the_snapshot_are_blocked_as_multimodal(hub_id: str) -> None:
    """Listed under multimodal or speech sections of the curated lists: certain, so blocking."""
    assert codes(check_multimodal(snapshot_candidate(hub_id), CONTEXT)) == [("multimodal", True)]


def test_multimodal_hints_flag_and_text_sets_pass() -> None:
    tagged = candidate("org/pairs", task_categories=["visual-question-answering"])
    assert codes(check_multimodal(tagged, CONTEXT)) == [("multimodal", True)]
    named = candidate("org/llava-style-mix")  # an id word alone: a hint, flagged for the reviewer
    assert codes(check_multimodal(named, CONTEXT)) == [("multimodal", False)]
    described = candidate("org/pairs", "A multimodal instruction set of image-text pairs.")
    assert codes(check_multimodal(described, CONTEXT)) == [("multimodal", False)]
    # Text sets whose words merely contain a media word, or whose description names a container image.
    for text in (candidate("org/code-review-critique-revision"), candidate("org/hatespeech_detection"),
                 candidate("org/agent-runs", "Start from the GPU image and run the training script."),
                 snapshot_candidate("HuggingFaceH4/ultrachat_200k"), snapshot_candidate("GAIR/lima")):
        assert check_multimodal(text, CONTEXT) == [], text.hub_id


def test_a_multimodal_set_ranks_below_a_text_set_with_the_same_evidence() -> None:
    from agents.categories import load_category
    from agents.scoring import MULTIMODAL_DISCOUNT, score_candidate

    definition = load_category(Category.GENERAL_CHAT)
    text = candidate("org/chat-conversations", "Multi-turn chat conversations.")
    video = text.model_copy(update={"metadata": DatasetMetadata(sections=["Multi-modal Datasets > Images + Videos"])})
    text_score, _ = score_candidate(text, definition)
    video_score, why = score_candidate(video, definition)
    assert video_score == pytest.approx(text_score * MULTIMODAL_DISCOUNT, abs=1e-3)
    assert "images, video or audio" in why


def test_a_set_a_draft_recipe_trains_on_gets_a_note_that_neither_flags_nor_blocks() -> None:
    from core.types import VerdictLabel, label_verdict
    from graph.suitability import check_draft_recipe

    used = snapshot_candidate("openai/gsm8k")  # also a benchmark with a train split: flagged for that alone
    assert codes(check_draft_recipe(used, CONTEXT)) == [("draft_recipe", False)]
    assert "SpecForge" in check_draft_recipe(used, CONTEXT)[0]["detail"]
    assert check_draft_recipe(snapshot_candidate("tatsu-lab/alpaca"), CONTEXT) == []
    _, reasons = judge_candidate(used, CONTEXT)
    assert ReasonCode.DRAFT_RECIPE in {r["code"] for r in reasons}
    note = [r for r in reasons if r["code"] == ReasonCode.DRAFT_RECIPE]
    assert label_verdict(note) is VerdictLabel.ACCEPTED  # a note alone leaves an accepted verdict accepted
