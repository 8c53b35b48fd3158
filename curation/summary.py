"""The human-readable side of a curation run: `summary.md` (counts per step, drops, mix, token histograms) and
`mix.png`.

Both are drawn from the run's `CurationReport` plus the token counts, and hold no timestamps. The plot uses
matplotlib's Agg backend: rows per category (selected and available) and the token-length histogram.
"""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import numpy as np

from curation.report import CurationReport

HIST_EDGES = (0, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 1 << 40)


def token_histogram(counts: list[int]) -> list[tuple[str, int]]:
    """Return (bucket label, rows) over HIST_EDGES."""
    values, _ = np.histogram(np.asarray(counts, dtype=np.int64), bins=np.asarray(HIST_EDGES))
    labels = [
        f"{lo}–{hi - 1}" if hi < 1 << 40 else f"≥{lo}"
        for lo, hi in itertools.pairwise(HIST_EDGES)
    ]
    return list(zip(labels, values.tolist(), strict=True))


def _bar(n: int, top: int, width: int = 30) -> str:
    return "█" * (round(width * n / top) if top else 0)


def _decontamination_lines(report: CurationReport) -> list[str]:
    """The eval sets the rows were checked against (loaded ones only), and those that were not, with why."""
    cover = report.decontamination
    if cover is None:
        return []
    lines = ["## Decontamination", "",
             f"Checked against {len(cover.checked)} of {cover.eval_sets} eval sets "
             f"({report.decontaminated} rows removed).", "", "| eval set | prompts | status |", "|---|---:|---|"]
    for name, status in sorted(report.eval_sets.items()):
        state = ("not available: " + status.unavailable if status.unavailable
                 else "failed: " + status.error if status.error else "checked" if status.items else "no prompts")
        lines.append(f"| {name} | {status.items} | {state} |")
    return lines


def _local_source_lines(report: CurationReport) -> list[str]:
    """Return the section on target-written and traffic sources (none when the manifest has only datasets)."""
    local = {key: src for key, src in report.per_source.items() if src.kind != "dataset"}
    if not local:
        return []
    lines = ["", "## Target-written and traffic sources", "",
             "| source | kind | rows in | selected | PII scrubbed |", "|---|---|---:|---:|---|"]
    for key, src in local.items():
        scrubbed = ", ".join(f"{kind} {n}" for kind, n in src.scrubbed.items()) or "–"
        if src.kind != "traffic":
            scrubbed = "not scrubbed (target-written)"
        lines.append(f"| {key} | {src.kind} | {src.rows_in} | {src.selected} | {scrubbed} |")
    return lines


def render_summary(report: CurationReport, tokens_regen: list[int], tokens_native: list[int]) -> str:
    """Return summary.md's text."""
    lines = ["# Curation summary", ""]
    lines += ["## Counts per step", "", "| step | rows |", "|---|---:|"]
    steps = report.steps.model_dump()
    for name in ("loaded", "after_cleaning", "after_dedup", "after_decontamination", "after_mix"):
        lines.append(f"| {name} | {steps[name]} |")
    lines += [
        "",
        f"Rows in: {report.rows_in}; rows out: {report.rows_out} "
        f"({report.target_native} target-native, {report.needs_regeneration} to regenerate).",
        "",
    ]
    lines += ["## Drops by reason", "", "| reason | rows |", "|---|---:|"]
    for reason, n in sorted(report.drops.items()):
        lines.append(f"| {reason} | {n} |")
    lines += [
        f"| duplicate (exact) | {report.duplicates.exact} |",
        f"| duplicate (near) | {report.duplicates.near} |",
        f"| decontaminated | {report.decontaminated} |",
        "",
    ]
    if report.warnings:
        lines += ["## Warnings", "", *[f"- {w}" for w in report.warnings], ""]
    lines += [
        "## Mix per category",
        "",
        "| category | available | quota | selected | unmet |",
        "|---|---:|---:|---:|---:|",
    ]
    for category, mix in sorted(report.per_category.items()):
        quota = "all" if mix.quota is None else mix.quota
        lines.append(f"| {category} | {mix.available} | {quota} | {mix.selected} | {mix.unmet} |")
    lines += [
        "",
        "## Per source",
        "",
        "| source | rows in | dropped | duplicates | decontaminated | selected | status |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for key, src in report.per_source.items():
        status = "failed: " + src.error if src.error else "ok"
        lines.append(
            f"| {key} | {src.rows_in} | {sum(src.drops.values())} | {src.duplicates} | "
            f"{src.decontaminated} | {src.selected} | {status} |"
        )
    lines += _local_source_lines(report)
    lines += ["", *_decontamination_lines(report)]
    for title, counts in (("needs_regeneration (prompt)", tokens_regen), ("target_native", tokens_native)):
        lines += ["", f"## Token histogram: {title} ({report.token_counter})", "", "```"]
        hist = token_histogram(counts)
        top = max((n for _, n in hist), default=0)
        for label, n in hist:
            lines.append(f"{label:>13} {n:7d} {_bar(n, top)}")
        lines.append("```")
    return "\n".join(lines) + "\n"


def render_plot(report: CurationReport, tokens: list[int]) -> bytes:
    """Return mix.png: rows per category and the token-length distribution."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    categories = sorted(report.per_category)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    ys = np.arange(len(categories))
    left.barh(
        ys, [report.per_category[c].available for c in categories], color="#c9d6e8", label="available"
    )
    left.barh(
        ys, [report.per_category[c].selected for c in categories], color="#2f6db5", label="selected"
    )
    left.set_yticks(ys, categories)
    left.set_xlabel("rows")
    left.set_title("Mix by category")
    left.legend(loc="lower right")
    hist = token_histogram(tokens)
    right.bar(range(len(hist)), [n for _, n in hist], color="#2f6db5")
    right.set_xticks(range(len(hist)), [label for label, _ in hist], rotation=45, ha="right", fontsize=7)
    right.set_title(f"Tokens per conversation ({report.token_counter})")
    right.set_ylabel("rows")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def write_summary(out_dir: Path, text: str, png: bytes) -> None:
    """Write summary.md and mix.png into `out_dir` (each whole, never through a link)."""
    from curation.shards import atomic_write_bytes

    atomic_write_bytes(out_dir / "summary.md", text.encode("utf-8"), root=out_dir)
    atomic_write_bytes(out_dir / "mix.png", png, root=out_dir)
