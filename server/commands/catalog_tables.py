"""How `datahunt catalog` draws entries: the ranked list (a table on a wide terminal, a block of lines per entry
on a narrow one), the reason codes of an entry, and the plain counts table `summary` prints.

The command module parses, calls the catalog and prints what these return; nothing here reads the catalog.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from rich import box
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from core.measured_value import MeasuredValue
    from core.types import Reason

ENTRY_STATUS_STYLE = {"pending_review": "yellow", "approved": "green", "rejected": "red"}


# Below this terminal width `catalog list` prints each entry as a block of lines: a table of eight columns at
# 80 columns wrapped ids, categories and reason codes mid-word, several lines per entry.
WIDE_LIST = 140


def list_title(entries: list[Any], category: str | None, total: int, offset: int) -> str:
    """Return the list's title: the category, if any, and which entries of how many are shown."""
    shown = f"{offset + 1}–{offset + len(entries)} of {total}" if entries else f"none of {total}"
    return f"catalog{f' · {category}' if category else ''} · {shown}"


def _score(entry: Any, category: str | None) -> str:
    return f"{entry.relevance.get(category, 0.0) if category else entry.best_relevance:.2f}"


def _styled_status(entry: Any) -> str:
    return f"[{ENTRY_STATUS_STYLE.get(entry.status, '')}]{entry.status}[/]"


def _styled_verdict(entry: Any, missing: str) -> str:
    verifier = entry.verifier_decision or missing
    return f"[red]{verifier}[/]" if verifier == "reject" else verifier


def _measured_text(values: list[MeasuredValue]) -> str:
    """The entry's measured values in words ('-' when none): its source's, then its categories'."""
    from core.measured_value import describe_value

    return "; ".join(describe_value(v) if v.kind == "source" else f"category {v.name}: {describe_value(v)}"
                     for v in values) or "-"


def entries_lines(entries: list[Any], category: str | None, total: int, offset: int, *, width: int,
                  measured: dict[str, list[MeasuredValue]] | None = None) -> list[str]:
    """Return the list as lines for a narrow terminal: each entry's id and score, its details wrapped under it."""
    lines = [list_title(entries, category, total, offset)]
    for rank, entry in enumerate(entries, start=offset + 1):
        lines.append(f"[dim]{rank:>3}[/] [bold]{escape(entry.hub_id)}[/]  {_score(entry, category)}")
        details = [f"{_styled_status(entry)} · verifier {_styled_verdict(entry, '-')} · "
                   f"license {escape(entry.license or '?')}", f"categories: {categories_text(entry)}"]
        codes = reason_codes(entry.reasons, category)
        if codes:
            details.append(f"reasons: {codes}")
        if (measured or {}).get(entry.hub_id):
            details.append(escape(_measured_text((measured or {})[entry.hub_id])))
        for detail in details:  # wrapped at word boundaries under the id, never mid-word
            lines += textwrap.wrap(detail, width=max(40, width - 1), initial_indent="    ",
                                   subsequent_indent="      ", break_long_words=False, break_on_hyphens=False)
    return lines


def entries_table(entries: list[Any], category: str | None, total: int, offset: int,
                  measured: dict[str, list[MeasuredValue]] | None = None) -> Table:
    """Return the list as one table of eight columns, for a wide terminal."""
    table = counts_table(list_title(entries, category, total, offset))
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
            categories_text(entry), entry.license or "?", reason_codes(entry.reasons, category),
            escape(_measured_text((measured or {}).get(entry.hub_id, []))),
        )
    return table


def categories_text(entry: Any) -> str:
    """The entry's categories, most relevant first; those it was found off-topic for named apart, in brackets."""
    kept, off_topic = entry.ranked_categories()
    text = ", ".join(kept) or "-"
    return f"{text} (off-topic for {', '.join(off_topic)})" if off_topic else text


def counts_table(title: str, **options: Any) -> Table:
    """The CLI's plain table: a rule under the headers, one space of padding, nothing at the edges."""
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1),
                 collapse_padding=True, **options)


def reason_codes(reasons: list[Reason], category: str | None = None) -> str:
    """Each reason code once, in first-seen order, `(flag)` unless one of its occurrences blocks; with a category,
    that category's reasons only. An entry found by five categories carries a license reason five times."""
    codes: dict[str, bool] = {}
    for reason in reasons:
        if category is not None and reason.get("category") not in (None, category):
            continue
        codes[reason["code"]] = codes.get(reason["code"], False) or bool(reason.get("blocking"))
    return ", ".join(code if blocking else f"{code} (flag)" for code, blocking in codes.items())
