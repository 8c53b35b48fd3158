"""`datahunt value`: the measured value of each source or category of a regenerated set, as one resumable command.

The work is `training.value`'s; this door reads the options, shows progress on stderr, writes the values into
the catalog (so `catalog list`, `GET /catalog` and the review page show them) and, with --results, into a
results file (docs/results/data_value.json), ends bad input with one line, and prints each value.
"""

from __future__ import annotations

import json
import logging
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from server.commands.failure import EXIT_FAILED, EXIT_USAGE, fail

if TYPE_CHECKING:
    from core.measured_value import MeasuredValue
    from training.value.runner import ValueDoc

HELP = "\n\n".join([
    ("Measure what each source (or category) of your regenerated set is worth to the draft: at a fixed budget of "
     "training rows, the change in acceptance length (AL) per eval set when its rows are swapped out of the "
     "default mix (or more of them swapped in), with a 95% interval from the seeds' noise."),
    ("  datahunt value --data REGENERATED --target DIR --eval PROMPTS --out VALUE --budget 16000\n"
     "      [--by source|category] [--unit ID ...] [--op remove|add] [--seeds 0 1] [--arm-seeds 1]\n"
     "      [--user-prompts MINE.jsonl] [--results docs/results/data_value.json]"),
    ("Drafts: the default mix (the first BUDGET rows of a seeded shuffle of the pool) at every --seeds, and for "
     "each unit an arm at the first --arm-seeds seeds, all under one steps rule and run config. Two seeds of the "
     "default mix measure the noise (1 degree of freedom: wide intervals); --arm-seeds 2 adds one per unit."),
    ("Units: every labelled source (or category) holding at least --min-share of the default mix, or the "
     "--unit values given. --op remove swaps a unit's rows for other rows; --op add swaps --add-rows of it in."),
    ("--mix measured (with --by category) measures no unit: it reads the categories' values (the catalog's "
     "newest, or --values FILE), chooses the measured mix at this budget as `curate --mix measured` does, and "
     "trains it and the default mix at every seed: value.md says whether it beat the default beyond the noise."),
    ("The values go into the catalog (unless --no-catalog) and OUT/value.json, value.md; --results merges the "
     "points and values into a results file. Run the same command again after a kill: it resumes."),
])


def _numbers(first: list[str], extra: list[str], what: str) -> list[int]:
    values = [v for text in [*first, *extra] for v in text.replace(",", " ").split()]
    try:
        return [int(v) for v in values]
    except ValueError:
        fail(f"{what}: whole numbers, e.g. {what} 0 1", EXIT_USAGE)


