"""`datahunt train`, `export-checkpoint`, `check-template`, `forecast`, `sglang-command`: the retraining stage's door.

`train` trains and exports an EAGLE-3 draft; `export-checkpoint` exports one checkpoint of a run;
`check-template` shows which tokens a row supervises; `forecast` fits acceptance length against data size
(`training.forecast`, said in words by `training.forecast_text`); `sglang-command` prints (or runs) the launch
command derived from the draft. `eval-accept` (`server.commands.eval_accept`) and `check-server`
(`server.commands.check_server`) are registered here too, so the stage's commands keep their order. Bad input
ends with a one-line error and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from core.target_config import read_target_config
from server.commands.check_server import check_server
from server.commands.eval_accept import eval_accept
from server.commands.failure import EXIT_FAILED, EXIT_USAGE, fail
from server.commands.retraining_errors import user_errors

if TYPE_CHECKING:
    from training.config import TrainConfig
    from training.trainer import TrainResult


def train(
    config: Path | None = typer.Option(None, "--config", help="Run config JSON (strict: unknown keys rejected)."),
    data: Path | None = typer.Option(None, "--data", help="Training JSONL (regenerated or curated rows)."),
    target: Path | None = typer.Option(None, "--target", help="Target model folder (transformers layout)."),
    out: Path | None = typer.Option(None, "--out", help="Run folder: checkpoints/, export/, caches."),
    steps: int | None = typer.Option(None, "--steps", help="Stop after this many optimizer steps."),
    max_length: int | None = typer.Option(None, "--max-length", help="Tokens per row (longer rows are cut; "
                                          "default 2048)."),
    epochs: int | None = typer.Option(None, "--epochs", help="Passes over the data (default 1; --steps, when "
                                      "given, stops earlier)."),
    ttt_steps: int | None = typer.Option(None, "--ttt-steps", help="Training-time-test unroll length (default 7)."),
    draft_vocab_size: int | None = typer.Option(None, "--draft-vocab-size", help="Default 32000."),
    batch_size: int | None = typer.Option(None, "--batch-size", help="Rows per batch (without --batch-tokens)."),
    batch_tokens: int | None = typer.Option(None, "--batch-tokens", help="Token budget per batch: length-sorted rows "
                                            "packed up to it (the fast path on a GPU, e.g. 16384)."),
    log_every: int | None = typer.Option(None, "--log-every", help="Steps between progress lines (default 50; a "
                                         "tenth of a shorter run; the first step always)."),
    lr: float | None = typer.Option(None, "--lr", help="Peak learning rate of AdamW (default 1e-4; warm-up, then "
                                    "cosine decay)."),
    head_init: str | None = typer.Option(None, "--head-init", help="random (default, SpecForge's start) | target "
                                         "(lm_head rows and final norm from the target)."),
    mode: str | None = typer.Option(None, "--mode", help="online (target runs each batch) or offline (cached)."),
    cache: Path | None = typer.Option(None, "--cache", help="Offline mode: a cache from `datahunt capture` (its rows "
                                      "are trained on; of the target only config, tokenizer and head are read)."),
    messages_field: str | None = typer.Option(None, "--messages-field",
                                              help="conversations | messages | original_messages (control)."),
    reasoning: str | None = typer.Option(None, "--reasoning", help="served-on | served-off | keep | drop: how the "
                                         "target's thinking is served (default: what the rows' regeneration "
                                         "recorded)."),
    tool_rendering: str | None = typer.Option(None, "--tool-rendering", help="native (the template's own tool-call "
                                              "tokens) | text (datahunt's text blocks, for a template without tool "
                                              "support); default: what the rows recorded, else native."),
    serving_context: int | None = typer.Option(None, "--serving-context",
                                               help="max_position_embeddings of the draft (default: target's)."),
    device: str | None = typer.Option(None, "--device", help="auto | cpu | cuda"),
    attention_kernels: str | None = typer.Option(
        None, "--attention-kernels", help="no-cudnn (default: no per-shape plan building) | auto (torch's choice)."),
    export_engine: str | None = typer.Option(None, "--engine", help="sglang (default) | vllm | both: the serving "
                                             "engine whose aux layer-id layout export/ holds (both: export-vllm/ "
                                             "beside it)."),
    init_draft: Path | None = typer.Option(None, "--init-draft", help="Warm start from an exported draft folder, "
                                           "keeping its draft-vocab map (d2t/t2d)."),
    select_every: int | None = typer.Option(None, "--select-every", min=1, help="Every N steps estimate acceptance "
                                            "on held-out training rows (replay) and export the best draft, not the "
                                            "last."),
    select_rows: int | None = typer.Option(None, "--select-rows", min=1, help="Rows held out for --select-every "
                                           "(default 64)."),
    select_k: int | None = typer.Option(None, "--select-k", min=1, help="Chain length of the estimate (default 5)."),
    force_resume: bool = typer.Option(False, "--force-resume", help="Resume even though training settings (lr, "
                                      "batch, data, …) differ from the checkpoint's; the new ones apply from there."),
    features_server: str | None = typer.Option(
        None, "--features-server", help="A vLLM server started with `datahunt vllm-command --extract`: the target's "
        "states are asked of it as training goes (no cache; the target is never loaded here)."),
    as_json: bool = typer.Option(False, "--json", help="Print the run's summary as one JSON line instead."),
) -> None:
    """Train an EAGLE-3 draft for the target and export it in the layout SGLang (or vLLM) loads."""
    import logging

    logging.getLogger("training").setLevel(logging.INFO)  # progress (loss, per-step accuracy) on stderr
    from training.interrupt import TrainingStopped
    from training.trainer import train as run_training

    overrides = {k: v for k, v in {
        "data": data, "target": target, "out": out, "max_steps": steps, "max_length": max_length,
        "epochs": epochs, "ttt_steps": ttt_steps,
        "draft_vocab_size": draft_vocab_size, "batch_size": batch_size, "batch_tokens": batch_tokens,
        "log_every": log_every, "lr": lr, "mode": mode, "head_init": head_init,
        "messages_field": messages_field, "serving_context": serving_context, "device": device,
        "reasoning": reasoning, "tool_rendering": tool_rendering,
        "attention_kernels": attention_kernels, "export_engine": export_engine, "cache": cache,
        "force_resume": force_resume or None, "features_server": features_server, "init_draft": init_draft,
        "select_every": select_every, "select_rows": select_rows, "select_k": select_k,
    }.items() if v is not None}
    try:
        cfg = _run_config(config, overrides)
        if cfg.features_server is not None:
            from server.usecases.engine_features import training_features

            with training_features(cfg) as fetch:
                result = run_training(cfg, features=fetch)
        else:
            result = run_training(cfg)
    except TrainingStopped:  # a TrainingError too: it must reach failure.py's map, which ends it with 128 + n
        raise
    except user_errors() as exc:
        fail(str(exc), EXIT_FAILED)
    _print_trained(result, cfg, as_json=as_json)


def _run_config(config: Path | None, overrides: Mapping[str, object]) -> TrainConfig:
    """The run's strict config: `config` with `overrides` over it, or the overrides alone (which must then
    name the data or a cache, the target and the run folder)."""
    from training.config import load_config, make_config

    if config is not None:
        cfg = load_config(config, overrides)
    else:
        if (("data" not in overrides and "cache" not in overrides)
                or "target" not in overrides or "out" not in overrides):
            fail("pass --config FILE, or --data (or --cache), --target and --out", EXIT_USAGE)
        cfg = make_config(overrides)
    if not cfg.target.is_dir():
        fail(f"target folder {cfg.target} does not exist", EXIT_USAGE)
    return cfg


def export_checkpoint(
    run: Path = typer.Argument(..., help="A training run folder (the --out of `datahunt train`)."),
    step: int | None = typer.Option(None, "--step", help="The checkpoint of this step (default: the newest)."),
    out: Path | None = typer.Option(None, "--out", help="Export folder (default RUN/export-step_N)."),
    target: Path | None = typer.Option(None, "--target", help="The target folder, when it is no longer where the "
                                       "run's config says (the checkpoint leaves out its frozen embedding)."),
    engine: str | None = typer.Option(None, "--engine", help="sglang | vllm | both (default: the run's)."),
) -> None:
    """Export the draft of one checkpoint of a run (the newest by default), for a run stopped before its end."""
    from training.checkpoint_export import export_checkpoint as run_export

    if engine is not None and engine not in {"sglang", "vllm", "both"}:
        fail(f"--engine {engine!r}: one of sglang, vllm, both", EXIT_USAGE)
    try:
        done = run_export(run, out, step=step, target=target, engine=engine)
    except user_errors() as exc:
        fail(str(exc), EXIT_FAILED)
    typer.echo(json.dumps({"checkpoint": str(done.checkpoint), "step": done.step, "export": str(done.export_dir),
                           "engines": done.engines}))


def _print_trained(result: TrainResult, cfg: TrainConfig, *, as_json: bool) -> None:
    """The run's summary on one screen (or as one JSON line with `as_json`) on stdout; warnings, and the next
    commands, on stderr."""
    for key, (before, after) in result.changed.items():
        typer.echo(f"warning: resumed with {key} {before} → {after} (--force-resume)", err=True)
    if result.already_finished:
        typer.echo(f"already finished at step {result.steps}; export is {result.export_dir} (pass a larger --steps "
                   "to train on)", err=True)
    loss = round(result.loss, 4) if result.loss == result.loss else None
    summary = {"steps": result.steps, "loss": loss, "step_accuracies": [round(a, 3) for a in result.step_accuracies],
               "vocab_coverage": round(result.vocab_coverage, 4), "tokens": result.tokens,
               "tokens_per_s": round(result.tokens_per_s, 1), "wall_s": round(result.wall_s, 1),
               "export": str(result.export_dir), "log": str(cfg.out / "train_log.jsonl"),
               "loss_curve": str(cfg.out / "loss_curve.png"), **_selected(result)}
    if as_json:
        typer.echo(json.dumps(summary))
    else:
        for line in _summary_lines(summary, cfg.out / "train_log.jsonl"):
            typer.echo(line)
    serve = "vllm-command" if cfg.export_engine == "vllm" else "sglang-command"
    typer.echo(f"next: datahunt eval-accept --draft {result.export_dir} --target {cfg.target} --prompts HELDOUT.jsonl; "
               f"datahunt {serve} --target {cfg.target} --draft {result.export_dir}", err=True)


def _summary_lines(summary: Mapping[str, Any], log: Path) -> list[str]:
    """The summary as a person reads it: steps and speed, the loss from the first logged step to the last, the
    draft's accuracy per TTT step, the vocabulary it covers, and where the files are."""
    from training.progress import first_logged_loss

    first = first_logged_loss(log)
    loss = summary["loss"]
    losses = f"loss {first:.4f} → {loss:.4f} (first logged step → last)" if first is not None and loss is not None \
        else f"loss {loss if loss is not None else '?'}"
    accuracies = " ".join(f"{a:.2f}" for a in summary["step_accuracies"]) or "?"
    minutes, seconds = divmod(int(summary["wall_s"]), 60)
    return [
        f"trained {summary['steps']} steps in {minutes}m {seconds:02d}s: {summary['tokens']:,} tokens, "
        f"{summary['tokens_per_s']:,.1f} tokens/s",
        losses,
        f"draft accuracy per TTT step: {accuracies}",
        f"draft vocabulary covers {summary['vocab_coverage']:.1%} of the target's tokens in the data",
        *([f"exported the draft of step {summary['exported_step']} (estimated accept length "
             f"{summary['estimated_accept_length']})"] if "exported_step" in summary else []),
        f"export: {summary['export']}",
        f"log: {summary['log']} · loss curve: {summary['loss_curve']}",
    ]


