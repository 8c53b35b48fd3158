"""The manifest: the versioned JSON contract between review (catalog) and curation.

A manifest lists the approved training sources with everything needed to load exactly the same rows again
(pinned revision, config, split, files for a local mirror, field mapping, format), the eval sets to
decontaminate against, the per-category budget, and the target model/tokenizer the data is meant for.
Unknown fields are rejected so a typo never silently changes a run. Besides datasets (`kind: "dataset"`, the
default), a source may be a local file the team has: prompts the target wrote itself (`kind: "target-written"`,
`datahunt write-prompts`) or the team's own chat traffic (`kind: "traffic"`, scrubbed of PII on load); its
`path` is relative to the manifest file's folder and must stay inside it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from core.types import Category, parse_hub_id
from curation.cleaning import CleaningConfig
from curation.errors import CurationError

SCHEMA_VERSION: Literal[1] = 1
SourceKind = Literal["dataset", "target-written", "traffic"]
LOCAL_KINDS: frozenset[str] = frozenset({"target-written", "traffic"})
LOCAL_FORMATS = {"target-written": "openai_messages", "traffic": "traffic_request"}


class ManifestError(CurationError, ValueError):
    """A manifest file is missing, not JSON, or does not match the schema; the message says where."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TargetModel(_Strict):
    """The model the curated data is for (its tokenizer renders and counts tokens)."""

    model: str = Field(description="Hub id or local path of the target model.")
    tokenizer: str | None = Field(default=None, description="Tokenizer id/path; defaults to the model's.")
    chat_template: str | None = Field(default=None, description="Override of the tokenizer's chat template.")


class MeasuredCategoryValue(_Strict):
    """A category's measured value as `curate --mix measured` read it (`core.measured_value`): AL per 10K rows
    and its 95% interval, and the value run that measured it."""

    per_10k: float
    low: float | None = None
    high: float | None = None
    run: str = ""


class Budget(_Strict):
    """How many samples to keep overall and how to share them across categories."""

    total: int | None = Field(default=None, gt=0, description="Samples overall; None keeps every row that passes.")
    shares: dict[Category, float] = Field(default_factory=dict, description="Category → fraction of `total`.")
    seed: int = 0
    measured: dict[Category, MeasuredCategoryValue] = Field(
        default_factory=dict, description="`curate --mix measured`: the categories' measured values; the quotas "
        "move from the default toward the clearly better ones (`curation.measured_mix`).")

    @field_validator("shares")
    @classmethod
    def _shares_are_fractions(cls, shares: dict[Category, float]) -> dict[Category, float]:
        if any(v < 0 for v in shares.values()):
            raise ValueError("budget shares must be non-negative")
        if shares and sum(shares.values()) > 1.0 + 1e-6:
            raise ValueError(f"budget shares sum to {sum(shares.values()):.3f} > 1")
        return shares