def value(
    ctx: typer.Context,
    data: Path = typer.Option(..., "--data", help="The regenerated set: regenerated.jsonl or the regen run folder."),
    target: Path = typer.Option(..., "--target", help="Target model folder (transformers layout)."),
    eval_prompts: Path = typer.Option(..., "--eval", help="Held-out prompts JSONL (`set` or `category` groups)."),
    out: Path = typer.Option(..., "--out", help="Output folder (resumes the run already there)."),
    budget: int = typer.Option(..., "--budget", min=1, help="Training rows of every draft."),
    by: str = typer.Option("source", "--by", help="source | category"),
    units: list[str] = typer.Option([], "--unit", help="A unit to measure (repeat; default: every unit of the "
                                    "mix holding --min-share)."),
    min_share: float = typer.Option(0.02, "--min-share", min=0.0, max=1.0),
    op: str = typer.Option("remove", "--op", help="remove (swap the unit's rows out) | add (swap rows of it in)."),
    add_rows: int | None = typer.Option(None, "--add-rows", min=1, help="--op add: rows swapped in (default "
                                        "budget/10)."),
    seeds: list[str] = typer.Option(["0", "1"], "--seeds", metavar="S...", help="Seeds of the default mix."),
    arm_seeds: int = typer.Option(1, "--arm-seeds", min=1, help="Each unit's arm trains at the first N seeds."),
    user_prompts: Path | None = typer.Option(None, "--user-prompts", help="A held-out slice of your own prompts, "
                                             "scored as the set `user`."),
    rule: str = typer.Option("epochs", "--rule", help="epochs | steps (as `datahunt curve`)."),
    epochs: int = typer.Option(1, "--epochs", min=1),
    steps: int | None = typer.Option(None, "--steps", min=1),
    k: int = typer.Option(5, "--k", min=1, help="Draft chain length of the evaluation."),
    max_new: int = typer.Option(64, "--max-new", min=1, help="New tokens per eval prompt."),
    eval_per_set: int | None = typer.Option(None, "--eval-per-set", min=1),
    eval_batch: int = typer.Option(1, "--eval-batch", min=1),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda"),
    train_config: list[str] = typer.Option([], "--train", metavar="KEY=VALUE", help="A run-config key for every "
                                           "draft, e.g. --train batch_tokens=16384 --train lr=3e-4 (JSON values)."),
    results: Path | None = typer.Option(None, "--results", help="Merge the points and values into this results "
                                        "file (e.g. docs/results/data_value.json)."),
    no_catalog: bool = typer.Option(False, "--no-catalog", help="Do not write the values into the catalog."),
    mix: str | None = typer.Option(None, "--mix", help="measured: compare the measured mix with the default "
                                   "(--by category) instead of measuring units."),
    values_file: Path | None = typer.Option(None, "--values", help="--mix measured: a value run's values "
                                            "(value.json or a results file) instead of the catalog's."),
    as_json: bool = typer.Option(False, "--json", help="Print the values as JSON."),
) -> None:
    if by not in {"source", "category"} or op not in {"remove", "add"} or rule not in {"epochs", "steps"}:
        fail("--by source|category, --op remove|add, --rule epochs|steps", EXIT_USAGE)
    if device not in {"auto", "cpu", "cuda"}:
        fail(f"--device {device!r}: auto, cpu or cuda", EXIT_USAGE)
    values: dict[str, Any] = {
        "data": data, "target": target, "eval": eval_prompts, "user_prompts": user_prompts, "out": out,
        "budget": budget, "by": by, "units": units, "min_share": min_share, "op": op, "add_rows": add_rows,
        "seeds": _numbers(seeds, ctx.args, "--seeds"), "arm_seeds": arm_seeds, "rule": rule, "epochs": epochs,
        "steps": steps, "k": k, "max_new": max_new, "eval_per_set": eval_per_set, "eval_batch": eval_batch,
        "device": device, "train": _train_keys(train_config)}
    if mix is not None:
        if mix != "measured" or by != "category":
            fail("--mix measured (the one mix to compare) goes with --by category", EXIT_USAGE)
        values["mix_counts"] = _measured_counts(values, measured_values(values_file))
    elif values_file is not None:
        fail("--values goes with --mix measured", EXIT_USAGE)
    again = command_line(values, results) + (f" --values {shlex.quote(str(values_file))}" if values_file else "")
    doc = _run(values, results, again)
    if not no_catalog:
        _to_catalog(doc)
    _print(doc, as_json)


def measured_values(path: Path | None) -> list[MeasuredValue]:
    """Measured values: a value run's file, else the catalog's newest of each source and category."""
    if path is not None:
        from training.value.results import values_of

        try:
            return values_of(path)
        except ValueError as exc:
            fail(str(exc), EXIT_USAGE)
    from sqlalchemy.exc import DatabaseError

    from core.settings import get_settings
    from curation.catalog import store

    engine = store.make_engine(get_settings().resolved_database_url)
    try:
        store.upgrade_database(engine)
        with store.open_session(engine, readonly=True) as session:
            return store.latest_values(session)
    except DatabaseError as exc:
        fail(f"cannot read the measured values from the catalog: {str(exc.orig or exc).splitlines()[0]}", EXIT_FAILED)
    finally:
        engine.dispose()


def _measured_counts(values: dict[str, Any], measured: list[MeasuredValue]) -> dict[str, int]:
    """Rows per category of the measured mix at this budget: the default mix's counts (first seed) moved by
    `curation.measured_mix`, as `curate --mix measured` moves its quotas; the moves on stderr."""
    from collections import Counter

    from curation.measured_mix import CategoryValue, measured_quotas
    from training.value.plan import default_rows, load_pool

    categories = {v.name: CategoryValue(v.mean.per_10k, v.mean.low, v.mean.high) for v in measured
                  if v.kind == "category"}
    if not categories:
        fail("--mix measured: no category has a measured value (run `datahunt value --by category` first, or pass "
             "--values FILE)", EXIT_USAGE)
    try:
        pool = load_pool(values["data"], "category")
        base = default_rows(pool, values["budget"], values["seeds"][0] if values["seeds"] else 0)
    except ValueError as exc:
        fail(str(exc).splitlines()[0], EXIT_FAILED)
    default = dict(Counter(pool.unit[r] for r in base))
    plan = measured_quotas(default, dict(Counter(pool.unit.values())), categories)
    for move in plan.moves:
        typer.echo(f"measured mix: {move}", err=True)
    if plan.quotas == default:
        fail("--mix measured: the measured mix is the default at this budget (no category's value is clear of "
             "another's): nothing to compare; measure with more seeds first", EXIT_FAILED)
    return {c: n for c, n in plan.quotas.items() if n}


