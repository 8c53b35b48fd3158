"""What a resumed run may change: the settings saved beside a checkpoint against the ones given now.

A run resumes from its newest checkpoint, and the checkpoint restores the optimizer's and the schedule's own
learning rate, so a new `--lr` (or batch size, data, TTT steps …) given at resume would be silently ignored or
silently mixed into a run that then no longer matches its saved config. `changed_settings` lists what differs;
the trainer refuses such a resume in one line (unless `force_resume`), naming the keys and the ways out.
Settings that only say how long to run, how often to log or save, where to run and how to export may change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from training.config import CONFIG_FILE, ConfigError, TrainConfig

# May differ at resume: how long (a longer run continues the same schedule stretched to the new end), how
# often to log or save and how many checkpoints to keep, the device and kernels, the export, and the resume
# switches themselves.
FREE_TO_CHANGE = frozenset({
    "out", "resume", "force_resume", "max_steps", "epochs", "save_every", "keep_checkpoints", "log_every", "device",
    "attention_kernels", "export_dtype", "export_engine", "serving_context",
})
# The draft's shapes come from these: a checkpoint of other shapes cannot be loaded, forced or not.
SHAPES = frozenset({"target", "draft_vocab_size", "draft_intermediate_size", "aux_layer_ids"})
PATHS = frozenset({"data", "target", "cache"})


class ResumeMismatchError(ConfigError):
    """A resume whose settings differ from the ones the checkpoint was trained with."""


def _comparable(key: str, value: Any) -> Any:
    if key in PATHS and value is not None:
        return str(Path(value).expanduser().resolve())
    return list(value) if isinstance(value, tuple) else value


def changed_settings(saved: dict[str, Any], cfg: TrainConfig) -> dict[str, tuple[Any, Any]]:
    """Return {key: (saved value, new value)} for every setting outside FREE_TO_CHANGE that differs."""
    now = json.loads(cfg.model_dump_json())
    changed = {}
    for key in sorted(set(saved) & set(now)):  # a key the saved config lacks predates it: nothing to compare
        if key in FREE_TO_CHANGE:
            continue
        before, after = _comparable(key, saved.get(key)), _comparable(key, now.get(key))
        if before != after:
            changed[key] = (saved.get(key), now.get(key))
    return changed


def check_resume(checkpoint: Path, cfg: TrainConfig) -> dict[str, tuple[Any, Any]]:
    """Compare cfg with the config saved in the checkpoint folder; return what changed (empty when nothing did).

    Raises ResumeMismatchError naming the changed keys unless cfg.force_resume, and even then when a change
    alters the draft's shapes. A checkpoint without a readable config (written by another tool) is not checked.
    """
    try:
        saved = json.loads((checkpoint / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    changed = changed_settings(saved, cfg)
    if not changed:
        return changed
    listed = ", ".join(f"{key} {before} → {after}" for key, (before, after) in changed.items())
    shapes = sorted(SHAPES & set(changed))
    if shapes:
        raise ResumeMismatchError(
            f"{cfg.out} holds a run of other settings ({listed}); {', '.join(shapes)} change the draft's shapes, "
            "so it cannot continue: pass another --out for a new run")
    if not cfg.force_resume:
        raise ResumeMismatchError(
            f"{cfg.out} holds a run of other settings ({listed}): leave them as they were to resume, pass another "
            "--out for a new run, or --force-resume to continue this one with the new settings")
    return changed
