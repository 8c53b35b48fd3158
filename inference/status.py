"""The run's status file: where a regeneration stands, rewritten atomically about once a second.

`DIR/status.json` holds rows done/failed/pending, user turns answered and still to come, tokens generated
(finished answers and those being written), tok/s over the last minute and overall, an ETA with a range,
per-endpoint load and errors, and per category the share of answers cut at the token limit and the share that
loop (`inference.quality`). This module declares the file (`StatusFile`), writes it and reads it back;
`inference.status_tracker` counts a run's progress and computes what goes in it (the ETA is explained there),
`inference.run_registry` lists runs by id. `datahunt monitor` and `GET /runs/{id}` read the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict, TypeGuard

from inference.atomic_files import write_file
from inference.endpoints import EndpointSnapshot
from inference.errors import InferenceError
from inference.quality import QualityShares

STATUS_FILE = "status.json"
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


class TokenCounts(TypedDict, total=False):
    """Tokens of this session's answered turns, and (`in_flight`) those written so far by unfinished answers."""

    prompt: int
    completion: int
    in_flight: int


class TurnCounts(TypedDict):
    """User turns of this session: answered, and still to come (queued rows' and the rest of rows in flight)."""

    answered: int
    to_come: int
    longest_row: int  # the most turns one row still has to answer, one after another


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


class Eta(TypedDict, total=False):
    """Seconds left: with the mean turn length (expected) and with the 10th/90th percentile (low ≤ expected ≤
    high); None when unknown, and then `unknown` says why."""

    expected_s: float | None
    low_s: float | None
    high_s: float | None
    unknown: str


class StatusFile(RunInfo, total=False):
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
    completion_tokens_per_turn: RowLengths | None
    turns: TurnCounts
    eta: Eta
    endpoints: list[EndpointSnapshot]
    quality: dict[str, QualityShares]
    stopped: dict[str, int]  # rows of this session stopped where the target's calls left the recording, by reason


def write_json_atomic(path: Path, data: Mapping[str, object]) -> None:
    """Write `data` to `path` through a fresh temporary file and a rename (`inference.atomic_files`), so readers
    never see half a file and a link planted at the name or a temporary name is never written through."""
    write_file(path, json.dumps(data, indent=1, ensure_ascii=False).encode("utf-8"))


class UnreadableStatusError(InferenceError, ValueError):
    """A run's status file exists but is not a JSON object (edited by hand, or damaged on disk): the runner
    writes it atomically, so it never reads half-written."""


def read_status(run_dir: Path) -> StatusFile | None:
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


def _is_run_status(status: dict[object, object]) -> TypeGuard[StatusFile]:
    """True when a JSON object read from a status file can be taken as one: its time stamp, when there, is a
    string. The other keys are taken as the runner wrote them; StatusFile is not total, so an older file's
    missing keys are allowed for."""
    return isinstance(status.get("updated_at", ""), str)