def command_line(values: dict[str, Any], results: Path | None) -> str:
    """The command that makes this run again, every setting spelled out (what a results point records)."""
    parts = ["datahunt", "value"]
    for key, value in values.items():
        if value is None or value == [] or value == {}:
            continue
        if key == "units":
            parts += [item for unit in value for item in ("--unit", unit)]
        elif key == "train":
            parts += [item for k, v in value.items() for item in ("--train", f"{k}={json.dumps(v)}")]
        elif key == "mix_counts":
            parts += ["--mix", "measured"]
        elif key == "seeds":
            parts += ["--seeds", *map(str, value)]
        else:
            parts += [f"--{key.replace('_', '-')}", str(value)]
    return shlex.join(parts + (["--results", str(results)] if results is not None else []))


def _train_keys(pairs: list[str]) -> dict[str, Any]:
    keys: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            fail(f"--train {pair!r}: KEY=VALUE, e.g. --train lr=3e-4", EXIT_USAGE)
        try:
            keys[key.strip()] = json.loads(text)
        except json.JSONDecodeError:
            keys[key.strip()] = text
    return keys


def _run(values: dict[str, Any], results: Path | None, command: str) -> ValueDoc:
    """Validate the settings and run (or resume) the value run, progress on stderr; the results file merged."""
    from training.errors import TrainingError
    from training.interrupt import TrainingStopped
    from training.value.plan import make_value_settings
    from training.value.results import write_results
    from training.value.runner import VALUE_FILE, run_value

    logging.getLogger("training").setLevel(logging.INFO)
    try:
        settings = make_value_settings(values)
        doc = run_value(settings, say=lambda line: typer.echo(line, err=True))
        if results is not None:
            write_results(doc, results, command)
    except TrainingStopped as exc:
        fail(f"{exc} (finished drafts are in {values['out'] / VALUE_FILE})", exc.exit_code)
    except (TrainingError, OSError, ValueError) as exc:
        fail(str(exc).splitlines()[0], EXIT_FAILED)
    return doc


def record(
    source: Path = typer.Argument(..., help="A value run's value.json, or a results file with `values`."),
) -> None:
    """Write the measured values of a finished value run (made on another machine) into this catalog."""
    from training.value.results import values_of

    try:
        values = values_of(source)
    except ValueError as exc:
        fail(str(exc).splitlines()[0], EXIT_USAGE)
    if not values:
        fail(f"{source} holds no measured values", EXIT_USAGE)
    _record(values)


def _to_catalog(doc: ValueDoc) -> None:
    """Write the run's values into the configured catalog."""
    if doc.values:
        _record(doc.values)


def _record(values: list[MeasuredValue]) -> None:
    from sqlalchemy.exc import DatabaseError

    from core.settings import get_settings
    from curation.catalog import store

    engine = store.make_engine(get_settings().resolved_database_url)
    try:
        store.upgrade_database(engine)
        with store.open_session(engine) as session:
            written = store.record_values(session, values=values)
    except DatabaseError as exc:
        fail(f"cannot write the values into the catalog: {str(exc.orig or exc).splitlines()[0]}", EXIT_FAILED)
    finally:
        engine.dispose()
    typer.echo(f"wrote {written} measured value(s) into the catalog {get_settings().catalog_label}", err=True)


def _print(doc: ValueDoc, as_json: bool) -> None:
    from core.measured_value import describe_value
    from training.value.runner import SUMMARY_FILE

    if as_json:
        typer.echo(json.dumps({"values": [v.model_dump(mode="json") for v in doc.values],
                               "mix_comparison": {k: v.model_dump() for k, v in doc.mix_comparison.items()},
                               "summary": str(doc.settings.out / SUMMARY_FILE)}))
        return
    for v in doc.values:
        typer.echo(f"{v.name}: {describe_value(v)}")
    if doc.mix_comparison:
        from training.value.results import comparison_lines

        typer.echo(comparison_lines(doc)[-1])
    typer.echo(f"summary: {doc.settings.out / SUMMARY_FILE}")


value.__doc__ = HELP


def register(app: typer.Typer) -> None:
    """Attach `value` and `value-record` to the main app."""
    app.command("value", context_settings={"allow_extra_args": True})(value)
    app.command("value-record")(record)
