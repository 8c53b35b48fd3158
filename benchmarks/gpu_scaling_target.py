"""The `target` stage of benchmarks/gpu_scaling.py: the carried GGUF parts joined, checked against their sha256
and made a transformers folder by the product (`inference.target_folder.prepare_target`, `datahunt target
prepare`); a rehearsal's toy target keeps only the first decoder layers (`truncate_layers`).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def make_target(args: argparse.Namespace) -> None:
    """Join the carried parts, check the hash, write the transformers target folder."""
    from inference.target_folder import prepare_target

    work = Path(args.work)
    target = work / "target"
    if (target / "datahunt_target.json").exists():
        print("target already made")
        return
    gguf = work / GGUF_NAME
    with gguf.open("wb") as dst:
        for part in sorted((work / "parts").glob("part*")):
            dst.write(part.read_bytes())
    record = prepare_target(str(gguf), target, expect_sha256=GGUF_SHA256)
    if args.layers:  # a rehearsal: the whole target stays beside the toy one (`write-prompts --writer-target`)
        shutil.copytree(target, work / "target_full", dirs_exist_ok=True)
        truncate_layers(target, args.layers)
    print(json.dumps({"sha256_ok": True, "seconds": record.seconds, "chat_template": record.chat_template,
                      "layers": args.layers or "all"}))


def truncate_layers(target: Path, layers: int) -> None:
    """Keep the target's first `layers` decoder layers (embeddings, final norm and head stay): a real-vocab,
    real-tokenizer target small enough for a CPU rehearsal of the whole plan. Never a result to publish."""
    from safetensors.torch import load_file, save_file

    config = json.loads((target / "config.json").read_text())
    if not 3 <= layers < config["num_hidden_layers"]:
        raise SystemExit(f"--layers must lie in [3, {config['num_hidden_layers'] - 1}], got {layers}")
    weights = load_file(str(target / "model.safetensors"))
    kept = {k: v for k, v in weights.items() if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers}
    save_file(kept, str(target / "model.safetensors"), metadata={"format": "pt"})
    config["num_hidden_layers"] = layers
    if "layer_types" in config:
        config["layer_types"] = config["layer_types"][:layers]
    (target / "config.json").write_text(json.dumps(config, indent=2))
