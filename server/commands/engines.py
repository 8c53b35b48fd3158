"""`datahunt export-draft` and `datahunt vllm-command`: a draft for the other serving engine, and its launch line.

SGLang and vLLM read a draft's `eagle_aux_hidden_state_layer_ids` differently (SGLang adds 1, vLLM takes them
as given), so one folder serves one engine correctly: `export-draft` writes the layout of the engine named,
and `vllm-command` prints vLLM's launch line for a draft after the same aux-layer check `sglang-command` runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from core.target_config import read_target_config
from server.commands.failure import EXIT_USAGE, fail

if TYPE_CHECKING:
    from core.target_config import ModelConfig


def _target_config(target: str) -> ModelConfig | None:
    return read_target_config(Path(target))


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
    draft: Path | None = typer.Option(None, "--draft", help="Draft folder exported for vLLM (serving with it)."),
    extract: bool = typer.Option(False, "--extract", help="Instead: a server that hands out the target's hidden "
                                 "states for `capture --engine vllm` and `train --features-server`."),
    aux_layers: str | None = typer.Option(None, "--aux-layers", help="With --extract: the draft's input-of-layer "
                                          "ids, e.g. 2,30,58 (default [2, L//2, L-3])."),
    storage: Path = typer.Option(Path("/tmp/datahunt-hidden-states"), "--storage", help="With --extract: where "
                                 "the engine writes the states (capture must be able to read it)."),
    cpu: bool = typer.Option(False, "--cpu", help="With --extract: vLLM's CPU build (datahunt's synchronous "
                             "connector instead of the stock CUDA one)."),
    tensor_parallel: int = typer.Option(1, "--tensor-parallel-size", min=1, help="With --extract: GPUs the "
                                        "target is split over."),
    steps: int = typer.Option(5, "--steps", help="num_speculative_tokens (a chain)."),
    context_length: int | None = typer.Option(None, "--context-length"),
    port: int = typer.Option(8000, "--port"),
    memory_fraction: float | None = typer.Option(None, "--gpu-memory-utilization",
                                                 help="vLLM's memory share (0.3 or less on a 24 GiB CPU machine)."),
) -> None:
    """Print the vLLM launch command for this draft (after checking its aux layer ids read right in vLLM), or
    with --extract the command of a server that hands out the target's hidden states."""
    if extract:
        _extract_command(target, aux_layers, storage, cpu, tensor_parallel, context_length, port, memory_fraction)
        return
    if draft is None:
        fail("--draft is required (or --extract for a hidden-state server)", EXIT_USAGE)
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


def _extract_command(target: str, aux_layers: str | None, storage: Path, cpu: bool, tensor_parallel: int,
                     context_length: int | None, port: int, memory_fraction: float | None) -> None:
    from inference.decoding.hidden_states import AuxLayers, default_aux_layers, parse_aux_ids
    from inference.vllm_extract import plan_extract_launch
    from training.engine_features import EngineLayers

    config = _target_config(target)
    if config is None:
        fail(f"--extract needs the target's config.json to choose the layers: {target} is not a local folder "
             "with one", EXIT_USAGE)
    layers = int((config.get("text_config") or config)["num_hidden_layers"])
    try:
        ids = parse_aux_ids(aux_layers) if aux_layers else None
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    chosen = EngineLayers(AuxLayers(ids, "input") if ids else default_aux_layers(layers), layers)
    try:
        chosen.aux.validate(layers)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    plan = plan_extract_launch(target, chosen.extract_ids, storage, cpu=cpu, port=port,
                               max_model_len=context_length, memory_fraction=memory_fraction,
                               tensor_parallel=tensor_parallel, host="0.0.0.0")
    for note in plan.notes:
        typer.echo(f"# {note}")
    typer.echo(plan.shell())


def register(app: typer.Typer) -> None:
    """Attach the serving-engine commands to the main app."""
    app.command("export-draft")(export_draft)
    app.command("vllm-command")(vllm_command)
