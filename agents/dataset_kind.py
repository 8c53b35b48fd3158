"""What kind of dataset a record describes: an evaluation benchmark or a raw corpus, from its id, tags, columns,
curated-list sections and description.

Training a draft on the prompts it is evaluated on inflates the very acceptance numbers datahunt reports, so
benchmarks must be told apart from training data before anything is approved. `benchmark_evidence` returns
the evidence for "this is an evaluation set" (a known evaluation family in the id such as HumanEval, MBPP,
MATH-500, GSM8K, SWE-bench Verified/Lite, MT-Bench, IFEval, GPQA, AIME; a `benchmark`/`evaluation` tag; a
listing under evaluation/benchmark sections or lm-eval tasks; a description that calls it a benchmark) and
for "it is meant for training" (a family with a real training split, a name or description saying so, traces
"distilled from" a model).
`raw_corpus_evidence` recognises pretraining dumps (raw source files, web text) that hold no conversations or
instructions, and `multimodal_evidence` sets whose rows need images, video or audio (a text target's draft
cannot train on them). The scorer ranks all three below text training data; the verifier (`graph/suitability.py`)
turns the evidence into verdicts.
"""

from __future__ import annotations

import re

from agents.models import Candidate

# (family, pattern on the lower-cased dataset name, has a real training split people train on)
EVAL_FAMILIES: tuple[tuple[str, str, bool], ...] = (
    ("HumanEval", r"human[-_]?eval", False),
    ("MBPP", r"(^|[^a-z])mbpp", False),
    ("MATH-500", r"math[-_]?500", False),
    ("AIME", r"(^|[^a-z])aime([^a-z]|$)", False),
    ("GPQA", r"gpqa", False),
    ("IFEval", r"(^|[^a-z])ifeval", False),
    ("MT-Bench", r"mt[-_]?bench", False),
    ("SWE-bench Verified/Lite/Multimodal", r"swe[-_]?bench[-_]?(verified|lite|multimodal|pro|multilingual)", False),
    ("SWE-bench", r"^swe[-_]?bench$", True),
    # GSM8K itself has a train split; its derivatives (a re-labelled test set, a tiny eval subset, translated test
    # sets) are evaluation only unless their own record says training (a name with `train`, …).
    ("GSM8K", r"^gsm[-_]?8k$", True),
    ("GSM8K-derived", r"gsm[-_]?8k", False),
    # Not a bare `math`: `camel-ai/math` is CAMEL's synthetic problem set, not the MATH benchmark.
    ("MATH", r"^(competition[-_]?math|hendrycks[-_]?math|math[-_]?lighteval)$", True),
    ("APPS", r"^apps$", True),
    # Every CodeXGLUE task ships train/validation/test splits; lm-eval lists the per-language code-to-text copies
    # as tasks (their test splits), which is no reason to keep their training splits out of a mix.
    ("CodeXGLUE", r"code[-_]?x[-_]?glue", True),
    ("MMLU", r"mmlu", False),
    ("BIG-Bench", r"big[-_]?bench|^bbh$", False),
    ("HellaSwag / ARC / TruthfulQA / WinoGrande",
     r"hellaswag|^ai2[-_]arc$|truthful[-_]?qa|winogrande", False),
    ("AlpacaEval / Arena-Hard / WildBench", r"alpaca[-_]?eval|arena[-_]?hard|wild[-_]?bench", False),
    ("LiveCodeBench / BigCodeBench / CRUXEval / DS-1000", r"livecodebench|bigcodebench|cruxeval|ds[-_]?1000", False),
)
# The name announces an evaluation set: `…bench`, `…-eval(s)` (but not `rebench`, `eval-like`).
_NAME_EVAL = re.compile(r"(?<!re)bench(mark)?s?([^a-z]|$)|(^|[-_])evals?([-_]|$)|eval$|^eval")
_NAME_TRAINING = re.compile(r"(?<!no[-_])train|sft|traject|traces?([^a-z]|$)|[-_]like([-_]|$)|distill|synthetic")
_EVAL_TAGS = {"benchmark", "evaluation", "eval", "leaderboard", "llm-evaluation", "benchmarking"}
_EVAL_SECTION = re.compile(r"lm-eval task|evaluation datasets|(^|> ?|\d\.\d )benchmarks?\b", re.IGNORECASE)
_EVAL_TEXT = re.compile(
    r"\bbenchmark\b(?! (results|scores))|\bevaluation (set|suite|benchmark|data|dataset|only|split)\b|"
    r"\bleaderboard\b|\bfor (evaluating|evaluation)\b|\bto evaluate\b|\bevaluation only\b",
    re.IGNORECASE,
)
_TRAIN_TEXT = re.compile(
    r"\bfor training\b|\b(a|as|the) training (data|set|split)\b|\bfor training coding agents\b|\bfine-?tun|\bsft\b|"
    r"\binstruction[- ]tuning\b|\bsplits? train\b|\btrain \d|\bdistilled (from|with)\b",
    re.IGNORECASE,
)
# The record says in so many words that it is not training data ("LongBench: Evaluation Only"): that outweighs a
# curated list that happens to file it among training datasets.
_EVAL_ONLY_TEXT = re.compile(r"\b(evaluation|eval|test)[- ]only\b|\bnot (meant |intended )?for training\b",
                             re.IGNORECASE)
