"""`curate --check`: where every source and eval set of a manifest would be read from, and how big it is.

Nothing is downloaded or written. A source resolves to the local mirror (its files and their sizes), to the
Hub (the repository's data files and their sizes from the Hub API, asked only when the Hub answers the
run's probe), to a Hub-like local folder, or to nothing, with the same reason the run would give.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from curation.loading import SourceLoadError
from curation.manifest import EvalSet, Manifest, Source
from curation.pipeline import plan_run
from curation.staging import LoadContext

logger = logging.getLogger(__name__)

DATA_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv", ".jsonl.gz", ".json.gz", ".csv.gz", ".arrow", ".traj")
HubSize = Callable[[str, str | None], tuple[int, int]]  # (hub id, revision) -> (data files, bytes)


@dataclass(frozen=True)
class Resolution:
    """Where one manifest source or eval set resolves: `mirror`, `hub`, `local` (a Hub-like folder), `file` (a
    target-written or traffic source beside the manifest) or `missing`."""

    name: str
    kind: str  # "source" or "eval"
    where: str
    files: int = 0
    size_bytes: int | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        """True when the run would find data for it."""
        return self.where != "missing"


def hub_data_size(hub_id: str, revision: str | None, *, token: str | None = None) -> tuple[int, int]:
    """Return (data files, total bytes) of a Hub dataset repository at `revision`, from its file metadata."""
    from huggingface_hub import HfApi

    info = HfApi(token=token).dataset_info(hub_id, revision=revision, files_metadata=True, timeout=10)
    data = [s for s in info.siblings or [] if s.rfilename.lower().endswith(DATA_SUFFIXES)]
    return len(data), sum(s.size or 0 for s in data)


def _resolve(
    spec: Source | EvalSet, files: list[str], kind: str, name: str, ctx: LoadContext, hub_size: HubSize
) -> Resolution:
    try:
        plan = ctx.plan_for(spec, files=files)
    except SourceLoadError as exc:
        return Resolution(name, kind, "missing", detail=str(exc))
    if plan.files:
        where = "file" if isinstance(spec, Source) and spec.local else "mirror"
        return Resolution(name, kind, where, len(plan.files), sum(f.stat().st_size for f in plan.files))
    if ctx.hub_root is not None:
        return Resolution(name, kind, "local", detail=str(plan.hub_path))
    try:
        count, size = hub_size(str(plan.hub_path), plan.revision)
    except Exception as exc:  # huggingface_hub raises its own tree plus httpx errors: each becomes the reason
        return Resolution(name, kind, "missing", detail=f"Hub: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    if not count:
        return Resolution(name, kind, "missing", detail="the Hub repository holds no data files")
    return Resolution(name, kind, "hub", count, size)


def check_manifest(manifest: Manifest, ctx: LoadContext, hub_size: HubSize | None = None) -> list[Resolution]:
    """Return where each source, then each eval set (the mirror's too), would be read from."""
    size = hub_size or (lambda hub_id, revision: hub_data_size(hub_id, revision, token=ctx.token))
    planned = plan_run(manifest, ctx)
    found = [_resolve(p.source, p.files, "source", p.source.key, ctx, size) for p in planned.sources]
    found += [_resolve(e.eval_set, e.files, "eval", e.eval_set.name, ctx, size) for e in planned.eval_sets]
    return found
