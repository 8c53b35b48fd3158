"""Preflight: compare a draft checkpoint with the SGLang server that will serve it, before any GPU time is spent.

Every misconfiguration below makes a draft useless without an error or a warning, so each is a named check
with an explanation: the EAGLE-vs-EAGLE3 flag (the server feeds 1x hidden instead of 3x, skips `fc`, swaps in
the target's lm_head and ignores d2t, accepts about 1.0 tokens); the server serving another draft than the
one given; `fc` not reading 3x the target's hidden size; a missing or mis-shaped `lm_head`; aux layer ids the
server will capture differently from training (SGLang's +1, whose rule depends on the target's model family)
or twice; `max_position_embeddings` below the serving context; draft and target dtypes differing; a draft
vocab that does not fit the target's. The checks are functions of what the server says (the typed
`ServerInfo` of `core/server_info.py`, parsed from its answers by `inference/server_info.py`), the draft's
config and tensor shapes, and the target's config (its `config.json`, as the model ships it), so they run on
recorded answers in tests; only the draft check reads files, to compare the server's draft folder with the
given one when their paths differ.

Two engines read the same `eagle_aux_hidden_state_layer_ids` differently: SGLang adds 1 (by a rule of the
target's family) and captures the inputs of those layers, vLLM takes them as given (id k = the residual stream
entering layer k). The server info's `engine` ("sglang" or "vllm") picks the reading, so a draft exported for
one engine is refused on the other with the fix named. What vLLM does not report (its speculative method and
draft path, without `VLLM_SERVER_DEV_MODE=1`) is said as unseen. The draft as the checks read it is
`training.draft_checkpoint`; the engines' readings of the ids, `training.aux_layers`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from core.server_info import ServerInfo
from training.aux_layers import PlusOne, engine_capture, plus_one_rule, server_capture
from training.draft_checkpoint import (
    DraftCheckpoint,
    draft_fingerprint,
    is_eagle3_draft,
    read_draft,
    text_config,
)
from training.model_config import ModelConfig

# The preflight's interface: read a draft (`read_draft`), then run every check on it (`run_preflight`).
__all__ = ["Check", "DraftCheckpoint", "check_algorithm", "check_aux_layers", "check_context", "check_draft",
           "check_dtype", "check_fc_input", "check_lm_head", "check_vocab", "read_draft", "run_preflight",
           "serving_context"]


@dataclass(frozen=True)
class Check:
    """One named check: passed or not, and why, in words a person can act on."""

    name: str
    ok: bool
    detail: str


def check_algorithm(server: ServerInfo, draft: DraftCheckpoint) -> Check:
    """The server must run EAGLE3 for an EAGLE-3 draft: only EAGLE3 makes the target capture aux states."""
    algo = str(server.speculative_algorithm or "").upper()
    eagle3 = is_eagle3_draft(draft)
    if algo == "SPECULATING":  # vLLM without dev mode: its counters say it speculates, nothing says how
        steps = server.speculative_num_steps
        return Check("algorithm", True, (
            f"vLLM speculates ({steps} draft tokens a round, from its /metrics) but does not report its method "
            "unless started with VLLM_SERVER_DEV_MODE=1; it must be started with "
            "--speculative-config '{\"method\": \"eagle3\", ...}' for this draft"))
    if not algo or algo == "NONE":
        return Check("algorithm", False, "the server runs without speculative decoding; start it with "
                     "--speculative-algorithm " + ("EAGLE3" if eagle3 else "EAGLE") + " and this draft")
    if eagle3 and algo == "EAGLE":
        return Check("algorithm", False, (
            "the draft is an EAGLE-3 draft but the server runs --speculative-algorithm EAGLE: the target will "
            "feed the draft its final hidden state only (1x hidden size instead of 3x), the draft's fc layer "
            "will be skipped by a shape guard, SGLang will also swap in the target's lm_head for the draft's and "
            "ignore d2t, its proposals will be garbage, and acceptance length will sit at about 1.0 tokens with "
            "no error or warning. Restart the server with --speculative-algorithm EAGLE3."))
    if eagle3 and algo != "EAGLE3":
        return Check("algorithm", False, f"the draft is an EAGLE-3 draft but the server runs {algo}; use EAGLE3")
    if not eagle3 and algo == "EAGLE3":
        return Check("algorithm", False, "the server runs EAGLE3 but the draft is not an EAGLE-3 draft "
                     "(no LlamaForCausalLMEagle3 architecture, no eagle_config aux layers)")
    return Check("algorithm", True, f"server runs {algo}, matching the draft")


def check_draft(server: ServerInfo, draft: DraftCheckpoint) -> Check:
    """The server must serve this draft: the same folder, or one with the same config and weights."""
    served = server.speculative_draft_model_path
    if not served and server.engine == "vllm" and not server.dev_mode:
        return Check("draft", True, "vLLM does not report the draft it serves unless started with "
                     "VLLM_SERVER_DEV_MODE=1: not compared (the other checks read the given draft)")
    if not served:
        return Check("draft", False, "the server reports no speculative_draft_model_path: it serves no draft")
    if draft.folder is None:
        return Check("draft", False, f"the server serves the draft at {served}; the given draft's folder is unknown")
    ours, theirs = draft.folder.resolve(), Path(str(served)).expanduser()
    if theirs.resolve() == ours:
        return Check("draft", True, f"the server serves {served}, the given draft")
    our_config, our_weights = draft_fingerprint(ours)
    if not (theirs / "config.json").is_file():
        return Check("draft", False, (
            f"the server serves the draft at {served}, but the given draft is {ours}, and {served} cannot be "
            "read here to compare config and weights: run the check where the server's draft is readable, "
            f"pass --draft {served}, or compare `sha256sum` of its weights with the given draft's {our_weights}"))
    their_config, their_weights = draft_fingerprint(theirs)
    if (our_config, our_weights) == (their_config, their_weights):
        return Check("draft", True, f"the server serves {served}, a copy of the given draft {ours} (same config, "
                     f"weights sha256 {our_weights[:12]})")
    differs = [name for name, a, b in (("config.json", our_config, their_config),
                                        ("weights", our_weights, their_weights)) if a != b]
    return Check("draft", False, (
        f"the server serves another draft: {served}, not the given {ours} ({' and '.join(differs)} differ; "
        f"weights sha256 {their_weights[:12]} vs {our_weights[:12]}); restart the server with "
        f"--speculative-draft-model-path {ours}, or check the draft it serves"))


def check_fc_input(draft: DraftCheckpoint, target: ModelConfig | None) -> Check:
    """fc must read 3 x the target's hidden size (low || mid || high aux states)."""
    target_hidden = text_config(target).get("hidden_size") or draft.config.get("target_hidden_size")
    fc = draft.shapes.get("fc.weight")
    if fc is None:
        return Check("fc_input", False, "the draft has no fc.weight: an EAGLE-3 draft fuses 3 target states in fc")
    if not target_hidden:
        return Check("fc_input", False, "the target's hidden size is unknown (pass --target-config)")
    if fc[1] != 3 * int(target_hidden):
        return Check("fc_input", False, (
            f"fc.weight reads {fc[1]} features but the target's hidden size is {target_hidden}: an EAGLE-3 draft "
            f"needs 3 x {target_hidden} = {3 * int(target_hidden)} (low, mid and high aux states); this draft was "
            "trained for a different target"))
    return Check("fc_input", True, f"fc reads 3 x {target_hidden} = {fc[1]}")


