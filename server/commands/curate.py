"""`datahunt curate`: the curation stage's front door.

`curate` turns a manifest into the
curated set (Parquet shards, report, summary, plot), or with `--check` says where each source would come from.
The work lives in `curation/`; this module parses options, draws the load step's bar, prints a short rich
summary with the mix warnings, ends bad input with a one-line error and exit code 2, and exits 1 naming the
sources that failed (unless `--allow-partial`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from server.commands.failure import EXIT_FAILED, EXIT_USAGE, fail
from server.commands.measured_values import measured_values
from server.hub_probe import hub_problem

if TYPE_CHECKING:
    from core.measured_value import MeasuredValue
    from curation.pipeline import CurateResult


def curate(
    manifest: Annotated[
        Path, typer.Option("--manifest", "-m", help="Manifest JSON (`manifest export|from-mirror`).")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder for the curated set.")],
    seed: Annotated[
        int | None, typer.Option("--seed", min=0, help="Sampling seed (default: the budget's).")
    ] = None,
    jsonl: Annotated[bool, typer.Option("--jsonl", help="Also write OUT/samples.jsonl.")] = False,
    mirror: Annotated[
        Path | None,
        typer.Option("--mirror", help="Mirror folder (default: the manifest's, then DATAHUNT_MIRROR)."),
    ] = None,
    allow_partial: Annotated[
        bool, typer.Option("--allow-partial", help="Exit 0 even when some sources failed (they are still named).")
    ] = False,
    check: Annotated[
        bool,
        typer.Option("--check", help="Dry run: say where each source resolves (mirror or Hub) and its size; exit 1 "
                     "when one resolves nowhere."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --check: print the resolutions as JSON.")] = False,
    curation_engine: Annotated[
        str,
        typer.Option("--executor", help="What runs the curation steps: local (in-process, default) or datatrove "
                     "(the same steps out of core)."),
    ] = "local",
    old_engine: Annotated[
        str | None, typer.Option("--engine", hidden=True, help="The old spelling of --executor (warned).")
    ] = None,
    workers: Annotated[
        int | None, typer.Option("--workers", min=1, help="Curation engine worker processes (default: the CPU "
                                 "count).")
    ] = None,
    mix: Annotated[
        str, typer.Option("--mix", help="default (the budget's shares) | measured (the quotas moved toward the "
                          "categories whose measured value is clearly higher; sources clearly below zero left out: "
                          "`datahunt value`).")
    ] = "default",
    values: Annotated[
        Path | None, typer.Option("--values", help="--mix measured: the values of a value run (value.json or a "
                                  "results file) instead of the catalog's newest.")
    ] = None,
) -> None:
    """Load, clean, deduplicate, decontaminate and mix the manifest's sources into OUT.

    Exits 1 when any source failed (naming each), unless --allow-partial.
    """
    if mirror is not None and not (mirror / "MIRROR.json").is_file():
        fail(f"{mirror} is not a mirror folder (no MIRROR.json)", EXIT_USAGE)
    if old_engine is not None:  # `--engine` names the inference engine everywhere else (capture, eval-accept)
        typer.echo(f"warning: `curate --engine` is now `--executor` (read as --executor {old_engine}); "
                   "--engine names an inference engine in the other commands", err=True)
        curation_engine = old_engine
    if mix not in {"default", "measured"}:
        fail(f"--mix {mix!r}: default or measured", EXIT_USAGE)
    if values is not None and mix != "measured":
        fail("--values goes with --mix measured", EXIT_USAGE)
    manifest = find_manifest(manifest)
    if check:
        _check(manifest, out, mirror, as_json)
        return
    measured = measured_values(values) if mix == "measured" else None
    result = _run(manifest, out, curation_engine, seed=seed, jsonl=jsonl, mirror=mirror, workers=workers,
                  measured=measured)
    _print_summary(result, out)
    if measured is not None:
        _print_moves(result, out)
    failed = result.report.failed_sources
    if not failed or allow_partial:
        typer.echo(f"next: datahunt regen --input {out} --server URL --out RUN (or --api local --model TARGET_DIR)")
    if failed and not allow_partial:
        fail(f"{len(failed)} of {len(result.report.per_source)} source(s) failed: {', '.join(failed)}; "
             f"the set in {out} lacks them (pass --allow-partial to accept a partial set)", EXIT_FAILED)


def _run(manifest: Path, out: Path, curation_engine: str, *, seed: int | None, jsonl: bool, mirror: Path | None,
         workers: int | None, measured: list[MeasuredValue] | None = None) -> CurateResult:
    """Curate `manifest` into `out` on the curation engine named (in process, or datatrove; either keeps the
    manifest beside the set and writes its completion marker last). A curation error ends through the CLI's
    one map (failure.py: a bad manifest or engine name exits 2, a failed run 1); a file that cannot be read or
    written exits 2."""
    from core.settings import get_settings
    from curation.engine import check_engine, curate_on
    from curation.manifest import load_manifest
    from curation.pipeline import curate as run_curation

    check_engine(curation_engine)
    try:
        loaded = load_manifest(manifest)
        if measured is not None:
            from curation.measured_mix import measured_manifest

            loaded, notes = measured_manifest(loaded, measured)
            for note in notes:
                typer.echo(f"measured mix: {note}", err=True)
        if not loaded.sources:  # an empty set would look like a finished curation, ready for regeneration
            fail(f"manifest {manifest} names no sources: approve datasets in the catalog, then export the manifest "
                 "(`datahunt manifest export`)", EXIT_USAGE)
        if curation_engine == "local":
            with _load_bar() as on_source:
                result = run_curation(
                    loaded, out, settings=get_settings(), seed=seed, jsonl=jsonl, mirror=mirror, hub_probe=hub_problem,
                    on_source=on_source, sources_root=manifest.resolve().parent,
                )
        else:
            result = curate_on(
                curation_engine, loaded, out, settings=get_settings(), seed=seed, jsonl=jsonl, mirror=mirror,
                workers=workers, progress=lambda line: typer.echo(f"[{curation_engine}] {line}", err=True),
                sources_root=manifest.resolve().parent,
            )
    except OSError as exc:
        fail(str(exc), EXIT_USAGE)
    return result


def _print_summary(result: CurateResult, out: Path) -> None:
    """The mix per category, the row counts, and each failed source, warning and unmet budget."""
    from rich.console import Console
    from rich.table import Table

    report = result.report
    console = Console()
    table = Table(title=f"curated set in {out}")
    for column in ("category", "available", "quota", "selected"):
        table.add_column(column, justify="left" if column == "category" else "right")
    for category, mix in report.per_category.items():
        quota = "all" if mix.quota is None else str(mix.quota)
        table.add_row(category, str(mix.available), quota, str(mix.selected))
    console.print(table)
    console.print(
        f"rows in {report.rows_in} → out {report.rows_out} "
        f"({report.needs_regeneration} to regenerate, {report.target_native} target-native); "
        f"dropped {sum(report.drops.values())}, duplicates {report.duplicates.exact} exact + "
        f"{report.duplicates.near} near, decontaminated {report.decontaminated}"
    )
    for key in report.failed_sources:
        console.print(f"[red]failed source[/red] {key}: {report.per_source[key].error}", soft_wrap=True)
    for warning in report.warnings:
        console.print(f"[yellow]warning[/yellow] {warning}", soft_wrap=True)
    for category, short in report.unmet_budgets.items():
        console.print(f"[yellow]budget unmet[/yellow] {category}: {short} rows short")
    if result.reused:
        console.print(f"reused {len(result.reused)} step(s) whose inputs had not changed")


def _print_moves(result: CurateResult, out: Path) -> None:
    """How the measured mix differs from the default at this budget, category by category (from the report's
    available rows: the same arithmetic the mix ran)."""
    from curation.manifest import load_manifest
    from curation.measured_mix import CategoryValue, measured_quotas
    from curation.mixing import default_quotas

    budget = load_manifest(out / "manifest.json").budget
    available = {c: m.available for c, m in result.report.per_category.items() if m.available}
    values = {str(c): CategoryValue(v.per_10k, v.low, v.high) for c, v in budget.measured.items()}
    plan = measured_quotas(default_quotas(budget, available), available, values)
    for move in plan.moves:
        typer.echo(f"measured mix: {move}")


@contextmanager
def _load_bar() -> Iterator[Callable[[int, int, str], None]]:
    """Yield an `on_source` callback drawing the load step's bar on stderr (nothing unless it is a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    columns = (TextColumn("loading {task.fields[source]:<40}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("load", total=None, source="")

        def on_source(done: int, total: int, key: str) -> None:
            bar.update(task, completed=done, total=total, source=key[-40:])

        yield on_source


