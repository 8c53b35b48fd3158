"""The offline hidden-state cache: one on-disk format that `datahunt capture` writes and `train --mode offline` reads.

A cache is a folder:

    manifest.json              what was captured: target identity, tokenizer hash, data hash, aux layers (input-of-
                               layer ids), dtype, hidden size, and the shard plan (each shard's row ids); `complete`
                               turns true only once every shard's marker is there
    target_head.safetensors    what the loss needs of the target and nothing more: its (scaled) input embeddings,
                               output head and final norm weight
    shard_00000.safetensors    consecutive rows: input_ids [T] int32, loss_mask [T] uint8, offsets [n+1], aux
                               [T, 3H] (low || mid || high), final [T, H], in the capture dtype (bf16 by default)
    shard_00000.done           the shard's completion marker: rows, tokens, bytes of the shard file

The shard plan depends only on the rows and the size bound (rows packed in order until a shard would pass
`shard_bytes`), never on how many processes wrote it, so a cache captured by 1 or 8 ranks has the same files
with the same contents. A shard file is written whole (temporary name, then renamed) and its marker after it,
so a killed run leaves finished shards and nothing half-written; a rerun with the same arguments captures only
the shards without a marker. A cache is complete when its manifest says so and every marker matches its file:
the trainer refuses anything else, and a cache of another target or tokenizer, in one line each.

The target's identity is a hash of its config.json and, per weight file, its name, size and first and last MiB:
cheap to compute on a 600 GB checkpoint, and different for two random initialisations of one config.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import torch
from torch import Tensor

from core.json_types import JSONObject
from core.target_config import read_model_config
from inference.decoding.hidden_states import AuxLayers
from training.data import TokenizedRow
from training.errors import TrainingError
from training.offline_target import logits_from_final

FORMAT = "datahunt-offline-cache/1"
MANIFEST = "manifest.json"
HEAD_FILE = "target_head.safetensors"
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
_EDGE = 1 << 20  # bytes read from each end of a weight file for the target's identity
# Manifest keys that must agree for a rerun to resume (or a trainer to read) the cache.
IDENTITY_KEYS = ("format", "target_identity", "tokenizer_hash", "data_hash", "aux_layers_input", "dtype",
                 "hidden_size", "shards", "engine")


class CacheError(TrainingError, ValueError):
    """An offline cache that cannot be used: missing, incomplete, or made by another target, tokenizer or data."""


class PlannedShard(TypedDict):
    """One shard of the plan: its rows' ids and where they start in the row order."""

    row_ids: list[str]
    first: int
    count: int


class CacheManifest(TypedDict):
    """manifest.json: what was captured and the shard plan (`IDENTITY_KEYS` must agree for a rerun to resume)."""

    format: str
    target_identity: str
    tokenizer_hash: str
    data_hash: str
    aux_layers_input: list[int]  # input-of-layer ids
    dtype: str  # a key of DTYPES
    hidden_size: int
    model_type: str
    num_hidden_layers: int
    softcap: float | None  # the target's final logit softcapping, if it has one
    rows: int
    tokens: int
    shards: list[PlannedShard]
    complete: NotRequired[bool]  # written false by start_cache, true by finish_cache
    engine: NotRequired[str]  # the serving engine the states came from ("vllm"); absent: transformers
    engine_details: NotRequired[JSONObject]  # its url, version, served model, extracted layers, checks


def target_identity(folder: Path) -> str:
    """A short hash naming the target in `folder`: its config.json and its weight files' names, sizes and ends."""
    h = hashlib.sha256()
    config = folder / "config.json"
    if not config.is_file():
        raise CacheError(f"target folder {folder} has no config.json")
    h.update(json.dumps(read_model_config(config), sort_keys=True).encode())
    weights = sorted([*folder.glob("*.safetensors"), *folder.glob("*.bin")])
    if not weights:
        raise CacheError(f"target folder {folder} has no weight files (*.safetensors, *.bin)")
    for path in weights:
        size = path.stat().st_size
        h.update(f"{path.name}:{size}".encode())
        with path.open("rb") as f:
            h.update(f.read(_EDGE))
            f.seek(max(0, size - _EDGE))
            h.update(f.read(_EDGE))
    return h.hexdigest()[:24]


def plan_shards(lengths: list[int], bytes_per_token: int, shard_bytes: int) -> list[tuple[int, int]]:
    """(first row, row count) of each shard: consecutive rows packed while the shard stays within shard_bytes
    (a row larger than the bound is a shard of its own). Depends on the rows and the bound only."""
    shards: list[tuple[int, int]] = []
    first, size = 0, 0
    for i, n in enumerate(lengths):
        row = n * bytes_per_token
        if i > first and size + row > shard_bytes:
            shards.append((first, i - first))
            first, size = i, 0
        size += row
    if lengths:
        shards.append((first, len(lengths) - first))
    return shards


def bytes_per_token(hidden: int, dtype: str) -> int:
    """Cache bytes per token: 3 aux states and the final state of `hidden` each, plus id (4) and mask (1)."""
    return 4 * hidden * DTYPES[dtype].itemsize + 5


