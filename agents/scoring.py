"""The deterministic scorer: how relevant a candidate is to its category, and what format its rows are in.

Relevance combines keyword evidence with meaning. Keywords: one in the dataset's id counts most, one in its
tags or task categories next, one in its description least. Meaning: the candidate's embedding similarity to
the category's anchors (description and exemplars, `agents/semantic.py`), which counts from
`SEMANTIC_FLOOR` (unrelated text sits below it) up to a full keyword's worth at `SEMANTIC_FULL`, so an
issue-to-patch set is bug fixing even when it never says "bug". Being found by several queries or backends
adds a little, but never lifts a candidate with no evidence at all. The sum is squashed into [0, 1] with a
one-line reason. An evaluation-only benchmark keeps the benchmark rule's `relevance_discount` of its relevance
(`agents/benchmark_rule.py`), a raw corpus (`agents/dataset_kind.py`) `RAW_CORPUS_DISCOUNT`: each is still
delivered (the verifier offers a benchmark as an eval set and flags a corpus) but ranks below training data; a
set whose rows need images, video or audio keeps `MULTIMODAL_DISCOUNT`. Keyword evidence is contrastive too:
when another category's keywords fit the candidate better than this one's (a code-review set that also
mentions summaries), its relevance keeps exp(-`KEYWORD_CONTRAST` × the difference × how weak its own keyword
evidence is), so look-alikes from a neighbouring category sink without being dropped, while a dataset that
fits this category strongly too (a keyword in its id) is spared: the judged set is multi-label, an SWE
trajectory set is bug fixing as well. The verifier rejects candidates below `OFF_TOPIC_BELOW` as off-topic.
`guess_format` names the row layout (sharegpt, openai_messages, alpaca, …) from features, tags and
description.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

from agents.benchmark_rule import PENALTY_REASON, benchmark_rule
from agents.categories import CategoryDefinition
from agents.dataset_kind import multimodal_evidence, raw_corpus_evidence
from agents.search.terms import light_stem, split_terms
from core.candidates import Candidate

# The one off-topic threshold (graph/verifier.py applies it). On the judged set (tests/data/index_judgments.json)
# 0.3 would reject one more kept dataset (a tool-use SFT set at 0.27) to catch seven more not-relevant ones that
# reach the reviewer anyway; a rejection blocks, so the lower one stays.
OFF_TOPIC_BELOW: float = 0.25
ID_WEIGHT = 1.0
TAG_WEIGHT = 0.6
TEXT_WEIGHT = 0.35
EVIDENCE_WEIGHT = 0.08
EVIDENCE_CAP = 5
SEMANTIC_FLOOR = 0.25  # cosine to the nearest anchor below which the meaning adds nothing
SEMANTIC_FULL = 0.55  # cosine at which the meaning counts SEMANTIC_WEIGHT
SEMANTIC_WEIGHT = 1.2
# A raw corpus ranks as low as an eval-only benchmark (the benchmark rule's `relevance_discount`): both are
# delivered for the reviewer but hold no conversations to train on.
RAW_CORPUS_DISCOUNT = 0.8
# A set whose rows need images, video or audio: a text target's draft cannot learn from them, so it ranks below
# every text set with comparable evidence (dev half: 0.6 and 0.8 recall alike, 0.6 a little more precisely).
MULTIMODAL_DISCOUNT = 0.6
KEYWORD_CONTRAST = 0.2  # per unit of keyword evidence by which another category fits better
# Own keyword evidence at which the contrast no longer applies: one keyword in the id (or two in the tags). A
# dataset kept for two categories (an SWE agent trajectory set: bug fixing *and* agent trajectories) fits both
# strongly and is spared; one with little evidence of its own is pushed down in full. Chosen on the dev half.
CONTRAST_SPARED_AT = ID_WEIGHT
# A candidate with none of the category's domain terms (`## Domain terms`: code words for the code categories)
# in its id, tags or description: a news summarization set reads like code explanation's anchors ("summaries")
# and is found by its Hub task filter, but nothing says it holds code. It keeps this share of its relevance.
OUT_OF_DOMAIN_DISCOUNT = 0.6
# A dataset whose name is made of the category's keywords and nothing else (`tatsu-lab/alpaca`,
# `HuggingFaceH4/ultrachat_200k`, `lmsys/lmsys-chat-1m`) is named for what the category is about: its name adds
# this much times the share of its words that are keywords. Such sets are often the originals a family is named
# after, with one-line records that read like nothing (`alpaca: MT | general instruct | text-davinci-003` is
# closer to code review's anchors than to chat's), so meaning alone never lifts them.
PURE_NAME_WEIGHT = 0.3
# The reverse, for a general category (`## Specialised terms`: code, math, tool calling for general chat): a set
# whose id or tags name a specialised domain (a code-instruction set that says "alpaca", a function-calling set full
# of conversations) is served by that domain's category and keeps this share of its relevance here: the value
# above, not tuned.
SPECIALISED_DISCOUNT = OUT_OF_DOMAIN_DISCOUNT


@lru_cache(maxsize=65_536)
def _stems(text: str) -> frozenset[str]:
    # Cached: every candidate of a category is scored against the same keywords, and ids/tags repeat across
    # categories, so most calls are repeats (this was most of a subagent's CPU time).
    return frozenset(light_stem(term) for term in split_terms(text))


def semantic_evidence(similarity: float | None) -> float:
    """Return what a cosine similarity to the category's anchors adds to the raw score (0 when unknown)."""
    if similarity is None:
        return 0.0
    share = (similarity - SEMANTIC_FLOOR) / (SEMANTIC_FULL - SEMANTIC_FLOOR)
    return SEMANTIC_WEIGHT * min(1.0, max(0.0, share))


