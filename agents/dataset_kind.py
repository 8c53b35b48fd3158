"""What kind of dataset a record describes beyond a benchmark: a raw corpus or rows that need media.

Whether a record is an evaluation benchmark is one rule of its own (`agents/benchmark_rule.py`, its patterns in
`prompts/rules/benchmark.md`). `raw_corpus_evidence` recognises pretraining dumps (raw source files, web text)
that hold no conversations or instructions, and `multimodal_evidence` sets whose rows need images, video or
audio (a text target's draft cannot train on them). The scorer ranks both below text training data; the
verifier (`graph/suitability.py`) turns the evidence into verdicts.
"""

from __future__ import annotations

import re

from core.candidates import Candidate

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