def _size(size: int | None) -> str:
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:,.0f} B" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} GiB"


def _check(manifest: Path, out: Path, mirror: Path | None, as_json: bool) -> None:
    import dataclasses
    import json

    from rich.console import Console
    from rich.table import Table

    from core.settings import get_settings
    from curation.check import check_manifest
    from curation.manifest import load_manifest
    from curation.pipeline import make_context

    try:
        loaded = load_manifest(manifest)  # a ManifestError ends through the CLI's one map: exit 2
    except OSError as exc:
        fail(str(exc), EXIT_USAGE)
    ctx = make_context(loaded, out, mirror, None, hub_problem, settings=get_settings(),
                       sources_root=manifest.resolve().parent)
    found = check_manifest(loaded, ctx)
    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(r) for r in found], indent=1))
    else:
        table = Table(title=f"where {manifest} resolves")
        for column in ("kind", "name", "where", "files", "size", "detail"):
            table.add_column(column, justify="right" if column in ("files", "size") else "left", overflow="fold")
        for r in found:
            where = r.where if r.ok else f"[red]{r.where}[/red]"
            table.add_row(r.kind, r.name, where, str(r.files), _size(r.size_bytes), r.detail)
        console = Console()
        console.print(table)
        for line in _check_lines(found, named=len(loaded.eval_sets)):
            console.print(line, highlight=False, soft_wrap=True)
    missing = [r.name for r in found if r.kind == "source" and not r.ok]
    if missing:  # a source that resolves nowhere fails the run; an eval set is coverage, stated above
        fail(f"{len(missing)} of {sum(r.kind == 'source' for r in found)} sources resolve nowhere: "
             f"{', '.join(missing)}", EXIT_FAILED)
    # With --json, stdout holds the JSON document alone; the hint goes to stderr.
    typer.echo(f"next: datahunt curate --manifest {manifest} --out {out}", err=as_json)


