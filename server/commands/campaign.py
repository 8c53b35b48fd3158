"""`datahunt campaign run|resume|rerun|status|list|prune`: discovery campaigns from the command line.

`run` shows a live table of the subagents (status, queries, candidates, elapsed) while the campaign runs and
ends with the per-category summary (candidates, accepted, flagged, rejected); `--json` prints one
machine-readable result instead. `run`, `resume` and `rerun` exit 0 only when every category succeeded: a
`partial` or `failed` campaign ends with one `error:` line naming the categories that did not succeed and the
`campaign rerun` command for each, and exit 1. Bad input (an unknown category) exits 2, an unknown campaign 1;
Ctrl-C marks the campaign interrupted, resumable with `campaign resume`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from core.types import Category
from server.commands.campaign_board import (
    SUMMARY_LEGEND,
    ProgressBoard,
    reason_lines,
    summary_table,
    tight_table,
)
from server.commands.failure import EXIT_USAGE, fail, outage_line

if TYPE_CHECKING:
    from graph.state import RunCounts  # one category's line of a finished campaign

campaign_app = typer.Typer(help="Discovery campaigns: search the ten categories, verify, fill the catalog.",
                           no_args_is_help=True)

@contextmanager
def catalog_failures(board: ProgressBoard | None = None) -> Iterator[None]:
    """Turn the catalog failing (a CatalogError, or the database down, full or damaged) into one error line and
    exit 1 instead of a traceback; when `board` has seen a campaign start, the line says how to resume it."""
    from curation.catalog import store

    try:
        yield
    except store.CatalogError as exc:  # the database is down, or its folder cannot be made
        fail(str(exc))
    except Exception as exc:
        if not store.is_outage(exc):
            raise
        campaign_id = board.campaign_id if board is not None else None
        hint = f"; once it is back, `datahunt campaign resume {campaign_id}` continues" if campaign_id else ""
        fail(f"{outage_line(exc)}{hint}")


def open_catalog() -> Any:
    """Return a database engine (SQLAlchemy's) on the configured catalog, migrated to the latest schema."""
    from core.settings import get_settings
    from server.usecases.catalog import open_catalog as open_migrated

    with catalog_failures():
        return open_migrated(settings=get_settings())


@contextmanager
def opened_catalog(*, readonly: bool = False) -> Iterator[Any]:
    """Yield `open_catalog()`'s engine and dispose of it when the command is done, however it ends: its pooled
    connections are closed then, not left open for the garbage collector (a command may run inside a longer
    process, such as a test run). A read (`readonly`) of a SQLite catalog that does not exist reads an empty one
    instead of creating it."""
    from core.settings import get_settings
    from server.usecases.catalog import reading_catalog

    if readonly:
        with catalog_failures(), reading_catalog(settings=get_settings()) as engine:
            yield engine
        return
    engine = open_catalog()
    try:
        yield engine
    finally:
        engine.dispose()


def parse_categories(values: list[str] | None) -> list[Any] | None:
    """Return the categories named (comma-separated or repeated), or None for all ten (the option left out).

    An option given but naming nothing (`-c ""`, a shell variable that came out empty) is refused rather than
    read as all ten."""
    from core.types import UnknownCategoryError, parse_category

    if values is None:
        return None
    names = [n for value in values for n in value.split(",") if n.strip()]
    if not names:
        raise UnknownCategoryError("--categories names no category: leave the option out to search all ten")
    return [parse_category(n) for n in names]


def drive(coroutine_factory: Any, *, as_json: bool) -> ProgressBoard:
    """Run a campaign coroutine with the live table (or silently for --json); Ctrl-C marks it interrupted.

    `coroutine_factory(engine, settings, on_event)` returns the coroutine: this entry point hands the graph the
    process's settings. A `CampaignError` ends through the CLI's one map of stage errors (one line, exit 1)."""
    from core.settings import get_settings

    board = ProgressBoard()
    settings = get_settings()
    with opened_catalog() as engine:
        try:
            with catalog_failures(board):  # the database went down or filled up under the campaign
                if as_json:
                    asyncio.run(coroutine_factory(engine, settings, board.on_event))
                else:
                    with Live(get_renderable=board.render, refresh_per_second=4, transient=True):
                        asyncio.run(coroutine_factory(engine, settings, board.on_event))
        except KeyboardInterrupt:
            if board.campaign_id:
                resume = f"resume with `datahunt campaign resume {board.campaign_id}`"
                if not mark_interrupted(engine, board.campaign_id):
                    fail(f"interrupted; the catalog is locked by another process (a `datahunt serve`?), so the "
                         f"campaign is not marked interrupted yet (its lease runs out on its own); {resume}")
                fail(f"interrupted; {resume}")
            fail("interrupted")
        with catalog_failures():
            adopt_mirror_licenses(engine)
    return board


INTERRUPT_WRITE_WAIT_MS = 3000  # after Ctrl-C, wait this long for a catalog another process is writing


def mark_interrupted(engine: Any, campaign_id: str) -> bool:
    """Mark the campaign interrupted after Ctrl-C; False when the catalog stayed locked (another process, such as
    `serve`, writing) or failed: the user asked to stop, so this waits seconds, not the busy timeout, and never
    turns a stop into a traceback."""
    from sqlalchemy import event
    from sqlalchemy.exc import SQLAlchemyError

    from curation.catalog import store
    from graph import lifecycle

    if engine.dialect.name == "sqlite":  # fresh connections, with a short busy timeout after the usual set-up
        engine.dispose()
        event.listen(engine, "connect",
                     lambda dbapi, _record: dbapi.execute(f"PRAGMA busy_timeout={INTERRUPT_WRITE_WAIT_MS}"))
    try:
        with store.open_session(engine) as session:  # one that finished before the stop keeps its result
            lifecycle.interrupt(session, campaign_id=campaign_id, error="interrupted by the user", actor="cli")
    except (SQLAlchemyError, store.CatalogError):
        return False
    return True


def adopt_mirror_licenses(engine: Any) -> None:
    """Copy the configured mirror's licences onto the catalog entries that have none, as the API does after a
    campaign (`server.usecases.licenses`)."""
    from core.settings import get_settings
    from server.usecases.licenses import adopt_mirror_licenses as adopt

    adopted = adopt(engine=engine, settings=get_settings())
    if adopted.warning:
        typer.echo(f"warning: {adopted.warning}", err=True)


def report(board: ProgressBoard, *, as_json: bool) -> None:
    """Print the campaign's outcome: JSON, or the summary table and any error."""
    console = Console()
    by_category: dict[str, RunCounts] = board.summary.get("by_category", {})
    if as_json:
        result = {"campaign_id": board.campaign_id, "status": board.summary.get("status"),
                  "error": board.summary.get("error"), "notes": board.notes, "by_category": by_category}
        typer.echo(json.dumps(result, indent=2))
        return
    for note in board.notes:
        console.print(f"note: {note}", highlight=False)
    console.print(summary_table(by_category))
    console.print(SUMMARY_LEGEND, highlight=False, soft_wrap=True)
    for line in reason_lines(by_category):
        console.print(f"  reasons · {line}", highlight=False, soft_wrap=True)
    console.print(f"campaign {board.campaign_id}: [bold]{board.summary.get('status')}[/bold]", highlight=False)
    if board.summary.get("error"):
        console.print(f"problems: {board.summary['error']}", highlight=False, soft_wrap=True)


@campaign_app.command("run")
def run_command(
    categories: Annotated[list[str] | None, typer.Option(
        "--categories", "-c", help="Categories to search, comma-separated or repeated (default: all ten).")] = None,
    offline: Annotated[bool, typer.Option("--offline", help="Search the embedded offline index only.")] = False,
    campaign_id: Annotated[str | None, typer.Option("--id", help="Campaign id (default: a new random id).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a machine-readable result instead of tables.")] = False,
) -> None:
    """Run a discovery campaign and store every candidate, verified, in the catalog."""
    from core.types import UnknownCategoryError
    from graph.campaign import run_campaign

    try:
        chosen = parse_categories(categories)
    except UnknownCategoryError as exc:
        fail(str(exc), EXIT_USAGE)
    board = drive(lambda engine, settings, on_event: run_campaign(
        engine=engine, settings=settings, categories=chosen, offline=True if offline else None, campaign_id=campaign_id,
        on_event=on_event), as_json=as_json)
    report(board, as_json=as_json)
    end_with_outcome(board, as_json=as_json)


def end_with_outcome(board: ProgressBoard, *, as_json: bool) -> None:
    """End a campaign command by its outcome: exit 0 with a `next:` line when every category succeeded; else one
    `error:` line naming the categories that did not and the command that re-runs each, and exit 1."""
    status = board.summary.get("status")
    by_category: dict[str, RunCounts] = board.summary.get("by_category", {})
    if status == "succeeded":
        if not as_json:
            Console().print("next: review with `datahunt serve` (or `datahunt catalog list`, `catalog approve ID`), "
                            "then `datahunt manifest export`", highlight=False, soft_wrap=True)
        return
    campaign_id = board.campaign_id or "ID"
    order = [c.value for c in Category]
    bad = sorted((c for c, row in by_category.items() if row.get("status") != "succeeded"),
                 key=lambda c: order.index(c) if c in order else len(order))
    if not bad:
        fail(f"campaign {campaign_id} ended {status}: see `datahunt campaign status {campaign_id}`, then "
             f"`datahunt campaign resume {campaign_id}`")
    named = ", ".join(f"{c} ({by_category[c].get('status')})" for c in bad)
    reruns = "; ".join(f"`datahunt campaign rerun {campaign_id} {c}`" for c in bad)
    kept = " (what the other categories found is in the catalog)" if status == "partial" else ""
    fail(f"campaign {campaign_id} ended {status}: {named} did not succeed{kept}; re-run with {reruns}")


@campaign_app.command("resume")
def resume_command(
    campaign_id: Annotated[str, typer.Argument(help="The campaign to continue from its checkpoint.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print a machine-readable result instead of tables.")] = False,
) -> None:
    """Continue an unfinished campaign; categories that had finished are not searched again."""
    from graph.campaign import resume_campaign

    board = drive(lambda engine, settings, on_event: resume_campaign(
        engine=engine, settings=settings, campaign_id=campaign_id, on_event=on_event), as_json=as_json)
    report(board, as_json=as_json)
    end_with_outcome(board, as_json=as_json)


@campaign_app.command("rerun")
def rerun_command(
    campaign_id: Annotated[str, typer.Argument(help="The campaign.")],
    category: Annotated[str, typer.Argument(help="The one category to search again.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print a machine-readable result instead of tables.")] = False,
) -> None:
    """Search one category of a campaign again (a new attempt); the other categories are left alone."""
    from core.types import UnknownCategoryError, parse_category
    from graph.campaign import rerun_category

    try:
        chosen = parse_category(category)
    except UnknownCategoryError as exc:
        fail(str(exc), EXIT_USAGE)
    board = drive(lambda engine, settings, on_event: rerun_category(
        engine=engine, settings=settings, campaign_id=campaign_id, category=chosen, on_event=on_event), as_json=as_json)
    report(board, as_json=as_json)
    end_with_outcome(board, as_json=as_json)


@campaign_app.command("status")
def status_command(
    campaign_id: Annotated[str, typer.Argument(help="The campaign.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Show a campaign's status and, per category, its latest run: status, attempt, counts, error."""
    from curation.catalog import store

    with opened_catalog(readonly=True) as engine, catalog_failures():
        try:
            with store.open_session(engine) as session:
                campaign = store.get_campaign(session, campaign_id=campaign_id).model_dump(mode="json")
                runs = [r.model_dump(mode="json") for r in store.list_runs(session, campaign_id=campaign_id)]
        except store.CampaignNotFoundError as exc:
            from core.settings import get_settings

            fail(f"{exc} in the catalog {get_settings().catalog_label}")
    if as_json:
        typer.echo(json.dumps({"campaign": campaign, "runs": runs}, indent=2))
        return
    # Runs' errors are listed under the table, in full, instead of in a column squeezed to nothing.
    table = tight_table(f"campaign {campaign_id}: {campaign['status']}")
    for column in ("category", "try", "status", "queries", "failed", "found", "accepted", "elapsed"):
        table.add_column(column, no_wrap=True, justify="left" if column in ("category", "status") else "right")
    errors = []
    for run in runs:
        failed = sum(q.get("status") == "failed" for q in run["queries"])
        elapsed = f"{run['elapsed_s']:.1f}s" if run["elapsed_s"] is not None else ""
        table.add_row(run["category"], str(run["attempt"]), run["status"], str(len(run["queries"])), str(failed),
                      str(run["candidates_found"]), str(run["candidates_accepted"]), elapsed)
        if run["error"]:
            errors.append(f"{run['category']} (try {run['attempt']}): {run['error']}")
    console = Console()
    console.print(table)
    for line in errors:
        console.print(f"error · {line}", highlight=False, soft_wrap=True)
    if campaign["error"]:
        Console().print(f"problems: {campaign['error']}", highlight=False, soft_wrap=True)


@campaign_app.command("list")
def list_command(
    limit: Annotated[int, typer.Option(min=1, help="How many campaigns, newest first.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List recent campaigns, newest first."""
    from curation.catalog import store

    with opened_catalog(readonly=True) as engine, catalog_failures(), store.open_session(engine) as session:
        campaigns = [c.model_dump(mode="json") for c in store.list_campaigns(session, limit=limit)]
    if not campaigns:
        from core.settings import get_settings
        from server.usecases.catalog import empty_catalog_note

        typer.echo(f"note: {empty_catalog_note(settings=get_settings())}", err=True)
    if as_json:
        typer.echo(json.dumps(campaigns, indent=2))
        return
    table = Table(title="campaigns", title_justify="left")
    # The id is what `status` and `rerun` take: never cut, whatever the terminal width; the error may fold.
    table.add_column("id", no_wrap=True, min_width=max((len(c["id"]) for c in campaigns), default=2))
    table.add_column("status", no_wrap=True)
    table.add_column("categories", justify="right", no_wrap=True)
    table.add_column("offline", no_wrap=True)
    table.add_column("created (UTC)", no_wrap=True)
    table.add_column("error", overflow="fold")
    for c in campaigns:
        table.add_row(c["id"], c["status"], str(len(c["categories"])), str(c["offline"]),
                      c["created_at"][:16].replace("T", " "),
                      (c["error"] or "")[:60])
    Console().print(table)


@campaign_app.command("prune")
def prune_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of lines.")] = False,
) -> None:
    """Delete the checkpoints that finished campaigns and re-runs left behind (catalogs made before checkpoints
    were deleted at each campaign's end still hold them), then compact a SQLite catalog; unfinished or busy
    campaigns keep theirs."""
    from core.settings import get_settings
    from curation.catalog import store
    from graph.campaign import prune_checkpoints

    settings = get_settings()
    with opened_catalog() as engine:
        path = Path(engine.url.database or "") if engine.dialect.name == "sqlite" else None
        before = path.stat().st_size if path is not None and path.is_file() else None
        with catalog_failures():
            result = asyncio.run(prune_checkpoints(engine=engine, settings=settings))
            compacted = store.compact_database(engine) if result.deleted else False
        after = path.stat().st_size if path is not None and path.is_file() else None
    out = {"deleted_threads": len(result.deleted), "kept_unfinished": result.unfinished, "kept_busy": result.busy,
           "compacted": compacted, "bytes_before": before, "bytes_after": after}
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    typer.echo(f"deleted the checkpoints of {len(result.deleted)} finished thread(s)")
    if result.unfinished:
        typer.echo(f"kept {len(result.unfinished)} unfinished (resumable): {', '.join(result.unfinished)}")
    if result.busy:
        typer.echo(f"kept {len(result.busy)} being worked on now: {', '.join(result.busy)}")
    if before is not None and after is not None:
        typer.echo(f"{path}: {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB")


def register(app: typer.Typer) -> None:
    """Attach the `campaign` group to the main app."""
    app.add_typer(campaign_app, name="campaign")
