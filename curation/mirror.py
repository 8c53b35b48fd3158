"""A local dataset mirror (`MIRROR.json` + files laid out by Hub id): turning it into a manifest, and trimming it.

`MIRROR.json` is a list of entries `{id, config?, files[], format, fields, rows, license, role, sha256}` with
file paths relative to the mirror folder. `manifest_from_mirror` makes `role: train` entries sources and
`role: eval` entries decontamination sets; an entry whose first record fits no adapter (e.g. answer keys
without prompts) is left out with a note; an entry of line-aligned text files (no JSON) is read as source/target
line pairs (`curation.loading.read_paired_lines`). Categories come from CATEGORY_RULES: the first pattern found in
the entry's id, config and file names decides; anything unmatched is `general_chat`.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import re
from pathlib import Path
from typing import NotRequired, TypedDict, cast

from core.types import Category
from curation.adapters import detect_format
from curation.loading import SourceLoadError, inside, is_line_file, read_paired_lines, read_records
from curation.manifest import EvalSet, Manifest, ManifestError, Source, TargetModel

MIRROR_INDEX = "MIRROR.json"


class MirrorEntry(TypedDict):
    """One entry of `MIRROR.json`: a Hub dataset (one config of it) and the mirror files standing in for it."""

    id: str
    files: list[str]  # relative to the mirror folder
    config: NotRequired[str | None]  # may carry the split: "main/train"
    role: NotRequired[str]  # "train" (the default) or "eval"
    license: NotRequired[str | None]
    format: NotRequired[str]
    fields: NotRequired[str]
    rows: NotRequired[int]
    rows_per_file: NotRequired[dict[str, int]]
    sha256: NotRequired[dict[str, str]]  # per file
    bytes: NotRequired[dict[str, int]]  # per file
    source: NotRequired[str | list[str]]  # where the mirror took the files from
    source_commit: NotRequired[str]
    hub_match: NotRequired[str]
    synthetic: NotRequired[bool]
    note: NotRequired[str]

# First match wins; matched against "id config files" lower-cased.
CATEGORY_RULES: tuple[tuple[str, Category], ...] = (
    (r"gsm8k|math", Category.MATH),
    (r"nl2bash", Category.CODE_EXPLANATION),  # shell one-liners; "TellinaTool" would read as tool use
    (r"commit", Category.COMMIT_MESSAGES),
    (r"codereview|code_review|review", Category.CODE_REVIEW),
    (r"swe-agent|trajector|toolbench/answer|\.traj", Category.AGENTIC_TRAJECTORIES),
    (r"swe-bench|bugfix|bug_fix", Category.BUG_FIXING),
    (r"pull.?request", Category.PULL_REQUESTS),
    (r"tool|function.?call|bfcl|gorilla|apibench", Category.TOOL_USE),
    (r"reason|logic", Category.REASONING),
    (r"code|mbpp|humaneval", Category.CODE_EXPLANATION),
)


def category_for(entry: MirrorEntry) -> Category:
    """Return the category of a mirror entry by CATEGORY_RULES (default general_chat)."""
    text = " ".join([entry.get("id", ""), entry.get("config") or "", *entry.get("files", [])]).lower()
    for pattern, category in CATEGORY_RULES:
        if re.search(pattern, text):
            return category
    return Category.GENERAL_CHAT


def read_mirror_index(mirror_dir: Path) -> list[MirrorEntry]:
    """Return the entries of `mirror_dir/MIRROR.json`, or raise ManifestError saying what is wrong."""
    index = Path(mirror_dir) / MIRROR_INDEX
    try:
        entries = json.loads(index.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{index} does not exist: not a mirror folder") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{index} is not valid JSON: {exc}") from None
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and "id" in e and "files" in e for e in entries
    ):
        raise ManifestError(f"{index} must be a list of entries with id and files")
    root = Path(mirror_dir).resolve()
    for entry in cast(list[MirrorEntry], entries):
        if not isinstance(entry["files"], list) or not entry["files"] or not all(
                isinstance(f, str) for f in entry["files"]):
            raise ManifestError(f"{index}: the files of {entry['id']!r} must be a non-empty list of paths")
        for name in entry["files"]:
            if not inside(root, name):
                raise ManifestError(f"{index}: {entry['id']!r} names {name!r}, which lies outside the mirror folder")
    return cast(list[MirrorEntry], entries)


def _config_and_split(entry: MirrorEntry, default_split: str) -> tuple[str | None, str]:
    config = entry.get("config")
    if config and "/" in config:  # the mirror writes e.g. "main/train" for config + split
        name, split = config.split("/", 1)
        return name, split
    return config, default_split


def _first_columns(mirror_dir: Path, files: list[str]) -> set[str]:
    paths = [mirror_dir / f for f in files]
    records = read_paired_lines(paths) if all(is_line_file(p) for p in paths) else read_records(paths[0])
    for record in records:
        return set(record)
    return set()


def _readable_format(mirror_dir: Path, files: list[str]) -> tuple[str | None, str | None]:
    """(the adapter that fits the entry's first file, None) or (None, why it is left out)."""
    try:
        columns = _first_columns(mirror_dir, files)
    except (OSError, SourceLoadError) as exc:  # missing, unreadable, a damaged .gz
        return None, f"cannot read {files[0]}: {exc}"
    found = detect_format(columns)
    return (found, None) if found is not None else (None, "no adapter fits its columns")


def mirror_eval_sets(mirror_dir: Path, entries: list[MirrorEntry]) -> list[EvalSet]:
    """Return the mirror's `role: eval` entries that an adapter can read, as eval sets (named id:config)."""
    eval_sets = []
    for entry in entries:
        if entry.get("role") != "eval":
            continue
        files = list(entry["files"])
        if _readable_format(Path(mirror_dir), files)[0] is None:
            continue
        config, split = _config_and_split(entry, "test")
        label = entry["id"] + (f":{entry['config']}" if entry.get("config") else "")
        eval_sets.append(
            EvalSet(name=label, hub_id=entry["id"], config=config, split=split, data_files=files)
        )
    return eval_sets


def manifest_from_mirror(mirror_dir: Path, *, target: str | None = None) -> Manifest:
    """Return a manifest over a mirror: train entries → sources, eval entries → eval sets, no budget."""
    mirror_dir = Path(mirror_dir).resolve()
    sources: list[Source] = []
    eval_sets: list[EvalSet] = []
    notes: list[str] = []
    for entry in read_mirror_index(mirror_dir):
        files = list(entry["files"])
        label = entry["id"] + (f":{entry['config']}" if entry.get("config") else "")
        found, why = _readable_format(mirror_dir, files)
        if found is None:
            notes.append(f"left out {label}: {why}")
            continue
        role = entry.get("role", "train")
        config, split = _config_and_split(entry, "train" if role == "train" else "test")
        if role == "eval":
            eval_sets.append(
                EvalSet(name=label, hub_id=entry["id"], config=config, split=split, data_files=files)
            )
        else:
            sources.append(
                Source(
                    hub_id=entry["id"],
                    config=config,
                    split=split,
                    data_files=files,
                    category=category_for(entry),
                    license=entry.get("license"),
                )
            )
    return Manifest(
        target=TargetModel(model=target) if target else None,
        sources=sources,
        eval_sets=eval_sets,
        mirror=str(mirror_dir),
        notes=notes,
    )


def mirror_files(entries: list[MirrorEntry], hub_id: str, config: str | None, split: str) -> list[str]:
    """Return the mirror files standing in for a Hub dataset (id, config, split), or [] when it is not mirrored.

    Entries match on id; a config keeps the entries of that config (the mirror's `main/train` style counts
    as config `main`, split `train`); when several remain, those of the wanted split are preferred.
    """
    matches = [e for e in entries if e.get("id") == hub_id]
    if config is not None:
        matches = [
            e for e in matches if e.get("config") == config or _config_and_split(e, split)[0] == config
        ]
    if len(matches) > 1:
        same_split = [
            e
            for e in matches
            if _config_and_split(e, "train" if e.get("role") != "eval" else "test")[1] == split
        ]
        matches = same_split or matches
    return [f for e in matches for f in e["files"]]


def _trim_bytes(path: Path, max_rows: int) -> tuple[bytes, int]:
    """Return the first `max_rows` records of a file in its own format, and how many it holds."""
    raw = path.read_bytes()
    gz = path.name.endswith(".gz")
    data = gzip.decompress(raw) if gz else raw
    if path.suffix == ".traj" or (path.suffix == ".json" and data.lstrip()[:1] == b"{" and _is_object(data)):
        return raw, 1
    if ".csv" in path.name:
        rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(rows[: max_rows + 1])
        out, count = buffer.getvalue().encode("utf-8"), min(len(rows) - 1, max_rows)
    elif data.lstrip()[:1] == b"[":
        items = json.loads(data)[:max_rows]
        out, count = (json.dumps(items, ensure_ascii=False, indent=1) + "\n").encode("utf-8"), len(items)
    else:
        lines = [line for line in data.split(b"\n") if line.strip()][:max_rows]
        out, count = b"\n".join(lines) + b"\n", len(lines)
    return (gzip.compress(out, mtime=0) if gz else out), count


def _is_object(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except ValueError:
        return False


def trim_mirror(
    src: Path, dst: Path, *, max_rows: int, overrides: dict[str, int] | None = None
) -> list[MirrorEntry]:
    """Copy a mirror with at most `max_rows` records per file (per-id `overrides`), rewriting rows and sha256."""
    entries = read_mirror_index(src)
    for entry in entries:
        limit = (overrides or {}).get(entry["id"], max_rows)
        total = 0
        for name in entry["files"]:
            data, count = _trim_bytes(Path(src) / name, limit)
            target = Path(dst) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            entry.setdefault("sha256", {})[name] = hashlib.sha256(data).hexdigest()
            entry.setdefault("bytes", {})[name] = len(data)
            total += count
        entry["rows"] = total
        entry.pop("rows_per_file", None)
        entry["note"] = (entry.get("note", "") + f" Trimmed to at most {limit} rows per file.").strip()
    (Path(dst) / MIRROR_INDEX).write_text(
        json.dumps(entries, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return entries
