"""Writing a draft's `expectations.json` (the contract is `core.draft_expectations`): at export, and measured.

Export writes the part it knows without measuring (`initial_expectations`): the engine layout, the aux layer ids
as written and as inputs of layers, the target's depth; a folder rewritten for the other engine keeps the
measurements of the same weights (`carried_expectations`). `eval-accept --record` then adds, per prompt set
(a row's `set`, else `category`, else `all`), the pooled round counts of a greedy run, and per batch size and k
the round's cost in target steps from that run's own timings (`record_measurements`). Decoding is what costs,
which is why it is a separate, explicit step and not part of every export.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.draft_expectations import (
    EXPECTATIONS_FILE,
    DraftExpectations,
    ExpectationsError,
    RoundCost,
    SetAcceptance,
    SetLabel,
    expectations_bytes,
    read_expectations,
)
from core.server_info import Engine
from training.atomic_files import write_file
from training.errors import TrainingError

if TYPE_CHECKING:
    from training.accept import AcceptReport

DEFAULT_SET = "all"


class RecordError(TrainingError, ValueError):
    """Measurements that cannot be recorded into the draft folder (no export there, or an unreadable file)."""


def initial_expectations(config: Mapping[str, Any], carried: DraftExpectations | None = None) -> DraftExpectations:
    """The expectations an export knows from its own config.json (`datahunt` block and `eagle_config`); the
    measurements of `carried` (same weights, another engine's layout) are kept."""
    ours = config.get("datahunt") or {}
    eagle = config.get("eagle_config") or {}
    engine: Engine = "vllm" if ours.get("engine") == "vllm" else "sglang"
    return DraftExpectations(
        engine=engine, aux_layer_ids=list(eagle.get("eagle_aux_hidden_state_layer_ids") or []),
        aux_layer_ids_input_of_layer=list(ours.get("aux_layer_ids_input_of_layer") or []),
        target_num_hidden_layers=ours.get("target_num_hidden_layers"),
        sets=dict(carried.sets) if carried else {}, round_costs=list(carried.round_costs) if carried else [])


def expectations_file_bytes(config: Mapping[str, Any], carried: DraftExpectations | None = None) -> bytes:
    """The bytes of the export's `expectations.json` (see `initial_expectations`)."""
    return expectations_bytes(initial_expectations(config, carried))


def carried_expectations(source: Path) -> DraftExpectations | None:
    """The measurements a source folder holds, for a rewrite of the same weights (None when unreadable)."""
    try:
        return read_expectations(source)
    except ExpectationsError:
        return None


def row_set(row: Mapping[str, Any]) -> str:
    """The prompt set a held-out row belongs to: its `set`, else `category` (also under `meta`), else 'all'."""
    meta = row.get("meta")
    name = row.get("set") or row.get("category") or (meta.get("category") if isinstance(meta, dict) else None)
    return str(name) if name else DEFAULT_SET


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def merge_reports(reports: list[AcceptReport]) -> AcceptReport:
    """One report pooling several runs of the same settings (counts and timings added): at batch 1 each prompt
    decodes alone, so per-set runs pooled equal one run over all the prompts."""
    from training.accept import AcceptReport

    first = reports[0]
    merged = AcceptReport(temperature=first.temperature, batch=first.batch, schedule=first.schedule, k=first.k)
    for r in reports:
        if r.attempted:
            if not merged.attempted:
                merged.attempted, merged.accepted = [0] * len(r.attempted), [0] * len(r.attempted)
            merged.attempted = [a + b for a, b in zip(merged.attempted, r.attempted, strict=True)]
            merged.accepted = [a + b for a, b in zip(merged.accepted, r.accepted, strict=True)]
        merged.rounds += r.rounds
        merged.tokens += r.tokens
        merged.prompts += r.prompts
        merged.identical = merged.identical and r.identical
        merged.speculative_s += r.speculative_s
        merged.baseline_s += r.baseline_s
        merged.baseline_tokens += r.baseline_tokens
        merged.round_steps += r.round_steps
        merged.baseline_steps += r.baseline_steps
    return merged


def record_measurements(folder: Path, per_set: Mapping[str, AcceptReport], pooled: list[AcceptReport], *,
                        label: SetLabel, prompts_file: Path, device: str) -> DraftExpectations:
    """Add `per_set` (greedy runs of one k) and the round costs of `pooled` (one per batch and k, where both
    sides were timed) to the draft folder's expectations; write and return them. A set or a (batch, k) measured
    before is replaced."""
    from training.export import read_config

    try:
        config = read_config(folder)
        current = read_expectations(folder)
    except (ExpectationsError, TrainingError) as exc:
        raise RecordError(f"cannot record into {folder}: {exc}") from None
    base = current or initial_expectations(config)
    sha = file_sha256(prompts_file)
    sets = dict(base.sets)
    for name, report in per_set.items():
        if report.temperature > 0:
            raise RecordError("--record keeps greedy acceptance only (the engines' counters watched later are "
                              "compared with it): run it at --temperature 0")
        sets[name] = SetAcceptance(label=label, prompts_file=prompts_file.name, prompts_sha256=sha,
                                   prompts=report.prompts, k=report.k, rounds=report.rounds, tokens=report.tokens,
                                   attempted=list(report.attempted), accepted=list(report.accepted), device=device)
    costs = {(c.batch, c.k): c for c in base.round_costs}
    for report in pooled:
        if report.round_cost:
            costs[(report.batch, report.k)] = RoundCost(
                batch=report.batch, k=report.k, device=device, round_cost_target_steps=round(report.round_cost, 4),
                break_even_accept_length=round(report.round_cost, 4), measured_speedup=round(report.speedup, 4))
    updated = base.model_copy(update={"sets": sets, "round_costs": [costs[key] for key in sorted(costs)]})
    write_file(folder / EXPECTATIONS_FILE, expectations_bytes(updated))
    return updated
