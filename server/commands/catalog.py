"""`datahunt catalog list|show|approve|reject|summary`: review the catalog from the command line.

`list` ranks a category's candidates by that category's relevance (or every entry by its best relevance) in a
rich table, or prints a JSON array with `--json`; `show` prints one entry with its evidence, verdicts and audit
trail; `approve`/`reject` record a human decision (approving a verifier rejection needs `--override`). Bad
input (unknown category or status, malformed or unknown Hub id) gives a one-line error on stderr and a non-zero
exit: 2 for input that can never work, 1 for an id that is not in the catalog or a refused review.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypedDict

import typer
from rich.console import Console
from rich.table import Table

from server.commands.catalog_tables import (
    ENTRY_STATUS_STYLE,
    WIDE_LIST,
    counts_table,
    entries_lines,
    entries_table,
    reason_codes,
)
from server.commands.failure import EXIT_FAILED, EXIT_USAGE, fail, outage_line

if TYPE_CHECKING:
    from core.measured_value import MeasuredValue
    from core.types import Reason
    from curation.catalog.models import CatalogEntry

catalog_app = typer.Typer(
    help="The catalog: list, inspect, approve and reject candidate datasets.", no_args_is_help=True
)

EXIT_NOT_FOUND = 1


class CliError(Exception):
    """A message for the user and the exit code that goes with it."""

    def __init__(self, message: str, code: int = EXIT_NOT_FOUND) -> None:
        super().__init__(message)
        self.code = code


@contextmanager
def _cli_errors() -> Iterator[None]:
    """Turn the catalog's errors into one line on stderr and a non-zero exit, never a traceback."""
    from sqlalchemy.exc import DatabaseError

    from core.types import MalformedHubIdError, UnknownCategoryError
    from curation.catalog import store

    try:
        yield
    except CliError as exc:
        fail(str(exc), exc.code)
    except (MalformedHubIdError, UnknownCategoryError, store.InvalidValueError) as exc:
        fail(str(exc), EXIT_USAGE)
    except store.CatalogError as exc:
        if isinstance(exc, store.EntryNotFoundError):
            from core.settings import get_settings

            fail(f"{exc} in the catalog {get_settings().catalog_label}", EXIT_NOT_FOUND)
        fail(str(exc), EXIT_NOT_FOUND)
    except DatabaseError as exc:  # the database failed: down, a damaged SQLite file, a full disk
        fail(outage_line(exc), EXIT_FAILED)


@contextmanager
def _session(*, readonly: bool = False) -> Iterator[Any]:
    """Yield a session on the configured catalog, migrated to the newest schema; a read (`readonly`) of a SQLite
    catalog that does not exist reads an empty one instead of creating it where the command happened to run."""
    from core.settings import get_settings
    from curation.catalog import store
    from server.usecases.catalog import open_catalog, reading_catalog

    settings = get_settings()
    if readonly:
        with reading_catalog(settings=settings) as engine, store.open_session(engine, readonly=True) as session:
            yield session
        return
    engine = open_catalog(settings=settings)
    try:
        with store.open_session(engine) as session:
            yield session
    finally:
        engine.dispose()


def _hub_id(value: str) -> str:
    from core.types import parse_hub_id

    return parse_hub_id(value)


class EntryJson(TypedDict):
    """One entry as `catalog list --json` (and `approve`/`reject --json`) print it."""

    hub_id: str
    status: str
    categories: list[str]
    score: float  # the category's relevance with --category, else the best
    relevance: dict[str, float]
    reasons: list[Reason]
    verifier_decision: str | None
    title: str
    license: str | None
    reviewer: str | None
    note: str | None
    version: int
    updated_at: str  # ISO 8601
    measured: list[dict[str, Any]]  # its source's and categories' measured values (`datahunt value`), with `text`


