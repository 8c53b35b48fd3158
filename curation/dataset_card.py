"""The dataset card of a published set: YAML metadata the Hub reads, and a body that states provenance.

The metadata carries the license derived from the sources (one Hub license id when they agree, else
`other` with the `license_name` and `license_link` the Hub's card spec asks for `other`: the link is the
folder's `LICENSE.md`, which `render_license` writes, one licence per source), task categories, source
datasets, the `configs`/`data_files` that tell `datasets` where the shards are, a size category, and a
`datahunt` block (version, kind of set, the target by name and hash, sampling settings). The body says where
every row came from (each source's revision, or the commit a local mirror pinned it at), what cleaning,
deduplication and decontamination removed, and, for a regenerated set, which model wrote the answers and how.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from huggingface_hub import DatasetCard, DatasetCardData

from core.licenses import hub_license, license_risk
from core.target_config import read_target_config
from curation.licenses import risky_sources

__all__ = ["CardFacts", "CardSource", "TargetIdentity", "card_license", "hub_license", "mirror_pins", "render_card",
           "render_license", "size_category", "target_identity"]

LICENSE_FILE = "LICENSE.md"  # what `license_link` names when the sources' licences differ
MIXED_LICENSE_NAME = "per-source-licenses"  # `license_name`: each row keeps its source's licence
TARGET_RECORD = "datahunt_target.json"  # written beside a prepared target's weights (`inference.target_folder`)


class CardSource(TypedDict):
    """One source of a published set, as its card lists it: the manifest's pin and licence, and its rows."""

    hub_id: str
    config: str | None
    revision: str | None
    license: str | None
    category: str | None
    rows: int
    pin: NotRequired[str]  # where a local mirror took the files from, at which commit (no Hub revision)


class RegenCounts(TypedDict, total=False):
    """What regeneration did to the set's rows, as the card states it."""

    regenerated: int
    passthrough: int  # copied unchanged: already the target's
    failed: int
    cut: int  # answers cut at the token limit
    repetitive: int  # answers repeating an 8-word phrase


class TargetIdentity(TypedDict, total=False):
    """What the target model is, as a card names it: its name, the hash of its weights file, and where the
    weights came from (a GGUF file and the package that shipped it, or the checkpoint itself)."""

    name: str
    sha256: str
    weights: str  # the file hashed: the GGUF it was prepared from, or the checkpoint's safetensors
    package: str  # the package that shipped the GGUF, with its version


def target_identity(model: str | None) -> TargetIdentity | None:
    """Return the target's identity from what a run names it by: a prepared folder's record (the GGUF's name,
    sha256 and package), else a checkpoint folder's config and safetensors hash, else the Hub id as given."""
    if not model:
        return None
    folder = Path(model)
    record_file = folder / TARGET_RECORD
    if record_file.is_file():
        record = json.loads(record_file.read_text(encoding="utf-8"))
        gguf = str(record.get("file") or "")
        identity = TargetIdentity(name=gguf.split(".", 1)[0] or folder.name, sha256=str(record.get("sha256", "")),
                                  weights=gguf)
        if record.get("package"):
            identity["package"] = f"{record['package']} {record.get('package_version') or ''}".strip()
        return identity
    if not folder.is_dir():
        return TargetIdentity(name=model)  # a Hub id: the name is the identity
    config = read_target_config(folder) or {}
    name = str(config.get("_name_or_path") or folder.name)
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        return TargetIdentity(name=name)
    digest = hashlib.sha256()
    for path in weights:
        with path.open("rb") as fh:
            while block := fh.read(8 << 20):
                digest.update(block)
    return TargetIdentity(name=name, sha256=digest.hexdigest(), weights=", ".join(p.name for p in weights))


