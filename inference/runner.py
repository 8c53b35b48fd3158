"""The regeneration loop: every pending row answered turn by turn, with retries, balancing and a journal.

The backend (`inference.backend`) is started once for the run's request slots (an HTTP backend opens its one
session: explicit timeouts, a connection pool sized to the total concurrency) and closed at the end; one
worker task per request slot keeps every endpoint saturated. Endpoints are balanced, probed and re-probed
only for a backend that has them; an in-process backend is the run's one slot group, named by its
`describe()`. A row's user turns are answered in order, each on top of the target's own earlier answers.
Connection errors, timeouts, 429 and 5xx are retried with capped exponential backoff and full jitter (on
whichever endpoint is least loaded); a 4xx, a malformed or an empty answer ends the row in `errors.jsonl`.
Finished rows go to the journal at once, so killing the process at any moment and running the same command
again resumes exactly where it stopped. A row that uses tools is regenerated turn by turn against its
recording (`inference.turns`): where the target's calls leave the recording the row stops, its prefix kept,
and the reason is recorded on the row and counted in the status. What a run settles before its first request
(its settings, run file, rows and pool) is `inference.run_setup`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
from dataclasses import dataclass
from typing import Any

from core.regen_records import (
    FailedRecord,
    PassthroughMeta,
    PassthroughRow,
    RegeneratedRow,
    RegenMeta,
    StopMeta,
    TurnMeta,
)
from core.regenerated_set import FINISHED_FILE, RUN_FILE, finished_marker
from core.tool_calls import Tool
from inference.atomic_files import hold_folder, remove_file, write_file
from inference.backend import GenerationBackend, Timeouts
from inference.endpoints import AllEndpointsDown, Endpoint, EndpointPool
from inference.errors import InferenceError
from inference.generation import RetryableError, RowError, Sampling, TurnResult
from inference.journal import Journal
from inference.records import InputRow, PromptError
from inference.run_registry import register_run
from inference.run_setup import (
    RunConfig,
    check_tool_template,
    endpoint_pool,
    read_run_file,
    run_file_data,
    select_rows,
)
from inference.status import STATUS_FILE, StatusFile, write_json_atomic
from inference.status_tracker import StatusTracker
from inference.turns import EmptyAnswer, Stop, total, turn_meta, walk

logger = logging.getLogger(__name__)

# The runner's interface: it takes a RunConfig (declared with the rest of a run's setup) and returns a RunSummary.
__all__ = ["RowFailed", "RunConfig", "RunSummary", "SamplingChangedError", "backoff_s", "passthrough_record",
           "regenerate", "run_regeneration"]



@dataclass
class RunSummary:
    """What a run did, for the CLI's last line."""

    total: int
    done: int
    failed: int
    skipped: int
    duplicates: int
    completion_tokens: int
    status: StatusFile



class SamplingChangedError(InferenceError, ValueError):
    """Resuming a run with other sampling settings than its finished rows were made with."""


class RowFailed(InferenceError):
    """A row's final failure, with what errors.jsonl records about it."""

    def __init__(self, message: str, *, status_code: int | None, attempts: int, turn: int, server: str | None):
        super().__init__(message)
        self.status_code = status_code
        self.attempts = attempts
        self.turn = turn
        self.server = server


def backoff_s(attempt: int, base_s: float, cap_s: float) -> float:
    """Return the wait before retry number `attempt` (1-based): capped exponential with full jitter."""
    return random.uniform(0, min(cap_s, base_s * 2 ** (attempt - 1)))


