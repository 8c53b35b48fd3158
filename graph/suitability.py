"""Checks of what a dataset *is*, beyond whether it exists: an evaluation benchmark, a raw corpus, the wrong
language, rows that need images, video or audio.

Each check is a pure `(candidate, context) -> list[reason]` like the verifier's others and reads only the
candidate's id, description and metadata (tags, task categories, languages, columns, and the curated-list
sections that name it).

* **benchmark** — an evaluation set must never become training data: training a draft on the prompts it is
  evaluated on inflates the very acceptance numbers datahunt reports. The one benchmark rule
  (`agents/benchmark_rule.py`, its patterns in `prompts/rules/benchmark.md`) decides and words the reason; its
  evidence is a known evaluation family in the id (HumanEval, MBPP, MATH-500, GSM8K, SWE-bench Verified/Lite,
  MT-Bench, IFEval, GPQA, AIME, …), a `benchmark`/`evaluation` tag, a listing under evaluation/benchmark
  sections or lm-eval tasks, or a description that calls it a benchmark. An eval-only set is blocked (a
  reviewer needs `--override` to train on it) and offered as a decontamination set for the manifest's
  `eval_sets`. A family with a real training split (GSM8K, MATH, APPS), or a set whose record says it is for
  training, is only flagged: train on its train split, decontaminate against its test split.
* **raw_corpus** — pretraining dumps (raw source files, web text) hold no conversations or instructions to
  regenerate answers for. Known columns without any prompt/answer-like field block; a record that only says
  "pre-training corpus" (or is listed under pretraining corpora) is flagged.
* **language_mismatch** — a dataset whose stated languages exclude the target's (a Chinese-only set for an
  English target) blocks; one that merely looks like it from its id or description is flagged.
* **multimodal** — image, video or speech data (an LLaVA-style instruction set, a video chat set, an ASR corpus)
  is no training data for a text target's draft: its turns refer to pixels or sound the draft never sees. A
  modality tag or a listing under multimodal/vision/speech sections blocks; an id word, a description phrase or
  the documentation of a media library (`prompts/sources/media_libraries.md`: diffusers, LeRobot, the audio course)
  naming it alone is flagged.
* **draft_recipe** — a note, never a flag: a speculative-decoding draft-training recipe
  (`prompts/sources/draft_recipes.md`) already trains on the set, so a draft trainer has put it into a real mix.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from agents.benchmark_rule import benchmark_rule
from agents.dataset_kind import multimodal_evidence, raw_corpus_evidence
from core.candidates import Candidate
from core.types import Reason, ReasonCode

if TYPE_CHECKING:
    from graph.verifier import VerifyContext


def _reason(code: ReasonCode, detail: str, *, blocking: bool) -> Reason:
    return Reason(code=code.value, detail=detail, blocking=blocking)


# ---- benchmarks ----------------------------------------------------------------------------------------------


def check_benchmark(candidate: Candidate, context: VerifyContext) -> list[Reason]:
    """Block an evaluation-only set (offered as an eval set instead); flag a benchmark with a training split."""
    found = benchmark_rule().judge(candidate).reason()
    return [] if found is None else [found]


# ---- raw corpora ---------------------------------------------------------------------------------------------


def check_raw_corpus(candidate: Candidate, context: VerifyContext) -> list[Reason]:
    """Block known columns with only raw text; flag a record that describes itself as a pretraining corpus."""
    found = raw_corpus_evidence(candidate)
    if found is None:
        return []
    why, certain = found
    if certain:
        return [_reason(ReasonCode.RAW_CORPUS, f"raw corpus: {why}", blocking=True)]
    detail = f"looks like a raw corpus ({why}): no conversations or instructions to regenerate answers for"
    return [_reason(ReasonCode.RAW_CORPUS, detail, blocking=False)]


# ---- modality ------------------------------------------------------------------------------------------------


def check_multimodal(candidate: Candidate, context: VerifyContext) -> list[Reason]:
    """Block a set whose rows need images, video or audio by its tags or listing; flag one that only looks so."""
    found = multimodal_evidence(candidate)
    if found is None:
        return []
    why, certain = found
    detail = f"rows need images, video or audio ({why}): a text target's draft cannot learn from them"
    return [_reason(ReasonCode.MULTIMODAL, detail if certain else "looks multimodal: " + detail, blocking=certain)]


# ---- draft-training recipes -----------------------------------------------------------------------------------


def check_draft_recipe(candidate: Candidate, context: VerifyContext) -> list[Reason]:
    """Note (never block or flag) that a draft-training recipe already trains on the set: a quality signal."""
    recipes = candidate.metadata.draft_recipes
    if not recipes:
        return []
    detail = f"a speculative-decoding draft-training recipe already trains on it ({', '.join(recipes)})"
    return [_reason(ReasonCode.DRAFT_RECIPE, detail, blocking=False)]


# ---- language ------------------------------------------------------------------------------------------------

LANGUAGE_NAMES = {
    "en": "English", "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "ru": "Russian", "ar": "Arabic",
    "fr": "French", "de": "German", "es": "Spanish", "it": "Italian", "pt": "Portuguese", "tr": "Turkish",
    "vi": "Vietnamese", "id": "Indonesian", "pl": "Polish", "nl": "Dutch", "hi": "Hindi", "th": "Thai",
}
_NAME_WORDS = {name.lower(): code for code, name in LANGUAGE_NAMES.items()}
_TABLE_LANG = re.compile(r"\|\s*(EN|ZH|CN)(\s*&\s*(EN|ZH|CN|PL))?\s*\|")  # curated tables: `| ZH |`, `| EN & ZH |`
_MULTI = {"multilingual", "multi", "mul"}
# Language codes a name spells as a word of its own (`train_1M_CN`, `dolly-15k-cn`, `logiqa-zh`); other two-letter
# words (`ar`, `de`, `es`, `it`) are too often something else in a dataset name.
_NAME_CODES = {"cn": "zh", "zh": "zh"}
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def stated_languages(candidate: Candidate) -> set[str]:
    """Return the natural languages the metadata states as codes, e.g. {"zh"} ("multi" for multilingual).

    Values are free text as well as codes (`en`, `English`, `Chinese, code`, `zh-CN`); words naming no
    natural language (`code`, `Python`) are ignored, so a code-only set states no language at all.
    """
    codes: set[str] = set()
    for value in candidate.metadata.languages:
        text = value.strip().lower()
        if re.fullmatch(r"[a-z]{2}([-_][a-z]{2,4})?", text):  # a code: `en`, `zh-cn`
            codes.add("zh" if text[:2] == "cn" else text[:2])
            continue
        for word in re.split(r"[^a-z]+", text):
            if word in _NAME_WORDS:
                codes.add(_NAME_WORDS[word])
            elif word in _MULTI:
                codes.add("multi")
    return codes


def inferred_languages(candidate: Candidate) -> tuple[set[str], str]:
    """Return the languages the id or description suggest, and why; empty when there is no clue."""
    words = re.split(r"[^a-z]+", candidate.hub_id.split("/", 1)[-1].lower())
    named = {_NAME_WORDS.get(w) or _NAME_CODES[w] for w in words if w in _NAME_WORDS or w in _NAME_CODES}
    if named:
        return named, "its name"
    table = _TABLE_LANG.search(candidate.description)
    if table:
        codes = {"zh" if c == "CN" else c.lower() for c in (table.group(1), table.group(3)) if c and c != "PL"}
        return codes, f"its listing says {table.group(0).strip()}"
    text = candidate.description
    if len(text) >= 20 and len(_CJK.findall(text)) > 0.3 * len(text.replace(" ", "")):
        return {"zh"}, "its description is written in CJK script"
    return set(), ""


def check_language(candidate: Candidate, context: VerifyContext) -> list[Reason]:
    """Block a dataset whose stated languages exclude the target's; flag one whose id or listing suggests it."""
    target = context.target_language.lower()
    target_name = LANGUAGE_NAMES.get(target, target)
    stated = stated_languages(candidate)
    if stated:
        if target in stated or "multi" in stated:
            return []
        langs = ", ".join(sorted(stated))
        detail = f"languages {langs}, not the target's {target_name}"
        return [_reason(ReasonCode.LANGUAGE_MISMATCH, detail, blocking=True)]
    inferred, why = inferred_languages(candidate)
    if not inferred or target in inferred:
        return []
    names = ", ".join(LANGUAGE_NAMES.get(code, code) for code in sorted(inferred))
    detail = f"looks {names}-only ({why}), not the target's {target_name}"
    return [_reason(ReasonCode.LANGUAGE_MISMATCH, detail, blocking=False)]