# "See also X for the reasoning variant": a curated list's pointer to a sibling dataset. Its words describe the
# sibling, so they are no evidence about this one, unless the clause names this very dataset (a sibling's record
# copies the description that points at it).
_SEE_ALSO = re.compile(r"\bsee also\b[^.]*\.?", re.IGNORECASE)


def own_description(candidate: Candidate) -> str:
    """Return the candidate's description without "see also" clauses that point at another dataset."""
    name = candidate.hub_id.split("/", 1)[-1].lower()
    return _SEE_ALSO.sub(lambda m: m.group(0) if name in m.group(0).lower() else "", candidate.description)


# A word the name negates ("CodeX-7M-Non-Thinking": answers without reasoning traces) is no keyword evidence, in
# the id or in a description that repeats the name or says "without reasoning".
_NEGATED = re.compile(r"(?:^|(?<=[-_. ]))(?:non|no|without)[-_. ]+[A-Za-z]+", re.IGNORECASE)


@lru_cache(maxsize=65_536)
def _affirmed_stems(text: str) -> frozenset[str]:
    """`_stems` of `text` without the words it negates (`Non-Thinking`, `no_train`, `without-passage`); cached like
    `_stems` (each id and description is read once per category)."""
    return _stems(_NEGATED.sub(" ", text))


def _keyword_matches(candidate: Candidate, definition: CategoryDefinition) -> tuple[list[str], list[str], list[str]]:
    """Return the category's keywords found in the candidate's id, else its tags, else its description."""
    keywords = [(k, _stems(k)) for k in definition.keywords if _stems(k)]
    meta = candidate.metadata
    id_stems = _affirmed_stems(candidate.hub_id.split("/", 1)[-1])
    tag_stems = _stems(" ".join([*meta.tags, *meta.task_categories]))
    text_stems = _affirmed_stems(f"{candidate.title} {own_description(candidate)}")
    in_id = [k for k, stems in keywords if stems <= id_stems]
    in_tags = [k for k, stems in keywords if stems <= tag_stems and k not in in_id]
    in_text = [k for k, stems in keywords if stems <= text_stems and k not in in_id and k not in in_tags]
    return in_id, in_tags, in_text


# A curated list's table cell that is only a link's label ("MediaSum 2021-3 | EN | Paper | Github | Dataset"): it
# says where the paper or the code lives, nothing about what the rows hold.
_LINK_CELL = re.compile(r"\|\s*(?:github|paper|dataset|arxiv|hf|huggingface|website|blog|demo)\s*(?=\||$)",
                        re.IGNORECASE)


def in_domain(candidate: Candidate, definition: CategoryDefinition) -> bool:
    """Whether the candidate's id, tags, task categories or description name the category's domain (True when the
    category has no domain terms). A term also counts inside the id's words (CodeAlpaca, Magicoder, bigcode)."""
    if not definition.domain_terms:
        return True
    meta = candidate.metadata
    description = _LINK_CELL.sub("|", own_description(candidate))
    stems = _stems(f"{candidate.hub_id} {' '.join([*meta.tags, *meta.task_categories])} {candidate.title} "
                   f"{description}")
    return any(_names_term(term, stems, candidate.hub_id) for term in definition.domain_terms)


