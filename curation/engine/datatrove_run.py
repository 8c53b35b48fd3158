"""`curate` on datatrove: the pipeline's steps as datatrove tasks, run by its LocalPipelineExecutor.

Four datatrove jobs, each a pipeline of one step whose task `rank` names its share of the work, run one
after another (each needs the files of the one before): **stage** (one task per source shard: load, adapt,
clean, keys), **dedup** (one task per hash partition for exact dedup, then one per band partition for LSH
candidates), **decontaminate** (one per shard, against the broadcast eval index) and **write** (one per
shard: the mix's selection and the split). Between them the driver does what needs the whole picture and
holds only counts or the candidate graph: building the eval index, resolving near duplicates, the mix
thresholds, and at the end the streaming merge into output shards and the report.

datatrove gives the rest: `workers` processes per job, a completion marker per task under
`OUT/engine/<key>/logs/<job>/completions/` so a killed run resumes without redoing finished tasks (no
source re-read), per-task logs and stats (`logs/<job>/stats.json`). The same jobs run on a Slurm cluster by
swapping `LocalPipelineExecutor` for `SlurmPipelineExecutor` with the work folder on a shared filesystem
(README: several machines).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypedDict, cast

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.base import PipelineStep

from core.settings import Settings
from curation.atomic_files import hold_folder
from curation.engine.counts import SourceCounts
from curation.engine.dedup import band_partition, exact_partition, resolve_near, write_near
from curation.engine.outputs import (
    write_decontaminated,
    write_dropped,
    write_duplicates,
    write_samples,
    write_shard,
)
from curation.engine.plan import EnginePlan, Shard, partitions_for, shards_for, source_size
from curation.engine.report import build_report, failure_bound, per_category, shard_metas
from curation.engine.select import decontaminate_shard, mix_thresholds, save_index
from curation.engine.stage import stage_shard
from curation.manifest import Manifest, dump_manifest
from curation.manifest_plan import ManifestPlan
from curation.pipeline import CurateResult, build_index, make_context, plan_run
from curation.report import CurationReport, EvalSetStatus
from curation.shards import atomic_write_json, begin_set, commit_set
from curation.staging import CODE_VERSION, LoadContext, stage_hash
from curation.summary import render_plot, render_summary, write_summary

logger = logging.getLogger(__name__)

ENGINE_VERSION = "1"
Progress = Callable[[str], None]


class TaskExtra(TypedDict, total=False):
    """What a job's tasks need beyond the plan: the write job's rank threshold per category."""

    thresholds: dict[str, bytes | None]


class CurationTask(PipelineStep):  # type: ignore[misc]  # datatrove ships no type information
    """One datatrove step running one of the engine's task functions for the task's rank."""

    type = "datahunt"

    def __init__(self, job: str, plan: EnginePlan, extra: TaskExtra | None = None) -> None:
        self.name = job
        super().__init__()
        self.job, self.plan, self.extra = job, plan, extra or TaskExtra()

    def run(self, data: Any = None, rank: int = 0, world_size: int = 1) -> Any:
        plan = self.plan
        with self.track_time("task"):
            if self.job == "stage":
                meta = stage_shard(plan, plan.shards[rank])
                self.stat_update("rows_in", value=meta["rows_in"])
                self.stat_update("kept", value=meta["kept"])
                if meta["error"]:
                    self.stat_update("failed_shards")
            elif self.job == "dedup":
                if rank < plan.partitions:
                    self.stat_update("exact_duplicates", value=exact_partition(plan, rank))
                else:
                    self.stat_update("candidate_pairs", value=band_partition(plan, rank - plan.partitions))
            elif self.job == "decontaminate":
                counts = decontaminate_shard(plan, plan.shards[rank])
                self.stat_update("contaminated", value=len(counts["contaminated"]))
            elif self.job == "write":
                shard = plan.shards[rank]
                category = str(plan.source(shard).category)
                selected = write_shard(plan, shard, self.extra["thresholds"].get(category))
                self.stat_update("selected", value=selected)
                (plan.work / "parts" / f"{shard.name}.count").write_text(str(selected))
        return iter(())


@contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Send datatrove's console log (loguru on stderr, in this process and forked workers) to `path`."""
    from loguru import logger as loguru_logger

    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved_fd, saved_stream = os.dup(2), sys.stderr
    with path.open("a", encoding="utf-8") as handle:
        os.dup2(handle.fileno(), 2)
        sys.stderr = handle
        loguru_logger.remove()
        loguru_logger.add(handle)
        try:
            yield
        finally:
            handle.flush()
            sys.stderr = saved_stream
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            loguru_logger.remove()  # datatrove re-adds its default sink on whatever stderr was current
            loguru_logger.add(sys.stderr, level="WARNING")


