"""The NumPy all-MiniLM-L6-v2 encoder: same vectors as `transformers`' BertModel, meaning-preserving, offline."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from agents.search.embedding import EncoderUnavailableError, SentenceEncoder, default_encoder, model_zip_path

TEXTS = [
    "GitHub issues paired with the patch that resolved them.",
    "Grade-school math word problems with step-by-step solutions.",
    "a",
    "Multi-turn conversations between users and a helpful assistant. " * 40,  # longer than 256 tokens: truncated
]


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    try:
        return default_encoder()
    except EncoderUnavailableError as exc:
        pytest.fail(f"the test install must carry the embedding model: {exc}")


def test_the_model_comes_from_the_installed_package_zip(encoder: SentenceEncoder) -> None:
    path = model_zip_path()
    assert path.name == "model.zip" and path.is_file()
    assert {"model.safetensors", "tokenizer.json", "1_Pooling/config.json"} <= set(zipfile.ZipFile(path).namelist())
    assert encoder.dim == 384


@pytest.mark.slow
def test_vectors_match_transformers_bert_with_mean_pooling(encoder: SentenceEncoder, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoTokenizer, BertModel

    zipfile.ZipFile(model_zip_path()).extractall(tmp_path)
    model = BertModel.from_pretrained(str(tmp_path)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path))
    batch = tokenizer(TEXTS, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    reference = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=1).numpy()
    ours = encoder.encode(TEXTS)
    assert ours.shape == (4, 384) and ours.dtype == np.float32
    assert np.abs(ours - reference).max() < 1e-4


def test_similar_meaning_is_closer_than_unrelated_text(encoder: SentenceEncoder) -> None:
    issue, math, _, chat = encoder.encode(TEXTS)
    fix = encoder.encode(["bug fix"])[0]
    assert fix @ issue > fix @ math and fix @ issue > fix @ chat
    assert np.allclose(np.linalg.norm(encoder.encode(TEXTS), axis=1), 1.0, atol=1e-5)


def test_empty_text_gives_a_zero_row(encoder: SentenceEncoder) -> None:
    rows = encoder.encode(["", "  ", "code review"])
    assert not rows[0].any() and not rows[1].any() and rows[2].any()


def test_the_extracted_weights_are_cached_and_a_damaged_cache_is_rewritten(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    from agents.search.embedding import SentenceEncoder, model_cache_dir, model_zip_path
    from core.settings import get_settings

    monkeypatch.setenv("DATAHUNT_MODEL_CACHE_DIR", str(tmp_path))
    get_settings.cache_clear()
    first = SentenceEncoder(model_zip_path()).encode(["bug fix"])
    (cached,) = model_cache_dir().glob("*.safetensors")
    assert cached.stat().st_size > 1_000_000
    assert np.array_equal(SentenceEncoder(model_zip_path()).encode(["bug fix"]), first)  # read from the cache
    cached.write_bytes(b"x" * cached.stat().st_size)  # same size, unreadable content
    assert np.array_equal(SentenceEncoder(model_zip_path()).encode(["bug fix"]), first)
    assert cached.read_bytes()[:1] != b"x"
    assert cached.parent == tmp_path
    monkeypatch.delenv("DATAHUNT_MODEL_CACHE_DIR")
    get_settings.cache_clear()


def test_the_index_embeds_prepared_queries_in_one_call_and_caches_them() -> None:
    from agents.search.build_vectors import build_vectors
    from agents.search.embedding import default_encoder
    from agents.search.offline import OfflineIndex

    records = [{"id": "a/issue-patch-pairs", "description": "GitHub issues and their patches."}]
    calls: list[list[str]] = []

    class Counting:
        def encode(self, texts: list[str]):  # type: ignore[no-untyped-def]
            calls.append(list(texts))
            return default_encoder().encode(texts)

    index = OfflineIndex(records, vectors=build_vectors(records), encoder=Counting())  # type: ignore[arg-type]
    index.prepare(["bug fix", "program repair", "bug fix"])
    assert calls == [["bug fix", "program repair"]]
    index.rank("bug fix")
    index.rank("program repair task_categories:text-generation")  # the filter is not part of the text
    assert calls == [["bug fix", "program repair"]]


def test_concurrent_encodes_give_the_vectors_of_one_at_a_time_and_restore_blas(encoder: SentenceEncoder) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_info

    def blas_threads() -> list[int]:
        return [int(info["num_threads"]) for info in threadpool_info() if info["user_api"] == "blas"]

    batches = [TEXTS[: i + 1] for i in range(len(TEXTS))] * 3
    before = blas_threads()
    alone = [encoder.encode(batch) for batch in batches]
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(encoder.encode, batches))
    for one, other in zip(alone, together, strict=True):
        assert np.array_equal(one, other)  # bit for bit: the campaign finds the same, however it is scheduled
    assert blas_threads() == before  # the last encode out restored the process's BLAS thread count
