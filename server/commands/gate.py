"""`datahunt gate` and `datahunt traffic-split`: never ship a draft that regresses on the team's own traffic.

`traffic-split` cuts a request log in the log's own time order: the earlier part is what a retrained draft may
learn from (a `kind: traffic` source), the later part becomes held-out prompts it never saw. `gate` measures
the candidate and the deployed draft the same way on those prompts and writes its verdict and table into the
candidate's folder (`training/gate.py`); `sglang-command` and `vllm-command` warn on a draft without a passed
gate.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from server.commands.failure import EXIT_FAILED, EXIT_USAGE, fail


def gate(
    candidate: Path = typer.Option(..., "--candidate", help="The retrained draft's export folder."),
    deployed: Path = typer.Option(..., "--deployed", help="The draft being served now."),
    prompts: Path = typer.Option(..., "--prompts", help="Held-out prompts the candidate never trained on (JSONL; a "
                                 "row's `set` or `category` groups it), e.g. traffic-split's heldout.jsonl."),
    target: Path = typer.Option(..., "--target", help="The target folder both drafts were trained for."),
    margin: float = typer.Option(0.02, "--margin", min=0.0, help="Required overall gain in acceptance length "
                                 "(relative: 0.02 = 2 %)."),
    tolerance: float = typer.Option(0.05, "--tolerance", min=0.0, max=1.0, help="Largest allowed fall (relative) "
                                    "of any set's acceptance length and of any position-0 acceptance."),
    k: int = typer.Option(5, "--k", min=1, help="Draft chain length both are measured with."),
    max_new: int = typer.Option(128, "--max-new", min=1, help="New tokens per prompt."),
    per_set: int | None = typer.Option(None, "--per-set", min=1, help="Use only the first N prompts of each set."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda"),
) -> None:
    """Pass a retrained draft only when it beats the deployed one overall and regresses nowhere."""
    from core.gate_verdict import GATE_TABLE, GateRule
    from training.curve.evaluate import DecodeEvaluator, load_eval_prompts
    from training.errors import TrainingError
    from training.gate import run_gate

    if not target.is_dir():
        fail(f"target folder {target} does not exist", EXIT_USAGE)
    loaded = load_eval_prompts(prompts, per_set)  # a CurveError ends as one line, exit 2 (failure.py's map)
    evaluator = DecodeEvaluator(target, loaded, k=k, max_new=max_new, device=device)
    try:
        verdict = run_gate(candidate, deployed, prompts, evaluator, GateRule(margin=margin, tolerance=tolerance),
                           evaluator.description)
    except (TrainingError, OSError) as exc:
        fail(str(exc), EXIT_FAILED)
    typer.echo((candidate / GATE_TABLE).read_text(encoding="utf-8"), err=True)
    typer.echo(json.dumps({"passed": verdict.passed, "reasons": verdict.reasons,
                           "overall": verdict.overall.model_dump(), "gate": str(candidate / "gate.json")}))
    if not verdict.passed:
        raise typer.Exit(EXIT_FAILED)  # the reasons are printed above


def traffic_split(
    log: Path = typer.Argument(..., help="A request log: JSONL of chat requests or request-log records."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for train.jsonl, heldout.jsonl and split.json."),
    heldout: float = typer.Option(0.2, "--heldout", min=0.0, max=1.0, help="Share of the latest records held out."),
    order: str = typer.Option("auto", "--order", help="auto (a timestamp field when every record has one, else "
                              "the file's order) | time | file."),
    set_field: str | None = typer.Option(None, "--set-field", help="Dotted path of a record field naming its set "
                                         "(e.g. metadata.route); default: one set, `traffic`."),
) -> None:
    """Split a traffic log in its own time order: the earlier records to train on, the latest held out."""
    from curation.traffic_split import split_traffic, write_split

    if order not in {"auto", "time", "file"}:
        fail(f"--order {order!r}: one of auto, time, file", EXIT_USAGE)
    if not log.is_file():
        fail(f"traffic log {log} does not exist", EXIT_USAGE)
    split = split_traffic(log, heldout, order=order, set_field=set_field)  # a CurationError ends as one line
    summary = write_split(split, out)
    typer.echo(json.dumps(summary))


def register(app: typer.Typer) -> None:
    """Attach `gate` and `traffic-split` to the main app."""
    app.command("gate")(gate)
    app.command("traffic-split")(traffic_split)