@dataclass
class _Run:
    config: RunConfig
    backend: GenerationBackend
    pool: EndpointPool
    journal: Journal
    tracker: StatusTracker

    async def call(self, history: list[dict[str, Any]], turn: int, sampling: Sampling, tools: list[Tool] | None = None
                   ) -> tuple[TurnResult, str, int]:
        """Answer the last turn of `history` with `sampling` (offering `tools`); return (result, endpoint url,
        attempts)."""
        soft = hard = 0
        endpoint: Endpoint | None = None
        while True:
            endpoint = await self.pool.acquire()
            try:
                result = await self.backend.generate_turn(
                    history, sampling, endpoint=endpoint.url if self.backend.has_endpoints else None, tools=tools)
            except RetryableError as exc:
                # A dead server (connection refused/dropped) is the pool's problem: it ejects the endpoint and
                # the row moves on to another; those attempts get a wider budget than the row's own failures.
                await self.pool.release(endpoint, error=str(exc), fault="hard" if exc.endpoint_fault else "soft")
                hard, soft = (hard + 1, soft) if exc.endpoint_fault else (hard, soft + 1)
                if soft >= self.config.max_attempts or hard >= 3 * self.config.max_attempts:
                    raise RowFailed(
                        f"gave up after {soft + hard} attempts: {exc}",
                        status_code=exc.status_code, attempts=soft + hard, turn=turn, server=endpoint.url,
                    ) from None
                wait = backoff_s(soft + hard, self.config.backoff_base_s, self.config.backoff_cap_s)
                if exc.retry_after_s is not None:  # a 429/503 saying when to come back, within our cap
                    wait = max(wait, min(exc.retry_after_s, self.config.backoff_cap_s))
                await asyncio.sleep(wait)
                continue
            except RowError as exc:
                await self.pool.release(endpoint, error=str(exc))
                raise RowFailed(
                    str(exc), status_code=exc.status_code, attempts=soft + hard + 1, turn=turn, server=endpoint.url
                ) from None
            except BaseException:
                await self.pool.release(endpoint, error="cancelled")
                raise
            await self.pool.release(endpoint, tokens=result.completion_tokens or 0)
            return result, endpoint.url, soft + hard + 1

    async def regenerate(self, row: InputRow) -> RegeneratedRow:
        """Return the regenerated record of `row`; raise RowFailed when a turn finally fails."""
        sampling = self.config.sampling.for_sample(row.sample)

        async def answer(history: list[dict[str, Any]], index: int) -> tuple[TurnResult, str, int]:
            result, server, attempts = await self.call(history, index, sampling, row.tools)
            self.tracker.add_turn(result.prompt_tokens, result.completion_tokens, key=id(row))
            return result, server, attempts

        self.tracker.row_started(id(row), _user_turn_count(row))
        try:
            done = await walk(row.messages, row.tools, answer, self.config.reasoning)
        except PromptError as exc:
            raise RowFailed(str(exc), status_code=None, attempts=0, turn=0, server=None) from None
        except EmptyAnswer as exc:
            raise RowFailed(str(exc), status_code=None, attempts=exc.attempts, turn=exc.turn,
                            server=exc.server) from None
        turns = [turn_meta(result, server, attempts) for result, server, attempts in done.answers]
        record: RegeneratedRow = {"id": row.id, "conversations": done.conversation,
                                  "meta": self._row_meta(row, turns, sampling, done.stop)}
        if row.tools:
            record["tools"] = row.tools
        return record

    def _row_meta(self, row: InputRow, turns: list[TurnMeta], sampling: Sampling, stop: Stop | None) -> RegenMeta:
        meta: RegenMeta = {
            "regenerated": True,
            "finish_reason": turns[-1]["finish_reason"],
            "prompt_tokens": sum(t["prompt_tokens"] or 0 for t in turns),
            "completion_tokens": sum(t["completion_tokens"] or 0 for t in turns),
            "server": turns[-1]["server"],
            "latency_s": round(sum(t["latency_s"] for t in turns), 4),
            "api": self.backend.api,
            "model": turns[-1]["model"] or self.config.model,
            "sampling": sampling.model_dump(),
            "reasoning": self.config.reasoning.value,
            "turns": turns,
            "category": row.category,
            "source": row.source,
        }
        if row.tools or any(t.get("tool_calls") or t["role"] == "tool" for t in row.messages):
            meta["tool_rendering"] = self.config.tool_rendering.value
        if stop is not None:
            meta["stopped"] = StopMeta(turn=stop.turn, reason=stop.reason, detail=stop.detail)
        if self.config.samples > 1:
            meta["sample"], meta["prompt_id"] = row.sample, row.prompt_id or row.id
        # Summed over the turns that carry them (SGLang omits them when 0); absent when no turn does.
        if (verify := total([t.get("spec_verify_ct") for t in turns])) is not None:
            meta["spec_verify_ct"] = verify
        if (correct := total([t.get("spec_num_correct_drafts") for t in turns])) is not None:
            meta["spec_num_correct_drafts"] = correct
        if (proposed := total([t.get("spec_num_proposed_drafts") for t in turns])) is not None:
            meta["spec_num_proposed_drafts"] = proposed
        return meta

    async def worker(self, queue: asyncio.Queue[InputRow]) -> None:
        """Take rows off `queue` until it is empty, writing each one's final record."""
        while True:
            try:
                row = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            try:
                record = await self.regenerate(row)
            except RowFailed as exc:
                failure: FailedRecord = {
                    "id": row.id,
                    "error": str(exc),
                    "status_code": exc.status_code,
                    "attempts": exc.attempts,
                    "turn": exc.turn,
                    "server": exc.server,
                    "api": self.backend.api,
                    "category": row.category,
                    "source": row.source,
                }
                self.journal.write_failed(failure)
                self.tracker.row_failed(key=id(row))
                continue
            self.journal.write_done(record)
            self.tracker.row_done(record["meta"]["completion_tokens"], key=id(row))
            self.tracker.count_quality(record)
            if "stopped" in record["meta"]:
                self.tracker.row_stopped(record["meta"]["stopped"]["reason"])

    async def write_status_forever(self) -> None:
        """Rewrite the status file every `status_interval_s`."""
        while True:
            self.write_status()
            await asyncio.sleep(self.config.status_interval_s)

    def write_status(self) -> None:
        """Rewrite the status file now (an in-process engine counts its unfinished answers' tokens)."""
        write_json_atomic(self.config.out_dir / STATUS_FILE, self.tracker.snapshot(
            self.pool.snapshot(), in_flight_tokens=self.backend.in_flight_tokens()))

    async def answer(self, queue: asyncio.Queue[InputRow], background: list[asyncio.Task[None]]) -> None:
        """Start the backend for the rows queued, probe its endpoints (if it has any), and answer every row."""
        config, backend = self.config, self.backend
        in_flight = min(config.concurrency * len(self.pool.endpoints), queue.qsize())
        backend.start(in_flight, Timeouts(connect_s=config.connect_timeout_s, request_s=config.request_timeout_s))
        if backend.has_endpoints:
            await self.pool.probe_all(backend.healthy)
            if not any(endpoint.healthy for endpoint in self.pool.endpoints):
                raise AllEndpointsDown("no server answers its health check: " + ", ".join(config.endpoints))
            background.append(asyncio.create_task(self.pool.reprobe_forever(backend.healthy)))
        workers = [asyncio.create_task(self.worker(queue)) for _ in range(in_flight)]
        try:
            await asyncio.gather(*workers)
        finally:
            await _cancel(workers)