_TRAIN_SECTION = re.compile(r"instruction|fine-?tuning|alignment|training|pre-?training|sft", re.IGNORECASE)


def eval_family(hub_id: str) -> tuple[str, bool] | None:
    """Return `(family, has a real training split)` of the first evaluation family the dataset's name belongs to."""
    name = hub_id.split("/", 1)[-1].lower()
    return next(((family, has_train) for family, pattern, has_train in EVAL_FAMILIES if re.search(pattern, name)),
                None)


def training_split_family(hub_id: str) -> str | None:
    """Return the evaluation family with a real training split that the dataset's name belongs to, or None."""
    found = eval_family(hub_id)
    return found[0] if found is not None and found[1] else None


def benchmark_evidence(candidate: Candidate) -> tuple[list[str], list[str], bool]:
    """Return `(eval evidence, training evidence, eval only)` found in the candidate's record; `eval only` is an
    eval-only family in the name or a description that says evaluation only."""
    name = candidate.hub_id.split("/", 1)[-1].lower()
    meta = candidate.metadata
    evidence: list[str] = []
    training: list[str] = []
    eval_only_family = False
    found = eval_family(candidate.hub_id)
    if found is not None:
        family, has_train = found
        evidence.append(f"{family} evaluation family")
        eval_only_family = not has_train
        if has_train:
            training.append(f"{family} has a training split")
    elif _NAME_EVAL.search(name):
        evidence.append("its name says benchmark/eval")
    tags = {t.lower() for t in [*meta.tags, *meta.task_categories]}
    if tags & _EVAL_TAGS:
        evidence.append(f"tagged {', '.join(sorted(tags & _EVAL_TAGS))}")
    eval_sections = [s for s in meta.sections if _EVAL_SECTION.search(s)]
    if eval_sections:
        evidence.append(f"listed under {eval_sections[0]!r}")
    if _EVAL_ONLY_TEXT.search(candidate.description):
        evidence.append("its description says evaluation only")
        eval_only_family = True  # as strong as an eval-only family: only a name saying training outweighs it
    elif _EVAL_TEXT.search(candidate.description):
        evidence.append("its description calls it a benchmark or evaluation set")
    if _NAME_TRAINING.search(name):
        training.append("its name says training data")
    if _TRAIN_TEXT.search(candidate.description):
        training.append("its description says it is for training")
    if tags & {"sft", "training", "instruction-tuning", "fine-tuning"}:
        training.append("tagged for training")
    if any(_TRAIN_SECTION.search(s) and not _EVAL_SECTION.search(s) for s in meta.sections):
        training.append("listed among training datasets")
    return evidence, training, eval_only_family


def is_eval_only(candidate: Candidate) -> bool:
    """True when the record says evaluation benchmark and nothing says it is meant for training."""
    evidence, training, eval_only_family = benchmark_evidence(candidate)
    if not evidence:
        return False
    return (eval_only_family and "its name says training data" not in training) or not training


