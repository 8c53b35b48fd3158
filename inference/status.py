"""The run's status file: where a regeneration stands, rewritten atomically about once a second.

`DIR/status.json` holds rows done/failed/pending, tokens generated, tok/s over the last minute and overall,
an ETA with a range, per-endpoint load and errors, and per category the share of answers cut at the token
limit and the share that loop (`inference.quality`). The ETA is pending rows × completion tokens per row
÷ tok/s: expected with the mean length, low/high with the 10th/90th percentile of the lengths observed so
far, so a run of long answers does not promise too early. `datahunt monitor` and `GET /runs/{id}` read it.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict, TypeGuard

from core.regen_records import RegeneratedRow
from core.settings import Settings, get_settings
from inference.atomic_files import write_file
from inference.endpoints import EndpointSnapshot
from inference.errors import InferenceError
from inference.quality import QualityCounts, QualityShares, category_of, record_flags

STATUS_FILE = "status.json"
WINDOW_S = 60.0
MAX_STATUS_DEPTH = 32  # containers within containers a status file may hold (the runner writes 4)


class RunInfo(TypedDict, total=False):
    """What the runner says about a run when it starts: the first keys of its status file."""

    run_id: str
    input: str
    api: str
    model: str | None
    sampling: dict[str, float | int | None]
    pid: int
    completion_tokens_earlier_runs: int


class RowCounts(TypedDict):
    """Rows of the run: over every session, and in this one."""

    total: int
    done: int
    failed: int
    pending: int
    done_this_session: int
    failed_this_session: int
    passthrough_this_session: int


class TokenCounts(TypedDict):
    """Tokens of this session's answered turns."""

    prompt: int
    completion: int


class TokenRate(TypedDict):
    """Completion tokens per second: over the last minute and since the session started."""

    last_minute: float
    overall: float


class RowLengths(TypedDict):
    """Completion tokens per finished row: the mean and three quantiles."""

    mean: float
    p10: float
    p50: float
    p90: float


class Eta(TypedDict):
    """Seconds left: with the mean row length (expected) and with the 10th/90th percentile; None when unknown."""

    expected_s: float | None
    low_s: float | None
    high_s: float | None


class RunStatus(RunInfo, total=False):
    """The status file, as `StatusTracker.snapshot` writes it. Not total: a file written by an older version, or
    by hand, is read back too, and may lack keys."""

    state: str
    error: str | None
    started_at: str
    updated_at: str
    elapsed_s: float
    rows: RowCounts
    tokens: TokenCounts
    tok_s: TokenRate
    completion_tokens_per_row: RowLengths | None
    eta: Eta
    endpoints: list[EndpointSnapshot]
    quality: dict[str, QualityShares]


class RunListing(TypedDict, total=False):
    """One run in `list_runs`; `error` only on a run whose status file is unreadable."""

    id: str
    state: str | None
    rows: RowCounts | None
    updated_at: str | None
    error: str


def write_json_atomic(path: Path, data: Mapping[str, object]) -> None:
    """Write `data` to `path` through a fresh temporary file and a rename (`inference.atomic_files`), so readers
    never see half a file and a link planted at the name or a temporary name is never written through."""
    write_file(path, json.dumps(data, indent=1, ensure_ascii=False).encode("utf-8"))


class UnreadableStatusError(InferenceError, ValueError):
    """A run's status file exists but is not a JSON object (edited by hand, or damaged on disk): the runner
    writes it atomically, so it never reads half-written."""


def read_status(run_dir: Path) -> RunStatus | None:
    """Return the status of the run in `run_dir`, or None when it has none (yet); UnreadableStatusError when
    the file is there but damaged."""
    path = Path(run_dir) / STATUS_FILE
    try:
        status = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8
        raise UnreadableStatusError(f"{path} is unreadable: {exc}") from None
    except RecursionError:
        raise UnreadableStatusError(f"{path} is unreadable: it nests too deep to be a run status") from None
    if not isinstance(status, dict):
        raise UnreadableStatusError(f"{path} holds a JSON {type(status).__name__}, not a run status object")
    if _depth(status) > MAX_STATUS_DEPTH:  # the runner's own is 4 deep; hundreds of levels fail every serializer
        raise UnreadableStatusError(f"{path} is unreadable: it nests too deep to be a run status")
    if not _is_run_status(status):
        raise UnreadableStatusError(f"{path}: updated_at is not a time stamp")
    return status


