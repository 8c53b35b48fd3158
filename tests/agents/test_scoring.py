"""The deterministic scorer and the format guesser."""

from __future__ import annotations

import pytest

from agents import scoring
from agents.categories import load_category
from agents.planning import plan_queries_deterministic
from agents.scoring import OFF_TOPIC_BELOW, guess_format, keyword_evidence, score_candidate
from core.candidates import Candidate, DatasetMetadata, Evidence
from core.types import Category


def candidate(hub_id: str, description: str = "", searches: int = 1, **meta: object) -> Candidate:
    evidence = [Evidence(backend="offline", query=f"q{i}", rank=1, score=1.0) for i in range(searches)]
    return Candidate(
        hub_id=hub_id,
        description=description,
        categories=[Category.MATH],
        metadata=DatasetMetadata(**meta),
        evidence=evidence,
    )


def test_keywords_in_the_id_score_above_the_description_and_unrelated_is_off_topic() -> None:
    math = load_category(Category.MATH)
    in_id, _ = score_candidate(candidate("org/math-word-problems"), math)
    in_text, _ = score_candidate(candidate("org/set-17", "a few math questions"), math)
    unrelated, reason = score_candidate(candidate("org/cat-pictures", "photos of cats", searches=6), math)
    assert 1.0 >= in_id > in_text > OFF_TOPIC_BELOW > unrelated == 0.0
    assert reason == "no math keyword in id, tags or description"


def test_more_evidence_raises_the_score_and_the_reason_says_why() -> None:
    chat = load_category(Category.GENERAL_CHAT)
    once, _ = score_candidate(candidate("org/ultrachat-200k", tags=["conversational"]), chat)
    often, reason = score_candidate(
        candidate("org/ultrachat-200k", searches=4, tags=["conversational"]), chat
    )
    assert often > once
    assert "id matches ultrachat" in reason and "found by 4 search(es)" in reason


@pytest.mark.parametrize(
    ("hub_id", "description", "meta", "expected"),
    [
        ("a/b", "", {"features": ["messages"]}, "openai_messages"),
        ("a/b", "", {"features": ["conversations", "id"]}, "sharegpt"),
        ("a/b", "", {"features": ["instruction", "input", "output"]}, "alpaca"),
        ("a/b", "", {"features": ["question", "answer"]}, "qa"),
        ("a/b", "", {"features": ["chosen", "rejected", "prompt"]}, "preference"),
        ("a/b", "", {"features": ["old_contents", "new_contents", "message"]}, "commits"),
        ("a/b", "", {"tags": ["agent-traces", "format:agent-traces"]}, "trajectories"),
        ("a/xlam-function-calling-60k", "", {}, "tool_calls"),
        ("a/ShareGPT_Vicuna_unfiltered", "", {}, "sharegpt"),
        ("a/commit-chronicle", "commits with diffs and messages", {}, "commits"),
        ("a/mystery", "", {}, None),
    ],
)
def test_formats_are_guessed_from_columns_then_tags_then_text(
    hub_id: str, description: str, meta: dict, expected: str | None
) -> None:
    assert guess_format(candidate(hub_id, description, **meta)) == expected


@pytest.mark.parametrize("category", list(Category))
def test_the_deterministic_planner_starts_with_seeds_and_fills_up_to_the_cap(category: Category) -> None:
    definition = load_category(category)
    queries = plan_queries_deterministic(definition, 8)
    assert queries[: len(definition.seed_queries)] == definition.seed_queries
    assert len(queries) == 8 and len({q.lower() for q in queries}) == 8
    assert plan_queries_deterministic(definition, 2) == definition.seed_queries[:2]


def test_the_filtered_hub_query_is_planned_only_when_a_hub_backend_will_apply_it() -> None:
    definition = load_category(Category.MATH)
    with_hub = plan_queries_deterministic(definition, 8)
    without = plan_queries_deterministic(definition, 8, hub_filters=False)
    filtered = f"{definition.seed_queries[0]} {definition.hub_task_filters[0]}"
    assert filtered in with_hub and filtered not in without
    assert len(without) == 8