def measured_json(values: list[MeasuredValue]) -> list[dict[str, Any]]:
    """Measured values as JSON, each with the line a reviewer reads (`text`)."""
    from core.measured_value import describe_value

    return [{**v.model_dump(mode="json"), "text": describe_value(v)} for v in values]


def entry_json(entry: CatalogEntry, category: str | None = None,
               measured: list[MeasuredValue] | None = None) -> EntryJson:
    """Return the JSON object of one entry as `catalog list --json` prints it (score = the category's relevance)."""
    score = entry.relevance.get(category, 0.0) if category else entry.best_relevance
    return {
        "hub_id": entry.hub_id,
        "status": entry.status,
        "categories": list(entry.categories),
        "score": score,
        "relevance": dict(entry.relevance),
        "reasons": list(entry.reasons),
        "verifier_decision": entry.verifier_decision,
        "title": entry.title,
        "license": entry.license,
        "reviewer": entry.reviewer,
        "note": entry.note,
        "version": entry.version,
        "updated_at": entry.updated_at.isoformat(),
        "measured": measured_json(measured or []),
    }


@catalog_app.command("list")
def list_command(
    status: str | None = typer.Option(None, "--status", help="pending_review, approved or rejected."),
    category: str | None = typer.Option(
        None, "--category", "-c", help="Only this category, best first by its relevance."
    ),
    license: str | None = typer.Option(None, "--license", help="Only this license (case-insensitive)."),
    search: str | None = typer.Option(None, "--search", "-q", help="Text in the Hub id, title or description."),
    limit: int = typer.Option(50, "--limit", "-n", min=1, max=10_000, help="At most this many entries."),
    offset: int = typer.Option(0, "--offset", min=0, help="Skip this many entries first."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array instead of a table."),
) -> None:
    """List catalog entries, best first (by the category's relevance score when --category is given)."""
    from core.types import parse_category
    from curation.catalog import store

    with _cli_errors():
        name = parse_category(category).value if category else None
        if status is not None and status not in ENTRY_STATUS_STYLE:
            raise CliError(f"unknown status {status!r}; known: {', '.join(ENTRY_STATUS_STYLE)}", EXIT_USAGE)
        with _session(readonly=True) as session:
            entries, total = store.list_entries(
                session, status=status, category=name, license=license, text=search, limit=limit, offset=offset
            )
            if total == 0 and not store.list_entries(session, limit=1)[1]:
                say_empty_catalog()
            measured = store.entry_values(session, hub_ids=[e.hub_id for e in entries],
                                          categories={e.hub_id: list(e.categories) for e in entries})
        if as_json:
            typer.echo(json.dumps([entry_json(e, name, measured[e.hub_id]) for e in entries], indent=2))
            return
        console = Console()
        if console.width >= WIDE_LIST:
            console.print(entries_table(entries, name, total, offset, measured))
        else:  # eight columns cannot share a narrow terminal: each entry as a short block instead
            for line in entries_lines(entries, name, total, offset, width=console.width, measured=measured):
                console.print(line, highlight=False)


@catalog_app.command("show")
def show_command(
    hub_id: str = typer.Argument(..., help="Hub dataset id, owner/name."),
    as_json: bool = typer.Option(False, "--json", help="Print the entry and its history as JSON."),
) -> None:
    """Show one entry: metadata, per-category relevance, evidence, verdicts and the audit trail."""
    from curation.catalog import store

    with _cli_errors():
        valid = _hub_id(hub_id)
        with _session(readonly=True) as session:
            history = store.entry_history(session, hub_id=valid)
        if as_json:
            typer.echo(json.dumps(_history_json(history), indent=2))
            return
        _print_history(Console(), history)


def _history_json(history: dict[str, Any]) -> dict[str, Any]:
    return {
        key: [row.model_dump(mode="json") for row in value] if isinstance(value, list)
        else value.model_dump(mode="json")
        for key, value in history.items()
    }


def _print_history(console: Console, history: dict[str, Any]) -> None:
    entry = history["entry"]
    console.print(f"[bold]{entry.hub_id}[/bold]  [{ENTRY_STATUS_STYLE.get(entry.status, '')}]{entry.status}[/]  "
                  f"verifier: {entry.verifier_decision or '?'}  version {entry.version}", highlight=False)
    if entry.title:
        console.print(entry.title, highlight=False)
    if entry.description:
        console.print(f"[dim]{entry.description[:400]}[/dim]", highlight=False)
    console.print(f"license: {entry.license or '?'}   format: {entry.format_guess or '?'}   "
                  f"reviewer: {entry.reviewer or '-'}   note: {entry.note or '-'}", highlight=False)
    relevance = ", ".join(f"{c} {entry.relevance.get(c, 0.0):.2f}" for c in entry.categories)
    console.print(f"categories: {relevance}", highlight=False)
    for reason in entry.reasons:
        kind = "blocks" if reason.get("blocking") else "flag"
        console.print(
            f"  • {reason['code']} ({kind}, {reason.get('category', '?')}): {reason.get('detail', '')}",
            highlight=False,
        )
    evidence = Table(title="evidence", title_justify="left")
    for column in ("campaign", "category", "relevance", "backend", "query", "rank"):
        evidence.add_column(column)
    for candidate in history["candidates"]:
        for item in candidate.evidence or [{}]:
            evidence.add_row(candidate.campaign_id, candidate.category, f"{candidate.relevance:.2f}",
                             str(item.get("backend", "")), str(item.get("query", "")), str(item.get("rank", "")))
    console.print(evidence)
    audit = Table(title="audit", title_justify="left")
    for column in ("at", "action", "from", "to", "actor", "note"):
        audit.add_column(column)
    for row in history["audit"]:
        audit.add_row(row.at.strftime("%Y-%m-%d %H:%M:%S"), row.action, row.from_status or "", row.to_status or "",
                      row.actor, row.note or "")
    console.print(audit)
    verdicts = ", ".join(f"{v.decision}[{reason_codes(v.reasons)}]" for v in history["verdicts"])
    console.print(f"verdicts: {verdicts or '-'}", highlight=False)


def _review(
    hub_id: str, *, approve: bool, note: str | None, reviewer: str | None, override: bool, as_json: bool
) -> None:
    from core.settings import get_settings
    from server.usecases.catalog import review

    with _cli_errors():
        valid = _hub_id(hub_id)
        who = (reviewer or _default_reviewer()).strip()
        if not who:
            raise CliError("the reviewer name is empty", EXIT_USAGE)
        with _session() as session:
            reviewed = review(session=session, settings=get_settings(), hub_id=valid, approve=approve, reviewer=who,
                              note=note, override=override)
        if reviewed.warning:
            typer.echo(f"warning: {reviewed.warning}", err=True)
        [entry] = reviewed.entries
        if approve:
            _warn_license(entry)
        if as_json:
            typer.echo(json.dumps(entry_json(entry), indent=2))
            return
        Console().print(f"{entry.hub_id}: [{ENTRY_STATUS_STYLE[entry.status]}]{entry.status}[/] by {entry.reviewer} "
                        f"(version {entry.version})", highlight=False)
        typer.echo("next: review the others (`datahunt catalog list --status pending_review`), then "
                   "`datahunt manifest export --out FILE`")


def _warn_license(entry: Any) -> None:
    """Say on stderr when an approved entry's licence is non-commercial, restricted or unknown."""
    from core.licenses import license_risk

    risk = license_risk(entry.license)
    if risk != "ok":
        typer.echo(f"warning: {entry.hub_id} is approved with license {entry.license or 'not stated'} "
                   f"({risk.replace('_', '-')}); publish will ask for --accept-license-risk", err=True)


def say_empty_catalog() -> None:
    """Say on stderr which catalog was opened and found empty, and how to point at another one."""
    from core.settings import get_settings
    from server.usecases.catalog import empty_catalog_note

    typer.echo(f"note: {empty_catalog_note(settings=get_settings())}", err=True)


def _default_reviewer() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


@catalog_app.command("approve")
def approve_command(
    hub_id: str = typer.Argument(..., help="Hub dataset id, owner/name."),
    note: str | None = typer.Option(None, "--note", "-m", help="Why; kept on the entry and in the audit trail."),
    reviewer: str | None = typer.Option(None, "--reviewer", help="Who approves (default: the login name)."),
    override: bool = typer.Option(False, "--override", help="Approve even though the verifier rejected it."),
    as_json: bool = typer.Option(False, "--json", help="Print the entry as JSON."),
) -> None:
    """Approve an entry for the manifest."""
    _review(hub_id, approve=True, note=note, reviewer=reviewer, override=override, as_json=as_json)


@catalog_app.command("reject")
def reject_command(
    hub_id: str = typer.Argument(..., help="Hub dataset id, owner/name."),
    note: str | None = typer.Option(None, "--note", "-m", help="Why; kept on the entry and in the audit trail."),
    reviewer: str | None = typer.Option(None, "--reviewer", help="Who rejects (default: the login name)."),
    as_json: bool = typer.Option(False, "--json", help="Print the entry as JSON."),
) -> None:
    """Reject an entry; it stays in the catalog with the note."""
    _review(hub_id, approve=False, note=note, reviewer=reviewer, override=False, as_json=as_json)


@catalog_app.command("summary")
def summary_command(
    campaign: str | None = typer.Option(None, "--campaign", help="Only the entries this campaign found."),
    as_json: bool = typer.Option(False, "--json", help="Print the counts as JSON."),
) -> None:
    """Count entries by status and by category."""
    from curation.catalog import store

    with _cli_errors():
        with _session(readonly=True) as session:
            summary = store.catalog_summary(session, campaign_id=campaign)
        if not summary["total"] and not campaign:
            say_empty_catalog()
        if as_json:
            typer.echo(json.dumps(summary, indent=2))
            return
        by_status = " · ".join(f"{n} {status}" for status, n in summary["by_status"].items())
        console = Console()
        console.print(f"catalog: {summary['total']} entries · {by_status}", highlight=False, soft_wrap=True)
        # Two tables, so each fits an 80-column terminal with its headers whole (one took 104 columns and cut
        # every header to "tot…", "v.a…").
        reviewers = counts_table("reviewers' status", show_footer=True)
        columns = ("total", "pending_review", "approved", "rejected")
        reviewers.add_column("category", no_wrap=True, footer="all entries")
        footers = {**summary["by_status"], "total": summary["total"]}
        for column in columns:
            reviewers.add_column(column.replace("_review", ""), justify="right", footer=str(footers.get(column, "")))
        verdicts = counts_table("verifier verdicts, counted as `campaign run` counts them")
        verifier = ("accepted", "unverified", "flagged", "eval_sets", "rejected")
        verdicts.add_column("category", no_wrap=True)
        for column in verifier:
            verdicts.add_column("eval" if column == "eval_sets" else column, justify="right")
        for category, counts in summary["by_category"].items():
            reviewers.add_row(category, *(str(counts.get(c, 0)) for c in columns))
            verdicts.add_row(category, *(str(counts.get(f"verifier_{c}", 0)) for c in verifier))
        console.print(reviewers)
        console.print(verdicts)
        console.print(
            "pending/approved/rejected: the reviewers' status; verdicts: each entry's verifier verdict for the "
            "category (unverified: accepted with only offline unknowns open; eval: benchmarks, offered for "
            "decontamination; both inside accepted / rejected).",
            highlight=False, soft_wrap=True)
        console.print("next: datahunt catalog list --category CATEGORY (or the review page: `datahunt serve`), then "
                      "`datahunt catalog approve OWNER/NAME`", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Attach the `catalog` group to the main app."""
    app.add_typer(catalog_app, name="catalog")
