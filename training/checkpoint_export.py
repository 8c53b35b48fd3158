"""A serving folder from any checkpoint of a run: a run stopped before its end (a time limit, a lost machine's last
state brought back) can be evaluated and served as it stood, without training further.

The checkpoint's own config says how the draft is shaped and which target layers it reads; the target (whose
frozen embedding the checkpoint leaves out) is loaded on the CPU, from the config's path or one given when the
run folder has moved. The export is the one `train` writes at its end (same layout, dtype rule and engines): a
run's last checkpoint exports to the same weights as its `export/`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from training.checkpoints import checkpoint_folders, load_weights
from training.config import CONFIG_FILE, load_config
from training.data import run_folder_rendering
from training.draft_setup import export_dtype, new_draft
from training.errors import TrainingError
from training.export import Engine, convert_export, export_draft
from training.trainer import aux_layers, load_target

logger = logging.getLogger(__name__)


class CheckpointNotFoundError(TrainingError, FileNotFoundError):
    """The run folder holds no checkpoint (or not the step asked for); the message says which there are."""


@dataclass
class CheckpointExport:
    """Which checkpoint was exported, and where."""

    checkpoint: Path
    step: int
    export_dir: Path
    engines: list[str]


def pick_checkpoint(run: Path, step: int | None = None) -> Path:
    """The run's newest checkpoint folder, or the one of `step`; CheckpointNotFoundError naming those there are."""
    found = checkpoint_folders(run)
    if not found:
        raise CheckpointNotFoundError(f"{run} holds no checkpoint (looked for checkpoints/step_*/state.pt)")
    if step is None:
        return found[0]
    wanted = [f for f in found if int(f.name.removeprefix("step_")) == step]
    if not wanted:
        steps = ", ".join(str(int(f.name.removeprefix("step_"))) for f in found[:8])
        raise CheckpointNotFoundError(f"{run} has no checkpoint of step {step} (it has: {steps})")
    return wanted[0]


def export_checkpoint(run: Path, out: Path | None = None, *, step: int | None = None, target: Path | None = None,
                      engine: str | None = None) -> CheckpointExport:
    """Write the serving folder of a checkpoint of `run` (newest, or of `step`) into `out` (default
    RUN/export-step_N); `engine` sglang | vllm | both, default the run's own."""
    folder = pick_checkpoint(run, step)
    overrides: dict[str, object] = {"target": str(target)} if target is not None else {}
    if engine is not None:
        overrides["export_engine"] = engine
    cfg = load_config(folder / CONFIG_FILE, overrides)
    target_model, _ = load_target(cfg.target, torch.device("cpu"), cfg.bf16)
    draft = new_draft(target_model, cfg)
    path = folder / "state.pt"
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except (OSError, RuntimeError, EOFError) as exc:
        raise TrainingError(f"{path}: unreadable checkpoint ({exc})") from None
    load_weights(draft, state["draft"], path)
    layers = target_model.config.num_hidden_layers
    out = out or run / f"export-{folder.name}"
    first: Engine = "vllm" if cfg.export_engine == "vllm" else "sglang"
    rendering = run_folder_rendering(run)
    export_draft(draft, aux_layers(cfg, layers), out, dtype=export_dtype(cfg, target_model), target_layers=layers,
                 engine=first, rendering=rendering.as_json() if rendering is not None else None)
    engines: list[str] = [first]
    if cfg.export_engine == "both":
        convert_export(out, out.with_name(out.name + "-vllm"), "vllm")
        engines.append("vllm")
    logger.info("exported %s (step %d) to %s", folder, int(state["step"]), out)
    return CheckpointExport(checkpoint=folder, step=int(state["step"]), export_dir=out, engines=engines)