def passthrough_record(row: InputRow) -> PassthroughRow:
    """Return the output record of a target-native row: its messages (and tools) unchanged."""
    meta: PassthroughMeta = {"regenerated": False, "reason": "needs_regeneration is false",
                             "category": row.category, "source": row.source}
    record: PassthroughRow = {"id": row.id, "conversations": row.messages, "meta": meta}
    if row.tools:
        record["tools"] = row.tools
    return record


def _write_run_file(config: RunConfig, backend: GenerationBackend) -> None:
    """Record the run's settings in its folder; a resume with other sampling is refused unless allowed."""
    data = run_file_data(config, backend)
    path = config.out_dir / RUN_FILE
    if path.exists():
        before = read_run_file(path)
        if before.get("sampling") != data["sampling"]:
            if not config.allow_new_sampling:
                raise SamplingChangedError(
                    f"{config.out_dir} was started with sampling {before.get('sampling')}, not {data['sampling']}: "
                    "resuming would mix settings in one set (use another --out, the same settings, or --force)"
                )
            logger.warning("resuming with other sampling settings than before: %s → %s",
                           before.get("sampling"), data["sampling"])
    write_json_atomic(path, data)




def _open_run(config: RunConfig, backend: GenerationBackend, rows: list[InputRow]) -> tuple[Journal, StatusTracker]:
    """Create the run folder, its run file and journal; return the journal and a tracker seeded from it. The
    completion marker goes first: from here until every row has its final record the run is unfinished."""
    config.out_dir.mkdir(parents=True, exist_ok=True)
    remove_file(config.out_dir / FINISHED_FILE)
    _write_run_file(config, backend)
    register_run(config.out_dir)
    journal = Journal(config.out_dir, fsync_interval_s=config.fsync_interval_s)
    journal.open(retry_failed=config.retry_failed)
    ids = {row.id for row in rows}
    tracker = StatusTracker(
        total=len(rows),
        already_done=len(journal.done_ids & ids),
        already_failed=len(journal.failed_ids & ids),
        info={"run_id": config.out_dir.name, "input": str(config.input_path), "api": backend.api,
              "model": config.model, "sampling": config.sampling.model_dump(), "pid": os.getpid(),
              "completion_tokens_earlier_runs": sum(journal.done_lengths)},
    )
    tracker.seed_lengths(journal.done_lengths)
    tracker.seed_quality(journal.done_quality)
    return journal, tracker