def _depth(value: object) -> int:
    """How deep JSON containers nest in `value` (0 for a scalar), counted without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth + 1)
            if deepest > MAX_STATUS_DEPTH:
                break
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _is_run_status(status: dict[object, object]) -> TypeGuard[RunStatus]:
    """True when a JSON object read from a status file can be taken as one: its time stamp, when there, is a
    string. The other keys are taken as the runner wrote them; RunStatus is not total, so an older file's
    missing keys are allowed for."""
    return isinstance(status.get("updated_at", ""), str)


def _quantile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return float(ordered[index])


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

    def add_turn(self, prompt_tokens: int | None, completion_tokens: int | None) -> None:
        """Count the tokens of one answered turn."""
        self.prompt_tokens += prompt_tokens or 0
        self.completion_tokens += completion_tokens or 0
        self._window.append((time.monotonic(), completion_tokens or 0))

    def row_done(self, completion_tokens: int) -> None:
        """Count a regenerated row and its total completion tokens."""
        self.done += 1
        self._row_lengths.append(completion_tokens)

    def row_failed(self) -> None:
        """Count a row that finally failed."""
        self.failed += 1

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
        now = time.monotonic()
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

    def snapshot(self, endpoints: list[EndpointSnapshot] | None = None, *, in_flight_tokens: int = 0
                 ) -> RunStatus:
        """Return the status as JSON-ready data; `in_flight_tokens`: tokens written so far by unfinished answers."""
        recent, overall = self._tok_s(in_flight_tokens)
        rate = recent or overall
        lengths = self._row_lengths
        per_row: RowLengths | None = None
        eta: Eta = {"expected_s": None, "low_s": None, "high_s": None}
        if lengths:
            per_row = {
                "mean": statistics.fmean(lengths),
                "p10": _quantile(lengths, 0.1),
                "p50": _quantile(lengths, 0.5),
                "p90": _quantile(lengths, 0.9),
            }
            if rate > 0:  # the tokens already written by unfinished answers are not left to write
                def left_s(tokens_per_row: float) -> float:
                    return max(0.0, self.pending * tokens_per_row - in_flight_tokens) / rate

                eta = {"expected_s": left_s(per_row["mean"]), "low_s": left_s(per_row["p10"]),
                       "high_s": left_s(per_row["p90"])}
        return {
            **self.info,
            "state": self.state,
            "error": self.error,
            "started_at": self.started_at,
            "updated_at": datetime.now(UTC).isoformat(),
            "elapsed_s": time.monotonic() - self.started,
            "rows": {
                "total": self.total,
                "done": self.already_done + self.done,
                "failed": self.already_failed + self.failed,
                "pending": self.pending,
                "done_this_session": self.done,
                "failed_this_session": self.failed,
                "passthrough_this_session": self.passthrough,
            },
            "tokens": {"prompt": self.prompt_tokens, "completion": self.completion_tokens},
            "tok_s": {"last_minute": recent, "overall": overall},
            "completion_tokens_per_row": per_row,
            "eta": eta,
            "endpoints": endpoints or [],
            "quality": {category: q.as_json() for category, q in sorted(self.quality.items())},
        }


RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
LINK_SUFFIX = ".path"


class UnknownRunError(InferenceError, LookupError):
    """No run with this id is registered (or the id is malformed)."""


def runs_root(settings: Settings | None = None) -> Path:
    """Return the folder where runs are listed: `settings.runs_dir`, default `home`/runs."""
    settings = settings or get_settings()
    return (settings.runs_dir or settings.home / "runs").resolve()


def register_run(run_dir: Path) -> str:
    """List `run_dir` under the runs folder (a `<id>.path` pointer unless it lives there); return its id."""
    run_dir = Path(run_dir).resolve()
    root = runs_root()
    run_id = run_dir.name
    if run_dir.parent != root:
        root.mkdir(parents=True, exist_ok=True)
        write_file(root / f"{run_id}{LINK_SUFFIX}", str(run_dir).encode("utf-8"))
    return run_id


def resolve_run(run_id: str, settings: Settings | None = None) -> Path:
    """Return the folder of run `run_id`; raise UnknownRunError for an unknown or malformed id."""
    if not RUN_ID_PATTERN.match(run_id) or ".." in run_id:
        raise UnknownRunError(f"malformed run id {run_id!r}")
    root = runs_root(settings)
    if (root / run_id / STATUS_FILE).is_file():
        return root / run_id
    link = root / f"{run_id}{LINK_SUFFIX}"
    if link.is_file():
        try:
            target = Path(link.read_text(encoding="utf-8").strip())
        except (OSError, ValueError) as exc:  # ValueError: not UTF-8
            raise UnreadableStatusError(f"{link} is unreadable: {exc}") from None
        if (target / STATUS_FILE).is_file():
            return target
    raise UnknownRunError(f"no run {run_id!r} under {root}")


def list_runs(settings: Settings | None = None) -> list[RunListing]:
    """Return a short summary of every listed run, newest update first."""
    root = runs_root(settings)
    if not root.is_dir():
        return []
    ids = {p.name for p in root.iterdir() if p.is_dir()} | {
        p.name[: -len(LINK_SUFFIX)] for p in root.iterdir() if p.name.endswith(LINK_SUFFIX)
    }
    runs: list[RunListing] = []
    for run_id in sorted(ids):
        try:
            status = read_status(resolve_run(run_id, settings))
        except UnknownRunError:
            continue
        except UnreadableStatusError as exc:  # listed, so one damaged run does not hide the others
            runs.append({"id": run_id, "state": "unreadable", "rows": None, "updated_at": None, "error": str(exc)})
            continue
        if status is not None:
            runs.append({"id": run_id, "state": status.get("state"), "rows": status.get("rows"),
                         "updated_at": status.get("updated_at")})
    return sorted(runs, key=lambda r: r.get("updated_at") or "", reverse=True)
