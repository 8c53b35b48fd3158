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
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypedDict

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from server.commands.failure import EXIT_USAGE, fail

if TYPE_CHECKING:
    from core.measured_value import MeasuredValue
    from core.types import Reason
    from curation.catalog.models import CatalogEntry

catalog_app = typer.Typer(help="The catalog: list, inspect, approve and reject candidate datasets.", no_args_is_help=True)

EXIT_NOT_FOUND = 1
STATUS_STYLE = {"pending_review": "yellow", "approved": "green", "rejected": "red"}


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
        fail(f"cannot use the catalog database: {str(exc.orig or exc).splitlines()[0]}", EXIT_NOT_FOUND)


@contextmanager
def _session(*, readonly: bool = False) -> Iterator[Any]:
    """Yield a session on the configured catalog, migrated to the newest schema."""
    from core.settings import get_settings
    from curation.catalog import store

    engine = store.make_engine(get_settings().resolved_database_url)
    try:
        store.upgrade_database(engine)
        with store.open_session(engine, readonly=readonly) as session:
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
    category: str | None = typer.Option(None, "--category", "-c", help="Only this category, best first by its relevance."),
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
        if status is not None and status not in STATUS_STYLE:
            raise CliError(f"unknown status {status!r}; known: {', '.join(STATUS_STYLE)}", EXIT_USAGE)
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
            console.print(_entries_table(entries, name, total, offset, measured))
        else:  # eight columns cannot share a narrow terminal: each entry as a short block instead
            for line in _entries_lines(entries, name, total, offset, width=console.width, measured=measured):
                console.print(line, highlight=False)


# Below this terminal width `catalog list` prints each entry as a block of lines: a table of eight columns at
# 80 columns wrapped ids, categories and reason codes mid-word, several lines per entry.
WIDE_LIST = 140


def _list_title(entries: list[Any], category: str | None, total: int, offset: int) -> str:
    shown = f"{offset + 1}–{offset + len(entries)} of {total}" if entries else f"none of {total}"
    return f"catalog{f' · {category}' if category else ''} · {shown}"


def _score(entry: Any, category: str | None) -> str:
    return f"{entry.relevance.get(category, 0.0) if category else entry.best_relevance:.2f}"


def _styled_status(entry: Any) -> str:
    return f"[{STATUS_STYLE.get(entry.status, '')}]{entry.status}[/]"


def _styled_verdict(entry: Any, missing: str) -> str:
    verifier = entry.verifier_decision or missing
    return f"[red]{verifier}[/]" if verifier == "reject" else verifier


def _measured_text(values: list[MeasuredValue]) -> str:
    """The entry's measured values in words ('-' when none): its source's, then its categories'."""
    from core.measured_value import describe_value

    return "; ".join(describe_value(v) if v.kind == "source" else f"category {v.name}: {describe_value(v)}"
                     for v in values) or "-"


def _entries_lines(entries: list[Any], category: str | None, total: int, offset: int, *, width: int,
                   measured: dict[str, list[MeasuredValue]] | None = None) -> list[str]:
    lines = [_list_title(entries, category, total, offset)]
    for rank, entry in enumerate(entries, start=offset + 1):
        lines.append(f"[dim]{rank:>3}[/] [bold]{escape(entry.hub_id)}[/]  {_score(entry, category)}")
        details = [f"{_styled_status(entry)} · verifier {_styled_verdict(entry, '-')} · "
                   f"license {escape(entry.license or '?')}", f"categories: {_categories_text(entry)}"]
        codes = _reason_codes(entry.reasons, category)
        if codes:
            details.append(f"reasons: {codes}")
        if (measured or {}).get(entry.hub_id):
            details.append(escape(_measured_text((measured or {})[entry.hub_id])))
        for detail in details:  # wrapped at word boundaries under the id, never mid-word
            lines += textwrap.wrap(detail, width=max(40, width - 1), initial_indent="    ",
                                   subsequent_indent="      ", break_long_words=False, break_on_hyphens=False)
    return lines


def _entries_table(entries: list[Any], category: str | None, total: int, offset: int,
                   measured: dict[str, list[MeasuredValue]] | None = None) -> Table:
    table = _counts_table(_list_title(entries, category, total, offset))
    table.add_column("#", justify="right", style="dim")
    table.add_column("hub id", no_wrap=True, min_width=min(40, max((len(e.hub_id) for e in entries), default=6)))
    table.add_column("score", justify="right")
    table.add_column("status", no_wrap=True)
    table.add_column("verifier", no_wrap=True)
    table.add_column("categories", overflow="fold")
    table.add_column("license")
    table.add_column("reasons", overflow="fold")
    table.add_column("measured", overflow="fold")
    for rank, entry in enumerate(entries, start=offset + 1):
        table.add_row(
            str(rank), entry.hub_id, _score(entry, category), _styled_status(entry), _styled_verdict(entry, ""),
            _categories_text(entry), entry.license or "?", _reason_codes(entry.reasons, category),
            escape(_measured_text((measured or {}).get(entry.hub_id, []))),
        )
    return table