def test_meaning_lifts_an_issue_to_patch_set_that_never_says_bug() -> None:
    from agents.semantic import CategorySimilarity

    bugs = load_category(Category.BUG_FIXING)
    issues = Candidate(hub_id="org/gh-resolutions", categories=[Category.BUG_FIXING],
                       description="GitHub issues paired with the code change that resolved them, with unit tests.")
    recipes = Candidate(hub_id="org/dinner", categories=[Category.BUG_FIXING],
                        description="Recipes for dinner with ingredients and cooking times.")
    similarity = CategorySimilarity.default()
    assert similarity.enabled
    sims = similarity.similarities(bugs, [issues, recipes])
    keywords_only, _ = score_candidate(issues, bugs)
    with_meaning, reason = score_candidate(issues, bugs, sims[issues.hub_id])
    unrelated, _ = score_candidate(recipes, bugs, sims[recipes.hub_id])
    assert sims[issues.hub_id] > sims[recipes.hub_id]
    assert with_meaning > keywords_only and with_meaning > OFF_TOPIC_BELOW > unrelated
    assert "reads like the category" in reason


def test_an_eval_only_benchmark_ranks_below_the_same_record_as_training_data() -> None:
    bugs = load_category(Category.BUG_FIXING)
    bench, reason = score_candidate(candidate("org/bugfix-bench", "A benchmark of real bug fixes."), bugs)
    train, _ = score_candidate(candidate("org/bugfix-pairs", "Real bug fixes for training."), bugs)
    assert 0 < bench < train
    assert "evaluation benchmark" in reason


def test_a_raw_corpus_ranks_below_the_same_topic_as_instruction_data() -> None:
    math = load_category(Category.MATH)
    dump, reason = score_candidate(candidate("org/math-web-text", sections=["Pre-training Corpora > Math"]), math)
    pairs, _ = score_candidate(candidate("org/math-word-problems"), math)
    assert 0 < dump < pairs
    assert "raw corpus" in reason


def test_a_neighbouring_categorys_stronger_keywords_sink_a_look_alike_but_do_not_drop_it() -> None:
    explanation = load_category(Category.CODE_EXPLANATION)
    review_set = candidate("org/code-review-comments", "Review comments on diffs, with code summarization notes.")
    rival = ("code_review", keyword_evidence(review_set, load_category(Category.CODE_REVIEW)))
    alone, _ = score_candidate(review_set, explanation)
    contrasted, reason = score_candidate(review_set, explanation, rival=rival)
    assert 0 < contrasted < alone and "code_review's keywords fit it better" in reason
    # A rival that fits no better than this category's own keywords changes nothing.
    explainer = candidate("org/code-explanation-docstring", "Functions and their docstrings.")
    weaker = ("code_review", keyword_evidence(explainer, load_category(Category.CODE_REVIEW)))
    assert score_candidate(explainer, explanation, rival=weaker) == score_candidate(explainer, explanation)


def test_the_contrast_spares_a_dataset_that_fits_both_categories_strongly() -> None:
    bugs = load_category(Category.BUG_FIXING)
    agents = load_category(Category.AGENTIC_TRAJECTORIES)
    # An SWE agent trajectory set: a bug-fixing keyword in its id, and agent-trajectory keywords fitting better.
    swe = candidate("org/swe-agent-trajectories", "Agent trajectories of an SWE agent resolving GitHub issues.")
    rival = ("agentic_trajectories", keyword_evidence(swe, agents))
    assert keyword_evidence(swe, bugs) >= scoring.CONTRAST_SPARED_AT and rival[1] > keyword_evidence(swe, bugs)
    assert score_candidate(swe, bugs, rival=rival) == score_candidate(swe, bugs)
    # With weak evidence of its own (a description mention only) the same rival still pushes it down.
    weak = candidate("org/agent-runs", "Agent trajectories of a coding agent; each run fixes a bug.")
    weak_rival = ("agentic_trajectories", keyword_evidence(weak, agents))
    assert 0 < keyword_evidence(weak, bugs) < scoring.CONTRAST_SPARED_AT
    contrasted, reason = score_candidate(weak, bugs, rival=weak_rival)
    assert 0 < contrasted < score_candidate(weak, bugs)[0] and "keywords fit it better" in reason


