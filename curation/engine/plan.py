"""The plan of one engine run: which shard each stage task owns, how many hash partitions, and where files go.

A source of S bytes is read by `shards_for(S)` stage tasks; task k of K keeps the rows whose index is k mod K,
so row indices (and therefore ids) are the same as in the in-process run. Exact-dedup and LSH-band records
are hash-partitioned into `partitions` files per stage task, sized so one partition's records stay well
under a worker's memory whatever the input size. Every path of the run lives under
`OUT/engine/<run key>/`, the key hashing everything the result depends on, so a rerun of the same command
finds its finished tasks (datatrove's completion markers) and a changed input starts afresh.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from curation.loading import SourceLoadError
from curation.local_sources import local_files
from curation.manifest import Manifest, Source
from curation.manifest_plan import ManifestPlan, SourcePlan
from curation.staging import LoadContext

SHARD_BYTES = 24 * 2**20
MAX_SHARDS = 64
PARTITION_BYTES = 8 * 2**20
MAX_PARTITIONS = 512


def shards_for(size: int) -> int:
    """Return how many stage tasks read a source of `size` bytes."""
    return max(1, min(MAX_SHARDS, math.ceil(size / SHARD_BYTES)))


def partitions_for(total_size: int) -> int:
    """Return the number of hash partitions for an input of `total_size` bytes."""
    return max(2, min(MAX_PARTITIONS, math.ceil(total_size / PARTITION_BYTES)))


@dataclass(frozen=True)
class Shard:
    """One stage task's share of a source: rows with index ≡ `part` (mod `parts`)."""

    order: int
    part: int
    parts: int

    @property
    def name(self) -> str:
        """Return the file stem of this shard's outputs."""
        return f"{self.order:05d}-{self.part:03d}"


@dataclass
class EnginePlan:
    """Everything a task needs, pickled to the workers: manifest and its load plans, load context, seed, layout."""

    manifest: Manifest
    load: ManifestPlan
    ctx: LoadContext
    seed: int
    jsonl: bool
    work: Path
    shards: list[Shard]
    partitions: int

    def source(self, shard: Shard) -> Source:
        """Return the manifest source a shard reads."""
        return self.manifest.sources[shard.order]

    def files(self, shard: Shard) -> list[str]:
        """Return the resolved data files of the source a shard reads."""
        return self.load.sources[shard.order].files

    def shards_of(self, order: int) -> list[Shard]:
        """Return the shards of one source, in part order."""
        return [s for s in self.shards if s.order == order]

    def path(self, kind: str, name: str) -> Path:
        """Return `work/kind/name`, creating the folder."""
        folder = self.work / kind
        folder.mkdir(parents=True, exist_ok=True)
        return folder / name

    def partition_dir(self, kind: str, partition: int) -> Path:
        """Return the folder of one hash partition of `kind` (exact or bands)."""
        folder = self.work / kind / f"{partition:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder


def source_size(planned: SourcePlan, ctx: LoadContext) -> int:
    """Return the bytes of a source's local files (0 when it is read from the Hub or its files are missing)."""
    if planned.source.local:
        try:
            return sum(f.stat().st_size for f in local_files(ctx.local_root, str(planned.source.path)))
        except SourceLoadError:
            return 0
    if ctx.mirror is None:
        return 0
    return sum((ctx.mirror / n).stat().st_size for n in planned.files if (ctx.mirror / n).is_file())
