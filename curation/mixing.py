"""Mixing to a budget: per-category quotas from the manifest's Budget, filled by seeded deterministic sampling.

Without `total` every row is kept. With measured values in the budget (`curate --mix measured`) the default
quotas are then moved by `curation.measured_mix`. With it, a category with a share gets `round(total × share)`; the rest
of the total is split evenly (remainder to the alphabetically first) among the categories that have rows
but no share; when every category with rows has a share, the unshared ones take nothing. Within a category
rows are ranked by sha256(seed, row id) and the first `quota` are taken, so the same seed picks the same
rows whatever order they arrived in. A quota larger than what is available is reported as unmet.
`mix_warnings` names a category that dominates the mix and an approved category that ends up empty.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from curation.conversation import Row
from curation.manifest import Budget
from curation.measured_mix import CategoryValue, measured_quotas

DOMINANT_SHARE = 0.4  # one category above this share of a mix of several is worth a warning


@dataclass
class CategoryMix:
    """Budget outcome of one category."""

    available: int
    quota: int | None
    selected: int

    @property
    def unmet(self) -> int:
        """How many rows short of its quota the category is (0 when met or unbudgeted)."""
        return max(0, (self.quota or 0) - self.selected) if self.quota is not None else 0


@dataclass
class MixResult:
    """Selected rows (in input order), per-category outcome, and per-source contributions."""

    selected: list[Row]
    per_category: dict[str, CategoryMix]
    per_source: Counter[str] = field(default_factory=Counter)


def quotas(budget: Budget, available: dict[str, int]) -> dict[str, int | None]:
    """Return the quota of each category present in `available` (None everywhere without a total); with measured
    values, the default quotas moved by `curation.measured_mix`."""
    if budget.total is None:
        return dict.fromkeys(available)
    default = default_quotas(budget, available)
    if not budget.measured:
        return dict(default)
    values = {str(c): CategoryValue(v.per_10k, v.low, v.high) for c, v in budget.measured.items()}
    return dict(measured_quotas(default, available, values).quotas)


def default_quotas(budget: Budget, available: dict[str, int]) -> dict[str, int]:
    """The default quota of each category present in `available`, for a budget with a total."""
    assert budget.total is not None
    shared = {str(c): round(budget.total * s) for c, s in budget.shares.items()}
    rest = max(0, budget.total - sum(shared.values()))
    unshared = sorted(c for c in available if c not in shared)
    out: dict[str, int] = {c: shared.get(c, 0) for c in available}
    if unshared and budget.shares and sum(budget.shares.values()) >= 1.0 - 1e-6:
        return out
    for k, category in enumerate(unshared):
        out[category] = rest // len(unshared) + (1 if k < rest % len(unshared) else 0)
    return out


def sample_rank(seed: int, row_id: str) -> bytes:
    """Return the seeded sort key of a row."""
    return hashlib.sha256(f"{seed}:{row_id}".encode()).digest()


def mix(rows: list[Row], budget: Budget, *, seed: int, row_id: dict[tuple[str, int], str]) -> MixResult:
    """Return the rows chosen by the budget; `row_id` maps each row's `key` to its stable id."""
    by_category: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_category[row.category].append(row)
    plan = quotas(budget, {c: len(v) for c, v in by_category.items()})
    chosen: set[tuple[str, int]] = set()
    per_category: dict[str, CategoryMix] = {}
    for category in sorted(by_category):
        members = by_category[category]
        quota = plan[category]
        if quota is None:
            picked = members
        else:
            picked = sorted(members, key=lambda r: sample_rank(seed, row_id[r.key]))[:quota]
        chosen.update(r.key for r in picked)
        per_category[category] = CategoryMix(available=len(members), quota=quota, selected=len(picked))
    for category, quota in quotas(budget, {str(c): 0 for c in budget.shares}).items():
        if category not in per_category and quota:
            per_category[category] = CategoryMix(available=0, quota=quota, selected=0)
    selected = [row for row in rows if row.key in chosen]
    return MixResult(
        selected=selected, per_category=per_category, per_source=Counter(r.source_key for r in selected)
    )


def mix_warnings(per_category: dict[str, CategoryMix], wanted: set[str], shared: set[str]) -> list[str]:
    """Return warnings about the mix: a category over DOMINANT_SHARE of it, a wanted category left empty.

    `wanted` are the categories the manifest has sources for; `shared` those its budget gives a share
    (a dominant category with a share was asked for, so it is not warned about).
    """
    total = sum(m.selected for m in per_category.values())
    filled = sum(1 for m in per_category.values() if m.selected)
    lines: list[str] = []
    if filled > 1:  # with one category left, the empty ones are the news, not its share
        for category, m in sorted(per_category.items(), key=lambda item: -item[1].selected):
            if m.selected / total > DOMINANT_SHARE and category not in shared:
                lines.append(
                    f"{category} is {m.selected / total:.0%} of the mix ({m.selected:,} of {total:,} rows): "
                    f"give it a budget share to balance the set (`datahunt manifest export --budget-total N "
                    f"--share {category}=0.2`, or `budget.shares` in the manifest)"
                )
    for category in sorted(wanted):
        if not (category in per_category and per_category[category].selected):
            lines.append(f"{category} has approved sources but no rows in the mix (see the per-source table)")
    return lines