# Column names (parts) that carry a prompt/answer structure; a dataset with none of them is raw text.
PAIR_FIELD_HINTS = (
    "prompt", "response", "instruction", "output", "message", "conversation", "question", "answer", "chosen",
    "diff", "patch", "commit", "solution", "problem", "comment", "review", "completion", "input", "target",
    "summary", "docstring", "turns", "dialog", "chat", "trajectory", "query", "label", "explanation",
)
RAW_TEXT_FIELDS = {"text", "content", "code", "raw", "document", "html", "source"}
_RAW_SECTION = re.compile(r"pre-?training corpora|pre-?training data|pretraining", re.IGNORECASE)
_RAW_TEXT = re.compile(
    r"\bpre-?training (corpus|corpora|data(set)?)\b|\braw (source code|code|text|web)\b|\bweb ?crawl\b|"
    r"\bsource code files\b|\bpermissively licensed source code\b|\b(code|text|web) corpus\b",
    re.IGNORECASE,
)
_STRUCTURED_TEXT = re.compile(
    r"instruction|conversation|dialog|chat|question|answer|q&a|pairs?\b|commit message|review comment|"
    r"trajector|function call|tool call|solution",
    re.IGNORECASE,
)

_STRUCTURED_NAME = re.compile(r"instruct|chat|sft|qa|conversation|dialog", re.IGNORECASE)


def raw_corpus_evidence(candidate: Candidate) -> tuple[str, bool] | None:
    """Return `(why, certain)` when the record looks like a raw corpus, else None.

    Certain when its known columns hold text but nothing prompt/answer-like; otherwise a listing under
    pretraining corpora or a description saying so, unless the id or description names a structure
    (instructions, chat, Q&A, pairs, trajectories).
    """
    features = [f.lower() for f in candidate.metadata.features or []]
    if features:
        if any(hint in name for name in features for hint in PAIR_FIELD_HINTS):
            return None
        if any(name in RAW_TEXT_FIELDS for name in features):
            return f"columns {sorted(features)} hold text but no prompt/answer or conversation", True
        return None
    sections = [s for s in candidate.metadata.sections if _RAW_SECTION.search(s)]
    said = _RAW_TEXT.search(candidate.description)
    name = candidate.hub_id.split("/", 1)[-1]
    if _STRUCTURED_TEXT.search(candidate.description) or _STRUCTURED_NAME.search(name):
        return None
    if sections:
        return f"listed under {sections[0]!r}", False
    if said:
        return f"its description says {said.group(0)!r}", False
    return None


# Rows that need images, video or audio: curated-list sections, Hub modality tags and task categories, id words,
# and description phrases that name such a layout (a bare "image" in a description is too often a container image).
_MEDIA_SECTION = re.compile(r"multi-?modal|\bMLLMs?\b|\bvision\b|\bimages?\b|\bvideos?\b|\baudio\b|\bspeech\b",
                            re.IGNORECASE)
_MEDIA_TAG = re.compile(r"^modality:(image|video|audio)$|image|video|visual|audio|speech", re.IGNORECASE)
_MEDIA_NAME_WORDS = frozenset({"video", "videos", "vision", "visual", "image", "images", "llava", "vqa", "audio",
                               "speech", "multimodal", "mllm", "vl", "4v"})
_MEDIA_TEXT = re.compile(
    r"\bmulti-?modal (dataset|instruction|data|captions?|conversations?|model)|\bimage[- ](text|caption|prompt|"
    r"instruction|document)|\binstruction-image\b|\binterleaved image|\bvideo (instruction|question|dialog|chat)",
    re.IGNORECASE,
)


def multimodal_evidence(candidate: Candidate) -> tuple[str, bool] | None:
    """Return `(why, certain)` when the record looks like its rows need images, video or audio, else None.

    Certain from a modality tag or task category, or a listing under multimodal/vision/speech sections; a hint
    from the documentation of a media library naming it (`agents/source_repos.py`: an image-generation, robot
    learning or audio library), the id's words or the description's phrasing."""
    meta = candidate.metadata
    tags = [t for t in [*meta.tags, *meta.task_categories] if _MEDIA_TAG.search(t)]
    if tags:
        return f"tagged {', '.join(sorted(set(tags))[:3])}", True
    sections = [s for s in meta.sections if _MEDIA_SECTION.search(s)]
    if sections:
        return f"listed under {sections[0]!r}", True
    if meta.media_libraries:
        return f"the documentation of {', '.join(meta.media_libraries)} names it", False
    name = candidate.hub_id.split("/", 1)[-1]
    words = {w.lower() for w in re.split(r"[-_.\s]+|(?<=[a-z])(?=[A-Z])", name) if w}
    if words & _MEDIA_NAME_WORDS:
        return f"its name says {sorted(words & _MEDIA_NAME_WORDS)[0]!r}", False
    said = _MEDIA_TEXT.search(candidate.description)
    if said:
        return f"its description says {said.group(0)!r}", False
    return None
