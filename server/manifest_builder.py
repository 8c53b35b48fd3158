"""Build the manifest from the approved catalog entries and write it inside the data directory.

One builder serves `GET /manifest`, `POST /manifest/export` and `datahunt manifest export`, so the three
always agree. Each approved entry becomes one `Source` (pinned revision, config, split, field mapping,
format, license: the catalog's, else the mirror index's) filed under its best category; every entry the
verifier recognised as an evaluation benchmark (and no reviewer rejected) becomes an `EvalSet` on its test
split, so curation decontaminates against it instead of training on it; the budget and target come from the
caller. Exports are confined to `settings.resolved_data_dir`: absolute paths elsewhere, `..` segments and
symlinks that lead out of it are refused with `ExportPathError`, and the file is written by
`server.confined_file`, which never follows a link planted after that check (at a folder or at its temporary
name).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path, PurePath

from pydantic import ValidationError

from core.types import Category, UnknownCategoryError, parse_category
from curation.catalog.models import CatalogEntry
from curation.licenses import license_from_metadata
from curation.manifest import Budget, EvalSet, Manifest, Source, TargetModel, dump_manifest
from server.confined_file import ConfinedPathError, check_name, write_confined

logger = logging.getLogger(__name__)

MANIFEST_FOLDER = "manifests"


class ExportPathError(ConfinedPathError):
    """The requested export path is outside the data directory or otherwise unusable."""


class ExportPathConflictError(ExportPathError):
    """A well-formed export path that the data directory's current contents refuse (a folder there, a file
    where a folder should be, a link leading out)."""


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


def source_for(entry: CatalogEntry, licenses: Mapping[str, str] | None = None) -> Source | None:
    """Return the manifest Source pinned from one approved entry, or None when it has no known category.

    Its licence is the entry's, else what its recorded metadata states (Hub card data, `license:` tags), else
    what `licenses` (the mirror index) states for it."""
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
        license=entry.license or license_from_metadata(entry.dataset_metadata) or (licenses or {}).get(entry.hub_id),
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
    licenses: Mapping[str, str] | None = None,
) -> Manifest:
    """Return the manifest of `entries` (the approved ones), sorted by category then Hub id, with
    `eval_entries` (the benchmarks, `store.benchmark_entries`) as its eval sets; `licenses` (the mirror index's)
    fills the licence of a source the catalog has none for."""
    sources: list[Source] = []
    notes: list[str] = []
    for entry in entries:
        source = source_for(entry, licenses)
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
        if sep:
            parse_category(name)  # an unknown name gets its own message, with a suggestion
        try:
            if not sep:
                raise ValueError
            fraction = float(value)
            if not 0.0 <= fraction <= 1.0:  # also refuses nan
                raise ValueError
            shares[parse_category(name)] = fraction
        except (UnknownCategoryError, ValueError):
            raise ValueError(
                f"budget share {item!r} must read category=fraction with a fraction in [0, 1], e.g. math=0.2"
            ) from None
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
    try:
        root = data_dir.resolve()
    except (RuntimeError, OSError) as exc:  # the data directory itself is a link loop
        raise ExportPathConflictError(f"the data directory {data_dir} cannot be resolved: {exc}") from None
    text = (requested or "").strip() or default_export_name()
    if "\x00" in text:
        raise ExportPathError("export path contains a NUL byte")
    pure = PurePath(text)
    if ".." in pure.parts:
        raise ExportPathError(f"export path {text!r} may not contain '..'")
    if pure.suffix != ".json":
        raise ExportPathError(f"export path {text!r} must end in .json")
    try:
        for part in pure.parts[1:] if pure.is_absolute() else pure.parts:
            check_name(part)
    except ConfinedPathError as exc:
        raise ExportPathError(f"export path {text[:80]!r}: {exc}") from None
    candidate = Path(text) if pure.is_absolute() else root / pure
    try:
        resolved = candidate.resolve()  # follows symlinks, so a link pointing outside is caught below
    except (RuntimeError, OSError) as exc:  # Python 3.11 raises RuntimeError for a link loop, later ones OSError
        raise ExportPathConflictError(f"export path {text!r} cannot be resolved: {exc}") from None
    if not resolved.is_relative_to(root) or resolved == root:
        error = ExportPathConflictError if candidate.absolute().is_relative_to(root) else ExportPathError
        raise error(f"export path {text!r} is outside the data directory {root}")  # a link inside leads out
    if resolved.is_dir():
        raise ExportPathConflictError(f"export path {text!r} is a directory")
    for parent in resolved.relative_to(root).parents:
        if (root / parent).exists() and not (root / parent).is_dir():
            raise ExportPathConflictError(f"export path {text!r}: {parent} is a file, not a folder")
    return resolved


def write_manifest(manifest: Manifest, path: Path, *, data_dir: Path) -> Path:
    """Write `manifest` to `path` (resolved inside `data_dir`) atomically, following no link; return the path.

    Raise ExportPathError when the file system refuses it there (a folder turned into a link or a file since
    the path was checked, a name it does not accept)."""
    root = data_dir.resolve()
    try:
        write_confined(root, path.relative_to(root), dump_manifest(manifest))
    except ConfinedPathError as exc:
        raise ExportPathConflictError(f"export path {str(path.relative_to(root))[:80]!r}: {exc}") from None
    logger.info("manifest with %d sources written to %s", len(manifest.sources), path)
    return path
