"""Publishing a curated or regenerated set as a Hub dataset repository folder, and uploading it.

`build_folder` writes `data/train-NNNNN-of-NNNNN.parquet` shards and a dataset card (`README.md`, see
`curation.dataset_card`) from the artifacts alone: a curated folder (`data/shard-*.parquet`, `report.json`,
`manifest.json`) or a regeneration run (`regenerated.jsonl`, `run.json`, `status.json`, `errors.jsonl`, and
the curated set named by `run.json`'s input). `upload` creates the repository (private unless asked) and
uploads the folder through `huggingface_hub`. The set is read through its one reader (`core.curated_set`,
`core.regenerated_set`), so an unfinished or changed set is refused. The folder is built beside its place and
renamed in whole, under a lock beside it (`.<out>.publish.lock`: one publish per `--out`); the next publish
removes what a killed one left (`.tmp-<out>-<digest>-*`). Publish never deletes a file it did not record
writing (`.publish.json`) nor a folder holding none of them, and never the set it publishes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import pyarrow as pa
import pyarrow.parquet as pq

from core.completion import ArtifactError
from core.curated_set import curated_folder_of, is_curated_set, read_curated, read_state
from core.jsonl import read_jsonl
from core.regenerated_set import (
    ERRORS_FILE,
    JOURNAL_FILE,
    STATUS_FILE,
    RunRecord,
    read_regenerated,
    read_run_record,
)
from core.samples import Message
from curation.atomic_files import hold_folder, read_own, staged_file
from curation.dataset_card import (
    LICENSE_FILE,
    CardFacts,
    CardSource,
    RegenCounts,
    render_card,
    render_license,
    target_identity,
)
from curation.errors import CurationError
from curation.licenses import risky_sources
from curation.shards import SCHEMA, SHARD_ROWS, atomic_write_bytes, shard_row

logger = logging.getLogger(__name__)
PUBLISH_RECORD = ".publish.json"  # the files a publish wrote: the only ones a later publish may replace

_TURNS = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
REGENERATED_SCHEMA = pa.schema([
    ("id", pa.string()),
    ("category", pa.string()),
    ("conversations", _TURNS),
    ("regenerated", pa.bool_()),
    ("model", pa.string()),
    ("finish_reason", pa.string()),
    ("completion_tokens", pa.int64()),
    ("source_dataset", pa.string()),
    ("source_row", pa.int64()),
    ("meta", pa.string()),  # the run's whole meta record, as JSON
])


class PublishedRow(TypedDict):
    """One row of a published regenerated set: a row of `REGENERATED_SCHEMA`."""

    id: str
    category: str | None
    conversations: list[Message]
    regenerated: bool
    model: str | None
    finish_reason: str | None
    completion_tokens: int | None
    source_dataset: str | None
    source_row: int | None
    meta: str


class PublishError(CurationError, ValueError):
    """The folder is not a curated set or a regeneration run, or lacks what a card must state."""


class LicenseRiskError(PublishError):
    """A source's licence is non-commercial, restricted or unknown, and the publisher did not acknowledge it."""


@dataclass
class PublishedFolder:
    """A folder laid out as a Hub dataset repository."""

    folder: Path
    kind: str
    rows: int
    shards: list[Path]
    license_warnings: list[str] = field(default_factory=list)  # sources published though their licence is a risk