def _names_term(term: str, stems: frozenset[str], glued_in: str) -> bool:
    """Whether `term`'s stems are all among `stems`, or the term (alphabetic, 4+ letters) sits inside `glued_in`
    (an id whose words are glued: CodeAlpaca, MathInstruct)."""
    wanted = _stems(term)
    return bool(wanted and wanted <= stems) or (len(term) >= 4 and term.isalpha() and term.lower() in glued_in.lower())


def specialised_term(candidate: Candidate, definition: CategoryDefinition) -> str | None:
    """Return the first of the category's specialised terms its id or tags name (inside the id's words too:
    CodeFeedback, MathInstruct), or None. The description is not read: a general chat set's may well say it
    covers coding questions too."""
    meta = candidate.metadata
    name = candidate.hub_id.split("/", 1)[-1]
    stems = _stems(f"{name} {' '.join([*meta.tags, *meta.task_categories])}")
    return next((term for term in definition.specialised_terms if _names_term(term, stems, name)), None)


_NAME_NOISE = re.compile(r"\d+(?:\.\d+)?[kmb]?$")  # sizes and versions: `200k`, `1m`, `4.8M`, the 1 of `oasst1`


def name_purity(candidate: Candidate, in_id: list[str]) -> float:
    """Return the share of the words of the candidate's name (sizes and versions aside) that are keywords
    found in its id (`in_id`): 1.0 for `alpaca` or `ultrachat_200k`, 1/3 for `ChatGPT-Jailbreak-Prompts`."""
    if not in_id:
        return 0.0
    name = candidate.hub_id.split("/", 1)[-1].lower()
    words = [_NAME_NOISE.sub("", w) for w in re.split(r"[^a-z0-9.]+", name)]
    words = [w.strip(".") for w in words if len(w.strip(".")) > 1]
    if not words:
        return 0.0
    glued = {re.sub(r"[^a-z0-9]", "", k.lower()) for k in in_id}
    stems = {light_stem(k.lower()) for k in in_id}
    return sum(w in glued or light_stem(w) in stems for w in words) / len(words)


def keyword_evidence(candidate: Candidate, definition: CategoryDefinition) -> float:
    """Return the weighted count of `definition`'s keywords in the candidate's id, tags and description."""
    in_id, in_tags, in_text = _keyword_matches(candidate, definition)
    return ID_WEIGHT * len(in_id) + TAG_WEIGHT * len(in_tags) + TEXT_WEIGHT * len(in_text)


def kind_discounts(candidate: Candidate, definition: CategoryDefinition) -> list[tuple[float, str]]:
    """Return `(discount, reason)` for each kind of data `candidate` is that ranks below the category's own, in
    the order they apply: an evaluation benchmark or else a raw corpus, rows that need media, nothing of the
    category's domain, a specialised set. Empty for a candidate of the category's own kind."""
    discounts: list[tuple[float, str]] = []
    if benchmark_rule().judge(candidate).eval_only:
        discounts.append((benchmark_rule().relevance_discount, PENALTY_REASON))
    elif raw_corpus_evidence(candidate) is not None:
        discounts.append((RAW_CORPUS_DISCOUNT, "a raw corpus: ranked below conversation and instruction data"))
    if multimodal_evidence(candidate) is not None:
        discounts.append((MULTIMODAL_DISCOUNT, "its rows need images, video or audio: ranked below text data"))
    if not in_domain(candidate, definition):
        domain = definition.domain_terms[0]
        discounts.append((OUT_OF_DOMAIN_DISCOUNT,
                          f"nothing in its id, tags or description says {domain}: ranked below {domain} data"))
    specialised = specialised_term(candidate, definition)
    if specialised:
        discounts.append((SPECIALISED_DISCOUNT,
                          f"its id or tags say {specialised}: a specialised set, ranked below general ones"))
    return discounts


