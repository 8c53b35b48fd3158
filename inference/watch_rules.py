"""What counts as an alarm for a served draft: pure rules over one window of the engine's speculative counters.

A window holds the rounds (target verifications with drafts), tokens and per-position acceptance the engine
counted over its span. Five alert classes, each from a failure seen in the field:

- `misconfigured`: the server's own configuration says it feeds the draft other aux layers than the draft was
  checked for (read from `/server_info` and the served folder's `config.json`, before any request; raised by
  `inference.watcher`, not judged from counters). The layer-id class caught at its cause: how much acceptance
  it costs depends on the draft (on a weak CPU-trained SmolLM2 draft, measured, nothing; on a trained one,
  most of position 0), so the counters alone may never show it.

- `no_acceptance`: acceptance length ≤ 1.05. The draft is never (or almost never) right: the EAGLE/EAGLE3 flag
  class (SGLang started with `EAGLE` for an EAGLE-3 draft feeds it the wrong hidden states and accepts 1.00),
  a missing `lm_head`, a draft for another target.
- `position0`: the first draft position accepted at less than a fraction (default one half) of the rate the
  draft was recorded at. The layer-id class: a draft fed the wrong target layers still proposes plausible
  tokens, so acceptance falls but does not vanish, and it shows first and most at position 0.
- `below_break_even`: acceptance length below the round's cost in target steps (the break-even): speculation
  is slower than the target alone, however good the number looks.
- `drift`: acceptance length below the deployment's own baseline by more than a fraction (default 10 %): the
  traffic moved away from what the draft learned, or something in the serving changed.

No rule judges a window of fewer rounds than asked (`Thresholds.min_rounds`): a handful of rounds says little.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

AlertKind = Literal["misconfigured", "no_acceptance", "position0", "below_break_even", "drift"]
ALERT_KINDS: tuple[AlertKind, ...] = ("misconfigured", "no_acceptance", "position0", "below_break_even", "drift")


@dataclass(frozen=True)
class Thresholds:
    """The stated limits of each rule."""

    min_accept_length: float = 1.05
    position0_fraction: float = 0.5
    drift: float = 0.10
    min_rounds: int = 200


@dataclass(frozen=True)
class Expected:
    """What the served draft should do: each None where nobody recorded or gave it."""

    break_even: float | None = None
    break_even_source: str = ""  # e.g. "recorded at batch 1 (cpu)" or "given"
    position0: float | None = None  # the draft's recorded position-0 acceptance
    accept_length: float | None = None  # the draft's recorded acceptance length (the reference sets)
    baseline_accept_length: float | None = None  # the deployment's baseline (--baseline)


@dataclass(frozen=True)
class WindowStats:
    """One window of counters: rounds with drafts, the acceptance they had, and the tokens served."""

    rounds: float
    accepted: float
    per_position: tuple[float, ...] = ()  # P(position i accepted | positions before it were); empty: not reported
    tokens: float = 0.0
    seconds: float = 0.0
    requests: float = 0.0

    @property
    def accept_length(self) -> float | None:
        """1 + accepted drafts per round (None without rounds)."""
        return 1.0 + self.accepted / self.rounds if self.rounds > 0 else None

    @property
    def tokens_per_s(self) -> float | None:
        """Tokens the engine generated per second of the window."""
        return self.tokens / self.seconds if self.seconds > 0 else None


@dataclass(frozen=True)
class Alert:
    """One rule that fired, in one sentence."""

    kind: AlertKind
    message: str
    values: dict[str, float] = field(default_factory=dict)


def _change(now: float, then: float) -> str:
    return f"{(now - then) / then:+.1%}" if then else "n/a"


def judge(stats: WindowStats, expected: Expected, thresholds: Thresholds) -> list[Alert]:
    """Every rule that fires on this window (none when it holds fewer than `min_rounds` rounds)."""
    al = stats.accept_length
    if al is None or stats.rounds < thresholds.min_rounds:
        return []
    alerts = []
    if al <= thresholds.min_accept_length:
        alerts.append(Alert("no_acceptance", f"acceptance length {al:.3f} ≤ {thresholds.min_accept_length} over "
                            f"{stats.rounds:.0f} rounds: the draft is almost never accepted (wrong speculative "
                            "algorithm such as EAGLE for an EAGLE-3 draft, a missing lm_head, another target's draft)",
                            {"accept_length": al}))
    p0 = stats.per_position[0] if stats.per_position else None
    if p0 is not None and expected.position0 and p0 < thresholds.position0_fraction * expected.position0:
        alerts.append(Alert("position0", f"position-0 acceptance {p0:.3f} is below {thresholds.position0_fraction:g}"
                            f" × the draft's recorded {expected.position0:.3f}: the draft is likely fed the wrong "
                            "target layers (aux layer ids of another engine's convention or another target)",
                            {"position0": p0, "recorded_position0": expected.position0}))
    if expected.break_even is not None and al < expected.break_even:
        alerts.append(Alert("below_break_even", f"acceptance length {al:.3f} is below the break-even "
                            f"{expected.break_even:.3f} ({expected.break_even_source}): speculation is slower "
                            "than the target alone", {"accept_length": al, "break_even": expected.break_even}))
    base = expected.baseline_accept_length
    if base and al < base * (1 - thresholds.drift):
        alerts.append(Alert("drift", f"acceptance length {al:.3f} is {_change(al, base)} from the deployment's "
                            f"baseline {base:.3f} (threshold -{thresholds.drift:.0%}): the traffic drifted from "
                            "what the draft learned, or the serving changed", {"accept_length": al, "baseline": base}))
    return alerts


def paying(stats: WindowStats, expected: Expected) -> bool | None:
    """True when acceptance is above the break-even (speculation is faster than the target alone), False below,
    None when there are no rounds or no known break-even."""
    al = stats.accept_length
    if al is None or expected.break_even is None:
        return None
    return al > expected.break_even


def describe(stats: WindowStats, expected: Expected, thresholds: Thresholds) -> str:
    """The interval's one line: whether speculation pays, with the numbers it rests on."""
    al = stats.accept_length
    if al is None:
        return "no speculative rounds yet"
    verdict = {True: "paying", False: "NOT paying", None: "paying unknown"}[paying(stats, expected)]
    parts = [f"{verdict}: AL {al:.3f} over {stats.rounds:.0f} rounds"]
    if expected.break_even is not None:
        parts.append(f"break-even {expected.break_even:.3f} ({expected.break_even_source}), "
                     f"{al / expected.break_even:.2f}x expected speedup")
    else:
        parts.append("break-even unknown (record it with eval-accept --record, or pass --break-even)")
    if expected.accept_length:
        parts.append(f"recorded AL {expected.accept_length:.3f} ({_change(al, expected.accept_length)})")
    if stats.per_position:
        rates = " ".join(f"{r:.2f}" for r in stats.per_position)
        p0 = stats.per_position[0]
        recorded = (f", recorded {expected.position0:.2f} ({_change(p0, expected.position0)})"
                    if expected.position0 else "")
        parts.append(f"per position {rates}{recorded}")
    if expected.baseline_accept_length:
        parts.append(f"baseline AL {expected.baseline_accept_length:.3f} "
                     f"({_change(al, expected.baseline_accept_length)})")
    if stats.tokens_per_s is not None:
        parts.append(f"{stats.tokens_per_s:.1f} tok/s served")
    if stats.rounds < thresholds.min_rounds:
        parts.append(f"not judged below {thresholds.min_rounds} rounds")
    return "; ".join(parts)
