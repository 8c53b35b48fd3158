"""What an inference server says about itself, as the stages read it: the `ServerInfo` contract.

Regeneration fetches it (`inference/server_info.py` asks SGLang's `/server_info` and `/model_info`, or vLLM's
`/version`, `/v1/models` and `/metrics`, and parses the answers into this model) and the training preflight
checks a draft against it (`training/preflight.py`), so the model lives here, where both may import it. `raw`
keeps the merged answer the server gave (its fields differ by engine and version); the named fields are the
ones datahunt reads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Engine = Literal["sglang", "vllm"]


class ServerInfo(BaseModel):
    """The fields of a server's info that datahunt reads, plus the raw answer."""

    raw: dict[str, Any] = Field(default_factory=dict, description="The merged JSON the server returned.")
    engine: Engine = Field(default="sglang", description="Which engine answered.")
    model_path: str | None = None
    tokenizer_path: str | None = None
    dtype: str | None = None
    context_length: int | None = None
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    enable_deterministic_inference: bool = Field(
        default=False, description="Whether the server honours `sampling_seed` (it ignores it otherwise)."
    )
    launch_command: str | None = None
    avg_spec_accept_length: float | None = Field(
        default=None, description="Mean over internal states (cumulative since start); None before any spec step."
    )
    version: str | None = None
    dev_mode: bool = Field(
        default=False, description="vLLM only: started with VLLM_SERVER_DEV_MODE=1, so it reports its method and draft."
    )

    @property
    def speculating(self) -> bool:
        """True when the server runs a speculative algorithm (SGLang reports none as null or "NONE")."""
        return bool(self.speculative_algorithm) and str(self.speculative_algorithm).upper() != "NONE"