def check_lm_head(draft: DraftCheckpoint) -> Check:
    """lm_head must be present and shaped [draft_vocab, hidden]; without it SGLang accepts 1.00 silently."""
    shape = draft.shapes.get("lm_head.weight")
    expected = (draft.config.get("draft_vocab_size") or draft.config.get("vocab_size"), draft.config.get("hidden_size"))
    if shape is None:
        return Check("lm_head", False, "the checkpoint has no lm_head.weight: SGLang loads it anyway and the "
                     "draft accepts exactly 1.00 tokens; re-export the draft")
    if tuple(shape) != expected:
        return Check("lm_head", False, f"lm_head.weight is {list(shape)}, expected [draft_vocab_size, hidden] = "
                     f"{list(expected)}")
    return Check("lm_head", True, f"lm_head {list(shape)}")


def check_aux_layers(draft: DraftCheckpoint, target: ModelConfig | None, engine: str = "sglang") -> Check:
    """The layers the server will capture must be three distinct layers, the ones the draft was trained on."""
    num_layers = text_config(target).get("num_hidden_layers")
    if not num_layers:
        return Check("aux_layers", False, "the target's layer count is unknown (pass --target-config)")
    L = int(num_layers)  # noqa: N806 - the layer count, as in the papers
    eagle_ids = (draft.config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    ours = (draft.config.get("datahunt") or {}).get("aux_layer_ids_input_of_layer")
    trained_depth = (draft.config.get("datahunt") or {}).get("target_num_hidden_layers")
    if trained_depth is not None and int(trained_depth) != L:
        return Check("aux_layers", False, (
            f"the draft was trained on a {trained_depth}-layer target and this target has {L} layers: its "
            "auxiliary states would come from other layers than it learned from; serve it with its own target"))
    if eagle_ids and len(set(eagle_ids)) != len(eagle_ids):
        return Check("aux_layers", False, (
            f"eagle_aux_hidden_state_layer_ids {eagle_ids} repeat a layer: SGLang captures each layer once, so "
            f"the draft's fc would get {len(set(eagle_ids))}H features instead of {len(eagle_ids)}H; re-export "
            "with distinct ids"))
    if engine == "vllm":
        return _check_vllm_layers(eagle_ids, tuple(ours) if ours else None, draft, L)
    rule = plus_one_rule(target)
    if rule is PlusOne.UNKNOWN:
        readings = {server_capture(eagle_ids, L, r) for r in (PlusOne.ALWAYS, PlusOne.IF_FIRST_IS_ONE)}
        if len(readings) > 1:
            return Check("aux_layers", False, (
                f"the target's family ({', '.join((target or {}).get('architectures') or ['unknown'])}) is not one "
                f"whose +1 rule is known, and ids {eagle_ids} are read differently by the known rules "
                f"(inputs of {' or '.join(str(list(r)) for r in sorted(readings))}); check the model file in SGLang"))
        rule = PlusOne.ALWAYS
    captured = server_capture(eagle_ids, L, rule)
    # What the draft was trained on: our own record; without one, all we can say is what the server reads.
    trained = tuple(ours) if ours else captured
    # Layer L's "input" is the last layer's output: only gpt-oss's model file captures it (hence its rule).
    if max(captured) > (L if rule is PlusOne.UNLESS_MAX_IS_L else L - 1) or min(captured) < 0:
        return Check("aux_layers", False, f"the server would capture inputs of layers {list(captured)}, outside a "
                     f"{L}-layer target")
    if captured != trained:
        return Check("aux_layers", False, (
            f"the server will capture the inputs of layers {list(captured)} (ids {eagle_ids}, +1 rule "
            f"{rule.value} for this target's family) but the draft was trained on the inputs of {list(trained)}: "
            "an off-by-one in the layer-id convention (input vs output of a layer) feeds the draft states it "
            "never saw"))
    if (draft.config.get("datahunt") or {}).get("engine") == "vllm":
        return Check("aux_layers", False, (
            f"this draft was exported for vLLM (ids {eagle_ids} as given); SGLang adds 1 and would capture the "
            f"inputs of {list(captured)}; export it for SGLang: datahunt export-draft DRAFT --engine sglang"))
    return Check("aux_layers", True, f"server captures inputs of layers {list(captured)}, as trained "
                 f"(+1 rule {rule.value})")


def _check_vllm_layers(eagle_ids: list[int] | None, trained: tuple[int, ...] | None, draft: DraftCheckpoint,
                       num_layers: int) -> Check:
    """vLLM captures the inputs of the ids as given; they must be the layers the draft was trained on."""
    captured = engine_capture(eagle_ids, num_layers, "vllm", PlusOne.ALWAYS)
    if max(captured) > num_layers - 1 or min(captured) < 0:
        return Check("aux_layers", False, f"vLLM would capture inputs of layers {list(captured)}, outside a "
                     f"{num_layers}-layer target")
    if trained is None:
        return Check("aux_layers", False, (
            f"the draft does not record which layers it was trained on, so ids {eagle_ids} cannot be checked "
            "against vLLM's reading (inputs of the layers as given); export it with datahunt"))
    if captured != trained:
        return Check("aux_layers", False, (
            f"vLLM takes ids as given and will capture the inputs of layers {list(captured)}, but the draft was "
            f"trained on the inputs of {list(trained)} (ids {eagle_ids} are SGLang's layout, which adds 1): the "
            "draft is fed states one layer early and loses acceptance silently; export it for vLLM: "
            "datahunt export-draft DRAFT --engine vllm --out DIR"))
    return Check("aux_layers", True, f"vLLM captures inputs of layers {list(captured)} (ids as given), as trained")


def serving_context(server: ServerInfo, target: ModelConfig | None) -> int | None:
    """The context the server serves: its context_length, else the target's max_position_embeddings."""
    value = server.context_length or text_config(target).get("max_position_embeddings")
    return int(value) if value else None


def check_context(server: ServerInfo, draft: DraftCheckpoint, target: ModelConfig | None) -> Check:
    """The draft's max_position_embeddings must cover the serving context (2048 cripples long prompts)."""
    context = serving_context(server, target)
    draft_max = draft.config.get("max_position_embeddings")
    if context is None or draft_max is None:
        return Check("context", False, "serving context or the draft's max_position_embeddings is unknown")
    if int(draft_max) < context:
        return Check("context", False, (
            f"the draft's max_position_embeddings is {draft_max} but the server serves {context} tokens: "
            "the draft's position limit sits below the context and acceptance collapses on long prompts "
            f"(SGLang #6783); re-export with max_position_embeddings >= {context}"))
    return Check("context", True, f"draft covers {draft_max} >= serving context {context}")


_DTYPE_NAMES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "half": "float16",
                "float16": "float16", "fp32": "float32", "float": "float32", "float32": "float32"}


