"""The speculative-decoding counters SGLang reports on one answer: the contract regeneration and evaluation share.

SGLang writes them in `meta_info` only on a finished answer that verified at least once: `spec_verify_ct`
(verification rounds), `spec_accept_length` (= completion_tokens / spec_verify_ct), `spec_num_correct_drafts`
and `spec_num_proposed_drafts` (older servers: `spec_accepted_drafts`, `spec_proposed_drafts`). An answer that
verified nothing carries none of them, which is not the same as a server without speculation.

vLLM keeps its counters server-wide instead (`/metrics`, read by `inference/vllm_info.py`): `VllmSpecCounters`
is one reading of them, and the difference of two readings is what a run between them added.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from core.json_types import JSONValue

# Each field, then the names older servers used for it.
_NAMES: dict[str, tuple[str, ...]] = {
    "spec_verify_ct": ("spec_verify_ct",),
    "spec_accept_length": ("spec_accept_length",),
    "spec_num_correct_drafts": ("spec_num_correct_drafts", "spec_accepted_drafts"),
    "spec_num_proposed_drafts": ("spec_num_proposed_drafts", "spec_proposed_drafts"),
}


class SpecCounters(BaseModel):
    """One answer's counters; each None where the answer does not carry it."""

    model_config = ConfigDict(frozen=True)

    spec_verify_ct: int | None = Field(default=None, description="Verification rounds (target forward passes).")
    spec_accept_length: float | None = Field(default=None, description="completion_tokens / spec_verify_ct.")
    spec_num_correct_drafts: int | None = Field(default=None, description="Draft tokens the target accepted.")
    spec_num_proposed_drafts: int | None = Field(default=None, description="Draft tokens proposed for verification.")

    @classmethod
    def from_meta_info(cls, meta: Mapping[str, JSONValue]) -> SpecCounters:
        """Return the counters in a `/generate` answer's `meta_info` (unreadable values count as absent)."""
        values: dict[str, int | float | None] = {}
        for name, keys in _NAMES.items():
            raw = next((meta[k] for k in keys if meta.get(k) is not None), None)
            kind = float if name == "spec_accept_length" else int
            try:
                values[name] = kind(raw) if isinstance(raw, str | int | float) else None
            except ValueError:
                values[name] = None
        return cls.model_validate(values)

    @property
    def verified(self) -> bool:
        """True when the answer went through at least one verification round."""
        return bool(self.spec_verify_ct)


@dataclass(frozen=True)
class VllmSpecCounters:
    """vLLM's cumulative speculative counters at one moment (summed over engines)."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_position: tuple[int, ...] = field(default_factory=tuple)

    def __sub__(self, earlier: VllmSpecCounters) -> VllmSpecCounters:
        """The counts between `earlier` and this reading (what one run added)."""
        width = max(len(self.per_position), len(earlier.per_position))
        now = self.per_position + (0,) * (width - len(self.per_position))
        then = earlier.per_position + (0,) * (width - len(earlier.per_position))
        return VllmSpecCounters(self.drafts - earlier.drafts, self.draft_tokens - earlier.draft_tokens,
                                self.accepted - earlier.accepted, tuple(a - b for a, b in zip(now, then, strict=True)))

    @property
    def accept_length(self) -> float | None:
        """Tokens per verification round: 1 + accepted / drafts (None before any draft round)."""
        return 1.0 + self.accepted / self.drafts if self.drafts else None

    @property
    def draft_accept_rate(self) -> float | None:
        """Accepted draft tokens over proposed ones."""
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    def per_position_accept(self) -> list[float]:
        """Position i's acceptance given positions before it were accepted (EAGLE's per-step rate)."""
        rates, before = [], self.drafts
        for accepted in self.per_position:
            rates.append(round(accepted / before, 4) if before else 0.0)
            before = accepted
        return rates
