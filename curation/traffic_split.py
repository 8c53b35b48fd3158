"""Split a traffic log by its own time order: the earlier records to retrain on, the latest held out.

A draft retrained on traffic must be judged on traffic it never saw, and the honest cut is in time: production
will send what comes after. Records are ordered by a timestamp when every one carries it (the first of
`timestamp`, `time`, `created_at`, `created`, `ts`, `start_time` at the top level, or `created` of the logged
response: epoch seconds or milliseconds, or ISO 8601), else they keep the file's order (a log is appended in
time). The last `heldout` share goes to `heldout.jsonl`, as prompt rows the evaluators read (`id`, `set`,
`messages`, `time`), each record scrubbed of PII (`curation.pii`) and read by the traffic adapter first;
records the adapter drops (a completions request, no messages) are counted by reason. `train.jsonl` keeps the
earlier records as they were logged, for a `kind: traffic` manifest source (which scrubs on load).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from core.jsonl import JsonlError, iter_jsonl
from curation.adapters.traffic import traffic_request
from curation.atomic_files import write_file
from curation.conversation import Drop
from curation.errors import CurationError
from curation.pii import scrub_record

TIME_KEYS = ("timestamp", "time", "created_at", "created", "ts", "start_time")
DEFAULT_SET = "traffic"


class TrafficSplitError(CurationError, ValueError):
    """A log that cannot be split as asked: unreadable, empty, or ordered by time with records lacking one."""


@dataclass
class TrafficSplit:
    """The split: records in time order, where the held-out part starts, and what was dropped."""

    records: list[tuple[float | None, Any]]
    cut: int
    ordered_by: str
    heldout_rows: list[dict[str, Any]] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    scrubbed: Counter[str] = field(default_factory=Counter)


def record_time(record: Any) -> float | None:
    """The record's time in epoch seconds (None without a readable one)."""
    if not isinstance(record, dict):
        return None
    response = record.get("response")
    candidates = [record.get(key) for key in TIME_KEYS]
    candidates.append(response.get("created") if isinstance(response, dict) else None)
    for value in candidates:
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int | float):
            return float(value) / 1000.0 if value > 1e11 else float(value)  # milliseconds past ~5000 AD in seconds
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def _field(record: Any, path: str) -> str | None:
    value = record
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return str(value) if isinstance(value, str | int) and not isinstance(value, bool) else None


def split_traffic(log: Path, heldout: float, *, order: str = "auto", set_field: str | None = None) -> TrafficSplit:
    """Order the log's records (see the module) and cut the latest `heldout` share off as held-out prompts."""
    try:
        records = [(record_time(r), r) for _, r in iter_jsonl(log)]
    except (JsonlError, OSError) as exc:
        raise TrafficSplitError(f"cannot read traffic log {log}: {exc}") from None
    if not records:
        raise TrafficSplitError(f"traffic log {log} holds no records")
    timed = sum(t is not None for t, _ in records)
    if order == "time" and timed < len(records):
        raise TrafficSplitError(f"{len(records) - timed} of {len(records)} records have no readable time (keys "
                                f"{', '.join(TIME_KEYS)} or response.created): pass --order file")
    by_time = order == "time" or (order == "auto" and timed == len(records))
    if by_time:
        records.sort(key=lambda pair: pair[0] or 0.0)  # stable: equal times keep the file's order
    cut = len(records) - round(len(records) * heldout)
    split = TrafficSplit(records=records, cut=cut, ordered_by="record time" if by_time else "file order")
    for n, (when, record) in enumerate(records[cut:], start=cut + 1):
        clean = scrub_record(record, split.scrubbed)
        messages = traffic_request(clean) if isinstance(clean, dict) else Drop("not_an_object", "not a JSON object")
        if isinstance(messages, Drop):
            split.dropped[messages.reason] += 1
            continue
        name = (_field(clean, set_field) if set_field else None) or DEFAULT_SET
        row: dict[str, Any] = {"id": f"traffic-{n}", "set": name, "messages": messages}
        if when is not None:
            row["time"] = when
        split.heldout_rows.append(row)
    return split


def write_split(split: TrafficSplit, out: Path) -> dict[str, Any]:
    """Write train.jsonl, heldout.jsonl and split.json into `out`; return the summary (split.json's content)."""
    out.mkdir(parents=True, exist_ok=True)
    train = "".join(json.dumps(record, ensure_ascii=False) + "\n" for _, record in split.records[: split.cut])
    held = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in split.heldout_rows)
    times = [t for t, _ in split.records if t is not None]
    summary: dict[str, Any] = {
        "ordered_by": split.ordered_by, "records": len(split.records), "train": split.cut,
        "heldout": len(split.heldout_rows), "heldout_dropped": dict(split.dropped),
        "heldout_scrubbed": dict(split.scrubbed),
        "heldout_sets": dict(Counter(row["set"] for row in split.heldout_rows)),
        "train_until": max((t for t, _ in split.records[: split.cut] if t is not None), default=None),
        "heldout_from": min((t for t, _ in split.records[split.cut:] if t is not None), default=None),
        "time_range": [min(times), max(times)] if times else None,
        "files": {"train": str(out / "train.jsonl"), "heldout": str(out / "heldout.jsonl")},
    }
    write_file(out / "train.jsonl", train.encode("utf-8"))
    write_file(out / "heldout.jsonl", held.encode("utf-8"))
    write_file(out / "split.json", (json.dumps(summary, indent=2) + "\n").encode("utf-8"))
    return summary
