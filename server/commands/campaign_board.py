"""What `datahunt campaign` shows of a campaign: the live board of its subagents while it runs, fed by the
graph's events, and the tables it prints at the end (per category: status and candidate counts, and each
category's reason codes).

The command module runs the campaign and prints what these return.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table

from core.types import RunStatus

if TYPE_CHECKING:
    from graph.state import RunCounts  # one category's line of a finished campaign

RUN_STATUS_STYLE = {RunStatus.PENDING: "dim", RunStatus.RUNNING: "yellow", RunStatus.SUCCEEDED: "green",
                RunStatus.EMPTY: "magenta", RunStatus.FAILED: "red"}


class ProgressBoard:
    """The live table: one row per category, fed by campaign events."""

    def __init__(self) -> None:
        self.campaign_id: str | None = None
        self.rows: dict[str, dict[str, Any]] = {}
        self.summary: dict[str, Any] = {}
        self.notes: list[str] = []

    def on_event(self, event: Any) -> None:
        """Update the rows from one `graph.events.CampaignEvent`."""
        self.campaign_id = event.campaign_id
        if event.kind == "campaign_started":
            self.notes = list(event.detail.get("notes", []))
            for category in event.detail.get("categories", []):
                self.rows.setdefault(category, {"status": RunStatus.PENDING})
        elif event.kind == "run_started" and event.category:
            self.rows[event.category] = {"status": RunStatus.RUNNING, "started": time.monotonic()}
        elif event.kind == "run_finished" and event.category:
            self.rows[event.category] = {"status": event.status, **event.detail}
        elif event.kind == "campaign_finished":
            self.summary = {"status": event.status, **event.detail}
            for category, counts in self.summary.get("by_category", {}).items():  # branches a resume did not re-run
                if self.rows.get(category, {}).get("status") in (None, RunStatus.PENDING):
                    self.rows[category] = {"status": counts["status"], "candidates": counts["candidates"]}

    def render(self) -> Table:
        """Return the table as it stands now."""
        table = Table(title=f"campaign {self.campaign_id or '…'}", title_justify="left")
        for column in ("category", "status", "queries", "failed", "candidates", "elapsed", "error"):
            table.add_column(
                column,
                justify="right" if column in ("queries", "failed", "candidates", "elapsed") else "left",
            )
        for category, row in self.rows.items():
            status = row["status"]
            elapsed = row.get("elapsed_s")
            if elapsed is None and "started" in row:
                elapsed = time.monotonic() - row["started"]
            table.add_row(
                category, f"[{RUN_STATUS_STYLE.get(status, '')}]{status}[/]", str(row.get("queries", "")),
                str(row.get("failed_queries", "")), str(row.get("candidates", "")),
                f"{elapsed:.1f}s" if elapsed is not None else "", (row.get("error") or "")[:60],
            )
        return table



SUMMARY_COLUMNS = ("candidates", "accepted", "unverified", "flagged", "eval_sets", "rejected")
SUMMARY_HEADERS = {"candidates": "found", "eval_sets": "eval"}
SUMMARY_LEGEND = (
    "found: candidates; accepted: let through by the verifier, of which unverified: only what nobody "
    "could check offline is open (existence, license, size, columns), flagged: a real flag for the "
    "reviewer; eval: benchmarks kept out of training and offered for decontamination (counted in "
    "rejected). `datahunt catalog summary` counts the same."
)


def tight_table(title: str) -> Table:
    """A table whose columns are one space apart (the rule's own), so ten category rows of counts fit 80 columns with
    every header whole (with cell padding the campaign summary took 86)."""
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0),
                 collapse_padding=True)


def summary_table(by_category: dict[str, RunCounts]) -> Table:
    """Return the end-of-run table: per category, status and candidate counts."""
    table = tight_table("catalog summary of this campaign")
    table.add_column("category", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for column in SUMMARY_COLUMNS:
        table.add_column(SUMMARY_HEADERS.get(column, column), justify="right")
    for category, row in by_category.items():
        table.add_row(category, row["status"], *(str(row.get(k, 0)) for k in SUMMARY_COLUMNS))
    return table


def reason_lines(by_category: dict[str, RunCounts]) -> list[str]:
    """Return one line per category with flags or rejections: the category, then each reason code once."""
    lines = []
    for category, row in by_category.items():
        if row.get("reasons"):
            lines.append(f"{category}: " + ", ".join(f"{code} {n}" for code, n in row["reasons"].items()))
    return lines
