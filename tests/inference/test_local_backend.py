"""The in-process backends: plain batched `generate` (left-padded answers equal unbatched ones) and the
continuous-batching engine (its answers equal plain `generate`'s), through the runner and the CLI."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from regen_fake_server import write_samples
from typer.testing import CliRunner

from inference.generation import Sampling
from inference.local_backend import LocalTransformersBackend
from inference.runner import RunConfig, regenerate
from server.cli import app


def _tiny_models() -> Any:
    path = Path(__file__).resolve().parents[1] / "training" / "tiny_models.py"
    spec = importlib.util.spec_from_file_location("tiny_models_for_local_backend", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved random tiny Llama and its word-level tokenizer with a chat template."""
    torch.set_num_threads(1)
    tiny = _tiny_models()
    tokenizer = tiny.make_tokenizer()
    folder = tmp_path_factory.mktemp("tiny_target")
    tiny.make_llama(len(tokenizer), layers=2).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _prompts(n: int) -> list[list[dict[str, str]]]:
    # Different lengths, so the batch really is left-padded.
    return [[{"role": "user", "content": " ".join(f"w{(7 * i + j) % 200}" for j in range(2 + i % 5))}]
            for i in range(n)]


async def _answer_all(backend: LocalTransformersBackend, histories: list[list[dict[str, str]]], sampling: Sampling
                      ) -> list[Any]:
    import asyncio

    try:
        return list(await asyncio.gather(*(backend.generate_turn(h, sampling) for h in histories)))
    finally:
        await backend.aclose()


def test_batched_greedy_answers_equal_one_prompt_at_a_time(tiny_dir: Path) -> None:
    import asyncio

    greedy = Sampling(temperature=0, max_tokens=8)
    histories = _prompts(6)
    batched = LocalTransformersBackend.load(tiny_dir, device="cpu", max_batch=64, engine="generate")
    together = asyncio.run(_answer_all(batched, histories, greedy))
    assert batched.batch_sizes == [6]  # all six turns went through one generate call
    alone = []
    for history in histories:
        single = LocalTransformersBackend.load(tiny_dir, device="cpu", max_batch=1, engine="generate")
        alone.append(asyncio.run(_answer_all(single, [history], greedy))[0])
    assert [r.content for r in together] == [r.content for r in alone]
    assert [r.completion_tokens for r in together] == [r.completion_tokens for r in alone]
    assert all(r.prompt_tokens and r.prompt_tokens > 2 for r in together)
    assert {r.finish_reason for r in together} <= {"stop", "length"}


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["generate", "static"])
def test_seeded_sampling_is_reproducible_and_differs_from_greedy(tiny_dir: Path, engine: str) -> None:
    import asyncio

    histories = _prompts(4)
    hot = Sampling(temperature=1.5, top_p=1.0, max_tokens=12, seed=3)
    def load() -> Any:
        return LocalTransformersBackend.load(tiny_dir, device="cpu", engine=engine)

    first = asyncio.run(_answer_all(load(), histories, hot))
    again = asyncio.run(_answer_all(load(), histories, hot))
    greedy = asyncio.run(_answer_all(load(), histories, Sampling(temperature=0, max_tokens=12)))
    assert [r.content for r in first] == [r.content for r in again]
    assert [r.content for r in first] != [r.content for r in greedy]


def test_runner_batches_turns_writes_the_journal_and_resumes(tiny_dir: Path, tmp_path: Path) -> None:
    write_samples(tmp_path / "in.jsonl", 10, turns=2, prefix="w")
    backend = LocalTransformersBackend.load(tiny_dir, device="cpu", max_batch=16, engine="generate")
    config = RunConfig(input_path=tmp_path / "in.jsonl", out_dir=tmp_path / "run", endpoints=[],
                       concurrency=16, sampling=Sampling(temperature=0.8, max_tokens=6, seed=1), model="tiny")
    summary = regenerate(config, backend)
    assert (summary.done, summary.failed) == (10, 0)
    assert max(backend.batch_sizes) > 1  # concurrent turns shared generate calls
    rows = [json.loads(line) for line in (tmp_path / "run" / "regenerated.jsonl").read_text().splitlines()]
    assert len(rows) == 10
    for row in rows:
        roles = [t["role"] for t in row["conversations"] if t["role"] != "system"]
        assert roles == ["user", "assistant", "user", "assistant"]
        assert row["meta"]["api"] == "local" and row["meta"]["server"] == f"in-process transformers ({tiny_dir.name})"
    run_file = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (run_file["endpoints"], run_file["backend"]) == ([], backend.describe())
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert [e["url"] for e in status["endpoints"]] == [backend.describe()]
    # Runs of earlier versions named the local backend by a pseudo-URL in run.json and every row: they resume.
    old = "local://transformers"
    (tmp_path / "run" / "run.json").write_text(json.dumps({**run_file, "endpoints": [old]}))
    (tmp_path / "run" / "regenerated.jsonl").write_text("".join(
        json.dumps({**r, "meta": {**r["meta"], "server": old}}) + "\n" for r in rows))
    again = regenerate(config, LocalTransformersBackend.load(tiny_dir, device="cpu"))
    assert (again.done, again.skipped) == (0, 10)


