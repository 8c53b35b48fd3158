"""eval-accept's result tables: one per mode and batch, the break-even beside the measured acceptance."""

from __future__ import annotations

from typing import Any


def accept_table(report: Any) -> Any:
    """A rich Table of one run: AL, per-position acceptance, both speeds, speedup, break-even, the output check."""
    from rich.table import Table

    mode = "greedy" if report.temperature <= 0 else f"sampled T={report.temperature:g}"
    batch = f"batch {report.batch}" + (f" ({report.schedule})" if report.batch > 1 else "")
    table = Table(title=f"{mode}, {batch}, k={report.k}, {report.prompts} prompts", title_justify="left")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("acceptance length", f"{report.accept_length:.2f}")
    table.add_row("per-position acceptance", " ".join(f"{r:.2f}" for r in report.position_rates))
    if report.baseline_s:
        table.add_row("speculative tok/s", f"{report.speculative_tok_s:.1f}")
        table.add_row("target alone tok/s", f"{report.baseline_tok_s:.1f}")
        table.add_row("speedup (measured)", f"{report.speedup:.2f}x")
    if report.round_cost:
        table.add_row("round cost (target steps)", f"{report.round_cost:.2f}")
        table.add_row("break-even AL", f"{report.round_cost:.2f}")
        table.add_row("speedup (expected AL / c)", f"{report.accept_length / report.round_cost:.2f}x")
    if report.temperature <= 0:
        table.add_row("identical to target greedy", "yes" if report.identical else "NO")
    else:
        table.add_row("output distribution", "exact rejection sampling (statistically tested, not per run)")
    return table


def recommend_line(reports: list[Any]) -> str:
    """'batch 1: run k=3 (1.39x measured; ...)': the measured best chain length of runs that differ only in k,
    and the k the per-position acceptance and the measured round costs predict (empty when nothing was timed)."""
    from training.break_even import recommend_k

    timed = [r for r in reports if r.round_cost and r.speedup]
    if len(timed) < 2:
        return ""
    best = max(timed, key=lambda r: r.speedup)
    longest = max(timed, key=lambda r: r.k)  # its per-position rates cover every shorter chain
    predicted = recommend_k(longest.position_rates, {r.k: r.round_cost for r in timed})
    return (f"batch {best.batch}: run k={best.k} ({best.speedup:.2f}x measured, best of k="
            f"{', '.join(str(r.k) for r in timed)}); from the acceptance per position and the measured round costs "
            f"k={predicted['k']} expects {predicted['expected_speedup']:.2f}x")