def _selected(result: TrainResult) -> dict[str, object]:
    """With checkpoint selection: the exported step and its estimated acceptance (empty without)."""
    if result.selected is None:
        return {}
    return {"exported_step": result.selected.step,
            "estimated_accept_length": round(result.selected.accept_length, 4)}


def check_template(
    target: Path = typer.Option(..., "--target", help="Folder with the target's tokenizer and chat template."),
    data: Path = typer.Option(..., "--data", help="Training JSONL."),
    row: int = typer.Option(1, "--row", help="Which row (1-based) to render."),
    messages_field: str = typer.Option("conversations", "--messages-field"),
    reasoning: str | None = typer.Option(None, "--reasoning", help="served-on | served-off | keep | drop (default: "
                                         "what the row recorded)."),
    tool_rendering: str | None = typer.Option(None, "--tool-rendering", help="native | text (default: what the row "
                                              "recorded, else native)."),
    as_json: bool = typer.Option(False, "--json", help="Print the rendering, token ids, loss mask and spans as JSON."),
) -> None:
    """Render one row with the target's chat template and print the tokens it supervises."""
    from core.chat_render import Reasoning, ToolRendering
    from training.data import check_template as run_check
    from training.data import check_tool_support, load_conversations, run_rendering

    try:
        from transformers import AutoTokenizer

        rows = load_conversations(data, messages_field)
        if not 1 <= row <= len(rows):
            fail(f"--row {row} is outside 1..{len(rows)}", EXIT_USAGE)
        chosen = rows[row - 1]
        rendering = run_rendering([chosen], Reasoning(reasoning) if reasoning else None,
                                  ToolRendering(tool_rendering) if tool_rendering else None)
        tokenizer = AutoTokenizer.from_pretrained(str(target))
        check_tool_support(tokenizer, [chosen], rendering)
        result = run_check(tokenizer, chosen[1], chosen.tools, rendering)
    except user_errors() as exc:
        fail(str(exc), EXIT_FAILED)
    if as_json:
        typer.echo(json.dumps({"id": chosen[0], "rendering": rendering.as_json(), "text": result.text,
                               "input_ids": result.input_ids, "loss_mask": result.loss_mask,
                               "supervised": result.supervised, "ids_match": result.ids_match,
                               "detail": result.detail}))
    else:
        typer.echo(f"rendering: reasoning {rendering.reasoning.value}, tool calls {rendering.tool_rendering.value}")
        typer.echo("rendered:\n" + result.text)
        for i, span in enumerate(result.supervised, start=1):
            typer.echo(f"supervised span {i}: {span!r}")
        typer.echo(f"{sum(result.loss_mask)} of {len(result.input_ids)} tokens supervised")
        typer.echo(result.detail)
    if not result.ids_match:
        raise typer.Exit(EXIT_FAILED)  # the check's own lines above say why


