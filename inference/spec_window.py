"""A rolling window over an engine's cumulative speculative counters, through server restarts.

An engine's counters only grow while it runs, so what happened between two readings is their difference. A
restart starts them again from zero: a counter that went down, or a reading whose epoch (the process start the
server reports) changed, means the server restarted, and then the new reading is itself what happened since
the restart. The window is emptied at a restart (the server may come back with another draft or settings, and
old rounds must not vouch for it), so no rule judges until it has filled again: a restart is never an alarm.

The window keeps the newest intervals whose rounds sum to at least `size` (older ones fall out), so its
figures always rest on about `size` rounds however busy the server is.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from inference.watch_rules import WindowStats


@dataclass(frozen=True)
class SpecTotals:
    """An engine's cumulative counters at one moment."""

    rounds: float  # verification rounds with drafts (vLLM: drafts; SGLang: tokens / its mean acceptance)
    accepted: float  # accepted draft tokens
    tokens: float = 0.0  # generated tokens
    requests: float = 0.0  # finished requests
    per_position: tuple[float, ...] = ()  # accepted draft tokens per position (empty: not reported)
    epoch: float | None = None  # when these counters started (the server's process start), where reported
    running: float | None = None  # requests running now (a gauge, not differenced)

    def since(self, earlier: SpecTotals) -> SpecTotals | None:
        """What happened between `earlier` and this reading; None when the counters restarted in between."""
        if earlier.epoch is not None and self.epoch is not None and earlier.epoch != self.epoch:
            return None
        pairs = [(self.rounds, earlier.rounds), (self.accepted, earlier.accepted), (self.tokens, earlier.tokens),
                 (self.requests, earlier.requests)]
        pairs += list(zip(self.per_position, earlier.per_position, strict=False))
        if any(now < then for now, then in pairs):
            return None
        width = len(self.per_position)
        then = earlier.per_position + (0.0,) * (width - len(earlier.per_position))
        return SpecTotals(self.rounds - earlier.rounds, self.accepted - earlier.accepted, self.tokens - earlier.tokens,
                          self.requests - earlier.requests,
                          tuple(a - b for a, b in zip(self.per_position, then[:width], strict=True)),
                          self.epoch, self.running)


def conditional_rates(rounds: float, per_position: tuple[float, ...]) -> tuple[float, ...]:
    """P(position i accepted | positions before it were) from accepted counts per position over `rounds`."""
    rates, before = [], rounds
    for accepted in per_position:
        rates.append(accepted / before if before > 0 else 0.0)
        before = accepted
    return tuple(rates)


@dataclass(frozen=True)
class Interval:
    """What the counters added over `seconds`."""

    seconds: float
    added: SpecTotals


class RollingWindow:
    """The newest intervals covering at least `size` rounds; `add` takes each reading in turn."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.intervals: deque[Interval] = deque()
        self.last: SpecTotals | None = None
        self.last_at: float | None = None
        self.restarts = 0

    def add(self, reading: SpecTotals, at: float) -> bool:
        """Take a reading made at time `at` (seconds, monotonic); return True when it shows a restart."""
        restarted = False
        if self.last is not None and self.last_at is not None:
            added = reading.since(self.last)
            if added is None:  # counters went back: the server restarted; start the window again
                restarted = True
                self.restarts += 1
                self.intervals.clear()
            elif added.rounds > 0 or added.tokens > 0:
                self.intervals.append(Interval(at - self.last_at, added))
            elif self.intervals:  # idle time still counts toward the tokens per second served (one entry for it)
                idle = self.intervals[-1]
                if idle.added.rounds == 0 and idle.added.tokens == 0:
                    self.intervals[-1] = Interval(idle.seconds + at - self.last_at, added)
                else:
                    self.intervals.append(Interval(at - self.last_at, added))
        self.last, self.last_at = reading, at
        self._trim()
        return restarted

    def _trim(self) -> None:
        """Drop the oldest intervals while the rest still cover `size` rounds."""
        while len(self.intervals) > 1 and self.stats_of(list(self.intervals)[1:]).rounds >= self.size:
            self.intervals.popleft()

    @staticmethod
    def stats_of(intervals: list[Interval]) -> WindowStats:
        """Pooled figures of some intervals."""
        rounds = sum(i.added.rounds for i in intervals)
        width = max((len(i.added.per_position) for i in intervals), default=0)
        positions = tuple(sum(i.added.per_position[p] for i in intervals if p < len(i.added.per_position))
                          for p in range(width))
        return WindowStats(rounds=rounds, accepted=sum(i.added.accepted for i in intervals),
                           per_position=conditional_rates(rounds, positions),
                           tokens=sum(i.added.tokens for i in intervals), seconds=sum(i.seconds for i in intervals),
                           requests=sum(i.added.requests for i in intervals))

    def stats(self) -> WindowStats:
        """The window's pooled figures."""
        return self.stats_of(list(self.intervals))

    def running(self) -> float | None:
        """Requests running at the last reading (the engine's gauge), None where not reported."""
        return self.last.running if self.last is not None else None
