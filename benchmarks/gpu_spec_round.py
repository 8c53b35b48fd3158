"""Where one speculative round's time goes at batch 1, against the target's own decode step, side by side.

The published speedup follows speedup ≈ AL / round cost, with the round cost measured at about 1.45 target
decode steps for a chain of 5 and 1.34 for a chain of 3 (docs/results/scaling.md). This splits a round of
`inference.decoding.spec_graph.GreedyRoundGraph` into its parts, each captured as its own CUDA graph and timed with CUDA
events (median of repeats), on a target of SmolLM2-135M's shape with random weights and a random draft (the
weights do not change the kernels, so no model file is needed):

* `target_step`: the baseline's decode step (one token, `inference.decoding.static_llama.DecodeGraph`);
* `verify`: the target over k + 1 tokens with the draft's three aux states;
* `chain`: the draft's k greedy proposals;
* `round`: the whole round as the decoder replays it (chain, verify, accept, draft update);
* `round_with_readback`: a round plus the host's read of its result, as `decode` does every round.

Each is also given in target steps. GPU only:

    python benchmarks/gpu_spec_round.py --out benchmarks/results/gpu_spec_round.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Run as `python3 benchmarks/gpu_spec_round.py` on a GPU machine where the project is not installed.
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from gpu_profile import timed  # noqa: E402  (beside this file)

# SmolLM2-135M-Instruct's shape (its config.json).
SMOLLM2 = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
           "num_key_value_heads": 3, "vocab_size": 49152, "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
           "max_position_embeddings": 8192, "tie_word_embeddings": True}
DRAFT_VOCAB = 32000


def build(device: torch.device, config: dict[str, Any]) -> tuple[Any, Any, Any]:
    """A random-weight target of the given shape, a random draft over it, and its aux layers."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from inference.decoding.draft_model import DraftConfig, Eagle3Draft
    from inference.decoding.hidden_states import default_aux_layers

    torch.manual_seed(0)
    target = LlamaForCausalLM(LlamaConfig(**config)).to(device=device, dtype=torch.bfloat16).eval()
    draft_vocab = min(DRAFT_VOCAB, config["vocab_size"])
    draft = Eagle3Draft(DraftConfig(
        hidden_size=config["hidden_size"], intermediate_size=config["intermediate_size"],
        num_attention_heads=config["num_attention_heads"], num_key_value_heads=config["num_key_value_heads"],
        vocab_size=config["vocab_size"], draft_vocab_size=draft_vocab, target_hidden_size=config["hidden_size"],
        rope_theta=config["rope_theta"])).to(device=device, dtype=torch.bfloat16).eval()
    t2d = torch.zeros(config["vocab_size"], dtype=torch.bool)
    t2d[:draft_vocab] = True
    draft.set_vocab(torch.zeros(draft_vocab, dtype=torch.long), t2d)  # copied into the draft's device buffers
    return target, draft, default_aux_layers(config["num_hidden_layers"])


@torch.no_grad()
def profile(config: dict[str, Any], ks: list[int], context: int, max_len: int, repeats: int) -> dict[str, Any]:
    from inference.decoding.attention_kernels import without_cudnn

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    target, draft, layers = build(device, config)
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
                           "torch": torch.__version__, "shape": config, "context": context, "by_k": {}}
    with without_cudnn():
        for k in ks:
            ms = profile_k(target, draft, layers, k, context=context, max_len=max_len, repeats=repeats)
            base = ms["target_step"]
            out["by_k"][str(k)] = {"ms": {n: round(v, 4) for n, v in ms.items()},
                                   "in_target_steps": {n: round(v / base, 3) for n, v in ms.items()}}
            print(k, json.dumps(out["by_k"][str(k)]))
    return out


def profile_k(target: Any, draft: Any, layers: Any, k: int, *, context: int, max_len: int, repeats: int
              ) -> dict[str, float]:
    """Milliseconds of each part of a chain-k round, and of the target's own step, at `context` positions."""
    from inference.decoding.spec_graph import GreedyRoundGraph
    from inference.decoding.speculative import RoundCounts
    from inference.decoding.static_llama import DecodeGraph

    device = next(target.parameters()).device
    use_graph = device.type == "cuda"
    rounds = GreedyRoundGraph(target, draft, layers, k=k, max_len=max_len, use_graph=use_graph)
    prompt = torch.randint(0, target.config.vocab_size, (context,)).tolist()
    rounds.decode(prompt, 2, set(), RoundCounts())  # fills both caches (acceptance is not measured here)
    start, last, hidden = rounds.start.clone(), rounds.last.clone(), rounds.hidden.clone()

    def rewind() -> None:  # every timed round starts at the same position
        rounds.start.copy_(start)
        rounds.last.copy_(last)
        rounds.hidden.copy_(hidden)

    step = DecodeGraph(rounds.target, use_graph=use_graph)
    verify = DecodeGraph(rounds.target, use_graph=use_graph, width=k + 1, aux_ids=rounds.aux_ids)
    chain = _graph(rounds._chain, use_graph)
    tokens1 = torch.zeros(1, 1, dtype=torch.long, device=device)
    position1 = torch.full((1, 1), context, device=device)
    tokens = torch.zeros(1, k + 1, dtype=torch.long, device=device)
    positions = (context + torch.arange(k + 1, device=device))[None]

    def round_() -> None:
        rewind()
        if rounds.graph is not None:
            rounds.graph.replay()
        else:
            rounds._round()

    def round_read() -> None:
        round_()
        rounds.result.tolist()

    def chain_() -> None:
        rewind()
        chain()

    return {"target_step": timed(lambda: step.run(tokens1, position1), repeats),
            "verify": timed(lambda: verify.run(tokens, positions), repeats),
            "chain": timed(chain_, repeats), "rewind": timed(rewind, repeats),
            "round": timed(round_, repeats), "round_with_readback": timed(round_read, repeats)}


def _graph(fn: Any, use_graph: bool) -> Any:
    """fn captured as a CUDA graph (returning its replay), or fn itself off CUDA."""
    if not use_graph:
        return fn
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 3, 5])
    parser.add_argument("--context", type=int, default=300, help="Positions already in the caches.")
    parser.add_argument("--max-len", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--tiny", action="store_true", help="A 2-layer toy shape (a CPU smoke run).")
    parser.add_argument("--out", default="benchmarks/results/gpu_spec_round.json")
    args = parser.parse_args()
    config = dict(SMOLLM2)
    if args.tiny:
        config.update(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=512)
    report = profile(config, args.ks, args.context, args.max_len, args.repeats)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
