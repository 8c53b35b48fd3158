"""The engine run's report.json, built from the tasks' counts: the same fields and numbers as the in-process run.

Per source, a failed shard fails its whole source, as an in-process failure does: the source keeps no rows,
its `rows_in` and drops are those before the earliest failing row (`failure_bound`), and the error is the
one of that shard.
"""

from __future__ import annotations

import json
from collections import Counter

from curation.engine.counts import ShardMeta, SourceCounts
from curation.engine.plan import EnginePlan
from curation.mixing import CategoryMix, mix_warnings, quotas
from curation.report import (
    CurationReport,
    DuplicateCounts,
    EvalSetStatus,
    SourceReport,
    StepCounts,
    category_reports,
)
from curation.staging import slug


def shard_metas(plan: EnginePlan, order: int) -> list[ShardMeta]:
    """Return the stage metas of a source's shards."""
    return [json.loads(plan.path("meta", s.name + ".json").read_text(encoding="utf-8")) for s in plan.shards_of(order)]


def failure_bound(metas: list[ShardMeta]) -> tuple[int | None, str | None]:
    """Return (rows read before the earliest failure, its error), or (None, None) when no shard failed."""
    failed = sorted((m["failed_row"], m["error"]) for m in metas if m["error"])
    return failed[0] if failed else (None, None)


def per_category(
    plan: EnginePlan, available: dict[str, int], plan_quota: dict[str, int | None], selected: Counter[str]
) -> dict[str, CategoryMix]:
    """Return the mix outcome per category, as `curation.mixing.mix` reports it."""
    out = {c: CategoryMix(available=available[c], quota=plan_quota[c], selected=selected[c]) for c in sorted(available)}
    budget = plan.manifest.budget
    for category, quota in quotas(budget, {str(c): 0 for c in budget.shares}).items():
        if category not in out and quota:
            out[category] = CategoryMix(available=0, quota=quota, selected=0)
    return out


def build_report(
    plan: EnginePlan,
    sources: list[SourceCounts],
    mix: dict[str, CategoryMix],
    counts: dict[str, int],
    eval_status: dict[str, EvalSetStatus],
) -> CurationReport:
    """Return report.json's content; `sources` holds each source's counts in manifest order."""
    drops: Counter[str] = Counter()
    per_source: dict[str, SourceReport] = {}
    for source, s in zip(plan.manifest.sources, sources, strict=True):
        drops.update(s["drops"])
        per_source[source.key] = SourceReport(
            rows_in=s["rows_in"],
            drops=dict(sorted(s["drops"].items())),
            format=s["format"],
            error=s["error"],
            duplicates=s["duplicates"],
            decontaminated=s["decontaminated"],
            selected=s["selected"],
            slug=slug(source),
            kind=source.kind,
            scrubbed=dict(sorted(s.get("scrubbed", {}).items())),
        )
    categories = category_reports(mix)
    rows_in = sum(s["rows_in"] for s in sources)
    cleaned = sum(s["kept"] for s in sources)
    deduped = cleaned - counts["exact"] - counts["near"]
    return CurationReport(
        seed=plan.seed,
        token_counter=plan.ctx.params.counter.name,
        rows_in=rows_in,
        rows_out=counts["rows_out"],
        drops=dict(sorted(drops.items())),
        duplicates=DuplicateCounts(exact=counts["exact"], near=counts["near"]),
        decontaminated=counts["decontaminated"],
        per_category=categories,
        unmet_budgets={c: v.unmet for c, v in categories.items() if v.unmet},
        warnings=mix_warnings(
            mix,
            {str(s.category) for s in plan.manifest.sources},
            {str(c) for c in plan.manifest.budget.shares},
        ),
        target_native=counts["native"],
        needs_regeneration=counts["rows_out"] - counts["native"],
        per_source=per_source,
        failed_sources=[src.key for src, s in zip(plan.manifest.sources, sources, strict=True) if s["error"]],
        eval_sets=eval_status,
        steps=StepCounts(
            loaded=rows_in,
            after_cleaning=cleaned,
            after_dedup=deduped,
            after_decontamination=deduped - counts["decontaminated"],
            after_mix=counts["rows_out"],
        ),
    )