def _queue_pending(pending: list[InputRow], journal: Journal, tracker: StatusTracker) -> asyncio.Queue[InputRow]:
    """Queue the rows to answer; write the target-native ones through unchanged at once."""
    queue: asyncio.Queue[InputRow] = asyncio.Queue()
    for row in pending:
        if row.needs_regeneration:
            queue.put_nowait(row)
            tracker.queue_rows([_user_turn_count(row)])
        else:
            journal.write_done(passthrough_record(row))
            tracker.row_passed_through()
    return queue


def _user_turn_count(row: InputRow) -> int:
    """How many turns regeneration will ask of `row`: each user turn, and each recorded tool call's results (the
    answer after them); at least 1 (a row regeneration will refuse fails at its first)."""
    users = sum(1 for m in row.messages if m["role"] == "user")
    calls = sum(1 for m in row.messages if m["role"] == "assistant" and m.get("tool_calls"))
    return max(1, users + calls)


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel `tasks` and wait until each has ended."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _drive(run: _Run, queue: asyncio.Queue[InputRow]) -> None:
    """Answer the queued rows with the status file kept current; record how the run ended, then close it all."""
    tracker = run.tracker
    background = [asyncio.create_task(run.write_status_forever())]
    try:
        if not queue.empty():
            await run.answer(queue, background)
        tracker.state = "finished"
    except AllEndpointsDown as exc:
        tracker.state, tracker.error = "failed", str(exc)
        raise
    except (asyncio.CancelledError, KeyboardInterrupt):  # Ctrl-C: a stop asked for, not an error to show
        tracker.state, tracker.error = "interrupted", "stopped by the user; run the same command again to resume"
        raise
    except BaseException as exc:
        tracker.state, tracker.error = "interrupted", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        try:
            await _cancel(background)
            run.journal.close()
            if tracker.state == "finished":  # every row has its final record: the run's completion marker, last
                write_file(run.config.out_dir / FINISHED_FILE, finished_marker(run.config.out_dir))
            run.write_status()
        finally:  # closed even when a full disk failed the lines above: no connection is left for the collector
            await run.backend.aclose()  # an HTTP session's connections, an in-process model's caches and threads


async def run_regeneration(config: RunConfig, backend: GenerationBackend) -> RunSummary:
    """Regenerate every unfinished row of `config.input_path` into `config.out_dir`; return the summary. The
    run holds the folder's lock from before its first write to its end: a second run on the folder is refused
    (FolderBusyError) before it writes anything (a bad input is refused before the folder is made)."""
    rows, duplicates = select_rows(config)
    backend.reasoning, backend.tool_rendering = config.reasoning, config.tool_rendering
    check_tool_template(rows, backend, config.tool_rendering)
    pool = endpoint_pool(config, backend)
    with hold_folder(config.out_dir):
        journal, tracker = _open_run(config, backend, rows)
        pending = [row for row in rows if not journal.finished(row.id)]
        run = _Run(config, backend, pool, journal, tracker)
        await _drive(run, _queue_pending(pending, journal, tracker))
    return RunSummary(
        total=len(rows), done=tracker.done, failed=tracker.failed, skipped=len(rows) - len(pending),
        duplicates=duplicates, completion_tokens=tracker.completion_tokens, status=tracker.snapshot(pool.snapshot()),
    )


def regenerate(config: RunConfig, backend: GenerationBackend) -> RunSummary:
    """Synchronous `run_regeneration`; returns the summary."""
    return asyncio.run(run_regeneration(config, backend))
