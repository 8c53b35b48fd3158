"""How every draft of a curve is measured: the same held-out prompts, the same decoding, per set.

The prompts come from one JSONL file: rows with `text` (taken literally), `prompt` (one user turn) or
`conversations` / `messages` (the turns up to the first assistant one), each rendered with the target's chat
template as `datahunt eval-accept` renders them. A row's `set` (else `category`) groups it; rows without one
form the set `all`. The evaluator is eval-accept's local one: greedy chain-k speculative decoding over the
static-cache target (`training.accept.evaluate`), whose acceptance length is Σ tokens per round / Σ rounds,
pooled over the prompts of a set. The target is loaded once and serves every draft.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from core.jsonl import JsonlError, iter_jsonl
from core.samples import read_turn
from training.curve.plan import CurveError

logger = logging.getLogger(__name__)
DEFAULT_SET = "all"


@dataclass(frozen=True)
class EvalPrompt:
    """One held-out prompt: its set, its id, and what to render (turns, or literal text)."""

    set: str
    id: str
    turns: tuple[tuple[str, str], ...] = ()
    text: str | None = None


def load_eval_prompts(path: Path, per_set: int | None = None) -> list[EvalPrompt]:
    """The prompts of `path` (the first `per_set` of each set when given); CurveError on a bad file or row."""
    if not path.is_file():
        raise CurveError(f"eval prompts file {path} does not exist")
    out: list[EvalPrompt] = []
    seen: Counter[str] = Counter()
    try:
        numbered = list(iter_jsonl(path, objects=True))
    except (JsonlError, OSError) as exc:
        raise CurveError(str(exc)) from None
    for n, row in numbered:
        prompt = _prompt(row, f"{path}:{n}")
        if per_set is None or seen[prompt.set] < per_set:
            out.append(prompt)
            seen[prompt.set] += 1
    if not out:
        raise CurveError(f"{path}: no prompts to evaluate on")
    return out


def _prompt(row: dict[str, Any], where: str) -> EvalPrompt:
    name = str(row.get("set") or row.get("category") or (row.get("meta") or {}).get("category") or DEFAULT_SET)
    rid = str(row.get("id", where.rsplit(":", 1)[-1]))
    if isinstance(row.get("text"), str) and row["text"]:
        return EvalPrompt(set=name, id=rid, text=row["text"])
    if isinstance(row.get("prompt"), str) and row["prompt"]:
        return EvalPrompt(set=name, id=rid, turns=(("user", row["prompt"]),))
    turns = row.get("conversations") or row.get("messages") or []
    kept: list[tuple[str, str]] = []
    for turn in turns if isinstance(turns, list) else []:
        role, content = read_turn(turn) if isinstance(turn, dict) else ("", None)  # the one turn reader
        if role == "assistant":
            break
        if isinstance(content, str) and content:
            kept.append((role or "user", content))
    if not any(role == "user" for role, _ in kept):
        raise CurveError(f"{where}: a prompt row needs `text`, `prompt`, or user turns under conversations/messages")
    return EvalPrompt(set=name, id=rid, turns=tuple(kept))


def encode(tokenizer: Any, prompt: EvalPrompt) -> list[int]:
    """Token ids of a prompt: literal text without special tokens, or turns through the chat template with the
    generation prompt (as eval-accept encodes them)."""
    if prompt.text is not None:
        return list(tokenizer(prompt.text, add_special_tokens=False)["input_ids"])
    turns = [{"role": role, "content": content} for role, content in prompt.turns]
    encoded = tokenizer.apply_chat_template(turns, tokenize=True, add_generation_prompt=True)
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


class SetScore(BaseModel):
    """Acceptance of one draft on one set of prompts (pooled over its prompts)."""

    model_config = ConfigDict(extra="forbid")

    prompts: int
    accept_length: float
    rounds: int
    tokens: int
    per_position_accept: list[float]


def score(tokens: int, rounds: int, attempted: list[int], accepted: list[int], prompts: int) -> SetScore:
    """A set's score from pooled round counts: AL = tokens / rounds, per-position P(accept | all before did)."""
    return SetScore(prompts=prompts, accept_length=round(tokens / max(1, rounds), 4), rounds=rounds, tokens=tokens,
                    per_position_accept=[round(a / n, 4) if n else 0.0 for a, n in zip(accepted, attempted,
                                                                                         strict=True)])


class Evaluator(Protocol):
    """Measures one exported draft on the curve's prompts: set name -> score."""

    description: str

    def __call__(self, export_dir: Path, on_prompt: Callable[[int], None] | None = None) -> dict[str, SetScore]:
        ...


class DecodeEvaluator:
    """eval-accept's local evaluator: greedy speculative decoding of every prompt, per set."""

    def __init__(self, target: Path, prompts: list[EvalPrompt], *, k: int, max_new: int, device: str = "auto",
                 batch: int = 1) -> None:
        self.target_dir, self.prompts, self.k, self.max_new, self.batch = target, prompts, k, max_new, batch
        self.device = device
        self.description = (f"greedy speculative decoding (chain of {k}, {max_new} new tokens, batch {batch}) "
                            f"of {len(prompts)} held-out prompts in {len({p.set for p in prompts})} set(s)")
        self._loaded: tuple[Any, Any, list[list[int]]] | None = None

    def _target(self) -> tuple[Any, Any, list[list[int]]]:
        if self._loaded is None:
            import torch

            from training.trainer import load_target

            name = self.device if self.device != "auto" else "cuda" if torch.cuda.is_available() else "cpu"
            model, tokenizer = load_target(self.target_dir, torch.device(name))
            self._loaded = model, tokenizer, [encode(tokenizer, p) for p in self.prompts]
        return self._loaded

    def __call__(self, export_dir: Path, on_prompt: Callable[[int], None] | None = None) -> dict[str, SetScore]:
        from inference.decoding.hidden_states import target_embeddings
        from training.accept import evaluate
        from training.export import load_draft

        model, tokenizer, ids = self._target()
        draft, layers = load_draft(export_dir, target_embeddings(model).cpu(),
                                   target_layers=model.config.num_hidden_layers)
        draft = draft.to(device=model.device, dtype=model.dtype).eval()
        eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        out: dict[str, SetScore] = {}
        for name in sorted({p.set for p in self.prompts}):
            mine = [ids[i] for i, p in enumerate(self.prompts) if p.set == name]
            started = time.perf_counter()
            report = evaluate(model, draft, layers, mine, max_new=self.max_new, k=self.k, eos=eos, baseline=False,
                              on_prompt=on_prompt, batch=self.batch)
            out[name] = score(report.tokens, report.rounds, report.attempted or [0] * self.k,
                              report.accepted or [0] * self.k, len(mine))
            logger.debug("%s: AL %.3f in %.1fs", name, report.accept_length, time.perf_counter() - started)
        return out
