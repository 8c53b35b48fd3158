"""How an engine reads a draft's `eagle_aux_hidden_state_layer_ids`: which layers' inputs it captures.

SGLang adds 1 to the ids by a rule of the target's model family (`PlusOne`, picked by `plus_one_rule`) and
captures the inputs of those layers; vLLM takes them as given (id k = the residual stream entering layer k).
Without ids both fall back to (2, L//2, L-3). The preflight's aux-layer check and the server command
(`training.launch`) read a draft's ids through these rules.
"""

from __future__ import annotations

from enum import StrEnum

from training.draft_checkpoint import text_config
from training.model_config import ModelConfig


class PlusOne(StrEnum):
    """How SGLang's model file turns a draft config's aux ids into the layers whose inputs it captures."""

    ALWAYS = "always"  # llama, qwen, gemma: every id + 1
    IF_FIRST_IS_ONE = "if_first_is_one"  # DeepSeek-V2/V3, GLM4-MoE-Lite: + 1 only when the first id is 1
    UNLESS_MAX_IS_L = "unless_max_is_L"  # gpt-oss: + 1 unless the largest id equals the layer count
    UNKNOWN = "unknown"


# Matched against the target's architectures (what SGLang picks its model file by), then its model_type,
# lower-cased without separators; the more specific names come first.
_FAMILY_RULES: tuple[tuple[str, PlusOne], ...] = (
    ("deepseekv2", PlusOne.IF_FIRST_IS_ONE), ("deepseekv3", PlusOne.IF_FIRST_IS_ONE),
    ("glm4moelite", PlusOne.IF_FIRST_IS_ONE), ("gptoss", PlusOne.UNLESS_MAX_IS_L),
    ("llama", PlusOne.ALWAYS), ("qwen", PlusOne.ALWAYS), ("gemma", PlusOne.ALWAYS),
)


def plus_one_rule(target: ModelConfig | None) -> PlusOne:
    """The +1 rule of the target's model family (PlusOne.UNKNOWN for a family not listed)."""
    config = target or {}
    names = [*(config.get("architectures") or []), str(config.get("model_type") or ""),
             str(text_config(config).get("model_type") or "")]
    for name in names:
        key = name.lower().replace("_", "").replace("-", "")
        for family, rule in _FAMILY_RULES:
            if family in key:
                return rule
    return PlusOne.UNKNOWN


def server_capture(config_ids: list[int] | None, num_layers: int, rule: PlusOne) -> tuple[int, ...]:
    """Input-of-layer ids SGLang captures from a draft config's ids under `rule` (not for PlusOne.UNKNOWN).

    Without ids in the draft's eagle_config, SGLang falls back to its default [2, L//2, L-3].
    """
    if not config_ids:
        return (2, num_layers // 2, num_layers - 3)
    ids = tuple(int(i) for i in config_ids)
    add = {PlusOne.ALWAYS: True, PlusOne.IF_FIRST_IS_ONE: ids[0] == 1,
           PlusOne.UNLESS_MAX_IS_L: max(ids) != num_layers}[rule]
    return tuple(i + 1 for i in ids) if add else ids


def engine_capture(config_ids: list[int] | None, num_layers: int, engine: str, rule: PlusOne) -> tuple[int, ...]:
    """Input-of-layer ids an engine captures from a draft config's ids: vLLM takes them as given (default
    (2, L//2, L-3)), SGLang by its +1 `rule`."""
    if engine == "vllm":
        return tuple(int(i) for i in config_ids) if config_ids else (2, num_layers // 2, num_layers - 3)
    return server_capture(config_ids, num_layers, rule)