def _dtype(value: object) -> str | None:
    text = str(value or "").lower().replace("torch.", "")
    return _DTYPE_NAMES.get(text)


def check_dtype(server: ServerInfo, draft: DraftCheckpoint, target: ModelConfig | None) -> Check:
    """Draft and target must run in the same dtype (the server's, or the target's own when it says auto)."""
    served = _dtype(server.dtype)
    text = text_config(target)
    served = served or _dtype((target or {}).get("torch_dtype") or (target or {}).get("dtype")
                              or text.get("torch_dtype") or text.get("dtype"))
    draft_dtype = _dtype(draft.config.get("torch_dtype") or draft.config.get("dtype"))
    if served is None or draft_dtype is None:
        return Check("dtype", False, f"cannot compare dtypes (server/target {served}, draft {draft_dtype})")
    if served != draft_dtype:
        return Check("dtype", False, f"the draft is {draft_dtype} but the target runs in {served}; export the "
                     f"draft in {served}")
    return Check("dtype", True, f"both {served}")


def check_vocab(draft: DraftCheckpoint, target: ModelConfig | None) -> Check:
    """The draft vocab must fit the target's: same full vocab, N <= V, d2t inside it, t2d consistent."""
    target_vocab = text_config(target).get("vocab_size")
    if not target_vocab:
        return Check("vocab", False, "the target's vocab size is unknown (pass --target-config)")
    v = int(target_vocab)
    n = int(draft.config.get("draft_vocab_size") or draft.config.get("vocab_size") or 0)
    problems = []
    if int(draft.config.get("vocab_size") or 0) != v:
        problems.append(f"the draft's vocab_size {draft.config.get('vocab_size')} is not the target's {v}")
    if n > v:
        problems.append(f"draft_vocab_size {n} exceeds the target vocab {v}")
    if draft.d2t is not None:
        mapped = draft.d2t + torch.arange(draft.d2t.shape[0])
        if draft.d2t.shape[0] != n:
            problems.append(f"d2t has {draft.d2t.shape[0]} entries, draft_vocab_size is {n}")
        if mapped.numel() and (int(mapped.max()) >= v or int(mapped.min()) < 0):
            problems.append(f"d2t maps draft ids to target ids up to {int(mapped.max())}, outside the target "
                            f"vocab of {v}")
        if draft.t2d is not None and draft.t2d.shape[0] != v:
            problems.append(f"t2d covers {draft.t2d.shape[0]} ids, the target has {v}")
        elif draft.t2d is not None and not torch.equal(torch.nonzero(draft.t2d).flatten(), mapped):
            problems.append("d2t and t2d disagree (nonzero(t2d) != d2t + arange(N))")
    elif n < v:
        problems.append("the draft has a reduced vocab but no d2t/t2d maps")
    if problems:
        return Check("vocab", False, "; ".join(problems) + ": the draft was built for another tokenizer")
    return Check("vocab", True, f"draft vocab {n} of the target's {v}")


def run_preflight(server: ServerInfo, draft: DraftCheckpoint, target: ModelConfig | None) -> list[Check]:
    """Every check, in the order a person would fix them."""
    return [
        check_algorithm(server, draft),
        check_draft(server, draft),
        check_fc_input(draft, target),
        check_lm_head(draft),
        check_aux_layers(draft, target, server.engine),
        check_context(server, draft, target),
        check_dtype(server, draft, target),
        check_vocab(draft, target),
    ]