def shard_name(index: int) -> str:
    """File stem of shard `index`."""
    return f"shard_{index:05d}"


def _write_json(path: Path, value: Any) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(value, indent=1))
    os.replace(partial, path)


def read_manifest(folder: Path) -> CacheManifest:
    """The cache's manifest; CacheError when the folder holds none."""
    path = folder / MANIFEST
    if not path.is_file():
        raise CacheError(f"{folder} is not an offline cache (no {MANIFEST}); write one with `datahunt capture`")
    try:
        manifest: CacheManifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CacheError(f"cannot read {path}: {exc}") from None
    if manifest.get("format") != FORMAT:
        raise CacheError(f"{path} is format {manifest.get('format')!r}, not {FORMAT!r}: capture it again")
    return manifest


def start_cache(folder: Path, manifest: CacheManifest) -> None:
    """Write the manifest of a new cache, or check that an existing one is this capture's (then it resumes)."""
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / MANIFEST).is_file():
        old = read_manifest(folder)
        differ = [k for k in IDENTITY_KEYS if old.get(k) != manifest.get(k)]
        if differ:
            raise CacheError(f"{folder} holds a cache of another capture (its {', '.join(differ)} differ); "
                             "capture into a new folder, or remove this one")
        return
    _write_json(folder / MANIFEST, {**manifest, "complete": False})


def shard_done(folder: Path, index: int) -> bool:
    """Whether shard `index` has its marker and the marker's byte count matches the file."""
    marker, data = folder / f"{shard_name(index)}.done", folder / f"{shard_name(index)}.safetensors"
    try:
        return bool(json.loads(marker.read_text())["bytes"] == data.stat().st_size)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def write_head(folder: Path, embed: Tensor, head: Tensor, norm: Tensor | None) -> None:
    """Write what the loss and the draft need of the target: scaled embeddings, output head, final norm."""
    from safetensors.torch import save_file

    tensors = {"embed": embed.cpu().clone(), "head": head.cpu().clone()}  # tied weights are one tensor
    if norm is not None:
        tensors["norm"] = norm.cpu().clone()
    partial = folder / (HEAD_FILE + ".partial")
    save_file(tensors, str(partial))
    os.replace(partial, folder / HEAD_FILE)


def write_shard(folder: Path, index: int, row_ids: list[str], rows: list[tuple[list[int], list[int]]],
                aux: list[Tensor], final: list[Tensor], dtype: str) -> None:
    """Write shard `index` whole (renamed into place), then its completion marker."""
    from safetensors.torch import save_file

    lengths = [len(ids) for ids, _ in rows]
    offsets = torch.tensor([0, *lengths]).cumsum(0)
    tensors = {
        "input_ids": torch.tensor([t for ids, _ in rows for t in ids], dtype=torch.int32),
        "loss_mask": torch.tensor([m for _, mask in rows for m in mask], dtype=torch.uint8),
        "offsets": offsets,
        "aux": torch.cat(aux).to(DTYPES[dtype]).contiguous(),
        "final": torch.cat(final).to(DTYPES[dtype]).contiguous(),
    }
    name = shard_name(index)
    partial = folder / f"{name}.safetensors.partial"
    save_file(tensors, str(partial), metadata={"row_ids": json.dumps(row_ids)})
    os.replace(partial, folder / f"{name}.safetensors")
    _write_json(folder / f"{name}.done", {"rows": len(rows), "tokens": int(offsets[-1]),
                                          "bytes": (folder / f"{name}.safetensors").stat().st_size})


def finish_cache(folder: Path) -> CacheManifest:
    """Mark the cache complete once every shard of its plan is done; return the manifest (CacheError otherwise)."""
    manifest = read_manifest(folder)
    missing = [i for i in range(len(manifest["shards"])) if not shard_done(folder, i)]
    if missing:
        raise CacheError(_incomplete(folder, manifest, missing))
    manifest["complete"] = True
    _write_json(folder / MANIFEST, manifest)
    return manifest


def _incomplete(folder: Path, manifest: CacheManifest, missing: list[int]) -> str:
    first = manifest["shards"][missing[0]]
    return (f"cache {folder} is incomplete: {len(missing)} of {len(manifest['shards'])} shards missing (first "
            f"{shard_name(missing[0])}, rows {first['row_ids'][0]}..{first['row_ids'][-1]}); run `datahunt capture` "
            "again with the same arguments to finish it")


@dataclass(frozen=True)
class _Place:
    shard: int
    start: int
    end: int


