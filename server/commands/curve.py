"""`datahunt curve`: the data-scaling curve of one's own regenerated set, as one resumable command.

The work is `training.curve`'s; this door reads the options, shows progress on stderr, ends bad input with one
line and a non-zero exit, and prints the answer (and, with --json, curve.json's summary on stdout).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from server.commands.failure import EXIT_FAILED, EXIT_USAGE, fail

if TYPE_CHECKING:
    from training.curve.runner import CurveDoc

HELP = "\n\n".join([
    ("Train a draft at several shares of your regenerated data, measure each the same way, fit, and say how "
     "much data a target acceptance length (AL) needs."),
    ("  datahunt curve --data REGENERATED --target DIR --eval PROMPTS --out CURVE\n"
     "      --scales 0.25 0.5 1.0 [--control] [--target-al 2.5]\n"
     "      [--rule epochs --epochs 2 | --rule steps --steps 400]"),
    ("Scales: each value is a fraction of the regenerated rows (0 < s <= 1) or a row count (a whole number "
     "above 1). The prompts are shuffled once (--seed) and each scale takes a prefix of the answers (every "
     "prompt's first answer, then every second answer, ...), so a larger point holds every row of a smaller "
     "one."),
    ("Steps rule, the same for every point: --rule epochs (default) trains --epochs passes over each point's "
     "rows, so the steps grow with the data; --rule steps trains the same --steps N optimizer steps at every "
     "point (a small set is repeated), so the points differ in data only. The run config (--lr, --batch-size, "
     "...) is one for all points."),
    ("--control also trains, at each scale, a draft on the same prompts' own dataset answers "
     "(original_messages of the curated set, --originals, by default the input the regeneration's run.json "
     "names): the gap is what regeneration buys."),
    ("Evaluation: every draft decodes the same --eval prompts greedily against the target (eval-accept's local"
     " evaluator, chain of --k); the AL is reported per set (a row's `set` or `category` field) and their "
     "mean."),
    ("Fit: training.forecast's AL(n) = a - b * n^(-c) through the mean AL of the regenerated points (3 sizes "
     "at least; the control is never fitted), a bootstrap band over the eval sets, and the rows --target-al "
     "needs."),
    ("OUT gets curve.json (every point, the runs `datahunt forecast` reads, the fit), curve.md, curve.png and "
     "curve_forecast.png, and runs/<point>/ per draft. curve.json is written after every point: run the same "
     "command again after a kill and it resumes at the next point (a point killed mid-training resumes from "
     "its newest checkpoint)."),
])


def _scales(first: list[str], extra: list[str]) -> list[float]:
    """`--scales 0.25 0.5 1.0` (the values after the first arrive as extra arguments), `--scales 0.25,0.5`, or
    `--scales 0.25 --scales 0.5`."""
    values = [v for text in [*first, *extra] for v in text.replace(",", " ").split()]
    if not values:
        fail("--scales needs at least one value, e.g. --scales 0.25 0.5 1.0", EXIT_USAGE)
    try:
        return [float(v) for v in values]
    except ValueError:
        bad = next(v for v in values if not _is_number(v))
        fail(f"--scales: {bad!r} is not a number (a fraction 0 < s <= 1 or a row count)", EXIT_USAGE)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def curve(
    ctx: typer.Context,
    data: Path = typer.Option(..., "--data", help="The regenerated set: regenerated.jsonl or the regen run folder."),
    target: Path = typer.Option(..., "--target", help="Target model folder (transformers layout)."),
    eval_prompts: Path = typer.Option(..., "--eval", help="Held-out prompts JSONL (text / prompt / conversations "
                                      "rows; `set` or `category` groups them)."),
    out: Path = typer.Option(..., "--out", help="Output folder (resumes the curve already there)."),
    scales: list[str] = typer.Option(..., "--scales", metavar="S...",
                                     help="Fractions (0 < s <= 1) or row counts: --scales 0.25 0.5 1.0"),
    control: bool = typer.Option(False, "--control", help="Also train each scale on the datasets' own answers."),
    originals: Path | None = typer.Option(None, "--originals", help="Curated set with original_messages (for "
                                          "--control; default: the input run.json names)."),
    rule: str = typer.Option("epochs", "--rule", help="epochs (same passes, steps grow with data) | steps (same "
                             "optimizer steps at every point)."),
    epochs: int = typer.Option(1, "--epochs", min=1, help="Passes per point (--rule epochs)."),
    steps: int | None = typer.Option(None, "--steps", min=1, help="Optimizer steps per point (--rule steps)."),
    target_al: float = typer.Option(2.5, "--target-al", help="The acceptance length to say the data for."),
    k: int = typer.Option(5, "--k", min=1, help="Draft chain length of the evaluation."),
    max_new: int = typer.Option(64, "--max-new", min=1, help="New tokens per eval prompt."),
    eval_per_set: int | None = typer.Option(None, "--eval-per-set", min=1, help="Only the first N prompts a set."),
    eval_batch: int = typer.Option(1, "--eval-batch", min=1, help="Static decoding batch of the evaluation."),
    seed: int = typer.Option(0, "--seed", help="Prompt order and training seed."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda (training and evaluation)."),
    lr: float | None = typer.Option(None, "--lr"),
    batch_size: int | None = typer.Option(None, "--batch-size", help="Rows per batch (without --batch-tokens)."),
    batch_tokens: int | None = typer.Option(None, "--batch-tokens", help="Token budget per batch."),
    max_length: int | None = typer.Option(None, "--max-length"),
    draft_vocab_size: int | None = typer.Option(None, "--draft-vocab-size"),
    ttt_steps: int | None = typer.Option(None, "--ttt-steps"),
    head_init: str | None = typer.Option(None, "--head-init", help="random | target"),
    save_every: int | None = typer.Option(None, "--save-every", help="Checkpoint every N steps (what a killed "
                                          "point resumes from)."),
    as_json: bool = typer.Option(False, "--json", help="Print curve.json's points, fit and paths as JSON."),
) -> None:
    if rule not in {"epochs", "steps"}:
        fail(f"--rule {rule!r}: epochs or steps", EXIT_USAGE)
    if device not in {"auto", "cpu", "cuda"}:
        fail(f"--device {device!r}: auto, cpu or cuda", EXIT_USAGE)
    train = {key: value for key, value in {
        "lr": lr, "batch_size": batch_size, "batch_tokens": batch_tokens, "max_length": max_length,
        "draft_vocab_size": draft_vocab_size, "ttt_steps": ttt_steps, "head_init": head_init,
        "save_every": save_every}.items() if value is not None}
    values: dict[str, Any] = {
        "data": data, "target": target, "out": out, "eval": eval_prompts, "scales": _scales(scales, ctx.args),
        "control": control, "originals": originals, "rule": rule, "epochs": epochs, "steps": steps, "seed": seed,
        "eval_per_set": eval_per_set, "k": k, "max_new": max_new, "eval_batch": eval_batch, "target_al": target_al,
        "device": device, "train": train}
    _print_curve(_run(values, out), out, target_al, as_json)


def _run(values: dict[str, Any], out: Path) -> CurveDoc:
    """Validate the curve's settings and run (or resume) it in `out`, progress on stderr; return the curve."""
    from training.curve.plan import make_settings
    from training.curve.runner import CURVE_FILE, run_curve
    from training.errors import TrainingError
    from training.interrupt import TrainingStopped

    logging.getLogger("training").setLevel(logging.INFO)  # the trainer's progress lines, on stderr
    try:
        return run_curve(make_settings(values), say=lambda line: typer.echo(line, err=True))
    except TrainingStopped as exc:  # SIGTERM / Ctrl-C: the step in flight was checkpointed
        fail(f"{exc} (finished points are in {out / CURVE_FILE})", exc.exit_code)
    except (TrainingError, OSError, ValueError) as exc:
        fail(str(exc).splitlines()[0], EXIT_FAILED)


