"""Build the manifest from the approved catalog entries and write it inside the data directory.

One builder serves `GET /manifest`, `POST /manifest/export` and `datahunt manifest export`, so the three
always agree. Each approved entry becomes one `Source` (pinned revision, config, split, field mapping,
format, license) filed under its best category; every entry the verifier recognised as an evaluation
benchmark (and no reviewer rejected) becomes an `EvalSet` on its test split, so curation decontaminates
against it instead of training on it; the budget and target come from the caller. Exports are
confined to `settings.resolved_data_dir`: absolute paths elsewhere, `..` segments and symlinks that lead
out of it are refused with `ExportPathError`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path, PurePath

from pydantic import ValidationError

from core.types import Category, UnknownCategoryError, parse_category
from curation.catalog.models import CatalogEntry
from curation.manifest import Budget, EvalSet, Manifest, Source, TargetModel, dump_manifest

logger = logging.getLogger(__name__)

MANIFEST_FOLDER = "manifests"


class ExportPathError(ValueError):
    """The requested export path is outside the data directory or otherwise unusable."""


def best_category(entry: CatalogEntry) -> Category | None:
    """Return the entry's most relevant known category, or None when it has none of the ten."""
    known: list[Category] = []
    for name in entry.categories:
        try:
            known.append(parse_category(name))
        except UnknownCategoryError:
            continue
    if not known:
        return None
    return max(known, key=lambda c: (float(entry.relevance.get(c.value, 0.0)), -known.index(c)))


def source_for(entry: CatalogEntry) -> Source | None:
    """Return the manifest Source pinned from one approved entry, or None when it has no known category."""
    category = best_category(entry)
    if category is None:
        return None
    revision = entry.revision or entry.dataset_metadata.get("sha")
    fmt = entry.format_guess if entry.format_guess and entry.format_guess != "unknown" else None
    return Source(
        hub_id=entry.hub_id,
        revision=str(revision) if revision else None,
        config=entry.config,
        split=entry.split or "train",
        format=fmt,
        field_mapping={str(k): str(v) for k, v in entry.field_mapping.items()},
        category=category,
        license=entry.license,
    )


def eval_set_for(entry: CatalogEntry) -> EvalSet:
    """Return the decontamination set of a benchmark entry: its test split at the pinned revision."""
    revision = entry.revision or entry.dataset_metadata.get("sha")
    return EvalSet(name=entry.hub_id, hub_id=entry.hub_id, revision=str(revision) if revision else None,
                   config=entry.config, split="test")


def build_manifest(
    entries: Iterable[CatalogEntry],
    *,
    budget: Budget | None = None,
    target: TargetModel | None = None,
    eval_entries: Iterable[CatalogEntry] = (),
) -> Manifest:
    """Return the manifest of `entries` (the approved ones), sorted by category then Hub id, with
    `eval_entries` (the benchmarks, `store.benchmark_entries`) as its eval sets."""
    sources: list[Source] = []
    notes: list[str] = []
    for entry in entries:
        source = source_for(entry)
        if source is None:
            notes.append(f"skipped {entry.hub_id}: none of its categories {entry.categories} is known")
            logger.warning("manifest: skipped %s (no known category)", entry.hub_id)
            continue
        sources.append(source)
    sources.sort(key=lambda s: (s.category.value, s.hub_id, s.config or ""))
    eval_sets = [eval_set_for(entry) for entry in sorted(eval_entries, key=lambda e: e.hub_id)]
    return Manifest(sources=sources, eval_sets=eval_sets, budget=budget or Budget(), target=target, notes=notes)


def parse_shares(items: Iterable[str]) -> dict[Category, float]:
    """Return `{category: fraction}` from `category=fraction` strings; raise ValueError naming a bad one."""
    shares: dict[Category, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            fraction = float(value)
            if not 0.0 <= fraction <= 1.0:  # also refuses nan
                raise ValueError
            shares[parse_category(name)] = fraction
        except (UnknownCategoryError, ValueError):
            raise ValueError(f"budget share {item!r} must read category=fraction with a fraction in [0, 1], e.g. math=0.2") from None
    return shares


def make_budget(total: int | None, shares: dict[Category, float], seed: int = 0) -> Budget:
    """Return a validated Budget; raise ValueError with a one-line reason (shares over 1, negative …)."""
    try:
        return Budget(total=total, shares=shares, seed=seed)
    except ValidationError as exc:
        raise ValueError("; ".join(e["msg"] for e in exc.errors())) from None


def default_export_name(now: datetime | None = None) -> str:
    """Return a fresh file name under the manifests folder, stamped with the UTC time."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{MANIFEST_FOLDER}/manifest-{stamp}.json"


def resolve_export_path(data_dir: Path, requested: str | None) -> Path:
    """Return the absolute file path to write, confined to `data_dir`; raise ExportPathError otherwise."""
    root = data_dir.resolve()
    text = (requested or "").strip() or default_export_name()
    if "\x00" in text:
        raise ExportPathError("export path contains a NUL byte")
    pure = PurePath(text)
    if ".." in pure.parts:
        raise ExportPathError(f"export path {text!r} may not contain '..'")
    if pure.suffix != ".json":
        raise ExportPathError(f"export path {text!r} must end in .json")
    candidate = Path(text) if pure.is_absolute() else root / pure
    resolved = candidate.resolve()  # follows symlinks, so a link pointing outside is caught below
    if not resolved.is_relative_to(root):
        raise ExportPathError(f"export path {text!r} is outside the data directory {root}")
    if resolved.exists() and resolved.is_dir():
        raise ExportPathError(f"export path {text!r} is a directory")
    return resolved


def write_manifest(manifest: Manifest, path: Path) -> Path:
    """Write `manifest` to `path` atomically (temp file then rename) and return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(dump_manifest(manifest), encoding="utf-8")
    tmp.replace(path)
    logger.info("manifest with %d sources written to %s", len(manifest.sources), path)
    return path