def mirror_pins(entries: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Return `{hub_id: pin}` from mirror index entries that record where their files came from: the source
    and its commit (`github:owner/repo:file @ 761dc5b…`), the first entry of a dataset mirrored in several."""
    pins: dict[str, str] = {}
    for entry in entries:
        hub_id, source, commit = entry.get("id"), entry.get("source"), entry.get("source_commit")
        if hub_id and source and commit and hub_id not in pins:
            pins[str(hub_id)] = f"{source} @ {commit}"
    return pins


@dataclass
class CardFacts:
    """What the card states; gathered from the set's report, manifest and run files by `curation.publish`."""

    repo_id: str
    kind: str  # "curated" or "regenerated"
    rows: int
    categories: dict[str, int]
    sources: list[CardSource]
    version: str
    target_model: str | None = None
    target: TargetIdentity | None = None
    sampling: dict[str, Any] | None = None
    reasoning: str | None = None
    report: dict[str, Any] = field(default_factory=dict)
    regen: RegenCounts = field(default_factory=RegenCounts)


def card_license(sources: list[CardSource]) -> str:
    """Return one Hub license for the set: the sources' common id, else `other` (`unknown` when none is known)."""
    ids = {hub_license(s.get("license")) for s in sources}
    if ids == {None} or not ids:
        return "unknown"
    if len(ids) == 1:
        return str(ids.pop())
    return "other"


def size_category(rows: int) -> str:
    """Return the Hub size category of a row count (`n<1K`, `1K<n<10K`, …)."""
    for bound, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if rows < bound:
            return name
    return "1M<n<10M"


class _DatahuntBlock(TypedDict, total=False):
    """The card metadata's `datahunt` block: how the set was made."""

    version: str
    kind: str
    target_model: str
    target: TargetIdentity
    sampling: dict[str, Any]
    reasoning: str
    decontamination: dict[str, int]  # eval sets, and how many were checked, unavailable, failed


def _metadata(facts: CardFacts) -> DatasetCardData:
    datahunt = _DatahuntBlock(version=facts.version, kind=facts.kind)
    if facts.target_model:
        datahunt["target_model"] = facts.target.get("name", facts.target_model) if facts.target else facts.target_model
    if facts.target:
        datahunt["target"] = facts.target
    if facts.sampling:
        datahunt["sampling"] = facts.sampling
    if facts.reasoning:
        datahunt["reasoning"] = facts.reasoning
    cover = facts.report.get("decontamination")
    if isinstance(cover, dict):
        datahunt["decontamination"] = {"eval_sets": cover.get("eval_sets", 0), "checked": len(cover.get("checked", [])),
                                       "unavailable": len(cover.get("unavailable", [])),
                                       "failed": len(cover.get("failed", []))}
    license_id = card_license(facts.sources)
    # The Hub's card spec for `other`: an id-like `license_name` and a `license_link` to a file of the repository.
    extra: dict[str, Any] = ({"license_name": MIXED_LICENSE_NAME, "license_link": LICENSE_FILE}
                             if license_id == "other" else {})
    return DatasetCardData(
        license=license_id,
        task_categories=["text-generation"],
        size_categories=[size_category(facts.rows)],
        source_datasets=sorted({s["hub_id"] for s in facts.sources}),
        pretty_name=facts.repo_id.split("/")[-1],
        configs=[{"config_name": "default", "data_files": [{"split": "train", "path": "data/train-*.parquet"}]}],
        tags=["datahunt", "eagle3", "speculative-decoding", *(["synthetic"] if facts.kind == "regenerated" else [])],
        datahunt=datahunt,
        **extra,
    )


_RISK_FLAGS = {"non_commercial": " (non-commercial)", "restricted": " (restricted)",
               "unknown": " (not known: check it)"}


def _license_lines(facts: CardFacts) -> list[str]:
    """The card's licence paragraph: the set's licence, and every source whose licence is a risk, by name."""
    license_id = card_license(facts.sources)
    text = f"License: `{license_id}`." + (
        f" The sources carry different licenses; each row inherits its source's ([{LICENSE_FILE}]({LICENSE_FILE}) "
        "lists them)." if license_id == "other" else "")
    risky = risky_sources(facts.sources)
    words = {"non_commercial": "non-commercial", "restricted": "restricted", "unknown": "not known"}
    if not risky:
        return [text]
    named = "; ".join(f"`{hub_id}`: {lic or 'no licence stated'} ({words[risk]})" for hub_id, lic, risk in risky)
    return [text + (" Some sources are non-commercial." if any(r == "non_commercial" for *_, r in risky) else ""),
            "", f"**License warning**: {len(risky)} of {len(facts.sources)} sources are not plainly usable for "
            f"commercial training: {named}. Check each before training a model you ship."]


def _source_lines(facts: CardFacts) -> list[str]:
    lines = ["| source | config | revision | category | license | rows |", "|---|---|---|---|---|---:|"]
    for s in facts.sources:
        flag = _RISK_FLAGS.get(license_risk(s.get("license")), "")
        lines.append(
            f"| [{s['hub_id']}](https://huggingface.co/datasets/{s['hub_id']}) | {s.get('config') or '–'} | "
            f"{s.get('revision') or s.get('pin') or 'not pinned'} | {s.get('category') or '–'} | "
            f"{s.get('license') or 'unknown'}{flag} "
            f"| {s.get('rows', '–')} |"
        )
    return lines


def _curation_lines(report: dict[str, Any]) -> list[str]:
    if not report:
        return ["The curation report was not found beside the set, so its cleaning counts are not stated here."]
    dup = report.get("duplicates", {})
    evals = report.get("eval_sets", {})
    loaded = sorted(n for n, v in evals.items()
                    if v.get("items", 0) > 0 and not v.get("error") and not v.get("unavailable"))
    checked = ", ".join(f"`{name}` ({evals[name]['items']} prompts)" for name in loaded) or "none"
    unchecked = sorted(set(evals) - set(loaded))
    missing = sorted(n for n in unchecked if evals[n].get("unavailable"))
    drops = ", ".join(f"{reason} {n}" for reason, n in sorted(report.get("drops", {}).items())) or "none"
    return [
        f"- Rows loaded: {report.get('rows_in', '?')}; kept: {report.get('rows_out', '?')}.",
        f"- Dropped by cleaning: {drops}.",
        f"- Duplicates removed: {dup.get('exact', 0)} exact (normalised prompt hash) and {dup.get('near', 0)} near "
        "(MinHash over word 3-grams, Jaccard ≥ 0.7).",
        f"- Decontamination: checked against {len(loaded)} of {len(evals)} evaluation sets; "
        f"{report.get('decontaminated', 0)} rows removed for a 13-gram overlap with (or the whole text of) an "
        f"evaluation prompt. Evaluation sets checked: {checked}.",
        *([f"- Not checked, {len(missing)} not available offline when the set was curated (rows may overlap "
           f"them): {', '.join(f'`{n}`' for n in missing)}."] if missing else []),
        *([f"- Not checked, {len(unchecked) - len(missing)} failed to load or held no prompt: "
           f"{', '.join(f'`{n}`' for n in unchecked if n not in missing)}."] if len(unchecked) > len(missing) else []),
    ]


def _regen_lines(facts: CardFacts) -> list[str]:
    if facts.kind != "regenerated":
        return []
    sampling = ", ".join(f"{k}={v}" for k, v in (facts.sampling or {}).items())
    r = facts.regen
    return [
        "",
        "## Regeneration",
        "",
        f"Every user turn was answered again by {_target_words(facts)} "
        f"(sampling {sampling or 'not recorded'}; reasoning {facts.reasoning or 'keep'}), each turn given the "
        "model's own earlier answers, so the draft model learns the target's distribution.",
        f"Rows regenerated: {r.get('regenerated', 0)}; copied unchanged (already the target's): "
        f"{r.get('passthrough', 0)}; failed and left out: {r.get('failed', 0)}; answers cut at the token limit: "
        f"{r.get('cut', 0)}; answers repeating an 8-word phrase: {r.get('repetitive', 0)}.",
    ]


def _target_words(facts: CardFacts) -> str:
    """The target as the card's body names it: its name, then the hash of its weights and where they came from."""
    target = facts.target or {}
    name = target.get("name") or facts.target_model
    if not name:
        return "the target model"
    said = [f"sha256 `{target['sha256']}` of {target.get('weights') or 'its weights'}"] if target.get("sha256") else []
    if target.get("package"):
        said.append(f"shipped by the `{target['package']}` package")
    return f"`{name}`" + (f" ({', '.join(said)})" if said else "")


def render_license(facts: CardFacts) -> str | None:
    """Return the `LICENSE.md` a set of several licences links to (None when one licence covers every row):
    each source with its licence and where it was taken from."""
    if card_license(facts.sources) != "other":
        return None
    lines = [f"# Licenses of {facts.repo_id.split('/')[-1]}", "",
             "This set has no single license: every row keeps the license of the dataset it came from (its source "
             "dataset is recorded in each row).", "", "| source | license | taken from |", "|---|---|---|"]
    for s in facts.sources:
        lines.append(f"| {s['hub_id']} | {s.get('license') or 'not stated'} | "
                     f"{s.get('revision') or s.get('pin') or 'not pinned'} |")
    return "\n".join(lines) + "\n"


def render_card(facts: CardFacts) -> str:
    """Return the README.md of the published set: YAML metadata between `---` lines, then the body."""
    per_category = ", ".join(f"{c} {n}" for c, n in sorted(facts.categories.items()))
    body = [
        f"# {facts.repo_id.split('/')[-1]}",
        "",
        f"A {facts.kind} training set for an EAGLE-3 speculative-decoding draft model, made with datahunt "
        f"{facts.version}. {facts.rows} rows, one split (`train`), rows per category: {per_category or 'none'}.",
        "",
        "Load it with `datasets.load_dataset(\"" + facts.repo_id + "\", split=\"train\")`.",
        "",
        "## Provenance",
        "",
        "Every row comes from one of these datasets (its id, source dataset and row index are kept in the data):",
        "",
        *_source_lines(facts),
        "",
        *_license_lines(facts),
        "",
        "## Curation and decontamination",
        "",
        *_curation_lines(facts.report),
        *_regen_lines(facts),
        "",
    ]
    card = DatasetCard(f"---\n{_metadata(facts).to_yaml()}\n---\n\n" + "\n".join(body))
    return str(card)