def _print_curve(doc: CurveDoc, out: Path, target_al: float, as_json: bool) -> None:
    """The answer (how much data `target_al` needs) and where the summary is; with `as_json`, the points, the
    fit and the paths as one JSON line instead."""
    from training.curve.runner import CURVE_FILE, SUMMARY_FILE
    from training.forecast_text import forecast_lines

    if as_json:
        typer.echo(json.dumps({"points": [{"name": p.name, "samples": p.samples, "control": p.control,
                                           "steps": p.stats["steps"], "mean_accept_length": p.mean_accept_length,
                                           "sets": {n: s.accept_length for n, s in p.sets.items()}}
                                          for p in doc.points],
                               "steps_rule": doc.steps_rule,
                               "fit": {k: v for k, v in (doc.fit or {}).items() if k not in {"grid", "band_10_90"}},
                               "curve": str(out / CURVE_FILE), "summary": str(out / SUMMARY_FILE)}))
        return
    for line in forecast_lines(doc.fit, target_al, rows_available=doc.rows_available):
        typer.echo(line)
    typer.echo(f"summary: {out / SUMMARY_FILE}")


curve.__doc__ = HELP


def register(app: typer.Typer) -> None:
    """Attach `curve` to the main app."""
    app.command("curve", context_settings={"allow_extra_args": True})(curve)