def _run_job(plan: EnginePlan, job: str, tasks: int, workers: int, progress: Progress,
             extra: TaskExtra | None = None, *, stale: bool = False) -> bool:
    """Run one job's unfinished tasks (all of them when `stale`); return whether any task ran."""
    logs = plan.work / "logs" / job
    if stale:
        shutil.rmtree(logs / "completions", ignore_errors=True)
    done = len(list((logs / "completions").glob("*"))) if (logs / "completions").is_dir() else 0
    started = time.monotonic()
    progress(f"{job}: {tasks} task(s), {done} already done" if done else f"{job}: {tasks} task(s)")
    executor = LocalPipelineExecutor(
        [CurationTask(job, plan, extra)],
        tasks=tasks,
        workers=min(workers, tasks),
        logging_dir=str(logs),
        start_method="fork",
    )
    with _stderr_to(logs / "console.log"):  # datatrove's console log joins its task logs; progress stays short
        executor.run()
    progress(f"{job}: done in {time.monotonic() - started:.1f} s")
    return done < tasks


def run_key(manifest: Manifest, load: ManifestPlan, ctx: LoadContext, seed: int, jsonl: bool) -> str:
    """Return the hash of everything an engine run's result depends on."""
    payload = {
        "stages": [stage_hash(p.source, p.files, ctx) for p in load.sources],
        "evals": [e.model_dump(mode="json") for e in manifest.eval_sets],
        "budget": manifest.budget.model_dump(mode="json"),
        "seed": seed,
        "jsonl": jsonl,
        "version": [CODE_VERSION, ENGINE_VERSION],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _retry_failed(plan: EnginePlan) -> None:
    """Forget the completion of failed stage tasks, so a rerun tries their sources again (as in-process)."""
    for rank, shard in enumerate(plan.shards):
        meta = plan.work / "meta" / f"{shard.name}.json"
        if meta.is_file() and json.loads(meta.read_text(encoding="utf-8"))["error"]:
            (plan.work / "logs" / "stage" / "completions" / f"{rank:05d}").unlink(missing_ok=True)


def _shards(load: ManifestPlan, ctx: LoadContext) -> tuple[list[Shard], int]:
    shards: list[Shard] = []
    total = 0
    for planned in load.sources:
        size = source_size(planned, ctx)
        total += size
        max_rows = planned.source.max_rows
        parts = 1 if max_rows is not None and max_rows <= 50_000 else shards_for(size)
        shards += [Shard(planned.order, k, parts) for k in range(parts)]
    return shards, partitions_for(total)


def curate_datatrove(
    manifest: Manifest,
    out_dir: Path,
    *,
    settings: Settings,
    seed: int | None = None,
    jsonl: bool = False,
    mirror: Path | None = None,
    hub_root: Path | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
    sources_root: Path | None = None,
) -> CurateResult:
    """Curate the manifest into `out_dir` with datatrove; the same outputs and report as `curation.pipeline.curate`."""
    say = progress or (lambda line: logger.info("%s", line))
    out_dir = Path(out_dir)
    with hold_folder(out_dir):  # one writer per output folder, released however the run ends
        begin_set(out_dir)  # no completion marker until every output below is written
        out_dir.mkdir(parents=True, exist_ok=True)
        ctx = make_context(manifest, out_dir, mirror, hub_root, settings=settings, sources_root=sources_root)
        seed = manifest.budget.seed if seed is None else seed
        workers = workers or os.cpu_count() or 1
        load = plan_run(manifest, ctx)
        key = run_key(manifest, load, ctx, seed, jsonl)
        root = out_dir / "engine"
        for stale in root.glob("*") if root.is_dir() else []:
            if stale.name != key:
                shutil.rmtree(stale, ignore_errors=True)
        shards, partitions = _shards(load, ctx)
        plan = EnginePlan(manifest, load, ctx, seed, jsonl, root / key, shards, partitions)
        plan.work.mkdir(parents=True, exist_ok=True)
        reused = len(list((plan.work / "logs" / "stage" / "completions").glob("*"))) if (
            plan.work / "logs" / "stage" / "completions").is_dir() else 0

        index, eval_status = build_index(load.eval_sets, ctx)
        save_index(plan, index)
        _retry_failed(plan)
        ran = _run_job(plan, "stage", len(shards), workers, say)
        for order, source in enumerate(manifest.sources):
            for meta, shard in zip(shard_metas(plan, order), plan.shards_of(order), strict=True):
                if meta["error"]:
                    say(f"failed shard: source {source.key} (shard {shard.part + 1}/{shard.parts}) at row "
                        f"{meta['failed_row']}: {meta['error']}")
        ran = _run_job(plan, "dedup", 2 * partitions, workers, say, stale=ran) or ran
        near = resolve_near(plan)
        write_near(plan, near)
        say(f"near dedup: {len(near)} near duplicate(s) from the candidate pairs")
        ran = _run_job(plan, "decontaminate", len(shards), workers, say, stale=ran) or ran
        available, plan_quota, thresholds = mix_thresholds(plan)
        _run_job(plan, "write", len(shards), workers, say, TaskExtra(thresholds=thresholds), stale=ran)
        report = _finish(plan, out_dir, near, available, plan_quota, eval_status)
        commit_set(out_dir, key, report.shards, dump_manifest(manifest))
        say(f"merge: {report.rows_out} rows into {len(report.shards)} file(s)")
        return CurateResult(report=report, reused=[f"engine:{reused} stage task(s)"] if reused else [])


def _finish(plan: EnginePlan, out_dir: Path, near: Any, available: dict[str, int],
            plan_quota: dict[str, int | None], eval_status: dict[str, EvalSetStatus]) -> CurationReport:
    outputs, tokens = write_samples(plan, out_dir)
    duplicates = write_duplicates(plan, out_dir, near)
    contaminated = write_decontaminated(plan, out_dir)
    selected: Counter[str] = Counter()
    sources: list[SourceCounts] = []
    for order, source in enumerate(plan.manifest.sources):
        metas = shard_metas(plan, order)
        bound, error = failure_bound(metas)
        drops = write_dropped(plan, out_dir, order, bound)
        chosen = sum(int((plan.work / "parts" / f"{s.name}.count").read_text()) for s in plan.shards_of(order))
        selected[str(source.category)] += chosen
        sources.append(SourceCounts(
            rows_in=bound if bound is not None else sum(m["rows_in"] for m in metas),
            drops=dict(drops),
            format=next((m["format"] for m in metas if m["format"]), None),
            error=error,
            kept=0 if error else sum(m["kept"] for m in metas),
            duplicates=duplicates[order],
            decontaminated=contaminated[order],
            selected=chosen,
            scrubbed=sum((Counter(m.get("scrubbed", {})) for m in metas), Counter()),
        ))
    counts = {
        "rows_out": len(tokens["original"]),
        "native": len(tokens["native"]),
        "exact": sum(duplicates.values()) - len(near),
        "near": len(near),
        "decontaminated": sum(contaminated.values()),
    }
    report = build_report(plan, sources, per_category(plan, available, plan_quota, selected), counts, eval_status)
    report.shards = outputs
    atomic_write_json(out_dir / "report.json", report.to_json())
    # The summary's histograms take any int sequence; numpy arrays keep 8 bytes per output row.
    regen, native, original = (cast(list[int], tokens[k]) for k in ("regen", "native", "original"))
    write_summary(out_dir, render_summary(report, regen, native), render_plot(report, original))
    return report