def _categories_text(entry: Any) -> str:
    """The entry's categories, most relevant first; those it was found off-topic for named apart, in brackets."""
    kept, off_topic = entry.ranked_categories()
    text = ", ".join(kept) or "-"
    return f"{text} (off-topic for {', '.join(off_topic)})" if off_topic else text


def _counts_table(title: str, **options: Any) -> Table:
    """The CLI's plain table: a rule under the headers, one space of padding, nothing at the edges."""
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1),
                 collapse_padding=True, **options)


def _reason_codes(reasons: list[Reason], category: str | None = None) -> str:
    """Each reason code once, in first-seen order, `(flag)` unless one of its occurrences blocks; with a category,
    that category's reasons only. An entry found by five categories carries a license reason five times."""
    codes: dict[str, bool] = {}
    for reason in reasons:
        if category is not None and reason.get("category") not in (None, category):
            continue
        codes[reason["code"]] = codes.get(reason["code"], False) or bool(reason.get("blocking"))
    return ", ".join(code if blocking else f"{code} (flag)" for code, blocking in codes.items())


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
    return {key: [row.model_dump(mode="json") for row in value] if isinstance(value, list) else value.model_dump(mode="json")
            for key, value in history.items()}


def _print_history(console: Console, history: dict[str, Any]) -> None:
    entry = history["entry"]
    console.print(f"[bold]{entry.hub_id}[/bold]  [{STATUS_STYLE.get(entry.status, '')}]{entry.status}[/]  "
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
        console.print(f"  • {reason['code']} ({kind}, {reason.get('category', '?')}): {reason.get('detail', '')}", highlight=False)
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
    verdicts = ", ".join(f"{v.decision}[{_reason_codes(v.reasons)}]" for v in history["verdicts"])
    console.print(f"verdicts: {verdicts or '-'}", highlight=False)


def _review(hub_id: str, *, approve: bool, note: str | None, reviewer: str | None, override: bool, as_json: bool) -> None:
    from curation.catalog import store

    with _cli_errors():
        valid = _hub_id(hub_id)
        who = (reviewer or _default_reviewer()).strip()
        if not who:
            raise CliError("the reviewer name is empty", EXIT_USAGE)
        with _session() as session:
            store.adopt_licenses(session, mirror_license_index(), source="mirror index")
            entry = store.review_entry(session, hub_id=valid, approve=approve, reviewer=who, note=note, override=override)
        if approve:
            _warn_license(entry)
        if as_json:
            typer.echo(json.dumps(entry_json(entry), indent=2))
            return
        Console().print(f"{entry.hub_id}: [{STATUS_STYLE[entry.status]}]{entry.status}[/] by {entry.reviewer} "
                        f"(version {entry.version})", highlight=False)


def mirror_license_index() -> dict[str, str]:
    """The licences the configured mirror's index states (none without a mirror, or with an unreadable one)."""
    from core.settings import get_settings
    from curation.licenses import mirror_licenses
    from curation.manifest import ManifestError
    from curation.mirror import read_mirror_index

    mirror = get_settings().mirror
    try:
        return mirror_licenses(read_mirror_index(mirror)) if mirror else {}
    except ManifestError as exc:
        typer.echo(f"warning: mirror licences not read: {exc}", err=True)
        return {}


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

    typer.echo(f"note: the catalog {get_settings().catalog_label} is empty; another one is chosen with "
               "DATAHUNT_HOME or DATAHUNT_DATABASE_URL, or for good with `datahunt config set home DIR`", err=True)


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
        reviewers = _counts_table("reviewers' status", show_footer=True)
        columns = ("total", "pending_review", "approved", "rejected")
        reviewers.add_column("category", no_wrap=True, footer="all entries")
        footers = {**summary["by_status"], "total": summary["total"]}
        for column in columns:
            reviewers.add_column(column.replace("_review", ""), justify="right", footer=str(footers.get(column, "")))
        verdicts = _counts_table("verifier verdicts, counted as `campaign run` counts them")
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


def register(app: typer.Typer) -> None:
    """Attach the `catalog` group to the main app."""
    app.add_typer(catalog_app, name="catalog")