def _check_lines(found: list[Any], *, named: int) -> list[str]:
    """The check's summary: the sources that resolve and their size, then the decontamination coverage, counted
    as `curate` counts it (the manifest's eval sets and those the mirror adds)."""
    sources = [r for r in found if r.kind == "source"]
    evals = [r for r in found if r.kind == "eval"]
    total = sum(r.size_bytes or 0 for r in sources if r.ok)
    lines = [f"sources: {sum(r.ok for r in sources)} of {len(sources)} resolve, {_size(total)} in all"]
    available = [r for r in evals if r.ok]
    added = f" ({named} from the manifest, {len(evals) - named} the mirror adds)" if len(evals) != named else ""
    line = f"decontamination: {len(available)} of {len(evals)} eval sets available{added}"
    unavailable = [r.name for r in evals if not r.ok]
    if unavailable:
        shown = ", ".join(unavailable[:8]) + (f", … (+{len(unavailable) - 8} more; --json lists all)"
                                              if len(unavailable) > 8 else "")
        line += f"; {len(unavailable)} not available here, curate goes on without them: {shown}"
    return [*lines, line]


def find_manifest(path: Path) -> Path:
    """Return `path`, or the file of that relative name in the data directory where `manifest export` writes."""
    from core.settings import get_settings

    if path.exists() or path.is_absolute():
        return path
    in_data_dir = get_settings().resolved_data_dir / path
    if in_data_dir.is_file():
        typer.echo(f"using {in_data_dir} (from the data directory)", err=True)
        return in_data_dir
    return path




def register(app: typer.Typer) -> None:
    """Attach `curate` to the main app."""
    app.command("curate")(curate)
