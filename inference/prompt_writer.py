"""Prompts written by the target itself (Magpie-style): the target continues its own user-turn opening.

For each category, `per_category` requests are written to `OUT/requests.jsonl`, each naming its category, a
seed topic (the caller's list for that category, taken in turn; none for a bare prefix) and its index. The
regeneration runner answers them (`inference.runner`: the same backends, journal, resume, retries and
status, in `OUT/generation/`) through `PrefixBackend`, which ignores the chat rendering: it sends the
target's chat-template prefix up to the user-turn opening (`inference.template_prefix`), plus the topic line,
as raw token ids (`generate_ids`: `/v1/completions`, SGLang's `/generate`, or the in-process model) and
stops at the template's end-of-turn marker. What the target writes there is a new user prompt.
`finish_prompts` then filters the answers — `empty`, `unfinished` (the turn never ended), `template_leak`
(a chat-template marker in the text), `too_short`, `repetitive` (looping words), `duplicate` (an earlier
prompt, whitespace and case aside), `failed` (the request failed) — and writes one source file per
category (`OUT/prompts/<category>.jsonl`, `{id, category, messages: [{role: user}], meta}`), the dropped
rows with their reasons (`OUT/dropped.jsonl`) and the counts (`OUT/report.json`). With a seed, request k
is sampled with seed + k, so prompts sharing one prefix still differ.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from core.jsonl import read_jsonl
from core.regenerated_set import ERRORS_FILE
from core.tool_calls import Tool
from inference.atomic_files import write_file
from inference.backend import DEFAULT_TIMEOUTS, GenerationBackend, RawBackend, Timeouts
from inference.errors import InferenceError
from inference.generation import Sampling, TurnResult
from inference.journal import DONE_FILE
from inference.runner import RunConfig, RunSummary, regenerate
from inference.template_prefix import TurnPrefix

REQUESTS_FILE = "requests.jsonl"
GENERATION_DIR = "generation"
PROMPTS_DIR = "prompts"
TOPIC_LINE = "Topic: {topic}\n\n"
DEFAULT_SAMPLING = Sampling(temperature=1.0, top_p=1.0, max_tokens=512)
DROP_REASONS = ("empty", "unfinished", "template_leak", "too_short", "repetitive", "duplicate", "failed")


class WriterError(InferenceError, ValueError):
    """The prompt writer was asked for something it cannot do (no categories, a bad request row)."""


@dataclass(frozen=True)
class Directive:
    """What one request asks for: a prompt of `category`, steered by `topic` (or the bare prefix), number `index`."""

    category: str
    topic: str | None
    index: int

    def text(self) -> str:
        """Return the directive as the request row's user turn carries it (JSON)."""
        return json.dumps({"category": self.category, "topic": self.topic, "index": self.index}, sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> Directive:
        """Return the directive of a request row's user turn; raise WriterError when it is not one."""
        try:
            raw = json.loads(text)
            return cls(str(raw["category"]), raw.get("topic"), int(raw["index"]))
        except (ValueError, KeyError, TypeError):
            raise WriterError(f"not a prompt-writer request: {text[:80]!r}") from None


class PrefixBackend(GenerationBackend):
    """Answers a request row by continuing the target's user-turn prefix (plus topic line) with `inner`; every
    other member of the interface is the inner backend's."""

    def __init__(self, inner: RawBackend, tokenizer: Any, turn: TurnPrefix) -> None:
        self.inner, self.tokenizer, self.turn = inner, tokenizer, turn
        self.api = inner.api
        self.has_endpoints = inner.has_endpoints

    def describe(self) -> str:
        """Return the inner backend's name for records."""
        return self.inner.describe()

    def prompt_text(self, topic: str | None) -> str:
        """Return the raw prompt text for `topic`: the user-turn prefix, then the topic line when there is one."""
        return self.turn.prefix + (TOPIC_LINE.format(topic=topic) if topic else "")

    def prompt_ids(self, topic: str | None) -> list[int]:
        """Return the raw prompt's ids (the prefix holds the template's special tokens as text: none added)."""
        return list(self.tokenizer(self.prompt_text(topic), add_special_tokens=False)["input_ids"])

    async def generate_turn(self, history: list[dict[str, Any]], sampling: Sampling, *,
                            endpoint: str | None = None, tools: list[Tool] | None = None) -> TurnResult:
        """Return the target's continuation of the prefix that the request in `history` asks for."""
        directive = Directive.parse(history[-1]["content"])
        if sampling.seed is not None:
            sampling = sampling.model_copy(update={"seed": sampling.seed + directive.index})
        return await self.inner.generate_ids(self.prompt_ids(directive.topic), sampling,
                                             stop=(self.turn.end_marker,), endpoint=endpoint)

    def start(self, requests: int, timeouts: Timeouts = DEFAULT_TIMEOUTS) -> None:
        """Start the inner backend (its session, or an in-process engine sized to `requests`)."""
        self.inner.start(requests, timeouts)

    def check_fits(self, max_tokens: int) -> None:
        """Ask the inner backend whether answers of `max_tokens` fit."""
        self.inner.check_fits(max_tokens)

    def in_flight_tokens(self) -> int:
        """Return the inner backend's unfinished answers' tokens."""
        return self.inner.in_flight_tokens()

    async def healthy(self, endpoint: str) -> bool:
        """Return the inner backend's health check of `endpoint`."""
        return await self.inner.healthy(endpoint)

    async def aclose(self) -> None:
        """Close the inner backend (its session; an in-process model frees its threads)."""
        await self.inner.aclose()


@dataclass
class WriterConfig:
    """One prompt-writing run: where, which categories, how many each, and how to sample."""

    out_dir: Path
    categories: list[str]
    per_category: int
    endpoints: list[str]
    topics: dict[str, list[str]] = field(default_factory=dict)  # category → seed topics; missing/empty: bare prefix
    concurrency: int = 8
    sampling: Sampling = DEFAULT_SAMPLING
    min_words: int = 4
    model: str | None = None
    retry_failed: bool = False
    allow_new_sampling: bool = False


class RequestRow(TypedDict):
    """A row of `requests.jsonl`: a curated-row shape whose one user turn carries the `Directive`."""

    id: str
    category: str
    needs_regeneration: bool
    messages: list[dict[str, str]]


class CategoryCounts(TypedDict):
    """One category's line of the report: requested, kept, not answered yet, and drops by reason."""

    requested: int
    kept: int
    pending: int
    drops: dict[str, int]


class DroppedPrompt(TypedDict):
    """A row of `dropped.jsonl`: the request, why its answer was not kept, and the text written."""

    id: str
    category: str
    topic: str | None
    reason: str  # one of DROP_REASONS
    detail: str
    text: str


class WrittenMeta(TypedDict):
    """What a kept prompt records about its writing."""

    topic: str | None
    model: str | None
    finish_reason: str | None
    completion_tokens: int | None
    sampling: dict[str, float | int | None] | None
    writer: str


class WrittenPrompt(TypedDict):
    """A row of `prompts/<category>.jsonl`: one user turn, the source a manifest names."""

    id: str
    category: str
    messages: list[dict[str, str]]
    meta: WrittenMeta


@dataclass
class WriterReport:
    """Per category: requests, prompts kept, drops by reason, and requests not answered yet."""

    per_category: dict[str, CategoryCounts]
    files: dict[str, str]

    @property
    def kept(self) -> int:
        """Return the prompts kept over all categories."""
        return sum(int(c["kept"]) for c in self.per_category.values())


def request_rows(config: WriterConfig) -> list[RequestRow]:
    """Return the request rows of a run: `per_category` per category, topics taken in turn."""
    if not config.categories or config.per_category < 1:
        raise WriterError("write at least one prompt for at least one category")
    rows: list[RequestRow] = []
    for category in config.categories:
        topics: list[str | None] = list(config.topics.get(category) or []) or [None]
        for k in range(config.per_category):
            directive = Directive(category, topics[k % len(topics)], k)
            rows.append({"id": f"{category}-{k:05d}", "category": category, "needs_regeneration": True,
                         "messages": [{"role": "user", "content": directive.text()}]})
    return rows


def write_prompts(config: WriterConfig, backend: PrefixBackend) -> tuple[RunSummary, WriterReport]:
    """Write the requests, have the target answer the unfinished ones (resumable), filter; return both summaries."""
    config.out_dir.mkdir(parents=True, exist_ok=True)
    rows = request_rows(config)
    requests = config.out_dir / REQUESTS_FILE
    write_file(requests, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode("utf-8"))
    run = RunConfig(input_path=requests, out_dir=config.out_dir / GENERATION_DIR, endpoints=config.endpoints,
                    concurrency=config.concurrency, sampling=config.sampling, model=config.model,
                    retry_failed=config.retry_failed, allow_new_sampling=config.allow_new_sampling)
    summary = regenerate(run, backend)
    return summary, finish_prompts(config, backend.turn, markers(backend.tokenizer, backend.turn))


def markers(tokenizer: Any, turn: TurnPrefix) -> tuple[str, ...]:
    """Return the template markers a written prompt must not contain: the end marker and the prefix's special tokens."""
    special = [t for t in getattr(tokenizer, "all_special_tokens", []) if t and t in turn.prefix]
    return tuple(sorted({turn.end_marker, *special}))


def prompt_problem(text: str, finish_reason: str | None, marks: tuple[str, ...], min_words: int) -> str | None:
    """Return why a written prompt is not kept (a DROP_REASONS code), or None when it is good."""
    if not text.strip():
        return "empty"
    if finish_reason != "stop":
        return "unfinished"
    if any(m in text for m in marks):
        return "template_leak"
    words = text.split()
    if len(words) < min_words:
        return "too_short"
    if len(words) >= 8 and Counter(words).most_common(1)[0][1] > len(words) / 2:
        return "repetitive"
    grams = list(zip(words, words[1:], words[2:], strict=False))
    if len(words) >= 12 and len(set(grams)) / len(grams) < 0.5:
        return "repetitive"
    return None


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def finish_prompts(config: WriterConfig, turn: TurnPrefix, marks: tuple[str, ...]) -> WriterReport:
    """Filter the journal's answers into one source file per category; write dropped.jsonl and report.json."""
    generation = config.out_dir / GENERATION_DIR
    done = {r["id"]: r for r in read_jsonl(generation / DONE_FILE)} if (generation / DONE_FILE).is_file() else {}
    failed = {r["id"]: r for r in read_jsonl(generation / ERRORS_FILE)} if (
        generation / ERRORS_FILE).is_file() else {}
    seen: set[str] = set()
    kept: dict[str, list[WrittenPrompt]] = {c: [] for c in config.categories}
    dropped: list[DroppedPrompt] = []
    kept_n: Counter[str] = Counter()
    pending: Counter[str] = Counter()
    drops: dict[str, Counter[str]] = {c: Counter() for c in config.categories}
    for row in request_rows(config):
        category, directive = row["category"], Directive.parse(row["messages"][0]["content"])
        record = done.get(row["id"])
        if record is None:
            reason = "failed" if row["id"] in failed else None
            if reason is None:
                pending[category] += 1
                continue
            text, detail = "", str(failed[row["id"]].get("error", ""))
        else:
            text = str(record["conversations"][-1]["content"]).strip()
            reason = prompt_problem(text, record["meta"].get("finish_reason"), marks, config.min_words)
            detail = ""
            if reason is None and _norm(text) in seen:
                reason = "duplicate"
        if reason is not None:
            drops[category][reason] += 1
            dropped.append({"id": row["id"], "category": category, "topic": directive.topic, "reason": reason,
                            "detail": detail, "text": text})
            continue
        seen.add(_norm(text))
        meta = record["meta"] if record else {}
        kept[category].append({"id": row["id"], "category": category, "messages": [{"role": "user", "content": text}],
                               "meta": {"topic": directive.topic, "model": meta.get("model"),
                                        "finish_reason": meta.get("finish_reason"),
                                        "completion_tokens": meta.get("completion_tokens"),
                                        "sampling": meta.get("sampling"), "writer": "write-prompts"}})
        kept_n[category] += 1
    files: dict[str, str] = {}
    for category, rows in kept.items():
        path = config.out_dir / PROMPTS_DIR / f"{category}.jsonl"
        write_file(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8"))
        files[category] = f"{PROMPTS_DIR}/{category}.jsonl"
    write_file(config.out_dir / "dropped.jsonl",
               "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in dropped).encode("utf-8"))
    per_category: dict[str, CategoryCounts] = {
        c: {"requested": config.per_category, "kept": kept_n[c], "pending": pending[c],
            "drops": dict(sorted(drops[c].items()))} for c in config.categories}
    report = {"prefix": turn.prefix, "end_marker": turn.end_marker, "sampling": config.sampling.model_dump(),
              "min_words": config.min_words, "per_category": per_category, "files": files}
    write_file(config.out_dir / "report.json", (json.dumps(report, indent=1, sort_keys=True) + "\n").encode())
    return WriterReport(per_category=per_category, files=files)
