"""The manifest resolved once per run: every source and eval set with the data files it will be read from.

`plan_manifest` asks the mirror once which files stand in for each entry (the manifest's own `data_files`
win) and adds the mirror's eval entries the manifest does not name; every later step (staging, the state
hash, the eval index, `curate --check`) takes these plans instead of resolving the files again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from curation.manifest import EvalSet, Manifest, Source
from curation.mirror import MirrorEntry, mirror_eval_sets, mirror_files


def resolve_files(spec: Source | EvalSet, mirror: Path | None, mirror_entries: list[MirrorEntry]) -> list[str]:
    """Return the data files to read for `spec`: the manifest's own, else the mirror's entry for its dataset."""
    if spec.data_files or spec.hub_id is None or mirror is None:
        return list(spec.data_files)
    return mirror_files(mirror_entries, spec.hub_id, spec.config, spec.split)


@dataclass(frozen=True)
class SourcePlan:
    """One manifest source, its position in the manifest, and the files it resolves to ([]: read from the Hub)."""

    source: Source
    order: int
    files: list[str]


@dataclass(frozen=True)
class EvalPlan:
    """One eval set to decontaminate against and the files it resolves to."""

    eval_set: EvalSet
    files: list[str]


@dataclass(frozen=True)
class ManifestPlan:
    """The run's sources and eval sets, each resolved once."""

    sources: list[SourcePlan]
    eval_sets: list[EvalPlan]


def plan_manifest(manifest: Manifest, mirror: Path | None, mirror_entries: list[MirrorEntry]) -> ManifestPlan:
    """Return the manifest's load plans: its sources in order, its eval sets plus the mirror's eval entries
    not named."""
    named = {e.name for e in manifest.eval_sets}
    extra = mirror_eval_sets(mirror, mirror_entries) if mirror and mirror_entries else []
    eval_sets = [*manifest.eval_sets, *(e for e in extra if e.name not in named)]
    return ManifestPlan(
        sources=[
            SourcePlan(s, order, resolve_files(s, mirror, mirror_entries)) for order, s in enumerate(manifest.sources)
        ],
        eval_sets=[EvalPlan(e, resolve_files(e, mirror, mirror_entries)) for e in eval_sets],
    )
