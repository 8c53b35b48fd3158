"""Stage one: each source loaded, adapted and cleaned into a cached staging file, reused when its inputs match.

A source's stage key hashes its manifest entry, its files' sizes and modification times, the cleaning
config, the token counter and the code version; when `OUT/work/<slug>.json` holds the same key and the
staging rows exist, the source is not read again. A source that fails (missing files, offline, a mapping
that matches nothing) is recorded with its error and the run goes on with the others.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from core.jsonl import read_jsonl
from core.tool_calls import Tool
from curation.adapters import adapt, adapt_tools, resolve_format
from curation.atomic_files import read_own, remove_file
from curation.cleaning import DEFAULT_STEPS, StepParams, StepRunner
from curation.conversation import Drop, Message, Row, RowExtra
from curation.loading import LoadPlan, SourceLoadError, plan_load, unreadable
from curation.local_sources import local_files, prepare_record, source_records
from curation.manifest import EvalSet, Source
from curation.manifest_plan import SourcePlan
from curation.mirror import MirrorEntry
from curation.pii import patterns_version
from curation.set_aside import DroppedRow
from curation.shards import atomic_write_bytes, atomic_write_json, jsonl_bytes

logger = logging.getLogger(__name__)

CODE_VERSION = "2"  # 2: tool calls kept structured, rows carry their tools


@dataclass
class LoadContext:
    """Where data comes from and how it is cleaned, shared by every source of a run."""

    mirror: Path | None
    offline: bool
    cache_dir: Path
    work_dir: Path
    dropped_dir: Path
    params: StepParams
    token: str | None = None
    hub_root: Path | None = None
    mirror_entries: list[MirrorEntry] = field(default_factory=list)
    hub_probe: Callable[[], str | None] | None = None  # None when the Hub answers, else why not; asked once
    local_root: Path | None = None  # the manifest's folder: where target-written and traffic sources are read
    _hub_answer: list[str | None] = field(default_factory=list, repr=False)

    def hub_problem(self) -> str | None:
        """Return why the Hub cannot be reached (the probe's answer, asked once per run), or None."""
        if self.hub_probe is None:
            return None
        if not self._hub_answer:
            self._hub_answer.append(self.hub_probe())
            if self._hub_answer[0] is not None:
                logger.warning("Hub unreachable (%s): only mirror sources can be curated", self._hub_answer[0])
        return self._hub_answer[0]

    def unreachable(self, spec: Source | EvalSet, *, files: list[str]) -> str | None:
        """Return why `spec` cannot be had here (the mirror lacks it and the run is offline or the Hub does not
        answer), or None when it is in the mirror or the Hub may serve it."""
        if (files and self.mirror) or self.hub_root is not None or spec.hub_id is None:
            return None
        if isinstance(spec, Source) and spec.local:
            return None
        if self.offline:
            return "not in the mirror, and the run is offline"
        problem = self.hub_problem()
        return f"not in the mirror, and the Hub is unreachable ({problem})" if problem is not None else None

    def plan_for(self, spec: Source | EvalSet, *, files: list[str], streaming: bool | None = None) -> Any:
        """Return the load plan of a manifest source or eval set, with this run's mirror and Hub settings.

        `files` are the entry's data files as the run's `curation.manifest_plan` resolved them.
        Raises SourceLoadError at once for a dataset the mirror lacks while the Hub cannot be reached.
        A target-written or traffic source is planned from its own `path` under the manifest's folder.
        """
        if isinstance(spec, Source) and spec.local:
            return LoadPlan(files=tuple(local_files(self.local_root, str(spec.path))))
        needs_hub = not (files and self.mirror) and self.hub_root is None and spec.hub_id is not None
        if needs_hub and not self.offline:
            problem = self.hub_problem()
            if problem is not None:
                raise SourceLoadError(f"{spec.hub_id} is not in the mirror and the Hub is unreachable ({problem})")
        return plan_load(
            hub_id=spec.hub_id,
            data_files=files,
            config=spec.config,
            split=spec.split,
            revision=spec.revision,
            mirror=self.mirror,
            offline=self.offline,
            streaming=streaming,
            hub_root=self.hub_root,
        )


@dataclass
class StagedSource:
    """The cleaned rows of one source and what happened on the way."""

    key: str
    rows: list[Row] = field(default_factory=list)
    rows_in: int = 0
    drops: dict[str, int] = field(default_factory=dict)
    format: str | None = None
    error: str | None = None
    stage_hash: str = ""
    reused: bool = False
    scrubbed: dict[str, int] = field(default_factory=dict)  # traffic: PII replaced, by kind


def slug(source: Source) -> str:
    """Return a file-name-safe, unique name for a source."""
    digest = hashlib.sha256("|".join([source.key, *source.data_files]).encode()).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", source.key) + "-" + digest


def sample_id(source: Source, row_index: int) -> str:
    """Return the stable id of a source row."""
    return hashlib.sha256(f"{source.key}|{','.join(source.data_files)}|{row_index}".encode()).hexdigest()[:20]


def _fingerprint(files: list[Path]) -> list[list[Any]]:
    return [
        [f.name, f.stat().st_size, f.stat().st_mtime_ns] if f.is_file() else [f.name, None] for f in files
    ]


def stage_hash(source: Source, names: list[str], ctx: LoadContext) -> str:
    """Return the key of a source's staging (`names`: its resolved data files): what it depends on, hashed."""
    files = [ctx.mirror / f for f in names] if ctx.mirror else []
    extra: dict[str, str] = {}
    if source.local:  # its own files, and for traffic the PII patterns it was scrubbed with
        try:
            files = local_files(ctx.local_root, str(source.path))
        except SourceLoadError:
            files = []
        names = [str(f) for f in files]
        extra = {"pii": patterns_version()} if source.kind == "traffic" else {}
    payload = {**extra,
        "source": source.model_dump(mode="json"),
        "files": [names, _fingerprint(files)],
        "mirror": bool(ctx.mirror),
        "cleaning": ctx.params.config.model_dump(mode="json"),
        "counter": ctx.params.counter.name,
        "version": CODE_VERSION,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class StagedRow(TypedDict):
    """A cleaned row as the staging cache stores it (`<slug>.jsonl.gz`)."""

    row: int
    messages: list[Message]
    tokens: int
    prompt_tokens: int
    tools: list[Tool] | None


def _row_from_json(item: StagedRow, source: Source, order: int) -> Row:
    return Row(
        source_key=source.key,
        row_index=item["row"],
        messages=item["messages"],
        category=str(source.category),
        target_native=source.target_native,
        source_order=order,
        extra=RowExtra(token_count=item["tokens"], prompt_tokens=item["prompt_tokens"]),
        tools=item.get("tools"),
    )


def _reuse(source: Source, order: int, ctx: LoadContext, key: str) -> StagedSource | None:
    meta_path = ctx.work_dir / f"{slug(source)}.json"
    rows_path = ctx.work_dir / f"{slug(source)}.jsonl.gz"
    raw = read_own(meta_path, root=ctx.work_dir.parent)
    if raw is None or read_own(rows_path, root=ctx.work_dir.parent) is None:  # missing, or a planted link
        return None
    try:
        meta = json.loads(raw)
    except ValueError:  # not a cache entry this stage wrote: stage again
        return None
    if not isinstance(meta, dict) or meta.get("hash") != key:
        return None
    rows = [_row_from_json(item, source, order) for item in read_jsonl(rows_path, errors="surrogatepass")]
    return StagedSource(
        key=source.key,
        rows=rows,
        rows_in=meta["rows_in"],
        drops=meta["drops"],
        format=meta["format"],
        error=meta["error"],
        stage_hash=key,
        reused=True,
        scrubbed=meta.get("scrubbed", {}),
    )


def stage_source(planned: SourcePlan, ctx: LoadContext) -> StagedSource:
    """Return the cleaned rows of a planned source, from the staging cache when its key matches."""
    source, order = planned.source, planned.order
    key = stage_hash(source, planned.files, ctx)
    cached = _reuse(source, order, ctx, key)
    if cached is not None:
        logger.info("reusing staged %s", source.key)
        return cached
    staged = StagedSource(key=source.key, stage_hash=key)
    dropped: list[DroppedRow] = []

    def on_drop(row: Row, drop: Drop) -> None:
        dropped.append(DroppedRow(id=sample_id(source, row.row_index), source=source.key, row=row.row_index,
                                  reason=drop.reason, detail=drop.detail, messages=row.messages))

    runner = StepRunner(DEFAULT_STEPS, ctx.params, on_drop)
    try:
        staged.rows = list(runner.run(_rows(planned, ctx, staged, on_drop)))
    except Exception as exc:  # one source failing must not stop the run: recorded in the report
        logger.error("source %s failed: %s", source.key, exc)
        staged.error = f"{type(exc).__name__}: {exc}"
        staged.rows = []
    for reason, n in runner.drops.items():
        staged.drops[reason] = staged.drops.get(reason, 0) + n
    _save(source, ctx, staged, dropped)
    return staged


def _rows(planned: SourcePlan, ctx: LoadContext, staged: StagedSource, on_drop: Any) -> Any:
    source, order = planned.source, planned.order
    plan = ctx.plan_for(source, files=planned.files, streaming=source.streaming)
    fmt: str | None = None
    for index, raw in enumerate(source_records(source, plan, cache_dir=ctx.cache_dir, token=ctx.token)):
        if source.max_rows is not None and index >= source.max_rows:
            break
        staged.rows_in += 1
        row = Row(source.key, index, [], str(source.category), source.target_native, order)
        if (bad := unreadable(raw)) is not None:
            _count(staged, on_drop, row, Drop(*bad))
            continue
        record, scrubbed = prepare_record(source, raw)
        for kind, n in scrubbed.items():
            staged.scrubbed[kind] = staged.scrubbed.get(kind, 0) + n
        if fmt is None:
            fmt = resolve_format(record.keys(), source.format, source.field_mapping, source.key)
            staged.format = fmt
        try:
            result, tools = adapt(record, fmt, source.field_mapping), adapt_tools(record, fmt, source.field_mapping)
        except Exception as exc:  # an adapter bug on one odd row is that row's drop, not the source's end
            result, tools = Drop("adapter_error", f"{type(exc).__name__}: {exc}"), None
        if isinstance(result, Drop) or isinstance(tools, Drop):
            _count(staged, on_drop, row, result if isinstance(result, Drop) else tools)  # type: ignore[arg-type]
            continue
        row.messages, row.tools = result, tools
        yield row


def _count(staged: StagedSource, on_drop: Any, row: Row, drop: Drop) -> None:
    staged.drops[drop.reason] = staged.drops.get(drop.reason, 0) + 1
    on_drop(row, drop)


def _save(source: Source, ctx: LoadContext, staged: StagedSource, dropped: list[DroppedRow]) -> None:
    name = slug(source)
    root = ctx.work_dir.parent  # the output folder: no link below it is followed
    rows = [
        StagedRow(row=r.row_index, messages=r.messages, tokens=r.extra["token_count"],
                  prompt_tokens=r.extra["prompt_tokens"], tools=r.tools)
        for r in staged.rows
    ]
    # The meta file is the cache's commit record: removed first, written last, so a kill in between leaves
    # no cache entry that claims rows it does not have.
    remove_file(ctx.work_dir / f"{name}.json", root=root)
    atomic_write_bytes(ctx.dropped_dir / f"{name}.jsonl", jsonl_bytes(dropped), root=root)
    if staged.error:  # a failed source is tried again next run, never cached
        return
    atomic_write_bytes(
        ctx.work_dir / f"{name}.jsonl.gz", gzip.compress(jsonl_bytes(rows), compresslevel=1, mtime=0), root=root
    )
    meta = {
        "hash": staged.stage_hash,
        "rows_in": staged.rows_in,
        "drops": staged.drops,
        "format": staged.format,
        "error": staged.error,
        "scrubbed": dict(sorted(staged.scrubbed.items())),
    }
    atomic_write_json(ctx.work_dir / f"{name}.json", meta, root=root)