def test_a_word_meets_its_inflections_so_an_issues_set_matches_the_issue_keyword() -> None:
    from agents.search.terms import light_stem

    pairs = [("issue", "issues"), ("resolve", "resolved"), ("code", "coding"), ("instruction", "instruct"),
             ("patch", "patches"), ("trace", "traces"), ("review", "reviews"), ("call", "calling")]
    for word, inflected in pairs:
        assert light_stem(word) == light_stem(inflected), (word, inflected)
    assert light_stem("class") == light_stem("classes") == "class"
    bugs = load_category(Category.BUG_FIXING)
    assert keyword_evidence(candidate("org/set-1", "GitHub issues and the pull requests that resolved them"), bugs) > 0
    code = load_category(Category.CODE_EXPLANATION)
    assert "code instruction" in score_candidate(candidate("org/OpenCodeInstruct"), code)[1]


def test_a_see_also_pointer_to_a_sibling_is_no_evidence_unless_it_names_this_dataset() -> None:
    from agents.scoring import own_description

    reasoning = load_category(Category.REASONING)
    text = "Instruction following mixture. See also Org-Think-7B for the reasoning variant."
    pointer = candidate("org/Org-Instruct", text)
    assert own_description(pointer) == "Instruction following mixture. "
    assert score_candidate(pointer, reasoning)[0] == 0.0
    sibling = candidate("org/Org-Think-7B", text)  # the sibling's record copies the text that points at it
    assert own_description(sibling) == text
    assert "reasoning" in score_candidate(sibling, reasoning)[1]


def test_a_set_that_never_says_code_ranks_below_code_data_in_a_code_category() -> None:
    """openai/summarization reads like code explanation's anchors ("summaries") and comes in through its Hub
    task filter, but nothing in its record says code: it keeps OUT_OF_DOMAIN_DISCOUNT and the reason says why."""
    definition = load_category(Category.CODE_EXPLANATION)
    news = candidate("openai/summarization", "MediaSum 2021-3 | EN | Paper | Github | Dataset")  # link cells only
    code = candidate("someone/summaries", "Function summaries of Python repositories")
    assert not scoring.in_domain(news, definition) and scoring.in_domain(code, definition)
    for hub_id in ("sahil2801/CodeAlpaca-20k", "ise-uiuc/Magicoder-OSS-Instruct-75K", "princeton-nlp/SWE-bench"):
        assert scoring.in_domain(candidate(hub_id), definition), hub_id  # the domain word inside the id's words
    assert scoring.in_domain(candidate("x/y", tags=["code"]), definition)
    inside, _ = score_candidate(code, definition, similarity=0.5)
    outside, reason = score_candidate(candidate("someone/summaries", "summaries of news articles"), definition,
                                      similarity=0.5)
    assert outside == pytest.approx(inside * scoring.OUT_OF_DOMAIN_DISCOUNT, abs=0.002)
    assert "nothing in its id, tags or description says code: ranked below code data" in reason
    chat = load_category(Category.GENERAL_CHAT)  # no domain terms: no check
    assert chat.domain_terms == [] and scoring.in_domain(news, chat)


def test_no_kept_code_dataset_of_the_judged_set_is_out_of_the_code_domain() -> None:
    """The domain check must not sink what a careful engineer keeps: every kept judgment of the five code
    categories names code somewhere in its snapshot record (id, tags or description)."""
    import json
    from pathlib import Path

    from agents.search.offline import OfflineIndex

    judged = json.loads((Path(__file__).parents[1] / "data" / "index_judgments.json").read_text())["judgements"]
    records = {r["id"]: r for r in OfflineIndex.default().records()}
    codes = [c for c in Category if load_category(c).domain_terms]
    assert {c.value for c in codes} == {"code_review", "bug_fixing", "code_explanation", "commit_messages",
                                        "pull_requests"}
    for category in codes:
        definition = load_category(category)
        for hub_id in judged[category.value]:
            record = records[hub_id]
            kept = candidate(hub_id, record.get("description") or "", tags=record.get("tags") or [],
                             task_categories=record.get("task_categories") or [])
            assert scoring.in_domain(kept, definition), (category.value, hub_id)


