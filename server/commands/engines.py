"""`datahunt export-draft` and `datahunt vllm-command`: a draft for the other serving engine, and its launch line.

SGLang and vLLM read a draft's `eagle_aux_hidden_state_layer_ids` differently (SGLang adds 1, vLLM takes them
as given), so one folder serves one engine correctly: `export-draft` writes the layout of the engine named,
and `vllm-command` prints vLLM's launch line for a draft after the same aux-layer check `sglang-command` runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from server.commands.failure import EXIT_USAGE, fail

if TYPE_CHECKING:
    from training.model_config import ModelConfig


def _target_config(target: str) -> ModelConfig | None:
    from training.model_config import read_model_config

    config_file = Path(target) / "config.json"
    return read_model_config(config_file) if config_file.is_file() else None


def export_draft(
    draft: Path = typer.Argument(..., help="An exported draft folder (from `datahunt train`)."),
    serving_engine: str = typer.Option(..., "--engine", help="sglang | vllm: the serving engine whose aux "
                                       "layer-id layout to write."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder to write (not the source)."),
) -> None:
    """Write the draft for another serving engine: the same weights, the layer ids it reads as trained."""
    from training.errors import TrainingError
    from training.export import ENGINES, convert_export, read_config

    chosen = next((e for e in ENGINES if e == serving_engine), None)
    if chosen is None:
        fail(f"--engine must be one of {', '.join(ENGINES)}, not {serving_engine!r}", EXIT_USAGE)
    if not draft.is_dir():
        fail(f"draft folder {draft} does not exist")
    try:
        folder = convert_export(draft, out, chosen)
        ids = read_config(folder)["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    except (TrainingError, OSError) as exc:
        fail(str(exc))
    typer.echo(f"wrote {folder.resolve()}: {serving_engine} layout, eagle_aux_hidden_state_layer_ids {ids}")


def vllm_command(
    target: str = typer.Option(..., "--target", help="Target model folder (or Hub id) as vLLM takes it."),
    draft: Path = typer.Option(..., "--draft", help="Draft folder exported for vLLM."),
    steps: int = typer.Option(5, "--steps", help="num_speculative_tokens (a chain)."),
    context_length: int | None = typer.Option(None, "--context-length"),
    port: int = typer.Option(8000, "--port"),
    memory_fraction: float | None = typer.Option(None, "--gpu-memory-utilization",
                                                 help="vLLM's memory share (0.3 or less on a 24 GiB CPU machine)."),
) -> None:
    """Print the vLLM launch command for this draft, after checking its aux layer ids read right in vLLM."""
    from training.errors import TrainingError
    from training.launch import plan_vllm_launch
    from training.preflight import read_draft

    try:
        plan = plan_vllm_launch(target, draft, read_draft(draft), steps=steps, context_length=context_length,
                                port=port, target_config=_target_config(target), memory_fraction=memory_fraction)
    except (TrainingError, OSError, ValueError) as exc:
        fail(str(exc))
    for note in plan.notes:
        typer.echo(f"# {note}")
    from training.gate import gate_warning

    warning = gate_warning(draft)
    if warning:  # a draft never gated against the deployed one may regress where nobody looked
        typer.echo(f"warning: {warning}", err=True)
    typer.echo(plan.shell())  # the last line printed


def register(app: typer.Typer) -> None:
    """Attach the serving-engine commands to the main app."""
    app.command("export-draft")(export_draft)
    app.command("vllm-command")(vllm_command)