def _json(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else {}


def _write_shards(table: pa.Table, data_dir: Path, root: Path) -> list[Path]:
    count = max(1, -(-table.num_rows // SHARD_ROWS))
    paths = []
    for number in range(count):
        path = data_dir / f"train-{number:05d}-of-{count:05d}.parquet"
        with staged_file(path, root=root) as handle:
            pq.write_table(table.slice(number * SHARD_ROWS, SHARD_ROWS), handle)
        paths.append(path)
    return paths


def _recorded(out: Path) -> set[str] | None:
    """Return the files a previous publish recorded writing in `out`, or None when `out` is not one of ours."""
    raw = read_own(out / PUBLISH_RECORD, root=out)
    try:
        files = json.loads(raw)["files"] if raw is not None else None
    except (ValueError, KeyError, TypeError):
        return None
    return {str(f) for f in files} if isinstance(files, list) else None


def _check_overlap(src: Path, out: Path) -> None:
    """Refuse an `out` that is, holds or lies inside `src` (before anything, its lock included, is written)."""
    source, target = src.resolve(), out.resolve()
    if target == source or source in target.parents or target in source.parents:
        raise PublishError(f"--out {out} overlaps the set {src}; publish writes a folder of its own beside it")


def _check_out(src: Path, out: Path) -> None:
    """Refuse an `out` that overlaps `src`, or a non-empty folder this step did not write whole."""
    _check_overlap(src, out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise PublishError(f"--out {out} is not a folder")
    if not out.is_dir() or not any(out.iterdir()):
        return
    recorded = _recorded(out)
    present = {p.relative_to(out).as_posix() for p in out.rglob("*") if not p.is_dir() or p.is_symlink()}
    # a folder is ours only when it holds a recorded file (`data/`): an empty one is the user's, never removed
    folders = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_dir() and not p.is_symlink()}
    ours = {parent.as_posix() for name in recorded or () for parent in Path(name).parents if parent != Path(".")}
    if recorded is None or not present <= recorded | {PUBLISH_RECORD} or not folders <= ours:
        raise PublishError(f"--out {out} is not empty and holds files publish did not write; "
                           "name a new folder (publish never deletes what it did not write)")


def _sources(manifest: dict[str, Any], rows: Counter[tuple[str, str | None]]) -> list[CardSource]:
    """The manifest's sources that gave rows, with their row counts (`rows` is keyed by (dataset, config))."""
    return [
        CardSource(hub_id=s["hub_id"], config=s.get("config"), revision=s.get("revision"), license=s.get("license"),
                   category=s.get("category"), rows=rows[(s["hub_id"], s.get("config"))])
        for s in manifest.get("sources", [])
        if rows[(s["hub_id"], s.get("config"))]
    ]


def _fill_licenses(sources: list[CardSource], known: Mapping[str, str]) -> None:
    """Give each source the licence `known` (the mirror index) states for it when its manifest stated none."""
    for source in sources:
        if not source.get("license") and known.get(source["hub_id"]):
            source["license"] = known[source["hub_id"]]


def check_licenses(sources: Sequence[CardSource], *, accepted: bool) -> list[str]:
    """Return one warning line per source whose licence is non-commercial, restricted or unknown; raise
    LicenseRiskError naming them all when there are any and `accepted` is False."""
    words = {"non_commercial": "non-commercial", "restricted": "restricted", "unknown": "unknown"}
    lines = [f"{hub_id}: license {lic or 'not stated'} ({words[risk]})" for hub_id, lic, risk in risky_sources(sources)]
    if lines and not accepted:
        raise LicenseRiskError(
            f"{len(lines)} source(s) are not plainly licensed for commercial training: " + "; ".join(lines)
            + "; check them, then publish again with --accept-license-risk")
    return lines


def _origin(source: Any) -> tuple[str, str | None] | None:
    if not isinstance(source, dict) or not source.get("dataset"):
        return None
    return str(source["dataset"]), source.get("config")


def _curated(src: Path) -> tuple[pa.Table, CardFacts]:
    try:  # the set's one reader: a set whose completion marker is missing or disagrees is refused
        samples = list(read_curated(src))
    except ArtifactError as exc:
        raise PublishError(str(exc)) from None
    table = pa.Table.from_pylist([shard_row(s) for s in samples], schema=SCHEMA)
    manifest, report = _json(src / "manifest.json"), _json(src / "report.json")
    if not manifest:
        raise PublishError(f"{src} has no manifest.json: the card could not name its sources")
    datasets = Counter(o for o in map(_origin, table.column("source").to_pylist()) if o)
    facts = CardFacts(
        repo_id="", kind="curated", rows=table.num_rows, categories=dict(Counter(table.column("category").to_pylist())),
        sources=_sources(manifest, datasets), version="", report=report,
        target_model=(manifest.get("target") or {}).get("model"),
        target=target_identity((manifest.get("target") or {}).get("model")),
    )
    return table, facts


def _regen_row(record: dict[str, Any]) -> PublishedRow:
    meta = record.get("meta") or {}
    source = meta.get("source") or {}
    return PublishedRow(
        id=str(record["id"]),
        category=meta.get("category"),
        conversations=[{"role": t["role"], "content": t["content"]} for t in record["conversations"]],
        regenerated=bool(meta.get("regenerated")),
        model=meta.get("model"),
        finish_reason=meta.get("finish_reason"),
        completion_tokens=meta.get("completion_tokens"),
        source_dataset=source.get("dataset") if isinstance(source, dict) else None,
        source_row=source.get("row") if isinstance(source, dict) else None,
        meta=json.dumps(meta, ensure_ascii=False, sort_keys=True),
    )


def _regenerated(src: Path) -> tuple[pa.Table, CardFacts]:
    try:  # the run's one reader: a run without its completion marker (killed, failed, running) is refused
        rows = [_regen_row(sample.model_dump()) for sample in read_regenerated(src)]
    except ArtifactError as exc:
        raise PublishError(str(exc)) from None
    run, status = read_run_record(src) or RunRecord(), _json(src / STATUS_FILE)
    curated = Path(run.input) if run.input else None
    curated_dir = curated if curated is None or curated.is_dir() else curated.parent
    if curated is not None and curated_folder_of(curated) is not None:
        try:  # the card names the curated set's sources: a set rewritten since (or torn) would name the wrong ones
            read_state(curated_folder_of(curated) or curated)
        except ArtifactError as exc:
            raise PublishError(f"the curated set the run read cannot describe it: {exc}") from None
    manifest = _json(curated_dir / "manifest.json") if curated_dir else {}
    quality = (status.get("quality") or {}).values()
    failed = len(read_jsonl(src / ERRORS_FILE)) if (src / ERRORS_FILE).is_file() else 0
    datasets = Counter(o for o in map(_origin, (json.loads(r["meta"]).get("source") for r in rows)) if o)
    facts = CardFacts(
        repo_id="", kind="regenerated", rows=len(rows),
        categories=dict(Counter(r["category"] or "unknown" for r in rows)),
        sources=_sources(manifest, datasets), version="",
        report=_json(curated_dir / "report.json") if curated_dir else {},
        target_model=run.model, target=target_identity(run.model),
        sampling=run.sampling, reasoning=run.reasoning,
        regen=RegenCounts(regenerated=sum(r["regenerated"] for r in rows),
                          passthrough=sum(not r["regenerated"] for r in rows),
                          failed=failed, cut=sum(q.get("cut_at_limit", 0) for q in quality),
                          repetitive=sum(q.get("repetitive", 0) for q in quality)),
    )
    return pa.Table.from_pylist(rows, schema=REGENERATED_SCHEMA), facts


def set_kind(src: Path) -> str:
    """Return `curated` or `regenerated` for a set folder; raise PublishError for anything else."""
    if (src / JOURNAL_FILE).is_file():
        return "regenerated"
    if is_curated_set(src):
        return "curated"
    raise PublishError(f"{src} is neither a curated set (data/shard-*.parquet) nor a regeneration run "
                       "(regenerated.jsonl)")


def build_folder(
    src: Path, out: Path, *, repo_id: str, version: str, licenses: Mapping[str, str] | None = None,
    accept_license_risk: bool = False, pins: Mapping[str, str] | None = None,
) -> PublishedFolder:
    """Write the Hub repository folder for the set in `src` into `out`; return what was written.

    Sources the manifest gives no licence take the one `licenses` (the mirror index's) states, and those with no
    revision the commit `pins` (the mirror index's) records for their files. When any source
    is non-commercial, restricted or unknown, nothing is written and LicenseRiskError names them, unless
    `accept_license_risk`; the card names them either way.

    The folder is built whole in a fresh temporary folder beside `out` and renamed into place, so a kill
    leaves the old folder or the new one. An existing `out` is replaced only when it is empty or holds nothing
    but the files a previous publish recorded writing (`.publish.json`); anything else is refused."""
    out = Path(out)
    kind = set_kind(src)
    _check_overlap(src, out)
    with hold_folder(out.parent, lock_file=out.parent / f".{out.name}.publish.lock"):  # one publish per --out
        remove_leftovers(out)
        table, facts = _regenerated(src) if kind == "regenerated" else _curated(src)
        if table.num_rows == 0:
            raise PublishError(f"{src} holds no rows to publish")
        _check_out(src, out)
        _fill_licenses(facts.sources, licenses or {})
        for source in facts.sources:
            if not source.get("revision") and (pins or {}).get(source["hub_id"]):
                source["pin"] = (pins or {})[source["hub_id"]]
        warnings = check_licenses(facts.sources, accepted=accept_license_risk)
        facts.repo_id, facts.version = repo_id, version
        staging = _new_folder(out, "")
        try:
            shards = _write_shards(table, staging / "data", staging)
            atomic_write_bytes(staging / "README.md", render_card(facts).encode("utf-8"), root=staging)
            licence = render_license(facts)  # the card's `license_link` when the sources' licences differ
            if licence is not None:
                atomic_write_bytes(staging / LICENSE_FILE, licence.encode("utf-8"), root=staging)
            files = sorted([*(p.relative_to(staging).as_posix() for p in shards), "README.md",
                            *([LICENSE_FILE] if licence is not None else [])])
            atomic_write_bytes(staging / PUBLISH_RECORD, (json.dumps({"files": files}) + "\n").encode(), root=staging)
            _swap_in(staging, out)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    shards = [out / p.relative_to(staging) for p in shards]
    logger.info("wrote %d rows in %d shard(s) and a dataset card to %s", table.num_rows, len(shards), out)
    return PublishedFolder(out, kind, table.num_rows, shards, warnings)


def _prefix(out: Path) -> str:
    """The start of the name of every temporary folder a publish to `out` makes beside it: `out`'s name (cut
    short) and a digest of the whole name, so the leftovers of one `--out` are never taken for another's."""
    return f".tmp-{out.name[:40]}-{hashlib.sha256(out.name.encode()).hexdigest()[:12]}-"


def _new_folder(out: Path, kind: str) -> Path:
    """Make a fresh temporary folder beside `out` (`kind`: "" to build in, "old-" to move the old one into),
    with the mode the umask gives a new folder (as `out` itself would have), not mkdtemp's 0700."""
    out.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(8):
        path = out.parent / f"{_prefix(out)}{kind}{secrets.token_hex(4)}"
        try:
            path.mkdir(0o777)
            return path
        except FileExistsError:
            continue
    raise PublishError(f"could not make a temporary folder beside {out}")


def remove_leftovers(out: Path) -> list[Path]:
    """Remove the temporary folders a killed publish to `out` left beside it; return them. Called with the
    publish lock held, so no live publish's folder is among them."""
    pattern = re.compile(re.escape(_prefix(out)) + r"(old-)?[0-9a-f]{8}")
    found = [p for p in out.parent.glob(".tmp-*") if pattern.fullmatch(p.name) and p.is_dir() and not p.is_symlink()]
    for path in found:
        logger.warning("removing %s, left by a publish that was killed", path)
        shutil.rmtree(path)  # rmtree never follows a link inside it
    return found


def _swap_in(staging: Path, out: Path) -> None:
    """Rename the built folder to `out`; an old `out` (checked by `_check_out`) is moved aside, then removed."""
    if not out.exists():
        os.rename(staging, out)
        return
    old = _new_folder(out, "old-")
    os.rename(out, old / "folder")
    os.rename(staging, out)
    shutil.rmtree(old)  # only what `_check_out` found recorded as written by publish (rmtree never follows links)


def upload(folder: Path, repo_id: str, *, private: bool = True, token: str | None = None) -> str:
    """Create the dataset repository (private unless `private=False`) and upload `folder`; return its URL."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    api.upload_folder(repo_id=repo_id, folder_path=folder, repo_type="dataset", ignore_patterns=[PUBLISH_RECORD],
                      commit_message="Publish a datahunt set (data shards and dataset card)")
    return str(url)
