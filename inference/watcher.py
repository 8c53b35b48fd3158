"""The `datahunt watch` loop: read the engine's counters each interval, keep the window, judge, tell.

Each interval: one reading (`inference.spec_readings`), added to the rolling window (`inference.spec_window`,
which notices restarts), judged by the rules (`inference.watch_rules`), then one line saying whether
speculation pays. A rule that starts firing is an alert: one `ALERT` line, a POST to the webhook when one is
set, and `datahunt_watch_alert{kind}` at 1; when it stops, one `resolved` line. A server that does not answer
is reported on the line (`down`) and is no alert: a restart takes minutes, and the window starts again when
it is back. What the draft expects comes from its `expectations.json` (`core.draft_expectations`) or the
command line; the engine and the served draft are read from the server at start and after every restart, and
a served draft whose aux layer ids differ from those the expectations were recorded for is said at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

from core.draft_expectations import DraftExpectations
from core.server_info import ServerInfo
from inference.server_info import ServerInfoError, fetch_server_info
from inference.spec_readings import read_totals
from inference.spec_window import RollingWindow, SpecTotals
from inference.watch_metrics import WatchMetrics
from inference.watch_rules import Alert, AlertKind, Expected, Thresholds, WindowStats, describe, judge, paying

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WatchSettings:
    """How to watch: where, how often, over how many rounds, and what was given on the command line."""

    url: str
    interval_s: float = 10.0
    window_rounds: int = 2000
    thresholds: Thresholds = field(default_factory=Thresholds)
    break_even: float | None = None  # given: overrides the recorded one
    baseline_accept_length: float | None = None
    webhook: str | None = None
    timeout_s: float = 30.0


@dataclass
class Tick:
    """What one interval found."""

    line: str
    stats: WindowStats | None = None
    started: list[Alert] = field(default_factory=list)
    resolved: list[AlertKind] = field(default_factory=list)
    firing: list[Alert] = field(default_factory=list)
    restarted: bool = False
    notes: list[str] = field(default_factory=list)
    up: bool = True


def expected_for(expectations: DraftExpectations | None, settings: WatchSettings, batch: float | None) -> Expected:
    """The figures the window is judged against: given ones first, else the draft's recorded ones (the round
    cost recorded at the batch size nearest to the requests the engine runs)."""
    reference = expectations.reference() if expectations else None
    cost = expectations.round_cost(batch) if expectations else None
    if settings.break_even is not None:
        break_even, source = settings.break_even, "given"
    elif cost is not None:
        break_even, source = (cost.break_even_accept_length,
                              f"recorded at batch {cost.batch}, k={cost.k} ({cost.device})")
    else:
        break_even, source = None, ""
    return Expected(break_even=break_even, break_even_source=source,
                    position0=reference.per_position_accept[0] if reference and reference.per_position_accept else None,
                    accept_length=reference.accept_length if reference else None,
                    baseline_accept_length=settings.baseline_accept_length)


def served_draft_notes(info: ServerInfo, expectations: DraftExpectations | None) -> list[str]:
    """Warnings about the draft the server says it serves, against what the expectations were recorded for."""
    notes = []
    if expectations is not None and info.engine != expectations.engine:
        notes.append(f"the draft's expectations were recorded for {expectations.engine}'s layer-id layout; this "
                     f"server is {info.engine}: its acceptance may fall short of them (see datahunt export-draft)")
    return notes


def layer_mismatch(info: ServerInfo, expectations: DraftExpectations | None) -> Alert | None:
    """The `misconfigured` alert when the folder the server says it serves (readable here) names other aux layer
    ids than the draft was checked for; None when they agree or cannot be read."""
    path = info.speculative_draft_model_path
    config = Path(path) / "config.json" if path else None
    if expectations is None or config is None or not config.is_file():
        return None
    try:
        served = json.loads(config.read_text(encoding="utf-8"))
        ids = list((served.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or [])
    except (OSError, ValueError, AttributeError):
        return None
    if not ids or ids == expectations.aux_layer_ids:
        return None
    return Alert("misconfigured", f"the server serves {path} whose aux layer ids {ids} differ from the ids the "
                 f"draft was checked for, {expectations.aux_layer_ids} ({expectations.engine}): the draft is fed "
                 "other target layers than it learned from", {})


class Watcher:
    """One watched server: its window, the rules that fire, and where alerts go."""

    def __init__(self, settings: WatchSettings, expectations: DraftExpectations | None,
                 metrics: WatchMetrics | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings, self.expectations, self.metrics, self.clock = settings, expectations, metrics, clock
        self.window = RollingWindow(settings.window_rounds)
        self.info: ServerInfo | None = None
        self.firing: dict[AlertKind, Alert] = {}
        self.config_alerts: dict[AlertKind, Alert] = {}  # from what the server says it serves (`identify`)

    def expected(self) -> Expected:
        """What this interval is judged against."""
        return expected_for(self.expectations, self.settings, self.window.running())

    def judge(self, stats: WindowStats) -> Tick:
        """Judge a window: the line, and which rules started or stopped firing."""
        expected = self.expected()
        alerts = {**self.config_alerts, **{a.kind: a for a in judge(stats, expected, self.settings.thresholds)}}
        started = [a for k, a in alerts.items() if k not in self.firing]
        resolved = [k for k in self.firing if k not in alerts]
        self.firing = alerts
        verdict = paying(stats, expected)
        if self.metrics is not None:
            self.metrics.update(stats, expected, set(alerts), verdict)
            for alert in started:
                self.metrics.fired(alert.kind)
        return Tick(describe(stats, expected, self.settings.thresholds), stats, started, resolved,
                    list(alerts.values()))

    def take(self, reading: SpecTotals | None, at: float) -> Tick:
        """Add one reading and judge the window."""
        if reading is None:
            if not self.config_alerts:
                return Tick("the server runs without speculation: nothing to watch")
            # It says it serves a draft but counts no rounds yet: its configuration is judged already.
            started = [a for k, a in self.config_alerts.items() if k not in self.firing]
            self.firing = dict(self.config_alerts)
            return Tick("no speculative rounds counted yet", started=started, firing=list(self.firing.values()))
        restarted = self.window.add(reading, at)
        if restarted:
            if self.metrics is not None:
                self.metrics.restarted()
            self.firing = {}
        tick = self.judge(self.window.stats())
        tick.restarted = restarted
        if restarted:
            tick.line = "server restarted (counters reset): window started again; " + tick.line
        return tick

    async def identify(self, client: httpx.AsyncClient) -> list[str]:
        """Read what the server is and serves; the notes about its draft."""
        self.info = await fetch_server_info(client, self.settings.url)
        mismatch = layer_mismatch(self.info, self.expectations)
        self.config_alerts = {mismatch.kind: mismatch} if mismatch is not None else {}
        return served_draft_notes(self.info, self.expectations)

    async def step(self, client: httpx.AsyncClient) -> Tick:
        """One interval: read (identifying the server first when needed), add, judge."""
        identified = self.info is None
        try:
            notes = await self.identify(client) if identified else []
            assert self.info is not None
            reading = await read_totals(client, self.settings.url, self.info.engine)
            tick = self.take(reading, self.clock())
            if tick.restarted and not identified:
                notes += await self.identify(client)
        except ServerInfoError as exc:
            if self.metrics is not None:
                self.metrics.down()
            self.info = None  # it may come back as another engine, or with another draft
            return Tick(f"down: {exc}", up=False)
        tick.notes = notes
        return tick

    async def notify(self, client: httpx.AsyncClient, alert: Alert, state: str) -> str | None:
        """POST the alert to the webhook; return a warning when it could not be delivered."""
        if not self.settings.webhook:
            return None
        stats = self.window.stats()
        body = {"source": "datahunt watch", "server": self.settings.url, "state": state, "kind": alert.kind,
                "message": alert.message, "values": alert.values, "accept_length": stats.accept_length,
                "per_position_accept": list(stats.per_position), "window_rounds": stats.rounds,
                "at": datetime.now(UTC).isoformat(timespec="seconds")}
        try:
            response = await client.post(self.settings.webhook, json=body)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            return f"webhook {self.settings.webhook} failed: {type(exc).__name__}: {exc}"
        return None


async def run_watch(watcher: Watcher, emit: Callable[[Tick], None], warn: Callable[[str], None],
                    ticks: int | None = None) -> None:
    """Watch until cancelled (or for `ticks` intervals): one client for the run, one tick per interval."""
    timeout = httpx.Timeout(watcher.settings.timeout_s)
    async with httpx.AsyncClient(timeout=timeout) as client:
        done = 0
        while ticks is None or done < ticks:
            started = time.monotonic()
            tick = await watcher.step(client)
            emit(tick)
            for alert in tick.started:
                problem = await watcher.notify(client, alert, "firing")
                if problem:
                    warn(problem)
            done += 1
            await asyncio.sleep(max(0.0, watcher.settings.interval_s - (time.monotonic() - started)))


async def check_once(watcher: Watcher) -> Tick:
    """One reading, judged over everything the counters hold since the server (re)started."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(watcher.settings.timeout_s)) as client:
        notes = await watcher.identify(client)
        assert watcher.info is not None
        reading = await read_totals(client, watcher.settings.url, watcher.info.engine)
        if reading is None:
            return Tick("the server runs without speculation: nothing to watch", notes=notes)
        zero = SpecTotals(0.0, 0.0, epoch=reading.epoch)
        uptime = time.time() - reading.epoch if reading.epoch else 0.0
        watcher.window.add(zero, 0.0)
        watcher.window.add(reading, max(uptime, 0.0))
        tick = watcher.judge(watcher.window.stats())
        tick.notes = notes
        for alert in tick.started:
            problem = await watcher.notify(client, alert, "firing")
            if problem:
                tick.notes.append(problem)
        return tick
