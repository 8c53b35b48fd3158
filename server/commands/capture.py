"""`datahunt capture`: the target's hidden states over the training rows, written once as the offline cache.

Two ways, one cache (`train --mode offline --cache DIR` reads either):
- `--engine transformers` (the default): the target loaded here, as one process or under `torchrun` with
  `--shard-target` (FSDP2 splits the weights over the ranks), for targets that fit;
- `--engine vllm`: the serving engine computes the states (vLLM's `extract_hidden_states`), for targets of any
  size: a running server started with the line `datahunt vllm-command --target T --extract` prints
  (`--server URL`), or one started here for the capture's length (`--vllm-python` names its interpreter).
A rerun with the same arguments finishes a cache a killed run (or a dead server) left. Bad input ends with one
`error:` line.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from server.commands.failure import EXIT_FAILED, EXIT_USAGE, fail


def aux_ids(text: str | None) -> tuple[int, int, int] | None:
    """The --aux-layers option as three ids (None when not given); a bad value ends the command."""
    from inference.decoding.hidden_states import parse_aux_ids

    if text is None:
        return None
    try:
        return parse_aux_ids(text)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)


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
    engine: str = typer.Option("transformers", "--engine", help="transformers (load the target here) | vllm (the "
                               "serving engine computes the states)."),
    server: str | None = typer.Option(None, "--server", help="With --engine vllm: a running extraction server "
                                      "(else one is started here for the capture)."),
    vllm_python: str = typer.Option("python", "--vllm-python", help="With --engine vllm and no --server: the "
                                    "interpreter of vLLM's environment."),
    concurrency: int = typer.Option(32, "--concurrency", min=1, help="With --engine vllm: rows in flight."),
    storage: Path | None = typer.Option(None, "--storage", help="With --engine vllm and no --server: where the "
                                        "engine writes states (default OUT/.engine-states; read once, deleted)."),
) -> None:
    """Run the target once over the training rows and write the offline cache `train --mode offline` reads."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from training.capture import CaptureConfig, run_capture
    from training.errors import TrainingError

    if engine not in {"transformers", "vllm"}:
        fail(f"--engine {engine!r}: transformers or vllm", EXIT_USAGE)
    if engine == "transformers" and server is not None:
        fail("--server needs --engine vllm (the transformers capture loads the target here)", EXIT_USAGE)
    if dtype not in {"bfloat16", "float32"}:
        fail(f"--dtype {dtype!r}: bfloat16 or float32", EXIT_USAGE)
    if device not in {"auto", "cpu", "cuda"}:
        fail(f"--device {device!r}: auto, cpu or cuda", EXIT_USAGE)
    if messages_field not in {"conversations", "messages", "original_messages"}:
        fail(f"--messages-field {messages_field!r}: conversations, messages or original_messages", EXIT_USAGE)
    if engine == "vllm":
        if shard_target:
            fail("--shard-target is for --engine transformers: the engine shards the target itself", EXIT_USAGE)
        _engine_capture(data, target, out, messages_field, max_length, aux_ids(aux_layers), shard_mb, dtype,
                        server, vllm_python, concurrency, storage)
        return
    cfg = CaptureConfig(data=data, target=target, out=out, messages_field=messages_field, max_length=max_length,
                        aux_layer_ids=aux_ids(aux_layers), shard_bytes=int(shard_mb * (1 << 20)),
                        batch_tokens=batch_tokens,
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


def _engine_capture(data: Path, target: Path, out: Path, messages_field: str, max_length: int,
                    aux: tuple[int, int, int] | None, shard_mb: float, dtype: str, server: str | None, python: str,
                    concurrency: int, storage: Path | None) -> None:
    """`capture --engine vllm`: the cache from the engine's states, with a bar of rows/s and tokens/s."""
    import time

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from inference.errors import InferenceError
    from server.usecases.engine_features import capture_from_engine
    from training.atomic_files import hold_folder
    from training.engine_capture import EngineCaptureConfig
    from training.errors import TrainingError

    cfg = EngineCaptureConfig(data=data, target=target, out=out, messages_field=messages_field,
                              max_length=max_length, aux_layer_ids=aux, shard_bytes=int(shard_mb * (1 << 20)),
                              dtype=dtype)  # type: ignore[arg-type]
    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("rows"),
               TextColumn("{task.fields[rate]}"), TimeElapsedColumn())
    started = time.monotonic()
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("starting vLLM" if server is None else "capture", total=None, rate="")

        def waiting(seconds: float) -> None:
            bar.update(task, description=f"starting vLLM ({seconds:.0f} s)")

        def progress(done: int, total: int, tokens: int) -> None:
            elapsed = max(time.monotonic() - started, 1e-6)
            bar.update(task, description="capture", completed=done, total=total,
                       rate=f"{done / elapsed:.1f} rows/s  {tokens / elapsed:,.0f} tok/s")

        try:
            with hold_folder(out):  # one writer per cache folder, taken before the engine starts writing into it
                result = capture_from_engine(cfg, url=server, python=python, concurrency=concurrency,
                                             storage=storage or out / ".engine-states", on_wait=waiting,
                                             on_progress=progress)
        except InferenceError as exc:  # the engine went away or answered nonsense: what is finished stays
            done = len(list(out.glob("shard_*.done")))
            fail(f"{exc}; {done} finished shard(s) are kept in {out}: run the same command again to resume",
                 EXIT_FAILED)
        except (TrainingError, OSError, ValueError) as exc:
            fail(str(exc), EXIT_FAILED)
    typer.echo(json.dumps({"cache": str(result.folder), "engine": "vllm", "rows": result.rows,
                           "tokens": result.tokens, "shards": result.shards, "written": result.written,
                           "skipped": result.skipped, "bytes": result.bytes, "wall_s": round(result.wall_s, 2)}))


def register(app: typer.Typer) -> None:
    """Attach `capture` to the main app."""
    app.command("capture")(capture)
