"""What a value run shows: value.md, and its points and values in the `{"points", "values"}` file that
docs/results/data_value.json holds (merged: a point or value of the same key is replaced, others are kept, so
the data-plan experiment's points and several value runs share one file).

A point: `{"samples", "mix", "seed", "per_set": {set: AL}, "mean_accept_length", "draft_sha256", "device",
"device_seconds", "command"}` with mix `default` or `<op>:<unit>` (e.g. `remove:owner/name`); a value is a
`core.measured_value.MeasuredValue` as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.measured_value import MeasuredValue, describe_value
from training.atomic_files import write_file
from training.value.runner import DraftResult, ValueDoc

RESULTS_KEYS = ("points", "values")


def mix_name(doc: ValueDoc, draft: DraftResult) -> str:
    """`default`, `measured` (the compared mix), or the arm as `<op>:<unit>`."""
    if draft.mix:
        return "measured"
    return "default" if draft.unit is None else f"{doc.settings.op}:{draft.unit}"


def point_json(doc: ValueDoc, draft: DraftResult, command: str) -> dict[str, Any]:
    """One draft as a point of data_value.json."""
    return {"samples": draft.samples, "mix": mix_name(doc, draft), "seed": draft.seed,
            "per_set": {s: v.accept_length for s, v in sorted(draft.sets.items())},
            "mean_accept_length": round(draft.mean_accept_length, 4), "draft_sha256": draft.draft_sha256,
            "device": draft.device,
            "device_seconds": round(float(draft.stats.get("train_wall_s", 0.0)) + draft.eval_wall_s, 1),
            "command": command}


def results_json(doc: ValueDoc, command: str) -> dict[str, list[dict[str, Any]]]:
    """The run's points and values in the data_value.json schema."""
    return {"points": [point_json(doc, d, command) for d in doc.drafts],
            "values": [v.model_dump(mode="json") for v in doc.values]}


def _point_key(point: dict[str, Any]) -> tuple[Any, ...]:
    return point.get("mix"), point.get("samples"), point.get("seed")


def _value_key(value: dict[str, Any]) -> tuple[Any, ...]:
    return value.get("kind"), value.get("name"), value.get("op"), value.get("budget")


def merge_results(existing: dict[str, Any], new: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """`existing` with `new`'s points and values in: same keys replaced, in place; new ones appended."""
    merged = {**existing}
    for name, key in (("points", _point_key), ("values", _value_key)):
        rows = [r for r in existing.get(name, []) if isinstance(r, dict)]
        fresh = {key(r): r for r in new[name]}
        kept = [fresh.pop(key(r)) if key(r) in fresh else r for r in rows]
        merged[name] = kept + list(fresh.values())
    return merged


def write_results(doc: ValueDoc, path: Path, command: str) -> Path:
    """Merge the run's points and values into the results file at `path` (created when absent)."""
    try:
        existing = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        existing = None
    if not isinstance(existing, dict):
        from training.value.plan import ValueRunError

        raise ValueRunError(f"{path} is not a results file of points and values: pass another --results")
    merged = merge_results(existing, results_json(doc, command))
    write_file(path, (json.dumps(merged, indent=1) + "\n").encode("utf-8"))
    return path


def markdown(doc: ValueDoc) -> str:
    """value.md: what was measured how, every draft's AL per set, and each unit's value with its interval."""
    s = doc.settings
    sets = sorted({name for d in doc.drafts for name in d.sets})
    lines = [f"# Measured value per {s.by}: {s.target}", "",
             f"- pool: {s.data} ({doc.pool_rows:,} rows); budget {s.budget:,} rows per draft; op {s.op}",
             f"- default mix at seeds {', '.join(map(str, s.seeds))}; each arm at the first {s.arm_seeds}",
             f"- evaluation: {doc.evaluator}",
             f"- status: {'complete' if doc.complete else 'in progress'} ({len(doc.drafts)} of {len(doc.plan)} "
             "drafts)"]
    lines += [f"- not measured: {line}" for line in doc.skipped]
    lines += ["", "| draft | seed | rows swapped | steps | " + " | ".join(f"AL {n}" for n in sets)
              + " | mean AL | device s |", "|---" * (6 + len(sets)) + "|"]
    for d in doc.drafts:
        cells = [f"{d.sets[n].accept_length:.3f}" if n in d.sets else "-" for n in sets]
        seconds = float(d.stats.get("train_wall_s", 0.0)) + d.eval_wall_s
        lines.append(f"| {mix_name(doc, d)} | {d.seed} | {d.rows_swapped:,} | {d.stats.get('steps', '-')} | "
                     + " | ".join(cells) + f" | {d.mean_accept_length:.3f} | {seconds:,.0f} |")
    if doc.mix_comparison:
        lines += ["", *comparison_lines(doc)]
    if not s.mix_counts:
        lines += ["", "## Values (AL per 10K rows; 95% interval from the seeds' noise)", ""]
        lines += [f"- {v.name}: {describe_value(v)}" for v in doc.values] or ["- none yet"]
    return "\n".join(lines) + "\n"


def comparison_lines(doc: ValueDoc) -> list[str]:
    """The measured mix against the default at the same budget, per set and on the mean, and the verdict."""
    lines = ["## Measured mix minus default (AL, paired by seed; 95% interval)", "",
             "mix: " + ", ".join(f"{c} {n:,}" for c, n in sorted(doc.settings.mix_counts.items())), ""]
    for name, est in sorted(doc.mix_comparison.items()):
        band = (f"{est.low:+.3f} to {est.high:+.3f}" if est.low is not None and est.high is not None
                else "noise unmeasured")
        lines.append(f"- {name}: {est.delta:+.3f} ({band})")
    mean = doc.mix_comparison.get("mean")
    if mean is not None:
        verdict = ("beat the default" if mean.clear and mean.delta > 0 else "lost to the default"
                   if mean.clear else "did not beat the default beyond the noise")
        lines += ["", f"verdict: the measured mix {verdict} at {doc.settings.budget:,} rows (mean AL "
                  f"{mean.delta:+.3f})"]
    return lines


def values_of(path: Path) -> list[MeasuredValue]:
    """The values of a value.json or a results file (`{"values": [...]}`)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return [MeasuredValue.model_validate(v) for v in raw.get("values", [])]
    except (OSError, ValueError, AttributeError) as exc:
        from training.value.plan import ValueRunError

        raise ValueRunError(f"{path}: no values to read ({str(exc).splitlines()[0]})") from None