def forecast(
    results: Path = typer.Argument(
        ..., help="A scaling results file (scaling.json: runs of accept length vs samples)."
    ),
    target_accept: float = typer.Option(2.5, "--target-accept", help="The acceptance length to plan for."),
    plot: Path | None = typer.Option(None, "--plot", help="PNG to draw (default: beside RESULTS)."),
    json_out: bool = typer.Option(False, "--json", help="Print the forecast as JSON."),
) -> None:
    """Fit acceptance length against data size and say how many conversations a target AL needs."""
    from training.forecast import forecast as run_forecast
    from training.forecast import load_results, plot_forecast
    from training.forecast_text import forecast_lines

    doc = load_results(results)  # a ForecastError ends as one line, exit 1 (server/commands/failure.py)
    doc["forecast"] = fc = run_forecast(doc["runs"], target_accept=target_accept)
    png = plot_forecast(doc, plot or results.with_name(results.stem + "_forecast.png"))
    if json_out:
        typer.echo(json.dumps({**{k: v for k, v in fc.items() if k not in {"grid", "band_10_90"}}, "plot": str(png)}))
        return
    for line in forecast_lines(fc, target_accept, show_points=True):
        typer.echo(line)
    typer.echo(f"plot: {png}")


def sglang_command(
    target: str = typer.Option(..., "--target", help="Target model path or Hub id as SGLang takes it."),
    draft: Path = typer.Option(..., "--draft", help="Exported draft folder."),
    steps: int = typer.Option(3, "--steps"),
    topk: int = typer.Option(1, "--topk"),
    draft_tokens: int | None = typer.Option(None, "--draft-tokens", help="Default steps + 1 (a chain)."),
    context_length: int | None = typer.Option(None, "--context-length"),
    port: int = typer.Option(30000, "--port"),
    launch: bool = typer.Option(False, "--launch", help="Start the server (needs the sglang extra)."),
) -> None:
    """Print the SGLang launch command for this draft, the algorithm and limits derived from the draft."""
    from training.launch import plan_launch
    from training.preflight import read_draft

    try:
        target_config = read_target_config(Path(target))
        plan = plan_launch(target, draft, read_draft(draft), steps=steps, topk=topk, draft_tokens=draft_tokens,
                           context_length=context_length, port=port, target_config=target_config)
    except user_errors() as exc:
        fail(str(exc), EXIT_FAILED)
    import importlib.util

    for note in plan.notes:
        typer.echo(f"# {note}")
    here = importlib.util.find_spec("sglang") is not None
    if not here:
        typer.echo(f"# sglang is not installed in this Python ({sys.executable}): run the line in the environment that "
                   "has it, on a GPU machine (pip install 'sglang[all]'); its `python` is that environment's")
    _warn_ungated(draft)  # before the line itself, which stays the last one printed on stdout
    typer.echo(plan.shell() if here else shlex.join(["python", *plan.argv[1:]]))
    typer.echo(f"next: once it serves, `datahunt check-server http://127.0.0.1:{port} --draft {draft}`, then "
               f"`datahunt eval-accept --server http://127.0.0.1:{port} --draft {draft} --prompts HELDOUT.jsonl`",
               err=True)
    if launch:
        if not here:
            fail("sglang is not installed: pip install 'sglang[all]' (the optional extra), "
                 "or run the line above", EXIT_USAGE)
        raise typer.Exit(subprocess.call(plan.argv))


def _warn_ungated(draft: Path) -> None:
    """Say on stderr when the draft has no passed `datahunt gate` for the weights it holds."""
    from training.gate import gate_warning

    warning = gate_warning(draft)
    if warning:
        typer.echo(f"warning: {warning}", err=True)


def register(app: typer.Typer) -> None:
    """Attach the retraining stage's commands to the main app."""
    app.command("train")(train)
    app.command("export-checkpoint")(export_checkpoint)
    app.command("check-template")(check_template)
    app.command("eval-accept")(eval_accept)
    app.command("forecast")(forecast)
    app.command("check-server")(check_server)
    app.command("sglang-command")(sglang_command)
