"""Where a decode step and a training step spend their time on the GPU (target folder from --target).

Decode: the engine's graph-replayed forward over all slots, the sampler, and a whole engine step, each timed
with CUDA events (median of repeats); the decode step's attention as sdpa, matmul and the split-KV Triton
kernel. Train: one trainer step split into its phases (target forward, vocab restriction, draft unroll, loss,
backward, optimizer), synchronised between phases, with the loss over every position and over the counted
positions only, side by side. Prints a table; writes --out JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Run through `gpu_scaling.sh profile` ($PY, python3) on a GPU machine where the project is not installed.
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

# Supervised share of the tokens of SmolLM2's regenerated rows (its 4,000 first rows: 72 %), for the train arm.
SUPERVISED_SHARE = 0.72


def timed(fn: Any, repeats: int = 20, warmup: int = 3) -> float:
    """Median milliseconds of fn() over repeats (CUDA events; the wall clock off CUDA, for smoke runs)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if not torch.cuda.is_available():
            began = time.perf_counter()
            fn()
            times.append(1000 * (time.perf_counter() - began))
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def top_kernels(fn: Any, rows: int = 12) -> list[list[Any]]:
    """The kernels fn() spends its GPU time in, most first: [name, total ms, calls] (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = sorted(prof.key_averages(), key=lambda e: -getattr(e, "device_time_total", 0.0))
    return [[e.key[:90], round(getattr(e, "device_time_total", 0.0) / 1e3, 3), e.count] for e in events[:rows]]


def triton_profile(runner: Any, graph: Any, tokens: Any, positions: Any) -> dict[str, Any]:
    """The same graph-replayed step with the split-KV Triton attention: its time at the common positions and at
    short ones (it reads only live positions, the others every one), its largest logit difference from the sdpa
    step, and one layer's attention alone at three split lengths. An error is recorded, not raised: the rest
    of the profile goes on."""
    import torch.nn.functional as F

    from inference.decoding.decode_kernel import split_kv_attention
    from inference.decoding.static_llama import DecodeGraph

    out: dict[str, Any] = {}
    runner.decode_attention = "triton"
    try:
        triton_graph = DecodeGraph(runner, use_graph=True)
        out["graph_step_triton_attention_ms"] = timed(lambda: triton_graph.step(tokens, positions))
        short = positions.clamp(max=200)
        out["graph_step_triton_attention_positions_le_200_ms"] = timed(lambda: triton_graph.step(tokens, short))
        reference = graph.step(tokens, positions).float().clone()
        out["triton_vs_sdpa_max_abs_logit_diff"] = float((triton_graph.step(tokens, positions).float()
                                                          - reference).abs().max())
        slots, kvh, max_len, hd = runner.k_cache[0].shape
        g = runner.heads // kvh
        q = torch.randn(slots, 1, runner.heads, hd, device="cuda", dtype=runner.k_cache[0].dtype)
        keys, values = runner.k_cache[0], runner.v_cache[0]
        qg = q.reshape(slots, 1, kvh, g, hd).permute(0, 2, 3, 1, 4).reshape(slots, kvh, g, hd)
        mask = torch.arange(max_len, device="cuda").view(1, 1, 1, -1) <= positions.view(slots, 1, 1, 1)
        out["one_layer_sdpa_attention_ms"] = timed(lambda: F.scaled_dot_product_attention(qg, keys, values,
                                                                                         attn_mask=mask))
        for split in (128, 256, 512):
            out[f"one_layer_triton_attention_split{split}_ms"] = timed(
                lambda split=split: split_kv_attention(q, keys, values, positions, split_len=split))
    except Exception as exc:  # a kernel that fails to compile or run on this GPU: say why, time the rest
        out["triton_error"] = f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        runner.decode_attention = "sdpa"
    return out


def decode_profile(target: Any, slots: int, max_len: int) -> dict[str, Any]:
    from inference.decoding.continuous import ContinuousEngine, Request, sample
    from inference.decoding.static_llama import DecodeGraph, StaticLlama

    runner = StaticLlama(target, slots=slots, max_len=max_len)
    graph = DecodeGraph(runner, use_graph=True)
    tokens = torch.randint(0, 49152, (slots, 1), device="cuda")
    positions = torch.randint(100, max_len - 10, (slots, 1), device="cuda")
    out: dict[str, Any] = {"slots": slots, "max_len": max_len}
    out["graph_step_ms"] = timed(lambda: graph.step(tokens, positions))
    runner.decode_attention = "matmul"  # the same step with explicit-score attention, side by side
    matmul_graph = DecodeGraph(runner, use_graph=True)
    out["graph_step_matmul_attention_ms"] = timed(lambda: matmul_graph.step(tokens, positions))
    runner.decode_attention = "sdpa"
    out.update(triton_profile(runner, graph, tokens, positions))
    out["eager_step_ms"] = timed(lambda: runner.forward(tokens, positions, last_only=True), repeats=5)
    out["top_kernels_eager_step"] = top_kernels(lambda: runner.forward(tokens, positions, last_only=True))
    logits = graph.step(tokens, positions).clone()
    temp, top_p = torch.full((slots,), 0.7, device="cuda"), torch.full((slots,), 0.95, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    out["sample_ms"] = timed(lambda: sample(logits, temp, top_p, gen))
    out["argmax_ms"] = timed(lambda: logits.argmax(-1))
    out["sort_ms"] = timed(lambda: logits.float().sort(dim=-1, descending=True))
    engine = ContinuousEngine(runner, {2}, use_graph=False)
    engine.graph = graph
    engine.run([Request([1] * 200, 64, 0.7, 0.95) for _ in range(slots)])
    for _ in range(slots):
        engine.submit(Request([1] * 200, max_len - 220, 0.7, 0.95))
    engine._refill()
    out["engine_step_ms"] = timed(engine._step, repeats=20)
    chunk = torch.randint(0, 49152, (64, 400), device="cuda")
    pos = torch.arange(400, device="cuda").expand(64, 400)
    idx = torch.arange(64, device="cuda")
    out["prefill_64x400_ms"] = timed(lambda: runner.forward(chunk, pos, slots=idx, prefill=True), repeats=5)
    kv_bytes = 2 * runner.num_layers * slots * max_len * runner.kv_heads * runner.head_dim * 2
    out["kv_read_floor_ms"] = kv_bytes / 4.3e12 * 1e3
    return out


def train_profile(target_dir: Path, batch_tokens: int) -> dict[str, Any]:
    from inference.decoding.draft_model import DraftConfig, Eagle3Draft
    from inference.decoding.hidden_states import default_aux_layers
    from training.loss import loss_rows, restrict_to_draft_vocab, ttt_loss, ttt_loss_rows
    from training.trainer import fast_target, load_target, target_states

    target, _ = load_target(target_dir, torch.device("cuda"))
    tc = target.config
    scorer = fast_target(target)  # what the trainer runs: the cacheless static forward for Llama targets
    layers = default_aux_layers(tc.num_hidden_layers)
    draft = Eagle3Draft(DraftConfig(hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                                    num_key_value_heads=3, vocab_size=49152, draft_vocab_size=32000,
                                    target_hidden_size=576, head_dim=64)).cuda()
    draft.set_vocab(torch.zeros(32000, dtype=torch.long, device="cuda"),
                    torch.cat([torch.ones(32000), torch.zeros(49152 - 32000)]).bool().cuda())
    opt = torch.optim.AdamW([p for p in draft.parameters() if p.requires_grad], lr=1e-4, fused=True)
    width = 320
    rows = batch_tokens // width
    ids = torch.randint(0, 49152, (rows, width), device="cuda")
    attn = torch.ones_like(ids)
    mask = torch.ones_like(ids)
    mask[:, : round(width * (1 - SUPERVISED_SHARE))] = 0  # a prompt before each answer, as in the real rows
    counted = loss_rows(mask.cpu()).cuda()
    out: dict[str, Any] = {"tokens": rows * width, "supervised_share": SUPERVISED_SHARE}
    for mode in ("all_positions", "counted_rows"):  # the loss over every position, or over the counted ones only
        phases: dict[str, list[float]] = {}

        def mark(name: str, t0: float, phases: dict[str, list[float]] = phases) -> float:
            torch.cuda.synchronize()
            now = time.perf_counter()
            phases.setdefault(name, []).append((now - t0) * 1e3)
            return now

        for _ in range(8):
            torch.cuda.synchronize()
            t = time.perf_counter()
            aux, target_logits = target_states(scorer, None, ids, attn, layers)
            t = mark("target_forward", t)
            if mode == "all_positions":
                tdl, inv = restrict_to_draft_vocab(target_logits, draft.d2t, draft.t2d)
                t = mark("restrict_vocab", t)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = draft(ids, aux, 7, rows=None if mode == "all_positions" else counted)
            t = mark("draft_unroll", t)
            if mode == "all_positions":
                loss = ttt_loss(logits, tdl, inv, mask)
            else:
                loss = ttt_loss_rows(logits, target_logits, draft.d2t, draft.t2d, counted, width)
            t = mark("loss", t)
            opt.zero_grad(set_to_none=True)
            loss.total.backward()
            t = mark("backward", t)
            torch.nn.utils.clip_grad_norm_(draft.parameters(), 0.5)
            opt.step()
            mark("optimizer", t)
        arm: dict[str, Any] = {k: round(statistics.median(v[2:]), 2) for k, v in phases.items()}
        arm["step_ms"] = round(sum(arm.values()), 2)
        arm["tokens_per_s"] = round(out["tokens"] / arm["step_ms"] * 1e3, 1)
        arm["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
        torch.cuda.reset_peak_memory_stats()
        out[mode] = arm
    out["counted_over_all_tokens_per_s"] = round(out["counted_rows"]["tokens_per_s"]
                                                 / out["all_positions"]["tokens_per_s"], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="/tmp/dh/target")
    parser.add_argument("--out", default="benchmarks/results/gpu_profile.json")
    parser.add_argument("--slots", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--max-len", type=int, default=832)
    parser.add_argument("--batch-tokens", type=int, nargs="+", default=[8192, 32768])
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.bfloat16).cuda().eval()
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "decode": [],
                              "train": []}
    for slots in args.slots:
        result["decode"].append({k: round(v, 3) if isinstance(v, float) else v
                                 for k, v in decode_profile(target, slots, args.max_len).items()})
        print(json.dumps(result["decode"][-1]))
        torch.cuda.empty_cache()
    del target
    for bt in args.batch_tokens:
        result["train"].append(train_profile(Path(args.target), bt))
        print(json.dumps(result["train"][-1]))
        torch.cuda.empty_cache()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