def score_candidate(
    candidate: Candidate,
    definition: CategoryDefinition,
    similarity: float | None = None,
    rival: tuple[str, float] | None = None,
) -> tuple[float, str]:
    """Return `(relevance in [0, 1], reason)` for `candidate` from `definition`'s keywords and, when given, the
    candidate's embedding `similarity` to the category's anchors and `rival`: the other category whose keywords
    fit it best, with that `keyword_evidence` (see the module text); the contrast weakens as this category's own
    keyword evidence grows and is gone at `CONTRAST_SPARED_AT`."""
    in_id, in_tags, in_text = _keyword_matches(candidate, definition)
    keywords_raw = ID_WEIGHT * len(in_id) + TAG_WEIGHT * len(in_tags) + TEXT_WEIGHT * len(in_text)
    semantic = semantic_evidence(similarity)
    purity = name_purity(candidate, in_id)
    raw = keywords_raw + semantic + PURE_NAME_WEIGHT * purity
    sources = {(e.backend, e.query) for e in candidate.evidence}
    if raw > 0:
        raw += EVIDENCE_WEIGHT * min(len(sources) - 1, EVIDENCE_CAP) if sources else 0.0
    relevance = 1.0 - math.exp(-raw)
    discounts = kind_discounts(candidate, definition) if raw > 0 else []
    for factor, _ in discounts:
        relevance *= factor
    lead = 0.0 if rival is None else rival[1] - keywords_raw
    weak = max(0.0, 1.0 - keywords_raw / CONTRAST_SPARED_AT)  # 1 with no keyword of its own, 0 once strong
    contrasted = lead > 0 and weak > 0
    if contrasted:
        relevance *= math.exp(-KEYWORD_CONTRAST * lead * weak)
    relevance = round(relevance, 3)
    if raw == 0:
        unlike = "" if similarity is None else f" and it reads unlike the category (similarity {similarity:.2f})"
        return 0.0, f"no {definition.category.value} keyword in id, tags or description{unlike}"
    parts = []
    if in_id:
        named = "; its name is only category words" if purity == 1.0 else ""
        parts.append(f"id matches {', '.join(in_id)}{named}")
    if in_tags:
        parts.append(f"tags match {', '.join(in_tags)}")
    if in_text:
        parts.append(f"description mentions {', '.join(in_text)}")
    if semantic > 0 and similarity is not None:
        parts.append(f"reads like the category (similarity {similarity:.2f})")
    parts.append(f"found by {len(sources)} search(es)")
    parts.extend(reason for _, reason in discounts)
    if contrasted and rival is not None:
        parts.append(f"{rival[0]}'s keywords fit it better (by {lead:.2f})")
    return relevance, "; ".join(parts)


# (format, words that reveal it) checked in order against column names, then tags, then id and description.
_FEATURE_FORMATS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("trajectories", ("trajectory", "trajectories", "steps", "actions")),
    ("tool_calls", ("tools", "tool_calls", "functions")),
    ("openai_messages", ("messages",)),
    ("sharegpt", ("conversations", "conversation")),
    ("commits", ("diff", "commit", "message", "old_contents", "new_contents")),
    ("preference", ("chosen", "rejected")),
    ("alpaca", ("instruction", "output")),
    ("qa", ("question", "answer", "problem", "solution")),
    ("code", ("code", "content", "func_code_string")),
)
_TEXT_FORMATS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "trajectories",
        ("trajectory", "trajectories", "agent-traces", "agent traces", "openhands", "swe-agent"),
    ),
    ("tool_calls", ("function calling", "function-calling", "tool calling", "tool-calling", "tool use")),
    ("sharegpt", ("sharegpt",)),
    ("commits", ("commit", "diffs")),
    ("preference", ("preference", "dpo", "rlhf")),
    ("openai_messages", ("multi-turn", "multiturn", "conversation", "dialogue", "chat")),
    ("alpaca", ("alpaca", "instruction")),
    ("qa", ("question", "answer", "problems", "solutions", "word problems")),
    ("code", ("source code", "code")),
)


def guess_format(candidate: Candidate) -> str | None:
    """Return the likely row format of `candidate` (e.g. `sharegpt`, `alpaca`, `qa`), or None if no clue."""
    features = {f.lower() for f in candidate.metadata.features or []}
    if features:
        for name, words in _FEATURE_FORMATS:
            if name == "alpaca" and not {"instruction", "output"} <= features:
                continue
            if any(word in features for word in words):
                return name
    tag_text = " ".join([*candidate.metadata.tags, *candidate.metadata.task_categories]).lower()
    text = f"{candidate.hub_id.replace('_', '-')} {candidate.description}".lower()
    for haystack in (tag_text, text):
        for name, words in _TEXT_FORMATS:
            if any(word in haystack for word in words):
                return name
    return None
