"""`datahunt capture`: the target's hidden states over the training rows, written once as the offline cache.

Runs as one process, or under `torchrun` with `--shard-target` to split the target's weights over the ranks
(FSDP2); the cache is the same either way and `train --mode offline --cache DIR` reads it. A rerun with the
same arguments finishes a cache a killed run left. Bad input ends with one `error:` line.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from server.commands.failure import EXIT_FAILED, EXIT_USAGE, fail


def _aux_ids(text: str | None) -> tuple[int, int, int] | None:
    if text is None:
        return None
    try:
        ids = tuple(int(x) for x in text.split(","))
    except ValueError:
        ids = ()
    if len(ids) != 3:
        fail(f"--aux-layers {text!r}: give three input-of-layer ids, e.g. 2,30,58", EXIT_USAGE)
    return ids  # three ints, checked above (fail never returns)


def capture(
    data: Path = typer.Option(..., "--data", help="Training JSONL (regenerated or curated rows), as `train` reads it."),
    target: Path = typer.Option(..., "--target", help="Target model folder (transformers layout)."),
    out: Path = typer.Option(..., "--out", help="Cache folder to write (or to finish, after a killed run)."),
    messages_field: str = typer.Option("conversations", "--messages-field",
                                       help="conversations | messages | original_messages."),
    max_length: int = typer.Option(2048, "--max-length", min=8, help="Tokens per row, as in `train`."),
    aux_layers: str | None = typer.Option(None, "--aux-layers", help="Input-of-layer ids, e.g. 2,30,58 "
                                          "(default SGLang's [2, L//2, L-3])."),
    shard_mb: float = typer.Option(1024, "--shard-mb", min=0.001, help="Upper bound of one shard file, in MiB."),
    batch_tokens: int = typer.Option(8192, "--batch-tokens", min=8, help="Tokens per forward (rows x width)."),
    dtype: str = typer.Option("bfloat16", "--dtype", help="bfloat16 | float32: how states are stored."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda"),
    shard_target: bool = typer.Option(False, "--shard-target", help="Under torchrun: split the target's weights "
                                      "over the ranks (FSDP2), each holding about 1/N."),
) -> None:
    """Run the target once over the training rows and write the offline cache `train --mode offline` reads."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from training.capture import CaptureConfig, run_capture
    from training.errors import TrainingError

    if dtype not in {"bfloat16", "float32"}:
        fail(f"--dtype {dtype!r}: bfloat16 or float32", EXIT_USAGE)
    if device not in {"auto", "cpu", "cuda"}:
        fail(f"--device {device!r}: auto, cpu or cuda", EXIT_USAGE)
    if messages_field not in {"conversations", "messages", "original_messages"}:
        fail(f"--messages-field {messages_field!r}: conversations, messages or original_messages", EXIT_USAGE)
    cfg = CaptureConfig(data=data, target=target, out=out, messages_field=messages_field, max_length=max_length,
                        aux_layer_ids=_aux_ids(aux_layers), shard_bytes=int(shard_mb * (1 << 20)), batch_tokens=batch_tokens,
                        dtype=dtype, device=device, shard_target=shard_target)  # type: ignore[arg-type]
    columns = (TextColumn("capture"), BarColumn(), MofNCompleteColumn(), TextColumn("rows"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("rows", total=None)
        try:
            result = run_capture(cfg, on_progress=lambda done, total: bar.update(task, completed=done, total=total))
        except (TrainingError, OSError, ValueError) as exc:
            fail(str(exc), EXIT_FAILED)
    typer.echo(json.dumps({"cache": str(result.folder), "rows": result.rows, "tokens": result.tokens,
                           "shards": result.shards, "written": result.written, "skipped": result.skipped,
                           "bytes": result.bytes, "wall_s": round(result.wall_s, 2), "ranks": result.ranks}))


def register(app: typer.Typer) -> None:
    """Attach `capture` to the main app."""
    app.command("capture")(capture)