def test_an_in_process_backend_takes_no_endpoints(tiny_dir: Path, tmp_path: Path) -> None:
    from inference.records import InputError

    write_samples(tmp_path / "in.jsonl", 1, prefix="w")
    backend = LocalTransformersBackend.load(tiny_dir, device="cpu", engine="generate")
    assert not backend.has_endpoints
    config = RunConfig(input_path=tmp_path / "in.jsonl", out_dir=tmp_path / "run", endpoints=["http://127.0.0.1:9"])
    with pytest.raises(InputError, match="runs in this process: it takes no endpoints"):
        regenerate(config, backend)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("attention", ["sdpa", "matmul"])
def test_engine_answers_equal_plain_generate_greedy_with_fewer_slots_than_turns(
        tiny_dir: Path, attention: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from inference.decoding.static_llama import StaticLlama
    from inference.engine_backend import LocalEngineBackend

    built: list[str] = []  # the decode attention of every runner the engine builds
    real_init = StaticLlama.__init__

    def spy(self: StaticLlama, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        built.append(self.decode_attention)

    monkeypatch.setattr(StaticLlama, "__init__", spy)

    greedy = Sampling(temperature=0, max_tokens=10)
    histories = _prompts(7)
    plain = asyncio.run(_answer_all(LocalTransformersBackend.load(tiny_dir, device="cpu", engine="generate"),
                                    histories, greedy))
    engine = LocalTransformersBackend.load(tiny_dir, device="cpu", max_batch=3, max_prompt_tokens=64,
                                           decode_attention=attention)
    assert isinstance(engine, LocalEngineBackend)
    answers = asyncio.run(_answer_all(engine, histories, greedy))
    assert built == [attention]
    assert [r.content for r in answers] == [r.content for r in plain]
    assert [r.completion_tokens for r in answers] == [r.completion_tokens for r in plain]
    assert [r.finish_reason for r in answers] == [r.finish_reason for r in plain]
    assert engine.stats.finished == 7 and engine.stats.prefills >= 3  # slots were refilled
    assert engine.engine is None  # closed: its cache is freed


def test_engine_refuses_a_prompt_that_cannot_fit_as_a_row_error(tiny_dir: Path) -> None:
    import asyncio

    from inference.generation import RowError

    engine = LocalTransformersBackend.load(tiny_dir, device="cpu", max_batch=2, max_prompt_tokens=8)
    long = [{"role": "user", "content": " ".join(["w1"] * 30)}]
    with pytest.raises(RowError, match="exceeds"):
        asyncio.run(_answer_all(engine, [long], Sampling(temperature=0, max_tokens=4)))


def test_runner_through_the_engine_resumes(tiny_dir: Path, tmp_path: Path) -> None:
    write_samples(tmp_path / "in.jsonl", 10, turns=2, prefix="w")
    config = RunConfig(input_path=tmp_path / "in.jsonl", out_dir=tmp_path / "run", endpoints=[],
                       concurrency=4, sampling=Sampling(temperature=0.8, max_tokens=6, seed=1), model="tiny")
    summary = regenerate(config, LocalTransformersBackend.load(tiny_dir, device="cpu", max_batch=4))
    assert (summary.done, summary.failed) == (10, 0)
    rows = [json.loads(line) for line in (tmp_path / "run" / "regenerated.jsonl").read_text().split("\n") if line]
    assert all(len(r["conversations"]) >= 4 and r["meta"]["api"] == "local" for r in rows)
    again = regenerate(config, LocalTransformersBackend.load(tiny_dir, device="cpu", max_batch=4))
    assert (again.done, again.skipped) == (0, 10)


def test_a_run_with_fewer_rows_than_slots_sizes_the_engine_to_its_rows(tiny_dir: Path, tmp_path: Path) -> None:
    """3 prompts at --concurrency 32: the engine is built with 3 slots (every decode step computes all of them),
    and a resumed run with nothing left starts no engine at all."""
    from inference.engine_backend import LocalEngineBackend

    write_samples(tmp_path / "in.jsonl", 3, turns=2, prefix="w")
    config = RunConfig(input_path=tmp_path / "in.jsonl", out_dir=tmp_path / "run", endpoints=[],
                       concurrency=32, sampling=Sampling(temperature=0, max_tokens=6), model="tiny")
    backend = LocalTransformersBackend.load(tiny_dir, device="cpu", max_batch=32)
    assert isinstance(backend, LocalEngineBackend)
    assert (regenerate(config, backend).done, backend.slots) == (3, 3)
    assert backend.stats is not None and backend.stats.slot_steps == 3 * backend.stats.steps
    again = LocalTransformersBackend.load(tiny_dir, device="cpu", max_batch=32)
    assert (regenerate(config, again).skipped, again.slots, again.stats) == (3, 32, None)


def test_cli_local_api_runs_and_bad_use_is_one_line(tiny_dir: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    write_samples(tmp_path / "in.jsonl", 3, prefix="w")
    ok = runner.invoke(app, ["regen", "--api", "local", "--model", str(tiny_dir), "--input", str(tmp_path / "in.jsonl"),
                             "--out", str(tmp_path / "run"), "--max-tokens", "4", "--seed", "0"])
    assert ok.exit_code == 0, ok.output
    assert "3 regenerated, 0 failed" in ok.output
    missing = runner.invoke(app, ["regen", "--api", "local", "--input", str(tmp_path / "in.jsonl"),
                                  "--out", str(tmp_path / "run2")])
    assert missing.exit_code == 2
    assert "--api local needs --model DIR" in missing.output
    no_server = runner.invoke(app, ["regen", "--input", str(tmp_path / "in.jsonl"), "--out", str(tmp_path / "run3")])
    assert no_server.exit_code == 2
    assert "pass --server URL" in no_server.output


def test_cli_refuses_an_engine_cache_larger_than_memory_in_one_line(tiny_dir: Path, tmp_path: Path) -> None:
    from inference.engine_backend import LocalEngineBackend

    engine = LocalTransformersBackend.load(tiny_dir, device="cpu", max_batch=4, max_prompt_tokens=100)
    assert isinstance(engine, LocalEngineBackend)
    # The tiny Llama: 2 layers x 2 kv heads x 16 dims x 4 bytes, keys and values, per position.
    assert engine.kv_bytes(28) == 2 * 2 * 2 * 16 * 4 * 4 * 128
    engine.check_fits(28)
    write_samples(tmp_path / "in.jsonl", 2, prefix="w")
    huge = CliRunner().invoke(app, ["regen", "--api", "local", "--model", str(tiny_dir), "--input",
                                    str(tmp_path / "in.jsonl"), "--out", str(tmp_path / "run"),
                                    "--concurrency", "4000000", "--max-tokens", "100000"])
    assert huge.exit_code == 2 and "KV cache needs" in huge.output and "lower --concurrency" in huge.output
    assert not (tmp_path / "run" / "regenerated.jsonl").exists()


def test_the_engine_reports_tokens_of_answers_in_flight_and_the_status_counts_them(tiny_dir: Path) -> None:
    """On a CPU every row is in flight at once and none finishes for minutes: the status used to show
    0.0 tok/s then. The engine counts what its live rows have written; the status adds it to the rate."""
    from transformers import LlamaForCausalLM

    from inference.decoding.continuous import ContinuousEngine, Request
    from inference.decoding.static_llama import StaticLlama
    from inference.status_tracker import StatusTracker

    model = LlamaForCausalLM.from_pretrained(tiny_dir).eval()
    engine = ContinuousEngine(StaticLlama(model, slots=2, max_len=80), set(), seed=0, sync_every=4, use_graph=False)
    for n in (3, 5):
        engine.submit(Request(ids=list(range(6, 6 + n)), max_new=60))
    assert engine.pump() == []  # nothing finished after 4 steps of 60
    assert engine.stats.in_flight_tokens == 2 * (1 + 4)  # each row: its prefill's token and 4 decoded

    tracker = StatusTracker(total=2)
    idle = tracker.snapshot()
    assert idle["tok_s"]["last_minute"] == 0 and idle["tok_s"]["overall"] == 0
    busy = tracker.snapshot(in_flight_tokens=engine.stats.in_flight_tokens)
    assert busy["tok_s"]["last_minute"] > 0 and busy["tok_s"]["overall"] > 0
    assert busy["rows"]["done"] == 0
