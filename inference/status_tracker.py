"""Counting a regeneration's progress (`StatusTracker`) into the status file's JSON (`inference.status`).

The ETA counts turns, not rows: a row of five user turns is five answers, each waiting for the one before.
While rows wait in the queue it is the larger of two times: the tokens still to write (turns to come ×
completion tokens per answered turn, less what unfinished answers already wrote) at the current tok/s, and the
longest chain of turns one row in flight still has to answer, one after another, each taking what the recent
answered turns took (their median). Once every row has started, it is that chain alone: the tail of a batch is
its multi-turn rows, and neither a burst of answers finishing together nor the tok/s of the one row left says
more about when the last of its turns ends than how long turns have been taking. Expected uses the mean turn
length; the range uses its 10th and 90th percentiles and always holds the expected value. Before the first
answered turn, or with nothing written in the last minute, the ETA is unknown and says why (`eta.unknown`).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from core.regen_records import RegeneratedRow
from inference.endpoints import EndpointSnapshot
from inference.quality import QualityCounts, category_of, record_flags
from inference.status import Eta, RowLengths, RunInfo, StatusFile, TurnCounts

WINDOW_S = 60.0
RECENT_TURNS = 8  # the answered turns whose wall time says how long the next one takes


def _quantile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return float(ordered[index])


def _lengths(values: list[int]) -> RowLengths | None:
    """The mean and 10th/50th/90th percentiles of `values`, or None when there are none."""
    if not values:
        return None
    return {"mean": statistics.fmean(values), "p10": _quantile(values, 0.1), "p50": _quantile(values, 0.5),
            "p90": _quantile(values, 0.9)}


@dataclass
class StatusTracker:
    """Counts a run's progress; `snapshot()` turns it into the status file's JSON."""

    total: int
    already_done: int = 0
    already_failed: int = 0
    done: int = 0
    failed: int = 0
    passthrough: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    info: RunInfo = field(default_factory=lambda: RunInfo())
    state: str = "running"
    error: str | None = None
    started: float = field(default_factory=time.monotonic)
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    _window: deque[tuple[float, int]] = field(default_factory=deque)
    _progress: deque[tuple[float, int]] = field(default_factory=deque)  # (time, tokens written incl. in flight)
    _row_lengths: list[int] = field(default_factory=list)
    quality: dict[str, QualityCounts] = field(default_factory=dict)
    stopped: dict[str, int] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic  # a replay of a recorded run passes its own
    turns_answered: int = 0
    _turn_lengths: list[int] = field(default_factory=list)
    _queued_turns: Counter[int] = field(default_factory=Counter)  # turns per queued row, counted
    _rows_in_flight: dict[Hashable, int] = field(default_factory=dict)  # row key → its turns still to answer
    _turn_started: dict[Hashable, float] = field(default_factory=dict)  # row key → when its current turn began
    _turn_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_TURNS))

    def queue_rows(self, turns_per_row: list[int]) -> None:
        """Count rows queued to answer, each by its number of user turns."""
        self._queued_turns.update(max(1, n) for n in turns_per_row)

    def row_started(self, key: Hashable, turns: int) -> None:
        """A worker took a queued row of `turns` user turns (`key` names it until it ends)."""
        turns = max(1, turns)
        if self._queued_turns[turns] > 0:
            self._queued_turns[turns] -= 1
            if not self._queued_turns[turns]:
                del self._queued_turns[turns]
        self._rows_in_flight[key] = turns
        self._turn_started[key] = self.clock()

    def _row_ended(self, key: Hashable | None) -> None:
        if key is not None:
            self._rows_in_flight.pop(key, None)  # a failed row's turns to come are dropped with it
            self._turn_started.pop(key, None)

    def turn_counts(self) -> TurnCounts:
        """Turns answered this session, still to come, and the longest chain one row still has."""
        queued = sum(n * k for n, k in self._queued_turns.items())
        longest = max([*self._rows_in_flight.values(), *self._queued_turns.keys(), 0])
        return {"answered": self.turns_answered, "to_come": queued + sum(self._rows_in_flight.values()),
                "longest_row": longest}

    def seed_lengths(self, lengths: list[int]) -> None:
        """Start the completion-length distribution from rows finished by earlier runs (a resumed ETA)."""
        self._row_lengths.extend(lengths)

    def seed_quality(self, quality: dict[str, QualityCounts]) -> None:
        """Start the per-category quality counts from rows finished by earlier runs."""
        for category, counts in quality.items():
            self.quality.setdefault(category, QualityCounts()).merge(counts)

    def count_quality(self, record: RegeneratedRow) -> None:
        """Count a regenerated record's quality (cut at the token limit, repetitive) under its category."""
        self.quality.setdefault(category_of(record), QualityCounts()).add(*record_flags(record))

    def add_turn(self, prompt_tokens: int | None, completion_tokens: int | None, key: Hashable | None = None) -> None:
        """Count the tokens of one answered turn (of the row `key`, when it was started with `row_started`)."""
        self.prompt_tokens += prompt_tokens or 0
        self.completion_tokens += completion_tokens or 0
        self._window.append((self.clock(), completion_tokens or 0))
        self.turns_answered += 1
        self._turn_lengths.append(completion_tokens or 0)
        if key in self._rows_in_flight:
            now = self.clock()
            self._rows_in_flight[key] = max(0, self._rows_in_flight[key] - 1)
            self._turn_seconds.append(now - self._turn_started.get(key, now))
            self._turn_started[key] = now

    def row_done(self, completion_tokens: int, key: Hashable | None = None) -> None:
        """Count a regenerated row and its total completion tokens."""
        self.done += 1
        self._row_lengths.append(completion_tokens)
        self._row_ended(key)

    def row_stopped(self, reason: str) -> None:
        """Count a row kept only up to where the target's tool calls left the recording, by reason."""
        self.stopped[reason] = self.stopped.get(reason, 0) + 1

    def row_failed(self, key: Hashable | None = None) -> None:
        """Count a row that finally failed (its turns still to come are no longer to come)."""
        self.failed += 1
        self._row_ended(key)

    def row_passed_through(self) -> None:
        """Count a target-native row copied unchanged."""
        self.done += 1
        self.passthrough += 1

    @property
    def pending(self) -> int:
        return self.total - self.already_done - self.already_failed - self.done - self.failed

    def _tok_s(self, in_flight: int) -> tuple[float, float]:
        """Tokens/s over the last minute and overall, counting the tokens of answers still being written
        (`in_flight`): an in-process engine answering every row at once finishes none for minutes, and counting
        finished answers only showed 0 tok/s and no ETA for all that time."""
        now = self.clock()
        while self._window and now - self._window[0][0] > WINDOW_S:
            self._window.popleft()
        elapsed = max(now - self.started, 1e-9)
        span = min(WINDOW_S, elapsed)
        generated = self.completion_tokens + in_flight
        if not self._progress:
            self._progress.append((self.started, 0))
        self._progress.append((now, generated))
        while len(self._progress) > 2 and now - self._progress[1][0] > WINDOW_S:
            self._progress.popleft()
        then, before = self._progress[0]
        in_window = sum(tokens for _, tokens in self._window)
        # Finished answers in the window, or the growth of all tokens written (finished + in flight), the larger:
        # the second also sees answers that are not finished yet.
        recent = max(in_window / span, (generated - before) / max(now - then, 1e-9) if in_flight else 0.0)
        return recent, generated / elapsed

    def _eta(self, rate: float, in_flight_tokens: int) -> tuple[Eta, RowLengths | None]:
        """The ETA by turns still to come (see the module's docstring), and the turn lengths it used."""
        per_turn = _lengths(self._turn_lengths)
        turns = self.turn_counts()
        if not (turns["to_come"] or self._queued_turns or self._rows_in_flight) and self.pending > 0:
            return self._eta_by_rows(rate, in_flight_tokens), per_turn  # turns never counted: a caller of old
        if turns["to_come"] == 0:
            return {"expected_s": 0.0, "low_s": 0.0, "high_s": 0.0}, per_turn
        if per_turn is None:
            return {"expected_s": None, "low_s": None, "high_s": None, "unknown": "no turn answered yet"}, per_turn
        if rate <= 0:
            return ({"expected_s": None, "low_s": None, "high_s": None,
                     "unknown": "nothing written in the last minute"}, per_turn)
        chain = self._chain_s()  # by the median, the shortest and the longest recent turn
        if not self._queued_turns and chain is not None:  # every row started: the longest chain is what is left
            return {"expected_s": chain[0], "low_s": min(chain), "high_s": max(chain)}, per_turn

        def left_s(tokens_per_turn: float, chained: float) -> float:
            return max(max(0.0, turns["to_come"] * tokens_per_turn - in_flight_tokens) / rate, chained)

        mid, short, long = chain or (0.0, 0.0, 0.0)
        expected = left_s(per_turn["mean"], mid)
        return {"expected_s": expected, "low_s": min(expected, left_s(per_turn["p10"], short)),
                "high_s": max(expected, left_s(per_turn["p90"], long))}, per_turn

    def _chain_s(self) -> tuple[float, float, float] | None:
        """Seconds the longest chain of turns takes, timed by the median, the shortest and the longest of the
        recent answered turns: for each row in flight, its turns to come one after another, less the time its
        current turn has run already (None before a turn was timed)."""
        if not self._turn_seconds:
            return None
        now = self.clock()

        def longest(per_turn: float) -> float:
            return max([turns * per_turn - min(per_turn, now - self._turn_started.get(key, now))
                        for key, turns in self._rows_in_flight.items() if turns] or [0.0])

        recent = list(self._turn_seconds)
        return longest(statistics.median(recent)), longest(min(recent)), longest(max(recent))

    def _eta_by_rows(self, rate: float, in_flight_tokens: int) -> Eta:
        per_row = _lengths(self._row_lengths)
        if per_row is None or rate <= 0:
            return {"expected_s": None, "low_s": None, "high_s": None,
                    "unknown": "no row answered yet" if per_row is None else "nothing written in the last minute"}

        def left_s(tokens_per_row: float) -> float:
            return max(0.0, self.pending * tokens_per_row - in_flight_tokens) / rate

        expected = left_s(per_row["mean"])
        return {"expected_s": expected, "low_s": min(expected, left_s(per_row["p10"])),
                "high_s": max(expected, left_s(per_row["p90"]))}

    def snapshot(self, endpoints: list[EndpointSnapshot] | None = None, *, in_flight_tokens: int = 0
                 ) -> StatusFile:
        """Return the status as JSON-ready data; `in_flight_tokens`: tokens written so far by unfinished answers."""
        recent, overall = self._tok_s(in_flight_tokens)
        eta, per_turn = self._eta(recent or overall, in_flight_tokens)
        return {
            **self.info,
            "state": self.state,
            "error": self.error,
            "started_at": self.started_at,
            "updated_at": datetime.now(UTC).isoformat(),
            "elapsed_s": self.clock() - self.started,
            "rows": {
                "total": self.total,
                "done": self.already_done + self.done,
                "failed": self.already_failed + self.failed,
                "pending": self.pending,
                "done_this_session": self.done,
                "failed_this_session": self.failed,
                "passthrough_this_session": self.passthrough,
            },
            "tokens": {"prompt": self.prompt_tokens, "completion": self.completion_tokens,
                       "in_flight": in_flight_tokens},
            "turns": self.turn_counts(),
            "tok_s": {"last_minute": recent, "overall": overall},
            "completion_tokens_per_row": _lengths(self._row_lengths),
            "completion_tokens_per_turn": per_turn,
            "eta": eta,
            "endpoints": endpoints or [],
            "quality": {category: q.as_json() for category, q in sorted(self.quality.items())},
            "stopped": dict(sorted(self.stopped.items())),
        }