class Source(_Strict):
    """One dataset (or one config/file set of it) to load, or one local file of target-written prompts or traffic."""

    kind: SourceKind = Field(default="dataset", description="dataset, target-written (prompts) or traffic (requests).")
    path: str | None = Field(
        default=None, description="Local kinds: a JSONL/Parquet file or folder, relative to the manifest's folder.")
    hub_id: str
    revision: str | None = Field(default=None, description="Pinned commit sha on the Hub.")
    config: str | None = None
    split: str = "train"
    data_files: list[str] = Field(
        default_factory=list, description="Files relative to the mirror folder (offline) or the repo (online)."
    )
    format: str | None = Field(default=None, description="Adapter name; detected from columns when None.")
    field_mapping: dict[str, str] = Field(default_factory=dict, description="Adapter field → dataset column.")
    category: Category
    license: str | None = None
    target_native: bool = Field(default=False, description="Assistant turns were produced by the target model.")
    max_rows: int | None = Field(default=None, gt=0)
    streaming: bool | None = Field(default=None, description="Stream rows; None streams files over 512 MiB.")

    @model_validator(mode="before")
    @classmethod
    def _local_name(cls, data: Any) -> Any:
        """A local source without a `hub_id` is named `<kind>/<file name>` (its key in reports)."""
        if isinstance(data, dict) and data.get("kind") in LOCAL_KINDS and not data.get("hub_id") and data.get("path"):
            stem = re.sub(r"[^A-Za-z0-9_]+", "_", Path(str(data["path"])).name.split(".")[0]).strip("_") or "data"
            data = {**data, "hub_id": f"{data['kind']}/{stem}"}
        return data

    @field_validator("hub_id")
    @classmethod
    def _valid_hub_id(cls, value: str) -> str:
        return parse_hub_id(value)

    @model_validator(mode="after")
    def _local_fields(self) -> Source:
        if self.kind == "dataset":
            if self.path is not None:
                raise ValueError("`path` is for target-written and traffic sources; a dataset uses data_files")
            return self
        if not self.path:
            raise ValueError(f"a {self.kind} source needs `path` (a file or folder beside the manifest)")
        if self.data_files:
            raise ValueError(f"a {self.kind} source reads `path`, not data_files")
        expected = LOCAL_FORMATS[self.kind]
        if self.kind == "traffic" and self.format not in (None, expected):
            raise ValueError(f"a traffic source is read as {expected!r} (request bodies), not {self.format!r}")
        if self.format is None:
            self.format = expected
        return self

    @property
    def local(self) -> bool:
        """True for a target-written or traffic source (read from `path`, never from the Hub or the mirror)."""
        return self.kind in LOCAL_KINDS

    @property
    def key(self) -> str:
        """A stable name for this source: hub id plus config."""
        return f"{self.hub_id}:{self.config}" if self.config else self.hub_id


class EvalSet(_Strict):
    """A benchmark to decontaminate against (its prompts must not leak into training data)."""

    name: str
    hub_id: str | None = None
    revision: str | None = None
    config: str | None = None
    split: str = "test"
    data_files: list[str] = Field(default_factory=list)
    format: str | None = None
    field_mapping: dict[str, str] = Field(default_factory=dict)


class Manifest(_Strict):
    """The approved set, ready for curation (DESIGN.md: Manifest)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    target: TargetModel | None = None
    budget: Budget = Field(default_factory=Budget)
    sources: list[Source] = Field(default_factory=list)
    eval_sets: list[EvalSet] = Field(default_factory=list)
    mirror: str | None = Field(default=None, description="Local mirror folder the data_files are relative to.")
    cleaning: CleaningConfig = Field(default_factory=CleaningConfig, description="Cleaning thresholds.")
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_sources(self) -> Manifest:
        # Counted once each (linear): a count of the list per key took seconds at 16,000 sources.
        keys = Counter(s.key + "|" + ",".join(s.data_files) + "|" + (s.path or "") for s in self.sources)
        dupes = {k for k, n in keys.items() if n > 1}
        if dupes:
            raise ValueError(f"duplicate sources: {sorted(dupes)}")
        names = Counter(s.key for s in self.sources if s.local)
        clash = sorted(k for k, n in names.items() if n > 1)
        if clash:
            raise ValueError(f"local sources share the name {clash}: give each its own hub_id (owner/name)")
        return self


def load_manifest(path: Path) -> Manifest:
    """Return the manifest at `path`; raise ManifestError with the offending field on a bad file."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"manifest {path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"manifest {path} is not valid JSON: {exc}") from None
    except RecursionError:  # JSON nested thousands of levels deep: no manifest is
        raise ManifestError(f"manifest {path} nests too deep to be a manifest") from None
    try:
        return Manifest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ManifestError(f"manifest {path} is invalid: {problems}") from None


def dump_manifest(manifest: Manifest) -> str:
    """Return the manifest as stable, indented JSON text."""
    return manifest.model_dump_json(indent=2) + "\n"
