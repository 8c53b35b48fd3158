"""The approved set's manifest, as both doors build and export it.

`approved_manifest` builds it from the catalog (`GET /manifest`, and the export); `export_approved_manifest` adopts the
mirror's licences first, builds it and writes it inside the data directory (`POST /manifest/export` and
`datahunt manifest export`): the same approvals give the same file whichever door exported them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine

from core.settings import Settings
from core.types import Category
from curation.catalog import store
from curation.manifest import Manifest, TargetModel
from curation.manifest_plan import plan_manifest
from curation.mirror import read_mirror_index
from server.manifest_builder import build_manifest, make_budget, resolve_export_path, write_manifest
from server.usecases.licenses import adopt_in_session, mirror_license_index


@dataclass(frozen=True)
class CatalogManifest:
    """A manifest of the catalog's approved entries; `empty_catalog` when the catalog holds no entry at all, and
    a warning when the mirror's licences could not be read."""

    manifest: Manifest
    empty_catalog: bool
    warning: str | None = None


@dataclass(frozen=True)
class ExportedManifest(CatalogManifest):
    """An exported manifest and the file it was written to."""

    path: Path = Path()


def approved_manifest(
    *, engine: Engine, settings: Settings, target_model: str | None = None, tokenizer: str | None = None,
    budget_total: int | None = None, shares: Mapping[Category, float] | None = None, seed: int = 0,
    adopt: bool = False,
) -> CatalogManifest:
    """Return the manifest of the approved entries, the mirror's licences filling those the catalog lacks (and,
    with `adopt`, written onto the entries first). Raise ValueError naming a bad budget."""
    budget = make_budget(budget_total, dict(shares or {}), seed)
    target = TargetModel(model=target_model, tokenizer=tokenizer) if target_model else None
    index = mirror_license_index(settings=settings)
    with store.open_session(engine) as session:
        if adopt:
            adopt_in_session(session=session, index=index)
        approved = store.approved_entries(session)
        empty = not approved and not store.list_entries(session, limit=1)[1]
        manifest = build_manifest(approved, budget=budget, target=target, eval_entries=store.benchmark_entries(session),
                                  licenses=index.licenses)
    return CatalogManifest(manifest=manifest, empty_catalog=empty, warning=index.warning)


def eval_set_count(*, manifest: Manifest, settings: Settings) -> int:
    """How many eval sets `curate` decontaminates this manifest against: its own and those the configured
    mirror adds (`curation.manifest_plan`), the count `curate --check` and curate's report give."""
    entries = read_mirror_index(settings.mirror) if settings.mirror else []
    return len({p.eval_set.name for p in plan_manifest(manifest, settings.mirror, entries).eval_sets})


def export_approved_manifest(
    *, engine: Engine, settings: Settings, path: str | None = None, target_model: str | None = None,
    tokenizer: str | None = None, budget_total: int | None = None, shares: Mapping[Category, float] | None = None,
    seed: int = 0,
) -> ExportedManifest:
    """Adopt the mirror's licences, build the approved set's manifest and write it to `path` inside the data
    directory (default `manifests/manifest-<time>.json`); return it and where it went. Raise
    `ExportPathError` (or its `ExportPathConflictError`) for a path the data directory refuses, ValueError for
    a bad budget."""
    written = resolve_export_path(settings.resolved_data_dir, path)
    built = approved_manifest(engine=engine, settings=settings, target_model=target_model, tokenizer=tokenizer,
                             budget_total=budget_total, shares=shares, seed=seed, adopt=True)
    write_manifest(built.manifest, written, data_dir=settings.resolved_data_dir)
    return ExportedManifest(manifest=built.manifest, empty_catalog=built.empty_catalog, warning=built.warning,
                            path=written)
