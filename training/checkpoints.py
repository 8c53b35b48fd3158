"""A run's checkpoints: out/checkpoints/step_N/{state.pt, train_config.json}, written whole, the newest few kept.

A checkpoint holds what a resumed run cannot make again: the draft's trained weights, the optimizer and scheduler
states, the step and the progress counted so far. It leaves out the draft's token embedding, which is frozen and
copied from the target at every start (49,152 x 576 in float32 for SmolLM2: 113 MB of a 396 MB checkpoint).
Checkpoints written with it still resume.

Only the newest `keep_checkpoints` are kept: a 96K-sample run checkpointing every 200 steps wrote 34 of them
(13 GB). Two or more keep the fallback a resume takes when the newest is unreadable. Pruning removes only the
files this module writes, never through a link, and leaves a folder that holds anything else.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import re
from pathlib import Path
from typing import Any, BinaryIO, cast

import torch

from inference.decoding.draft_model import Eagle3Draft
from training.atomic_files import (
    OutputWriteError,
    UnsafePathError,
    WriteErrorKeeper,
    remove_file,
    staged_file,
)
from training.config import CONFIG_FILE, TrainConfig, save_config
from training.progress import Progress, RunProgress

logger = logging.getLogger(__name__)

FROZEN_KEYS = ("embed_tokens.weight",)  # made again from the target at every start: not saved
STEP_FOLDER = re.compile(r"step_\d{7}")
OWN_FILES = ("state.pt", CONFIG_FILE)


def save_checkpoint(cfg: TrainConfig, draft: Eagle3Draft, optimizer: Any, scheduler: Any, step: int,
                    progress: Progress | None = None) -> Path:
    """Write out/checkpoints/step_N: weights, optimizer, scheduler, step, the tokens and loop seconds so far (so
    a resumed run reports the whole run's), and the run config beside them; then drop the checkpoints older than
    the newest `cfg.keep_checkpoints`."""
    counted = (RunProgress(tokens=progress.tokens, elapsed_s=progress.elapsed()) if progress is not None
               else RunProgress())
    folder = cfg.out / "checkpoints" / f"step_{step:07d}"
    weights = {k: v for k, v in draft.state_dict().items() if k not in FROZEN_KEYS}
    state = {"draft": weights, "optimizer": optimizer.state_dict(),
             "scheduler": scheduler.state_dict(), "step": step, "progress": counted}
    # A fresh temporary file renamed into place whole: a kill mid-write leaves no state.pt, a failed write
    # (a full disk) removes the temporary file and is one OutputWriteError naming the checkpoint.
    try:
        save_config(cfg, folder, root=cfg.out)
        with staged_file(folder / "state.pt", root=cfg.out) as handle:
            kept = WriteErrorKeeper(handle)
            try:
                torch.save(state, cast(BinaryIO, kept))  # a file as far as torch.save goes: write, flush
            except RuntimeError:  # torch hides a failed write behind "unexpected pos": name the OS's reason
                if kept.error is None:
                    raise
                raise kept.error from None
    except (OSError, RuntimeError) as exc:  # torch wraps a failed write in RuntimeError
        if isinstance(exc, UnsafePathError):
            raise
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[-1]
        raise OutputWriteError(f"cannot write the checkpoint {folder / 'state.pt'}: {reason}") from None
    prune_checkpoints(cfg.out, cfg.keep_checkpoints)
    return folder


def checkpoint_folders(out: Path) -> list[Path]:
    """The step folders under out/checkpoints holding a state.pt, newest first (links are not checkpoints)."""
    root = out / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if STEP_FOLDER.fullmatch(p.name) and not p.is_symlink() and p.is_dir()
             and (p / "state.pt").is_file()]
    return sorted(found, key=lambda p: p.name, reverse=True)


def prune_checkpoints(out: Path, keep: int) -> list[Path]:
    """Remove all but the newest `keep` checkpoints under out/checkpoints; return the folders removed."""
    removed = []
    for folder in checkpoint_folders(out)[keep:]:
        for name in OWN_FILES:
            remove_file(folder / name, root=out)
        with contextlib.suppress(OSError):  # a folder still holding something else is left as it is
            os.rmdir(folder)
        removed.append(folder)
    if removed:
        logger.info("removed %d older checkpoint(s), keeping the newest %d", len(removed), keep)
    return removed


def newest_checkpoint(cfg: TrainConfig) -> Path | None:
    """The newest checkpoint folder under out/checkpoints holding a state.pt, or None."""
    found = checkpoint_folders(cfg.out)
    return found[0] if found else None


def resume(cfg: TrainConfig, draft: Eagle3Draft, optimizer: Any, scheduler: Any) -> tuple[int, RunProgress]:
    """Load the newest checkpoint under out/checkpoints (if any): its step and the progress counted up to it
    (tokens, elapsed_s; empty for a checkpoint written before they were kept), else (0, {})."""
    for folder in checkpoint_folders(cfg.out):
        path = folder / "state.pt"
        try:
            state = torch.load(path, weights_only=True)
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as exc:
            logger.warning("skipping unreadable checkpoint %s (%s); trying the one before", folder, exc)
            continue
        load_weights(draft, state["draft"], path)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if cfg.force_resume:  # the checkpoint restored the old lr and weight decay: the new ones apply from here
            scheduler.base_lrs = [cfg.lr for _ in optimizer.param_groups]
            for group, rule in zip(optimizer.param_groups, scheduler.lr_lambdas, strict=True):
                group.update(initial_lr=cfg.lr, weight_decay=cfg.weight_decay, lr=cfg.lr * rule(scheduler.last_epoch))
        logger.info("resumed from %s", folder)
        return int(state["step"]), cast(RunProgress, dict(state.get("progress") or {}))
    return 0, RunProgress()


def load_weights(draft: Eagle3Draft, weights: dict[str, torch.Tensor], path: Path) -> None:
    """Load a checkpoint's draft weights: every key but the frozen ones must be there, and nothing else."""
    result = draft.load_state_dict(weights, strict=False)
    missing = [k for k in result.missing_keys if k not in FROZEN_KEYS]
    if missing or result.unexpected_keys:
        raise RuntimeError(f"{path}: the checkpoint's draft does not fit this run's (missing "
                           f"{missing[:4]}, unexpected {result.unexpected_keys[:4]})")
