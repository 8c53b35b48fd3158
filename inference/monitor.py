"""The live view of a regeneration run: rich progress bars drawn from the run's status file.

`datahunt monitor DIR` redraws about once a second until the run finishes (or once with `--once`). It only
reads `DIR/status.json`, so it can watch a run started by another process, on another terminal, or one that
already ended. `LiveStatus` draws the same view from inside `datahunt regen` while it runs.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.table import Table

from inference.quality import UNKNOWN_CATEGORY, QualityShares
from inference.status import Eta, StatusFile, TokenRate, TurnCounts, read_status


def format_duration(seconds: float | None) -> str:
    """Return `seconds` as `1d 02h`, `3h 04m`, `5m 06s` or `7s`; `?` when unknown."""
    if seconds is None:
        return "?"
    seconds = int(max(0, seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def process_gone(status: StatusFile) -> bool:
    """True when the status says running but its process no longer exists on this machine (killed or crashed)."""
    pid = status.get("pid")
    if status.get("state") != "running" or not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, owned by someone else
        return False
    return False


def render(status: StatusFile) -> RenderableType:
    """Return the monitor's view of one status snapshot."""
    rows = status["rows"]
    progress = Progress(
        TextColumn("{task.description:<34}"), BarColumn(bar_width=40), TaskProgressColumn(),
        TextColumn("{task.fields[note]}"),
    )
    finished = rows["done"] + rows["failed"]
    progress.add_task(
        "rows", total=max(rows["total"], 1), completed=finished,
        note=f"{rows['done']} done · {rows['failed']} failed · {rows['pending']} pending",
    )
    for endpoint in status.get("endpoints", []):
        mark = "[green]up[/]" if endpoint["healthy"] else "[red]down[/]"
        progress.add_task(
            short_label(endpoint["url"]), total=max(endpoint["limit"], 1), completed=endpoint["in_flight"],
            note=(f"{mark} in flight {endpoint['in_flight']}/{endpoint['limit']} · ok {endpoint['ok']} "
                  f"· err {endpoint['errors']}"),
        )
    eta: Eta | dict[str, float] = status.get("eta") or {}
    tok_s: TokenRate | dict[str, float] = status.get("tok_s") or {}
    table = Table.grid(padding=(0, 2))
    state = status.get("state", "?")
    if process_gone(status):
        state = "[red]stopped (process gone: run the same regen command to resume)[/]"
    tokens = status["tokens"]
    written = tokens["completion"] + tokens.get("in_flight", 0)  # what the tok/s beside it counts
    table.add_row(
        f"[bold]{status.get('run_id', '')}[/] {state}",
        f"{written:,} tokens",
        f"{tok_s.get('last_minute', 0):,.1f} tok/s (last min) · {tok_s.get('overall', 0):,.1f} overall",
    )
    table.add_row(f"elapsed {format_duration(status.get('elapsed_s'))}", *eta_cells(eta, status.get("turns")))
    parts: list[RenderableType] = [table, progress]
    quality = status.get("quality") or {}
    if quality:
        parts.append(quality_table(quality))
    if status.get("error"):
        parts.append(f"[red]{status['error']}[/]")
    return Group(*parts)


def eta_cells(eta: Mapping[str, Any], turns: TurnCounts | None) -> tuple[str, str]:
    """The ETA and its range as the monitor prints them, or why there is none yet; the turns still to come."""
    to_come = f" · {turns['to_come']} turns to come" if turns else ""
    unknown = eta.get("unknown")
    if eta.get("expected_s") is None:
        return f"ETA unknown ({unknown or 'nothing to go by yet'})", to_come.removeprefix(" · ")
    low, expected, high = (format_duration(eta.get(key)) for key in ("low_s", "expected_s", "high_s"))
    spread = f"range {low} – {high}" if low != high else ""
    return f"ETA {expected}", f"{spread}{to_come}".removeprefix(" · ")


def short_label(label: str, width: int = 34) -> str:
    """`label` cut to `width` at its end, never its start (`in-process static-cache engine (smol…`)."""
    return label if len(label) <= width else label[: width - 1] + "…"


def quality_table(quality: dict[str, QualityShares]) -> Table:
    """Return the per-category table of regenerated rows cut at the token limit and repeating themselves."""
    table = Table(title="answer quality", title_justify="left")
    for column in ("category", "rows", "cut at limit", "repetitive"):
        table.add_column(column, justify="left" if column == "category" else "right")
    for category, q in sorted(quality.items()):
        cut = f"{q['cut_at_limit']} ({q['cut_share']:.0%})"
        loops = f"{q['repetitive']} ({q['repetition_share']:.0%})"
        table.add_row("(none)" if category == UNKNOWN_CATEGORY else category, str(q["rows"]), cut, loops)
    return table


class LiveStatus:
    """Redraw a run's status file on `console` from a background thread while the run works in this process.

    Use as a context manager around the run; nothing is drawn when the console is not a terminal, so piped
    output and logs stay clean.
    """

    def __init__(self, run_dir: Path, console: Console, interval_s: float = 0.5) -> None:
        self.run_dir, self.console, self.interval_s = Path(run_dir), console, interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        with Live("starting…", console=self.console, refresh_per_second=4, transient=False) as live:
            while True:
                status = read_status(self.run_dir)
                if status is not None:
                    live.update(render(status))
                if self._stop.wait(self.interval_s):
                    final = read_status(self.run_dir)
                    if final is not None:
                        live.update(render(final))
                    return

    def __enter__(self) -> LiveStatus:
        if self.console.is_terminal:
            self._thread = threading.Thread(target=self._loop, name="regen-live-status", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def watch(run_dir: Path, *, once: bool = False, interval_s: float = 1.0, console: Console | None = None) -> StatusFile:
    """Show the run in `run_dir` until it stops running (or once); return the last status seen."""
    console = console or Console()
    status = read_status(run_dir)
    if status is None:
        raise FileNotFoundError(f"{run_dir} has no status file: not a regeneration run (or not started yet)")
    if once:
        console.print(render(status))
        return status
    with Live(render(status), console=console, refresh_per_second=4) as live:
        while status.get("state") == "running" and not process_gone(status):
            time.sleep(interval_s)
            status = read_status(run_dir) or status
            live.update(render(status))
    return status
