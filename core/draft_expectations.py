"""What a draft expects of its serving: the `expectations.json` contract beside its weights, with its one reader.

A watcher of a served draft (`datahunt watch`) needs to know what "healthy" looks like for this draft, and the
draft is the one place that knowledge can travel with. The training stage writes it in two steps:

- every export writes what it knows at once: the engine whose aux layer-id layout the folder holds, the ids as
  the config names them and as inputs of layers, the target's depth;
- `datahunt eval-accept --record` adds what has to be measured (decoding prompts through target and draft
  costs minutes, too much to do silently at the end of every export): per prompt set, the round counts, the
  acceptance length and the acceptance per position; per batch size and chain length, the round's cost in
  target steps and so the break-even acceptance length (speculation pays only above it).

Sets are labelled `eval` (public eval sets) or `heldout` (the team's own prompts); the reference a watcher
compares with pools the held-out sets when there are any (they are the closest to the served traffic), else
every set. Pooling adds the counts, so a set of many prompts weighs as much as its rounds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

EXPECTATIONS_FILE = "expectations.json"
SetLabel = Literal["eval", "heldout"]


class ExpectationsError(ValueError):
    """An `expectations.json` that is not valid JSON or not this contract (the message names the file)."""


class SetAcceptance(BaseModel):
    """One prompt set's measured acceptance with a chain of `k`, as counts (so sets pool exactly)."""

    model_config = ConfigDict(extra="forbid")

    label: SetLabel = Field(description="eval (public eval prompts) or heldout (the team's own prompts).")
    prompts_file: str = Field(description="The prompts file's name (not its path).")
    prompts_sha256: str
    prompts: int
    k: int
    rounds: int
    tokens: int
    attempted: list[int] = Field(description="Per draft position: rounds that drafted it.")
    accepted: list[int] = Field(description="Per draft position: rounds where it was accepted.")
    device: str = ""

    @property
    def accept_length(self) -> float:
        """Tokens per verification round (accepted drafts + 1)."""
        return self.tokens / self.rounds if self.rounds else 0.0

    @property
    def per_position_accept(self) -> list[float]:
        """P(position i accepted | positions before it were)."""
        return [a / n if n else 0.0 for a, n in zip(self.accepted, self.attempted, strict=False)]


class RoundCost(BaseModel):
    """What one round (k drafts + one (k+1)-token verify) costs at one batch size, in target decode steps."""

    model_config = ConfigDict(extra="forbid")

    batch: int
    k: int
    device: str
    round_cost_target_steps: float
    break_even_accept_length: float = Field(description="Equal to the cost: below it speculation is slower.")
    measured_speedup: float | None = None


class Reference(BaseModel):
    """The pooled acceptance a served draft is compared with."""

    model_config = ConfigDict(frozen=True)

    label: str
    sets: list[str]
    accept_length: float
    per_position_accept: list[float]
    rounds: int


class DraftExpectations(BaseModel):
    """`expectations.json`: what this draft was checked for and measured at."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    engine: Literal["sglang", "vllm"]
    aux_layer_ids: list[int] = Field(description="eagle_aux_hidden_state_layer_ids as the config names them.")
    aux_layer_ids_input_of_layer: list[int]
    target_num_hidden_layers: int | None = None
    sets: dict[str, SetAcceptance] = Field(default_factory=dict)
    round_costs: list[RoundCost] = Field(default_factory=list)

    @property
    def measured(self) -> bool:
        """True once `eval-accept --record` has measured at least one set."""
        return bool(self.sets)

    def reference(self) -> Reference | None:
        """The pooled acceptance of the held-out sets (else of every set); None before any measurement."""
        chosen = {n: s for n, s in self.sets.items() if s.label == "heldout"} or self.sets
        if not chosen:
            return None
        width = max(len(s.attempted) for s in chosen.values())
        attempted, accepted = [0] * width, [0] * width
        for s in chosen.values():
            for i, (n, a) in enumerate(zip(s.attempted, s.accepted, strict=False)):
                attempted[i] += n
                accepted[i] += a
        rounds = sum(s.rounds for s in chosen.values())
        tokens = sum(s.tokens for s in chosen.values())
        label = "heldout" if any(s.label == "heldout" for s in chosen.values()) else "eval"
        return Reference(label=label, sets=sorted(chosen), accept_length=tokens / rounds if rounds else 0.0,
                         per_position_accept=[a / n if n else 0.0 for a, n in zip(accepted, attempted, strict=True)],
                         rounds=rounds)

    def round_cost(self, batch: float | None = None, k: int | None = None) -> RoundCost | None:
        """The recorded cost nearest to `batch` (batch 1 when unknown), for chain `k` when recorded, else any k."""
        costs = [c for c in self.round_costs if k is None or c.k == k] or self.round_costs
        if not costs:
            return None
        want = batch if batch is not None and batch > 0 else 1.0
        return min(costs, key=lambda c: (abs(c.batch - want), c.batch))


def read_expectations(folder: Path) -> DraftExpectations | None:
    """The draft folder's expectations, None when it has none; ExpectationsError when the file is unreadable."""
    path = folder / EXPECTATIONS_FILE
    if not path.is_file():
        return None
    try:
        return DraftExpectations.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise ExpectationsError(f"{path} is not a draft's expectations file: {first}") from None


def expectations_bytes(expectations: DraftExpectations) -> bytes:
    """The file's bytes as every writer writes them (indented JSON, keys in the model's order)."""
    return (expectations.model_dump_json(indent=2) + "\n").encode("utf-8")