def test_a_code_or_math_set_ranks_below_general_sets_in_general_chat() -> None:
    """A code-instruction set whose id says "alpaca" and a function-calling set are served by their own
    categories: in general chat they keep SPECIALISED_DISCOUNT. Only the id and tags are read, since a general
    chat set's description may well say it covers coding questions too."""
    chat = load_category(Category.GENERAL_CHAT)
    code = candidate("iamtarun/code_instructions_120k_alpaca", "code instructions in alpaca format")
    general = candidate("someone/easy_instructions_120k_alpaca", "code instructions in alpaca format")
    assert scoring.specialised_term(code, chat) == "code" and scoring.specialised_term(general, chat) is None
    assert scoring.specialised_term(candidate("m-a-p/CodeFeedback-Filtered-Instruction"), chat) == "code"
    assert scoring.specialised_term(candidate("TIGER-Lab/MathInstruct"), chat) == "math"
    assert scoring.specialised_term(candidate("glaiveai/glaive-function-calling-v2"), chat) == "function calling"
    assert scoring.specialised_term(candidate("x/multi-turn", tags=["code"]), chat) == "code"
    assert scoring.specialised_term(candidate("x/chat", "helps with coding and math homework"), chat) is None
    specialised, reason = score_candidate(code, chat, similarity=0.4)
    plain, _ = score_candidate(general, chat, similarity=0.4)
    assert specialised == pytest.approx(plain * scoring.SPECIALISED_DISCOUNT, abs=0.002)
    assert "its id or tags say code: a specialised set, ranked below general ones" in reason
    math = load_category(Category.MATH)  # no specialised terms: no check
    assert math.specialised_terms == [] and scoring.specialised_term(code, math) is None


@pytest.mark.parametrize(("category", "caught"), [(Category.GENERAL_CHAT, 30), (Category.CODE_EXPLANATION, 25)])
def test_no_kept_dataset_of_the_judged_set_is_specialised(category: Category, caught: int) -> None:
    """The specialised-domain check must not sink a kept set, and it does catch what the judged set keeps out:
    code, math and tool sets in general chat (40 of 124 at the time of writing), review, commit and repair sets
    in code explanation (34 of 125)."""
    import json
    from pathlib import Path

    from agents.search.offline import OfflineIndex

    data = json.loads((Path(__file__).parents[1] / "data" / "index_judgments.json").read_text())
    records = {r["id"]: r for r in OfflineIndex.default().records()}
    definition = load_category(category)

    def specialised(hub_id: str) -> bool:
        record = records[hub_id]
        found = candidate(hub_id, record.get("description") or "", tags=record.get("tags") or [],
                          task_categories=record.get("task_categories") or [])
        return scoring.specialised_term(found, definition) is not None

    assert not [h for h in data["judgements"][category.value] if specialised(h)]
    assert sum(specialised(h) for h in data["not_relevant"][category.value]) >= caught


def test_a_name_made_only_of_category_words_counts_beyond_its_keywords() -> None:
    """tatsu-lab/alpaca's record is one line that reads like no chat anchor; its name is the category's word and
    nothing else, which a name that merely contains the word (inside "ChatGPT", beside "Jailbreak") is not."""
    assert scoring.name_purity(candidate("tatsu-lab/alpaca"), ["alpaca"]) == 1.0
    assert scoring.name_purity(candidate("HuggingFaceH4/ultrachat_200k"), ["ultrachat"]) == 1.0  # a size aside
    assert scoring.name_purity(candidate("OpenAssistant/oasst1"), ["oasst"]) == 1.0  # a version aside
    assert scoring.name_purity(candidate("allenai/WildChat-4.8M"), ["chat", "wildchat"]) == 1.0
    assert scoring.name_purity(candidate("sahil2801/CodeAlpaca-20k"), ["code alpaca"]) == 1.0  # glued keyword
    assert scoring.name_purity(candidate("yahma/alpaca-cleaned"), ["alpaca"]) == 0.5
    assert scoring.name_purity(candidate("rubend18/ChatGPT-Jailbreak-Prompts"), ["chat"]) == 0.0
    assert scoring.name_purity(candidate("tatsu-lab/alpaca"), []) == 0.0
    chat = load_category(Category.GENERAL_CHAT)
    pure, reason = score_candidate(candidate("tatsu-lab/alpaca", "alpaca: MT | general instruct"), chat)
    mixed, _ = score_candidate(candidate("yahma/alpaca-cleaned", "alpaca: MT | general instruct"), chat)
    assert pure > mixed and "its name is only category words" in reason


