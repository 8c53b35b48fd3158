"""The curation run: approved manifest in, budgeted training mix out (`curate(manifest, out_dir)`).

Steps, each a module: stage every source (load → adapt → clean, cached per source: `staging`), build the
eval index from the manifest's eval sets plus the mirror's eval entries (`decontam`), deduplicate across
sources (`dedup`), decontaminate, mix to the budget (`mixing`), split into target-native and
needs-regeneration rows (`samples`), then write shards, report and summary. A state file
records the hash of everything the final files depend on; a rerun with the same inputs writes nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.completion import IncompleteSetError
from core.curated_set import MANIFEST_FILE, REPORT_FILE, SAMPLES_FILE, CuratedState, read_state
from core.samples import CuratedSample
from core.settings import Settings
from curation.adapters import adapt, resolve_format
from curation.atomic_files import hold_folder, read_own
from curation.cleaning import StepParams
from curation.conversation import Drop, Row, prompt_text
from curation.decontam import EvalIndex, find_contaminated
from curation.dedup import DedupResult, deduplicate
from curation.loading import iter_records, unreadable
from curation.manifest import Manifest, ManifestError, dump_manifest
from curation.manifest_plan import EvalPlan, ManifestPlan, plan_manifest
from curation.mirror import MIRROR_INDEX, MirrorEntry, read_mirror_index
from curation.mixing import MixResult, mix, mix_warnings
from curation.report import (
    CurationReport,
    DuplicateCounts,
    EvalSetStatus,
    SourceReport,
    StepCounts,
    category_reports,
)
from curation.samples import build_sample
from curation.set_aside import ContaminatedRecord, DuplicateRecord
from curation.shards import (
    atomic_write_bytes,
    atomic_write_json,
    begin_set,
    commit_set,
    jsonl_bytes,
    write_shards,
)
from curation.staging import CODE_VERSION, LoadContext, StagedSource, sample_id, slug, stage_source
from curation.summary import render_plot, render_summary, write_summary
from curation.textkeys import content_hash, normalise, word_hashes
from curation.tokens import TokenCounter, load_counter

logger = logging.getLogger(__name__)


@dataclass
class CurateResult:
    """What a run produced: the report, and which steps were skipped because their inputs had not changed."""

    report: CurationReport
    reused: list[str] = field(default_factory=list)


def mirror_of(manifest: Manifest, mirror: Path | None, settings: Settings) -> Path | None:
    """Return the run's mirror: `mirror` (the caller's), else the manifest's own, else the settings'.

    The manifest's own `mirror` never widens the one the user named: with a mirror in the settings it must
    lie inside it (links resolved), and without one it must be a mirror folder (holding MIRROR.json), so a
    manifest naming `/` cannot pull arbitrary local files into the set. Raises ManifestError otherwise."""
    if mirror is not None:
        return Path(mirror)
    if not manifest.mirror:
        return settings.mirror
    own = Path(manifest.mirror)
    if settings.mirror is not None:
        if not own.resolve().is_relative_to(Path(settings.mirror).resolve()):
            raise ManifestError(f"the manifest's mirror {own} lies outside the mirror {settings.mirror} named in the "
                                "settings; its files must stay inside that mirror")
        return own
    if not (own / MIRROR_INDEX).is_file():
        raise ManifestError(f"the manifest's mirror {own} is not a mirror folder (no {MIRROR_INDEX}); name the "
                            "mirror with --mirror")
    return own


def make_context(
    manifest: Manifest,
    out_dir: Path,
    mirror: Path | None,
    hub_root: Path | None,
    hub_probe: Callable[[], str | None] | None = None,
    *,
    settings: Settings,
    sources_root: Path | None = None,
) -> LoadContext:
    """Return the run's load context: mirror, offline mode, caches under `out_dir`, token counter, Hub probe;
    `settings` (the caller's) give the mirror default, offline mode, the cache folder and the Hub token;
    `sources_root` is the manifest file's folder, where target-written and traffic sources are read."""
    mirror_dir = mirror_of(manifest, mirror, settings)
    tokenizer = manifest.target.tokenizer or manifest.target.model if manifest.target else None
    entries: list[MirrorEntry] = []
    if mirror_dir and (Path(mirror_dir) / MIRROR_INDEX).is_file():
        entries = read_mirror_index(Path(mirror_dir))
    ctx = LoadContext(
        mirror_entries=entries,
        mirror=Path(mirror_dir) if mirror_dir else None,
        offline=settings.offline,
        cache_dir=settings.home / "cache" / "datasets",
        work_dir=out_dir / "work",
        dropped_dir=out_dir / "dropped",
        params=StepParams(config=manifest.cleaning, counter=TokenCounter()),  # the real one below
        token=settings.hf_token.get_secret_value() if settings.hf_token else None,
        hub_root=hub_root,
        hub_probe=hub_probe,
        local_root=Path(sources_root) if sources_root is not None else None,
    )
    # A Hub tokenizer id while the Hub does not answer its probe: as offline, instead of download retries.
    hub_tokenizer = bool(tokenizer) and not Path(str(tokenizer)).is_dir()
    offline = settings.offline or (hub_tokenizer and ctx.hub_problem() is not None)
    ctx.params.counter = load_counter(tokenizer, offline=offline)
    return ctx


def eval_prompts(planned: EvalPlan, ctx: LoadContext) -> list[tuple[str, str]]:
    """Return (item id, user prompt text) for every item of a planned eval set."""
    eval_set = planned.eval_set
    plan = ctx.plan_for(eval_set, files=planned.files)
    items: list[tuple[str, str]] = []
    fmt: str | None = None
    for index, record in enumerate(iter_records(plan, cache_dir=ctx.cache_dir, token=ctx.token)):
        if unreadable(record) is not None:
            continue
        fmt = fmt or resolve_format(record.keys(), eval_set.format, eval_set.field_mapping, eval_set.name)
        messages = adapt(record, fmt, eval_set.field_mapping)
        if isinstance(messages, Drop):
            continue
        text = "\n".join(m["content"] for m in messages if m["role"] == "user")
        items.append((f"{eval_set.name}#{index}", text))
    return items


def plan_run(manifest: Manifest, ctx: LoadContext) -> ManifestPlan:
    """Return the manifest's load plans under this run's mirror (see `curation.manifest_plan`)."""
    return plan_manifest(manifest, ctx.mirror, ctx.mirror_entries)


def build_index(eval_plans: list[EvalPlan], ctx: LoadContext) -> tuple[EvalIndex, dict[str, EvalSetStatus]]:
    """Return the eval prompts' index and each eval set's status (a broken one is reported, not fatal)."""
    index = EvalIndex()
    status: dict[str, EvalSetStatus] = {}
    for planned in eval_plans:
        name = planned.eval_set.name
        try:
            items = eval_prompts(planned, ctx)
        except Exception as exc:  # a broken eval set is reported; decontamination goes on with the rest
            missing = ctx.unreachable(planned.eval_set, files=planned.files)
            if missing is not None:  # expected offline: the report's one coverage warning names them all
                logger.debug("eval set %s not available: %s (%s: %s)", name, missing, type(exc).__name__, exc)
                status[name] = EvalSetStatus(items=0, error=None, unavailable=missing)
                continue
            logger.error("eval set %s failed: %s", name, exc)
            status[name] = EvalSetStatus(items=0, error=f"{type(exc).__name__}: {exc}")
            continue
        for item_id, text in items:
            index.add(item_id, text)
        status[name] = EvalSetStatus(items=len(items), error=None)
    return index, status


def _final_hash(
    manifest: Manifest, plan: ManifestPlan, staged: list[StagedSource], ctx: LoadContext, seed: int, jsonl: bool
) -> str:
    eval_files = [
        [f, (ctx.mirror / f).stat().st_size if ctx.mirror and (ctx.mirror / f).is_file() else None]
        for e in plan.eval_sets
        for f in e.files
    ]
    payload = {
        "stages": [s.stage_hash for s in staged],
        "errors": [s.error for s in staged],
        "evals": [e.eval_set.model_dump(mode="json") for e in plan.eval_sets],
        "eval_files": eval_files,
        "budget": manifest.budget.model_dump(mode="json"),
        "seed": seed,
        "jsonl": jsonl,
        "version": CODE_VERSION,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def curate(
    manifest: Manifest,
    out_dir: Path,
    *,
    settings: Settings,
    seed: int | None = None,
    jsonl: bool = False,
    mirror: Path | None = None,
    hub_root: Path | None = None,
    hub_probe: Callable[[], str | None] | None = None,
    on_source: Callable[[int, int, str], None] | None = None,
    sources_root: Path | None = None,
) -> CurateResult:
    """Curate the manifest's sources into `out_dir`; return the report (also written as report.json).

    `hub_probe` answers None when the Hub is reachable, else why not; it is asked once, and only when a
    source or eval set is missing from the mirror, which then fails at once instead of retrying the Hub.
    `on_source(done, total, key)` is called before each source is staged and once at the end (a progress bar).
    `sources_root` (the manifest file's folder) is where target-written and traffic sources' paths lead.
    """
    out_dir = Path(out_dir)
    with hold_folder(out_dir):  # one writer per output folder, released however the run ends
        out_dir.mkdir(parents=True, exist_ok=True)
        ctx = make_context(manifest, out_dir, mirror, hub_root, hub_probe, settings=settings, sources_root=sources_root)
        seed = manifest.budget.seed if seed is None else seed
        plan = plan_run(manifest, ctx)
        staged: list[StagedSource] = []
        for planned in plan.sources:
            if on_source is not None:
                on_source(planned.order, len(plan.sources), planned.source.key)
            staged.append(stage_source(planned, ctx))
        if on_source is not None:
            on_source(len(manifest.sources), len(manifest.sources), "")
        reused = [f"stage:{s.key}" for s in staged if s.reused]
        final = _final_hash(manifest, plan, staged, ctx, seed, jsonl)
        manifest_text = dump_manifest(manifest)
        try:
            state: CuratedState | None = read_state(out_dir)
        except IncompleteSetError:
            state = None
        report_bytes = read_own(out_dir / REPORT_FILE, root=out_dir)
        if state is not None and state.final == final and state.files is not None and report_bytes is not None \
                and all(read_own(out_dir / p, root=out_dir) is not None for p in state.outputs):
            logger.info("nothing changed since the last run: outputs kept")
            report = CurationReport.model_validate_json(report_bytes)
            if read_own(out_dir / MANIFEST_FILE, root=out_dir) != manifest_text.encode("utf-8"):
                commit_set(out_dir, final, state.outputs, manifest_text)  # a manifest change the key does not see
            return CurateResult(report=report, reused=[*reused, "final"])
        # The state file is the outputs' commit record: removed before the first output is touched and written
        # after the last, so a run killed in between (of this manifest or another) is never taken as finished.
        begin_set(out_dir)
        report, outputs = _finish(manifest, plan, out_dir, staged, ctx, seed, jsonl)
        commit_set(out_dir, final, outputs, manifest_text)
        return CurateResult(report=report, reused=reused)


def _finish(
    manifest: Manifest,
    plan: ManifestPlan,
    out_dir: Path,
    staged: list[StagedSource],
    ctx: LoadContext,
    seed: int,
    jsonl: bool,
) -> tuple[CurationReport, list[str]]:
    sources = {s.key: src for s, src in zip(staged, manifest.sources, strict=True)}
    rows: list[Row] = [row for s in staged for row in s.rows]
    for row in rows:
        text = normalise(prompt_text(row.messages))
        row.extra["prompt_hash"] = content_hash(text, normalised=True)
        row.extra["words"] = word_hashes(text, normalised=True)
    row_ids = {r.key: sample_id(sources[r.source_key], r.row_index) for r in rows}
    # Deduplicate across all sources, then decontaminate the survivors against the eval prompts.
    dedup = deduplicate(rows)
    index, eval_status = build_index(plan.eval_sets, ctx)
    contaminated = find_contaminated(index, [r.extra["words"] for r in dedup.kept])
    clean = [r for i, r in enumerate(dedup.kept) if i not in contaminated]
    mixed = mix(clean, manifest.budget, seed=seed, row_id=row_ids)
    # Split and write.
    samples = [
        build_sample(r, sources[r.source_key], row_ids[r.key], ctx.params.counter) for r in mixed.selected
    ]
    shard_paths = write_shards(samples, out_dir / "data", root=out_dir)
    outputs = [p.relative_to(out_dir).as_posix() for p in shard_paths]
    if jsonl:
        atomic_write_bytes(out_dir / SAMPLES_FILE, jsonl_bytes(s.model_dump() for s in samples), root=out_dir)
        outputs.append(SAMPLES_FILE)
    _write_set_aside(out_dir, dedup, contaminated, index, row_ids)
    report = _report(
        manifest, staged, dedup, contaminated, mixed, samples, eval_status, ctx.params.counter, seed
    )
    report.shards = outputs
    atomic_write_json(out_dir / "report.json", report.to_json(), root=out_dir)
    regen = [s.token_count for s in samples if s.needs_regeneration]
    native = [s.token_count for s in samples if not s.needs_regeneration]
    write_summary(
        out_dir,
        render_summary(report, regen, native),
        render_plot(report, [s.original_token_count for s in samples]),
    )
    return report, outputs


def _write_set_aside(
    out_dir: Path, dedup: DedupResult, contaminated: dict[int, str], index: EvalIndex,
    row_ids: dict[tuple[str, int], str],
) -> None:
    """Write the rows set aside beside the shards: duplicates (with the id each duplicates) and decontaminated
    rows (with the eval item each matched)."""
    dup_records = [
        DuplicateRecord(id=row_ids[d.key], kept_id=row_ids[k.key], kind="exact", similarity=1.0)
        for d, k in dedup.exact
    ]
    dup_records += [
        DuplicateRecord(id=row_ids[d.key], kept_id=row_ids[k.key], kind="near", similarity=s)
        for d, k, s in dedup.near
    ]
    atomic_write_bytes(out_dir / "dropped" / "duplicates.jsonl", jsonl_bytes(dup_records), root=out_dir)
    decon_records = [
        ContaminatedRecord(
            id=row_ids[dedup.kept[i].key],
            source=dedup.kept[i].source_key,
            row=dedup.kept[i].row_index,
            eval_item=item,
            eval_text=index.texts[item][:500],
            prompt=prompt_text(dedup.kept[i].messages)[:500],
        )
        for i, item in sorted(contaminated.items())
    ]
    atomic_write_bytes(out_dir / "decontaminated.jsonl", jsonl_bytes(decon_records), root=out_dir)


def _source_reports(
    manifest: Manifest, staged: list[StagedSource], dedup: DedupResult, contaminated: dict[int, str], mixed: MixResult
) -> dict[str, SourceReport]:
    """Return each source's report: its rows, drops, duplicates, decontaminated rows and selected rows."""
    per_source: dict[str, SourceReport] = {}
    for s, source in zip(staged, manifest.sources, strict=True):
        per_source[s.key] = SourceReport(
            rows_in=s.rows_in,
            drops=dict(sorted(s.drops.items())),
            format=s.format,
            error=s.error,
            duplicates=0,
            decontaminated=0,
            selected=mixed.per_source.get(s.key, 0),
            slug=slug(source),
            kind=source.kind,
            scrubbed=dict(sorted(s.scrubbed.items())),
        )
    for row in [d for d, _ in dedup.exact] + [d for d, _, _ in dedup.near]:
        per_source[row.source_key].duplicates += 1
    for i in contaminated:
        per_source[dedup.kept[i].source_key].decontaminated += 1
    return per_source


def _report(
    manifest: Manifest,
    staged: list[StagedSource],
    dedup: DedupResult,
    contaminated: dict[int, str],
    mixed: MixResult,
    samples: list[CuratedSample],
    eval_status: dict[str, EvalSetStatus],
    counter: TokenCounter,
    seed: int,
) -> CurationReport:
    drops: dict[str, int] = {}
    for s in staged:
        for reason, n in s.drops.items():
            drops[reason] = drops.get(reason, 0) + n
    per_source = _source_reports(manifest, staged, dedup, contaminated, mixed)
    per_category = category_reports(mixed.per_category)
    cleaned = sum(len(s.rows) for s in staged)
    native = sum(1 for s in samples if not s.needs_regeneration)
    return CurationReport(
        seed=seed,
        token_counter=counter.name,
        rows_in=sum(s.rows_in for s in staged),
        rows_out=len(samples),
        drops=dict(sorted(drops.items())),
        duplicates=DuplicateCounts(exact=len(dedup.exact), near=len(dedup.near)),
        decontaminated=len(contaminated),
        per_category=per_category,
        unmet_budgets={c: v.unmet for c, v in per_category.items() if v.unmet},
        warnings=mix_warnings(
            mixed.per_category,
            {str(s.category) for s in manifest.sources},
            {str(c) for c in manifest.budget.shares},
        ),
        target_native=native,
        needs_regeneration=len(samples) - native,
        per_source=per_source,
        failed_sources=[s.key for s in staged if s.error],
        eval_sets=eval_status,
        steps=StepCounts(
            loaded=sum(s.rows_in for s in staged),
            after_cleaning=cleaned,
            after_dedup=len(dedup.kept),
            after_decontamination=len(dedup.kept) - len(contaminated),
            after_mix=len(samples),
        ),
    )
