"""A gate's verdict on a candidate draft against the deployed one: the `gate.json` contract and its one reader.

`datahunt gate` (training stage) measures both drafts on the same held-out prompts and writes this file into
the candidate's folder; the serving commands (`sglang-command`, `vllm-command`) read it and warn when a draft
has no passed gate, or when the verdict was given to other weights than the folder now holds (its sha256).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

GATE_FILE = "gate.json"
GATE_TABLE = "gate.md"


class GateVerdictError(ValueError):
    """A `gate.json` that is not valid JSON or not this contract (the message names the file)."""


class SetComparison(BaseModel):
    """One prompt set (or the pool, named `overall`) measured on both drafts."""

    model_config = ConfigDict(extra="forbid")

    name: str
    prompts: int
    candidate_accept_length: float
    deployed_accept_length: float
    candidate_position0: float
    deployed_position0: float
    accept_length_change: float = Field(description="(candidate - deployed) / deployed.")
    position0_change: float = Field(description="(candidate - deployed) / deployed (0 when deployed is 0).")


class GateRule(BaseModel):
    """The stated thresholds: better overall by `margin`, nothing down by more than `tolerance` (relative)."""

    model_config = ConfigDict(extra="forbid")

    margin: float
    tolerance: float


class GateVerdict(BaseModel):
    """`gate.json`: passed or not, why, and the table behind it."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    passed: bool
    reasons: list[str] = Field(description="Each failed condition in one sentence; empty when passed.")
    rule: GateRule
    overall: SetComparison
    sets: list[SetComparison]
    candidate: str
    deployed: str
    candidate_weights_sha256: str
    deployed_weights_sha256: str
    prompts_file: str
    prompts_sha256: str
    evaluator: str
    measured_at: str


def read_gate_verdict(folder: Path) -> GateVerdict | None:
    """The draft folder's gate verdict, None when it has none; GateVerdictError when the file is unreadable."""
    path = folder / GATE_FILE
    if not path.is_file():
        return None
    try:
        return GateVerdict.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise GateVerdictError(f"{path} is not a gate verdict: {first}") from None
