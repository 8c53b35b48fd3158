"""The measured value of a source or a category: what `datahunt value` writes, the catalog keeps and the review
page, `catalog list` and `curate --mix measured` read.

A value is measured at a fixed budget of training rows: the change in acceptance length (AL) of the draft when
one unit's rows in the default mix are swapped for other rows (`remove`: AL with them minus AL without), or
when rows of it are swapped in (`add`: AL with more of it minus AL of the default mix), per eval set and over
their mean. `per_10k` scales that change to 10,000 swapped rows (a linear reading of a local measurement: it
says which way and how strongly, not what 100K rows would do). `low`/`high` are the 95% interval from the
training noise measured by repeated seeds (None when no point was trained twice: the noise was not measured).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

UnitKind = Literal["source", "category"]
ValueOp = Literal["remove", "add"]
MEAN_SET = "mean"  # the key of the mean over the eval sets in `per_set`-like views


class ValueEstimate(BaseModel):
    """One unit's change in AL on one eval set (or the mean): raw, per 10K swapped rows, and its interval."""

    model_config = ConfigDict(extra="forbid")

    delta: float = Field(description="AL change at the budget (positive: the unit's rows help).")
    per_10k: float = Field(description="delta scaled to 10,000 swapped rows.")
    low: float | None = Field(default=None, description="95% interval of per_10k, low end (None: noise unmeasured).")
    high: float | None = Field(default=None, description="95% interval of per_10k, high end.")

    @property
    def clear(self) -> bool:
        """The interval excludes zero (the sign is more than noise)."""
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)


class MeasuredValue(BaseModel):
    """The value of one source (a Hub id) or one category, as one value run measured it."""

    model_config = ConfigDict(extra="forbid")

    kind: UnitKind
    name: str = Field(description="The Hub id (kind source) or the category.")
    op: ValueOp
    budget: int = Field(gt=0, description="Training rows of every draft of the run.")
    rows_swapped: float = Field(ge=0, description="The unit's rows swapped out (remove) or in (add), mean over seeds.")
    seeds: int = Field(ge=1, description="Seeds the unit's arm was trained at.")
    noise_dof: int = Field(ge=0, description="Degrees of freedom of the noise estimate (0: not measured).")
    mean: ValueEstimate
    per_set: dict[str, ValueEstimate] = Field(default_factory=dict)
    run: str = Field(description="The value run that measured it (its output folder and id).")

    def headline(self) -> tuple[str, ValueEstimate]:
        """(set, estimate) a reviewer is shown: the eval set the unit moves most, else the mean."""
        if not self.per_set:
            return MEAN_SET, self.mean
        name = max(sorted(self.per_set), key=lambda s: abs(self.per_set[s].per_10k))
        return name, self.per_set[name]


def describe_value(value: MeasuredValue) -> str:
    """One line for a reviewer: 'measured +0.06 AL per 10K rows on humaneval (95%: +0.01 to +0.11; mean
    +0.02)'."""
    name, est = value.headline()
    where = "the mean of the eval sets" if name == MEAN_SET else name
    text = f"measured {est.per_10k:+.2f} AL per 10K rows on {where}"
    band = (f"95%: {est.low:+.2f} to {est.high:+.2f}" if est.low is not None and est.high is not None
            else "noise not measured")
    mean = f"; mean {value.mean.per_10k:+.2f}" if name != MEAN_SET else ""
    return f"{text} ({band}{mean})"
