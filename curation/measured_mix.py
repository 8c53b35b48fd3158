"""The measured mix (`curate --mix measured`): the default quotas moved toward the categories whose measured value
says they are worth more, only as far as the measurement supports.

A category's value (`datahunt value --by category`) is the change in acceptance per 10K rows when its rows in
the default mix are swapped for others, with a 95% interval. It is a local measurement, made at the default
mix, so the mix moves in its direction and not without limit:

1. The default quotas, each capped at the rows the category has (what the default mix really gets; a budget
   the default leaves unfilled stays unfilled, so both mixes hold the same number of rows).
2. A category whose interval lies below zero (its rows clearly hurt) gives all its rows to `free`.
3. Receivers are the categories whose interval lies above zero, best value first; each may grow to `FACTOR`
   times its default quota (and never past its rows). They take `free` first; then rows from donors, any
   measured category whose interval lies entirely below the receiver's (lowest value first), each donor
   shrinking to no less than its default quota / `FACTOR`.
4. Rows still free go back to the categories with room, highest value first (unmeasured ones last).

No interval clear of another means no move: the measured mix is then the default, and says so. A source
whose own measured value lies clearly below zero is left out of the manifest (`measured_manifest`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.measured_value import MeasuredValue
from core.types import Category
from curation.errors import CurationError
from curation.manifest import Manifest, MeasuredCategoryValue

FACTOR = 2.0  # how far from its default quota a category may move: x2 up, /2 down (a measurement's trust region)


@dataclass(frozen=True)
class CategoryValue:
    """A category's measured value: AL per 10K rows and its 95% interval (None: noise not measured)."""

    per_10k: float
    low: float | None = None
    high: float | None = None

    @property
    def harmful(self) -> bool:
        return self.high is not None and self.high < 0

    @property
    def helpful(self) -> bool:
        return self.low is not None and self.low > 0

    def clearly_above(self, other: CategoryValue) -> bool:
        """This value's interval lies entirely above the other's."""
        return self.low is not None and other.high is not None and self.low > other.high


@dataclass
class MeasuredQuotas:
    """The quotas of the measured mix and, in words, every move from the default."""

    quotas: dict[str, int]
    moves: list[str] = field(default_factory=list)


def measured_quotas(default: dict[str, int], available: dict[str, int], values: dict[str, CategoryValue],
                    factor: float = FACTOR) -> MeasuredQuotas:
    """The measured mix's quota per category of `default` (see the module's rules)."""
    start = {c: min(q, available.get(c, 0)) for c, q in default.items()}
    quota = dict(start)
    free = 0  # the default's own unfilled budget stays unfilled: both mixes train on the same number of rows
    moves: list[str] = []
    for c in sorted(quota):
        if c in values and values[c].harmful and quota[c]:
            moves.append(f"{c}: all {quota[c]:,} rows out (its value {values[c].per_10k:+.3f} per 10K is below zero)")
            free, quota[c] = free + quota[c], 0
    floor = {c: int(quota[c] / factor) if c in values and not values[c].harmful else quota[c] for c in quota}
    ceiling = {c: min(available.get(c, 0), int(default[c] * factor)) for c in quota}
    receivers = sorted((c for c in quota if c in values and values[c].helpful), key=lambda c: (-values[c].per_10k, c))
    for r in receivers:
        take = min(free, ceiling[r] - quota[r])
        if take > 0:
            free, quota[r] = free - take, quota[r] + take
            moves.append(f"{r}: +{take:,} free rows (value {values[r].per_10k:+.3f} per 10K)")
        donors = sorted((d for d in quota if d in values and d != r and values[r].clearly_above(values[d])),
                        key=lambda d: (values[d].per_10k, d))
        for d in donors:
            give = min(quota[d] - floor[d], ceiling[r] - quota[r])
            if give > 0:
                quota[d], quota[r] = quota[d] - give, quota[r] + give
                moves.append(f"{give:,} rows from {d} ({values[d].per_10k:+.3f}) to {r} ({values[r].per_10k:+.3f})")
    order = sorted(quota, key=lambda c: (c not in values, -(values[c].per_10k if c in values else 0.0), c))
    for c in order:
        if free <= 0:
            break
        if c in values and values[c].harmful:
            continue
        take = min(free, available.get(c, 0) - quota[c])
        if take > 0:
            free, quota[c] = free - take, quota[c] + take
            moves.append(f"{c}: +{take:,} rows still free")
    if not moves:
        moves.append("no measured value is clear of another's interval: the measured mix is the default")
    elif free > 0:
        moves.append(f"{free:,} rows of the budget stay unfilled (no category has more rows)")
    # A category the measurement did not move keeps its default quota (a shortfall is still reported as unmet).
    return MeasuredQuotas(quotas={c: q if q != start[c] else default[c] for c, q in quota.items()}, moves=moves)


def measured_manifest(manifest: Manifest, values: list[MeasuredValue]) -> tuple[Manifest, list[str]]:
    """The manifest for the measured mix: its budget carries the categories' values (the quotas move in
    `curation.mixing.quotas`), and a source whose own value is clearly below zero is left out; with what was
    done, in words. CurationError when the budget has no total or no value applies."""
    if manifest.budget.total is None:
        raise CurationError("--mix measured needs a budget total (`datahunt manifest export --budget-total N`, or "
                            "budget.total in the manifest): the measured mix moves rows within a budget")
    categories = {v.name: v for v in values if v.kind == "category" and v.name in Category._value2member_map_}
    sources = {v.name: v for v in values if v.kind == "source"}
    harmful = [s for s in manifest.sources if s.hub_id in sources and sources[s.hub_id].mean.clear
               and sources[s.hub_id].mean.per_10k < 0]
    if not categories and not harmful:
        raise CurationError("--mix measured: no measured value applies to this manifest (run `datahunt value --by "
                            "category` on its regenerated set first, or pass --values FILE)")
    notes = [f"left out {s.hub_id}: its measured value {sources[s.hub_id].mean.per_10k:+.3f} AL per 10K rows is "
             "below zero" for s in harmful]
    measured = {Category(name): MeasuredCategoryValue(per_10k=v.mean.per_10k, low=v.mean.low, high=v.mean.high,
                                                     run=v.run) for name, v in sorted(categories.items())}
    notes += [f"{name}: measured {v.mean.per_10k:+.3f} AL per 10K rows" for name, v in sorted(categories.items())]
    kept = [s for s in manifest.sources if s not in harmful]
    budget = manifest.budget.model_copy(update={"measured": measured})
    return manifest.model_copy(update={"sources": kept, "budget": budget}), notes
