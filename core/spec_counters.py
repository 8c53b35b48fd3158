"""The speculative-decoding counters SGLang reports on one answer: the contract regeneration and evaluation share.

SGLang writes them in `meta_info` only on a finished answer that verified at least once: `spec_verify_ct`
(verification rounds), `spec_accept_length` (= completion_tokens / spec_verify_ct), `spec_num_correct_drafts`
and `spec_num_proposed_drafts` (older servers: `spec_accepted_drafts`, `spec_proposed_drafts`). An answer that
verified nothing carries none of them, which is not the same as a server without speculation.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

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
    def from_meta_info(cls, meta: dict[str, Any]) -> SpecCounters:
        """Return the counters in a `/generate` answer's `meta_info` (unreadable values count as absent)."""
        values: dict[str, Any] = {}
        for name, keys in _NAMES.items():
            raw = next((meta[k] for k in keys if meta.get(k) is not None), None)
            kind = float if name == "spec_accept_length" else int
            try:
                values[name] = kind(raw) if raw is not None else None
            except (TypeError, ValueError):
                values[name] = None
        return cls(**values)

    @property
    def verified(self) -> bool:
        """True when the answer went through at least one verification round."""
        return bool(self.spec_verify_ct)