class HeadOnlyTarget(torch.nn.Module):
    """The target without its decoder layers: config, scaled input embeddings, output head, final norm. What the
    trainer reads of a target in offline mode (shapes, embeddings for the draft, the head for the logits)."""

    def __init__(self, config: Any, embed: Tensor, head: Tensor, norm: Tensor | None) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = torch.nn.Embedding(embed.shape[0], embed.shape[1])
        self.embed_tokens.weight = torch.nn.Parameter(embed, requires_grad=False)
        self.lm_head = torch.nn.Linear(head.shape[1], head.shape[0], bias=False)
        self.lm_head.weight = torch.nn.Parameter(head, requires_grad=False)
        self.model = torch.nn.Module()
        if norm is not None:
            self.model.norm = torch.nn.Module()
            self.model.norm.weight = torch.nn.Parameter(norm, requires_grad=False)
        self.dtype = head.dtype

    def get_input_embeddings(self) -> torch.nn.Embedding:
        """The target's embeddings as its first layer sees them (already scaled)."""
        embed: torch.nn.Embedding = self.embed_tokens
        return embed

    def get_output_embeddings(self) -> torch.nn.Linear:
        """The target's output projection."""
        return self.lm_head


class OfflineCache:
    """A complete cache opened for training: its rows, its aux layers, the head-only target, and lookups of a
    padded batch's aux states and target logits (read per batch from the memory-mapped shards)."""

    def __init__(self, folder: Path, manifest: CacheManifest) -> None:
        from safetensors import safe_open

        self.folder, self.manifest = folder, manifest
        a, b, c = (int(i) for i in manifest["aux_layers_input"])
        self.layers = AuxLayers((a, b, c), "input")
        self.hidden = int(manifest["hidden_size"])
        self._files: list[Any] = [safe_open(str(folder / f"{shard_name(i)}.safetensors"), framework="pt")
                       for i in range(len(manifest["shards"]))]
        self._rows: list[TokenizedRow] = []
        self._where: dict[bytes, _Place] = {}
        for i, f in enumerate(self._files):
            ids, mask, offsets = f.get_tensor("input_ids"), f.get_tensor("loss_mask"), f.get_tensor("offsets").tolist()
            for j, row_id in enumerate(json.loads(f.metadata()["row_ids"])):
                a, b = offsets[j], offsets[j + 1]
                row_ids = ids[a:b].to(torch.int64)
                self._rows.append(TokenizedRow(id=row_id, input_ids=row_ids.tolist(), loss_mask=mask[a:b].tolist()))
                self._where[row_ids.numpy().tobytes()] = _Place(i, a, b)
        with safe_open(str(folder / HEAD_FILE), framework="pt") as head_file:
            opened: Any = head_file
            self._head: dict[str, Tensor] = {k: opened.get_tensor(k) for k in opened.keys()}  # noqa: SIM118  # safe_open is not a mapping
        self.head = self._head["head"].float()
        self.softcap: float | None = manifest.get("softcap")

    def rows(self) -> list[TokenizedRow]:
        """Every cached row (id, input ids, loss mask), in the cache's order."""
        return list(self._rows)

    def head_target(self, config: Any) -> HeadOnlyTarget:
        """The target as training needs it, without decoder layers; `config` is the target's (AutoConfig)."""
        return HeadOnlyTarget(config, self._head["embed"].float(), self._head["head"], self._head.get("norm"))

    def lookup(self, ids: Tensor, attn: Tensor) -> tuple[Tensor, Tensor]:
        """Aux states [B, T, 3H] and target logits [B, T, V] of a right-padded batch (padding rows are zeros)."""
        b, t = ids.shape
        aux = torch.zeros(b, t, 3 * self.hidden)
        final = torch.zeros(b, t, self.hidden)
        for i in range(b):
            n = int(attn[i].sum())
            key = ids[i, :n].to(torch.int64).cpu().numpy().tobytes()
            place = self._where.get(key)
            if place is None:
                raise CacheError(f"a batch row of {n} tokens is not in the cache {self.folder}")
            f = self._files[place.shard]
            aux[i, :n] = f.get_slice("aux")[place.start:place.end].float()
            final[i, :n] = f.get_slice("final")[place.start:place.end].float()
        return aux.to(ids.device), logits_from_final(final, self.head, self.softcap).to(ids.device)


def open_cache(folder: Path, target_dir: Path, tokenizer_fingerprint: str) -> OfflineCache:
    """Open a cache for training against the target in target_dir; CacheError (one line) when it is missing,
    incomplete, or was made by another target or tokenizer."""
    manifest = read_manifest(folder)
    identity = target_identity(target_dir)
    if manifest["target_identity"] != identity:
        raise CacheError(f"cache {folder} was captured from another target ({manifest.get('model_type')}, identity "
                         f"{manifest['target_identity'][:12]}), not {target_dir} ({identity[:12]}): capture it "
                         "for this target")
    if manifest["tokenizer_hash"] != tokenizer_fingerprint:
        raise CacheError(f"cache {folder} was captured with another tokenizer or chat template "
                         f"({manifest['tokenizer_hash'][:12]}, not {target_dir}'s {tokenizer_fingerprint[:12]}): "
                         "capture it with this target's tokenizer")
    missing = [i for i in range(len(manifest["shards"])) if not shard_done(folder, i)]
    if missing:
        raise CacheError(_incomplete(folder, manifest, missing))
    if not manifest.get("complete"):
        raise CacheError(f"cache {folder} was never marked complete: run `datahunt capture` again with the same "
                         "arguments to finish it")
    return OfflineCache(folder, manifest)