def test_a_word_the_name_negates_is_no_keyword_evidence() -> None:
    """`CodeX-7M-Non-Thinking` holds direct solutions, its sibling `CodeX-2M-Thinking` the reasoning traces: only the
    sibling's "thinking" is reasoning evidence, in the id and where a description repeats the name."""
    reasoning = load_category(Category.REASONING)
    text = "CodeX-7M-Non-Thinking (Feb 2026): Large-scale curated coding dataset with direct solutions."
    negated, reason = score_candidate(candidate("Modotte/CodeX-7M-Non-Thinking", text), reasoning)
    affirmed, _ = score_candidate(candidate("Modotte/CodeX-2M-Thinking", "coding solutions"), reasoning)
    assert negated == 0.0 and "no reasoning keyword" in reason and affirmed > OFF_TOPIC_BELOW
    without, _ = score_candidate(candidate("org/math-answers", "answers without reasoning traces"), reasoning)
    assert without == 0.0
    assert scoring._affirmed_stems("Nonsense-nonogram-thinking") >= {"nonogram", "think"}  # words starting with non


def test_only_gsm8k_itself_carries_the_families_training_split() -> None:
    """GSM8K has a train split; a re-labelled test set and a tiny eval subset named after it have none, so they
    are evaluation only (they were accepted with a "train on its train split" flag) unless they say training."""
    from agents.benchmark_rule import benchmark_rule

    def is_eval_only(c: Candidate) -> bool:
        return benchmark_rule().judge(c).eval_only

    assert not is_eval_only(candidate("openai/gsm8k", "Grade school math word problems"))
    assert is_eval_only(candidate("madrylab/gsm8k-platinum", "GSM8k Platinum: a revised test set"))
    assert is_eval_only(candidate("tinyBenchmarks/tinyGSM8k", "evaluating LLMs with fewer examples"))
    assert not is_eval_only(candidate("someone/gsm8k-train-augmented", "GSM8K train questions, rephrased"))


def test_a_set_merely_named_math_is_no_member_of_the_math_benchmark_family() -> None:
    """camel-ai/math (CAMEL's synthetic problems) was flagged "MATH has a training split: its test split is offered
    as an eval set"; the MATH benchmark's own copies keep the family."""
    from agents.benchmark_rule import benchmark_rule

    training_split_family = benchmark_rule().training_split_family
    assert benchmark_rule().judge(
        candidate("camel-ai/math", "camel: camel-ai/chemistry | camel-ai | 760620")
    ).evidence == ()
    assert training_split_family("camel-ai/math") is None
    assert training_split_family("EleutherAI/hendrycks_math") == "MATH"
    assert training_split_family("DigitalLearningGmbH/MATH-lighteval") == "MATH"


def test_a_record_that_says_evaluation_only_is_a_benchmark_even_when_a_list_files_it_under_training() -> None:
    from agents.benchmark_rule import benchmark_rule

    def is_eval_only(c: Candidate) -> bool:
        return benchmark_rule().judge(c).eval_only

    sections = ["Awesome Datasets for LLM Training > General Open Access Datasets", "Evaluation Datasets > Long Text"]
    longbench = candidate("THUDM/LongBench", "LongBench: Evaluation Only | A benchmark for long context.",
                          sections=sections)
    assert is_eval_only(longbench)
    listed = candidate("org/long-chats", "Long multi-turn conversations.", sections=sections[:1])
    assert not is_eval_only(listed)
    assert not is_eval_only(candidate("org/eval-only-prompts-train", "Evaluation only prompts, rewritten"))
