"""The SpecForge side-by-side's arithmetic (benchmarks/specforge_side.py), pure and tested on CPU: SpecForge's
capture layers and datahunt's for the same target, the recipe's draft config filled in for a target, the weight
keys SpecForge reads, its step plan against the token budget, the training seconds of a cut call, how each trainer
batches the same rows, the eval pairs, and accept lengths pooled over the sets.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

# Fields of the draft config that follow the target (the rest is the recipe's, checked on CPU against datahunt).
TARGET_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                 "max_position_embeddings", "vocab_size", "bos_token_id", "eos_token_id", "pad_token_id")


def sf_capture_layers(num_layers: int) -> list[int]:
    """SpecForge's default EAGLE-3 capture, output-of-layer ids [1, L//2 - 1, L - 4] (distinct: L >= 7)."""
    layers = [1, num_layers // 2 - 1, num_layers - 4]
    if len(set(layers)) != 3 or min(layers) < 0:
        raise SystemExit(f"a {num_layers}-layer target gives SpecForge capture layers {layers}: "
                         "it needs 3 distinct ones (7 layers or more)")
    return layers


def datahunt_layers(sf_layers: list[int]) -> tuple[int, int, int]:
    """The same layers in datahunt's input-of-layer convention (SpecForge's output of layer i = input of i+1)."""
    a, b, c = (i + 1 for i in sf_layers)
    return (a, b, c)


def draft_config(template: dict[str, Any], target: dict[str, Any], draft_vocab: int) -> dict[str, Any]:
    """The recipe's draft config with the target's shapes, capture layers and the draft vocab filled in."""
    cfg = json.loads(json.dumps(template))
    for key in TARGET_FIELDS:
        if key in target:
            cfg[key] = target[key]
    cfg["target_hidden_size"] = target["hidden_size"]
    rope = (target.get("rope_parameters") or {}).get("rope_theta", target.get("rope_theta"))
    if rope is not None:
        cfg["rope_theta"] = rope
    cfg["draft_vocab_size"] = draft_vocab
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = sf_capture_layers(target["num_hidden_layers"])
    return cfg


def weight_keys(keys: set[str]) -> tuple[str, str]:
    """SpecForge's embedding_key and lm_head_key for a target folder holding `keys`: a tied target keeps only
    the embedding (`datahunt target prepare` drops the head's alias), an untied one has its own head."""
    embed = next((k for k in ("model.embed_tokens.weight", "embed_tokens.weight") if k in keys), None)
    if embed is None:
        raise SystemExit("the target folder has no token embedding tensor (model.embed_tokens.weight)")
    return embed, "lm_head.weight" if "lm_head.weight" in keys else embed


def accumulation(batch_tokens: int, batch_rows: int, mean_tokens: float) -> int:
    """Micro-batches a step so that batch_rows x steps x the mean row length is closest to the token budget."""
    return max(1, round(batch_tokens / (batch_rows * mean_tokens)))


def sf_total_steps(rows: int, batch: int, accum: int, epochs: int) -> int:
    """SpecForge's own horizon for a finite set (its resolve_total_steps): whole accumulation windows only."""
    return (rows // batch) * epochs // accum


def loop_seconds(step_times: list[tuple[int, float]], from_step: int, to_step: int, fallback: float,
                 step_s: float | None = None) -> float:
    """Seconds of the steps from_step+1..to_step of one call (those its last checkpoint kept), at the steady rate
    between its first and last logged steps (loading and compiling before the first are no training step's); with
    fewer than two logged steps at SpecForge's own step time (`step_s`), else the call's wall."""
    if to_step <= from_step:
        return 0.0
    if len(step_times) < 2 or step_times[-1][0] == step_times[0][0]:
        return step_s * (to_step - from_step) if step_s else fallback
    (s0, t0), (s1, t1) = step_times[0], step_times[-1]
    return (t1 - t0) / (s1 - s0) * (to_step - from_step)


def pooled(per_set: dict[str, dict[str, Any]]) -> float | None:
    """Accept length over every prompt of every set: all sets' tokens over all their rounds."""
    rounds = sum(s["rounds"] for s in per_set.values())
    return round(sum(s["tokens"] for s in per_set.values()) / rounds, 4) if rounds else None


def mean_of_sets(per_set: dict[str, dict[str, Any]]) -> float | None:
    """The mean of the sets' accept lengths (docs/results/scaling.md's headline figure)."""
    return round(sum(s["accept_length"] for s in per_set.values()) / len(per_set), 4) if per_set else None


def batch_stats(tokens: list[int], supervised: list[int], sf_batch: int, sf_accum: int, budget: int,
                seed: int = 0) -> dict[str, Any]:
    """How each trainer batches the same rows, one epoch: positions computed per real token, real tokens a step,
    and (SpecForge) the supervised share of a micro-batch's positions, which its loss divides by all positions:
    under AdamW a constant share would not matter, its spread across micro-batches reweights the rows (a row
    among long or prompt-heavy neighbours counts less). datahunt's packing is training.trainer.token_batches's."""
    import random
    import statistics

    def spread(values: list[float]) -> dict[str, float]:
        mean = statistics.fmean(values)
        return {"mean": round(mean, 4), "cv": round(statistics.pstdev(values) / mean, 4) if mean else 0.0}

    real = sum(tokens)
    order = list(range(len(tokens)))
    random.Random(seed).shuffle(order)
    micro = [order[i:i + sf_batch] for i in range(0, len(order) - sf_batch + 1, sf_batch)]
    padded = [len(m) * max(tokens[i] for i in m) for m in micro]
    share = [sum(supervised[i] for i in m) / p for m, p in zip(micro, padded, strict=True)]
    steps = [sum(tokens[i] for m in micro[a:a + sf_accum] for i in m)
             for a in range(0, len(micro) - sf_accum + 1, sf_accum)]
    groups: list[list[int]] = []
    for i in sorted(range(len(tokens)), key=lambda i: (tokens[i], i)):
        if groups and (len(groups[-1]) + 1) * tokens[i] <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    dh_padded = sum(len(g) * max(tokens[i] for i in g) for g in groups)
    return {"specforge": {"positions_per_real_token": round(sum(padded) / real, 4),
                          "supervised_share_of_positions": spread(share),
                          "real_tokens_per_step": spread([float(x) for x in steps]), "steps_per_epoch": len(steps)},
            "datahunt": {"positions_per_real_token": round(dh_padded / real, 4),
                         "real_tokens_per_step": spread([float(sum(tokens[i] for i in g)) for g in groups]),
                         "steps_per_epoch": len(groups)},
            "supervised_share_of_tokens": round(sum(supervised) / real, 4)}


def eval_pairs(path: Path, per_set: int) -> dict[str, list[tuple[str, str]]]:
    """(prompt, target greedy answer) of the first `per_set` prompts of each eval set, by question number."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    rows.sort(key=lambda r: (r["id"].rsplit("-", 1)[0], int(r["id"].rsplit("-", 1)[1])))
    out: dict[str, list[tuple[str, str]]] = {}
    for r in rows:
        name = r["id"].rsplit("-", 1)[0]
        turns = r["conversations"]
        user = next(t["content"] for t in turns if t["role"] == "user")
        answer = next(t["content"] for t in turns if t["role"] == "assistant")
        if len(out.setdefault(name, [])) < per_set:
            out[name].append((user, answer))
    return out
