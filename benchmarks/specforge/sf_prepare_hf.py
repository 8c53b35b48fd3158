"""HF-transformers stand-in for SpecForge's scripts/prepare_hidden_states.py (which needs sglang).

Writes SpecForge offline EAGLE-3 feature files (storage contract `specforge_hidden_states_v1`):
  <out>/rows_<g>-<g+2000>/data_<i>.ckpt = {"input_ids": [L] int64, "loss_mask": [L] int64,
                                           "hidden_state": [1, L, H] (final, post-norm = lm_head input),
                                           "aux_hidden_state": [1, L, 3H] (low||mid||high)}
Tokenization and loss masks come from SpecForge's own GeneralParser (specforge.data.parse), and the capture
layers from SpecForge's own algorithm registry (resolve_offline_capture), so only the target forward differs:
HF `output_hidden_states=True` instead of a patched sglang ModelRunner. SpecForge layer ids are output-of-layer
ids (sglang adds 1 and captures the input of the next layer), i.e. HF hidden_states[id + 1].

No `datasets`, no sglang, no torch.distributed. Works on CPU and CUDA. Resumable: with --skip-existing a
forward whose rows all have their file already is skipped, so a call cut short by a time limit continues. The
last thing written is <out>/features.json (rows, tokens, seconds, capture layers): its presence marks the set whole;
<out>/lengths.json beside it holds each row's token and supervised-token counts.
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import os
import time

import torch


def open_any(path: str):
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    if path.endswith(".xz"):
        return lzma.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def register_template(name: str) -> None:
    from specforge.data.template import TEMPLATE_REGISTRY, ChatTemplate

    if name in TEMPLATE_REGISTRY.get_all_template_names():
        return
    if name != "smollm2":
        raise SystemExit(f"unknown template {name!r}")
    # ChatML. system_prompt=None: no system turn is injected by SpecForge, so the tokenizer's own Jinja template
    # adds SmolLM2's default system prompt exactly as it does at serving time.
    TEMPLATE_REGISTRY.register(
        name="smollm2",
        template=ChatTemplate(
            assistant_header="<|im_start|>assistant\n",
            user_header="<|im_start|>user\n",
            system_prompt=None,
            end_of_turn_token="<|im_end|>\n",
        ),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--data", required=True, help="jsonl(.gz/.xz) rows with a 'conversations' list")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-length", type=int, default=1024)
    ap.add_argument("--num-samples", type=int, default=None)
    ap.add_argument("--chat-template", default="smollm2")
    ap.add_argument("--batch-tokens", type=int, default=65536, help="padded tokens per target forward")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--file-group-size", type=int, default=2000)
    ap.add_argument("--tokens-out", default=None, help="also write input_ids/loss_mask as jsonl (for diffing)")
    ap.add_argument("--draft-config", default=None,
                    help="the draft config training reads: its eagle_aux_hidden_state_layer_ids pick the layers")
    ap.add_argument("--skip-existing", action="store_true", help="skip forwards whose files all exist (resume)")
    args = ap.parse_args()

    from specforge.application import resolve_offline_capture
    from specforge.config import Config
    from specforge.data.parse import GeneralParser
    from specforge.data.template import TEMPLATE_REGISTRY
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    register_template(args.chat_template)
    target_config = AutoConfig.from_pretrained(args.target)
    model_cfg = {"target_model_path": args.target}
    if args.draft_config:
        model_cfg["draft_model_config"] = args.draft_config
    cfg = Config(
        model=model_cfg,
        data={"hidden_states_path": args.out, "max_length": args.max_length},
        training={"strategy": "eagle3"},
    )
    plan = resolve_offline_capture(cfg, target_config=target_config)
    layers = list(plan.capture_layers)
    print(f"capture layers (SpecForge output-of-layer ids): {layers} -> HF hidden_states{[i + 1 for i in layers]}")

    tok = AutoTokenizer.from_pretrained(args.target)
    parser = GeneralParser(tok, TEMPLATE_REGISTRY.get(args.chat_template))

    rows = []
    with open_any(args.data) as f:
        for line in f:
            if args.num_samples is not None and len(rows) >= args.num_samples:
                break
            rows.append(json.loads(line))
    t0 = time.time()
    toks = []
    skipped = 0
    for r in rows:
        ids, mask = parser.parse(r["conversations"], args.max_length)
        if int(mask.sum()) == 0:
            skipped += 1
            continue
        toks.append((r.get("id"), ids.long(), mask.long()))
    n_tok = sum(len(t[1]) for t in toks)
    print(f"tokenized {len(toks)} rows ({skipped} without loss tokens skipped), {n_tok} tokens, "
          f"mean {n_tok / max(1, len(toks)):.1f}, {time.time() - t0:.1f}s")
    if args.tokens_out:
        with open(args.tokens_out, "w") as f:
            for rid, ids, mask in toks:
                f.write(json.dumps({"id": rid, "input_ids": ids.tolist(), "loss_mask": mask.tolist()}) + "\n")

    dtype = getattr(target_config, "dtype", None) or torch.bfloat16
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(args.target, dtype=dtype).to(args.device).eval()

    order = sorted(range(len(toks)), key=lambda i: len(toks[i][1]))
    batches, cur, cur_max = [], [], 0
    for i in order:
        n = len(toks[i][1])
        if cur and max(cur_max, n) * (len(cur) + 1) > args.batch_tokens:
            batches.append(cur)
            cur, cur_max = [], 0
        cur.append(i)
        cur_max = max(cur_max, n)
    if cur:
        batches.append(cur)

    t1 = time.time()
    written = skipped_forwards = 0

    def path_of(i: int) -> str:
        g = (i // args.file_group_size) * args.file_group_size
        return os.path.join(args.out, f"rows_{g}-{g + args.file_group_size}", f"data_{i}.ckpt")

    for n_batch, b in enumerate(batches):
        if args.skip_existing and all(os.path.exists(path_of(i)) for i in b):
            skipped_forwards += 1
            continue
        L = max(len(toks[i][1]) for i in b)
        ids = torch.full((len(b), L), tok.pad_token_id or 0, dtype=torch.long)
        att = torch.zeros((len(b), L), dtype=torch.long)
        for j, i in enumerate(b):
            n = len(toks[i][1])
            ids[j, :n] = toks[i][1]
            att[j, :n] = 1
        with torch.no_grad():
            out = model.model(input_ids=ids.to(args.device), attention_mask=att.to(args.device),
                              output_hidden_states=True)
        hs = out.hidden_states
        aux = torch.cat([hs[k + 1] for k in layers], dim=-1)
        last = hs[-1]
        for j, i in enumerate(b):
            n = len(toks[i][1])
            rec = {
                "input_ids": toks[i][1].clone(),
                "loss_mask": toks[i][2].clone(),
                "hidden_state": last[j, :n].to("cpu", dtype).clone().unsqueeze(0),
                "aux_hidden_state": aux[j, :n].to("cpu", dtype).clone().unsqueeze(0),
            }
            path = path_of(i)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            torch.save(rec, path + ".tmp")
            os.replace(path + ".tmp", path)  # whole or absent: a kill mid-write leaves no half file
            written += 1
        if n_batch % 20 == 0:
            print(f"forward {n_batch + 1}/{len(batches)}, {written} files, {time.time() - t1:.0f}s", flush=True)
    print(f"wrote {written} feature files to {args.out} in {time.time() - t1:.1f}s "
          f"({len(batches)} forwards on {args.device}, {skipped_forwards} already done)")
    summary = {"rows": len(toks), "skipped_without_loss": skipped, "tokens": n_tok,
               "mean_tokens": round(n_tok / max(1, len(toks)), 1), "capture_layers": layers,
               "seconds": round(time.time() - t1, 1), "forwards": len(batches), "device": args.device}
    with open(os.path.join(args.out, "lengths.json"), "w") as fh:  # per row: tokens, supervised tokens
        json.dump({"tokens": [len(t[1]) for t in toks], "supervised": [int(t[2].sum()) for t in toks]}, fh)
    with open(os.path.join(args.out, "features.json"), "w") as fh:
        json.dump(summary, fh)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
