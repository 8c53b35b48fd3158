"""The regeneration loop against the fault-injecting fake server: multi-turn, faults, resume, failover."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from regen_fake_server import FakeServer, write_samples

from core.samples import RegeneratedSample
from inference.chat_template import ChatRenderer
from inference.generation import Reasoning, Sampling
from inference.openai_api import OpenAIChatBackend
from inference.runner import RunConfig, regenerate
from inference.sglang_api import SGLangNativeBackend
from inference.status import read_status


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _config(tmp_path: Path, urls: list[str], **kwargs) -> RunConfig:
    defaults = {"concurrency": 4, "backoff_base_s": 0.01, "backoff_cap_s": 0.05, "reprobe_interval_s": 0.05,
                    "request_timeout_s": 2.0, "status_interval_s": 0.05}
    defaults.update(kwargs)
    return RunConfig(tmp_path / "in.jsonl", tmp_path / "run", urls, **defaults)


def test_multi_turn_answers_build_on_the_regenerated_history(tmp_path: Path, fake_server: FakeServer) -> None:
    write_samples(tmp_path / "in.jsonl", 4, turns=3)
    summary = regenerate(_config(tmp_path, [fake_server.url], sampling=Sampling(seed=1)), OpenAIChatBackend())
    assert summary.done == 4 and summary.failed == 0
    rows = {r["id"]: r for r in _lines(tmp_path / "run" / "regenerated.jsonl")}
    conv = rows["row-1"]["conversations"]
    assert [m["role"] for m in conv] == ["user", "assistant"] * 3
    assert conv[1]["content"] == FakeServer.answer_for("q1 turn0")
    # The third request carried the target's own earlier answers, not the dataset's.
    third = [b for b in fake_server.bodies if b["messages"][-1]["content"] == "q1 turn2"][0]
    assert third["messages"][1]["content"] == FakeServer.answer_for("q1 turn0")
    assert all("dataset answer" not in m["content"] for m in third["messages"])
    meta = rows["row-1"]["meta"]
    assert meta["sampling"] == {"temperature": 0.7, "top_p": 0.95, "max_tokens": 2048, "seed": 1}
    assert len(meta["turns"]) == 3 and meta["api"] == "openai" and meta["completion_tokens"] > 0
    system_row = next(r for r in rows.values() if r["conversations"][0]["role"] == "system")
    assert system_row["conversations"][0]["content"] == "Be brief."
    assert all(RegeneratedSample.model_validate(r).meta["regenerated"] for r in rows.values())  # the contract


def test_retryable_faults_are_retried_and_row_errors_recorded(tmp_path: Path) -> None:
    server = FakeServer(script=["429", "500", "drop", "timeout"], delay_s=0.0).start()
    try:
        rows = write_samples(tmp_path / "in.jsonl", 10)
        rows.append({"id": "poison", "messages": [{"role": "user", "content": "POISON"}]})
        rows.append({"id": "garbage", "messages": [{"role": "user", "content": "G"}]})
        (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        config = _config(tmp_path, [server.url], concurrency=1, request_timeout_s=0.5)
        summary = regenerate(config, OpenAIChatBackend())
    finally:
        server.stop()
    assert summary.done == 11 and summary.failed == 1
    errors = _lines(tmp_path / "run" / "errors.jsonl")
    assert [e["id"] for e in errors] == ["poison"]
    assert errors[0]["status_code"] == 400 and errors[0]["attempts"] == 1
    assert server.faults["429"] == server.faults["500"] == server.faults["drop"] == server.faults["timeout"] == 1
    done = _lines(tmp_path / "run" / "regenerated.jsonl")
    assert len({r["id"] for r in done}) == len(done) == 11


def test_retries_are_capped_and_the_row_fails_with_the_last_error(tmp_path: Path) -> None:
    server = FakeServer(script=["500"] * 3).start()
    try:
        write_samples(tmp_path / "in.jsonl", 1)
        summary = regenerate(_config(tmp_path, [server.url], concurrency=1, max_attempts=3), OpenAIChatBackend())
    finally:
        server.stop()
    assert summary.failed == 1
    error = _lines(tmp_path / "run" / "errors.jsonl")[0]
    assert error["attempts"] == 3 and error["status_code"] == 500 and "gave up" in error["error"]


def test_garbage_json_is_recorded_on_the_row(tmp_path: Path) -> None:
    server = FakeServer(script=["garbage"]).start()
    try:
        write_samples(tmp_path / "in.jsonl", 2)
        summary = regenerate(_config(tmp_path, [server.url], concurrency=1), OpenAIChatBackend())
    finally:
        server.stop()
    assert summary.failed == 1 and "not JSON" in _lines(tmp_path / "run" / "errors.jsonl")[0]["error"]


def test_target_native_rows_pass_through_and_resume_skips_finished_rows(
        tmp_path: Path, fake_server: FakeServer) -> None:
    rows = write_samples(tmp_path / "in.jsonl", 6)
    rows[0]["needs_regeneration"] = False
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    first = regenerate(_config(tmp_path, [fake_server.url], limit=3), OpenAIChatBackend())
    assert first.done == 3
    native = _lines(tmp_path / "run" / "regenerated.jsonl")[0]
    assert native["meta"]["regenerated"] is False and native["conversations"] == rows[0]["messages"]
    requests_before = fake_server.requests["/v1/chat/completions"]
    second = regenerate(_config(tmp_path, [fake_server.url]), OpenAIChatBackend())
    assert second.skipped == 3 and second.done == 3
    assert fake_server.requests["/v1/chat/completions"] - requests_before == 3
    ids = [r["id"] for r in _lines(tmp_path / "run" / "regenerated.jsonl")]
    assert len(ids) == len(set(ids)) == 6
    status = read_status(tmp_path / "run")
    assert status["state"] == "finished" and status["rows"]["done"] == 6 and status["rows"]["pending"] == 0


def test_retry_failed_moves_a_row_from_errors_to_regenerated(tmp_path: Path, fake_server: FakeServer) -> None:
    (tmp_path / "in.jsonl").write_text(
        json.dumps({"id": "p", "messages": [{"role": "user", "content": "POISON"}]}) + "\n"
    )
    regenerate(_config(tmp_path, [fake_server.url]), OpenAIChatBackend())
    assert [e["id"] for e in _lines(tmp_path / "run" / "errors.jsonl")] == ["p"]
    (tmp_path / "in.jsonl").write_text(
        json.dumps({"id": "p", "messages": [{"role": "user", "content": "fixed"}]}) + "\n"
    )
    again = regenerate(_config(tmp_path, [fake_server.url]), OpenAIChatBackend())
    assert again.skipped == 1 and again.done == 0  # failed rows stay failed without --retry-failed
    regenerate(_config(tmp_path, [fake_server.url], retry_failed=True), OpenAIChatBackend())
    assert _lines(tmp_path / "run" / "errors.jsonl") == []
    assert [r["id"] for r in _lines(tmp_path / "run" / "regenerated.jsonl")] == ["p"]


def test_native_api_end_to_end_with_reasoning_dropped(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    server = FakeServer(reasoning="let me think").start()
    try:
        write_samples(tmp_path / "in.jsonl", 3, turns=2)
        backend = SGLangNativeBackend(ChatRenderer.load(tiny_tokenizer_dir), model="m", reasoning=Reasoning.DROP)
        summary = regenerate(_config(tmp_path, [server.url], reasoning=Reasoning.DROP), backend)
    finally:
        server.stop()
    assert summary.done == 3
    row = _lines(tmp_path / "run" / "regenerated.jsonl")[0]
    assert all("think" not in m["content"] for m in row["conversations"])
    assert row["meta"]["spec_verify_ct"] == 10 and row["meta"]["api"] == "sglang"
    assert row["meta"]["turns"][0]["reasoning_chars"] == len("let me think")
    assert server.requests["/generate"] == 6


@pytest.mark.slow
def test_three_endpoints_one_dies_mid_run_and_comes_back(tmp_path: Path) -> None:
    servers = [FakeServer(delay_s=0.03, seed=i).start() for i in range(3)]
    victim = servers[1]
    port = victim.port
    write_samples(tmp_path / "in.jsonl", 400)
    revived: list[FakeServer] = []

    def chaos() -> None:
        while victim.requests["/v1/chat/completions"] < 20:
            time.sleep(0.005)
        victim.stop()
        time.sleep(0.3)
        revived.append(FakeServer(port=port, delay_s=0.03).start())

    thread = threading.Thread(target=chaos)
    thread.start()
    try:
        summary = regenerate(_config(tmp_path, [s.url for s in servers], concurrency=4), OpenAIChatBackend())
    finally:
        thread.join()
        for server in servers + revived:
            server.stop()
    ids = [r["id"] for r in _lines(tmp_path / "run" / "regenerated.jsonl")]
    assert summary.failed == 0 and len(ids) == len(set(ids)) == 400
    endpoint = read_status(tmp_path / "run")["endpoints"][1]
    assert endpoint["ejections"] >= 1
    assert revived[0].requests["/v1/chat/completions"] > 0  # re-admitted and given work again


def test_retry_after_is_honoured_within_the_cap() -> None:
    import asyncio

    from inference.generation import RetryableError, new_session, post_json

    server = FakeServer(script=["429"]).start()

    async def run() -> float | None:
        async with new_session(connections=1, connect_timeout_s=1, request_timeout_s=1) as session:
            try:
                await post_json(session, server.url + "/v1/chat/completions", {"messages": []})
            except RetryableError as exc:
                return exc.retry_after_s
        return None

    try:
        assert asyncio.run(run()) == 0.25
    finally:
        server.stop()


def test_several_answers_per_prompt_each_with_its_own_seed_and_growing_on_resume(
        tmp_path: Path, fake_server: FakeServer) -> None:
    rows = write_samples(tmp_path / "in.jsonl", 3)
    for i, row in enumerate(rows):
        row["id"] = f"p{i}"
    rows[2]["needs_regeneration"] = False
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    first = regenerate(_config(tmp_path, [fake_server.url], sampling=Sampling(seed=5)), OpenAIChatBackend())
    assert first.done == 3
    before = fake_server.requests["/v1/chat/completions"]
    grown = regenerate(_config(tmp_path, [fake_server.url], sampling=Sampling(seed=5), samples=3), OpenAIChatBackend())
    # Only the new answers were asked for: two more for each of the two prompts to regenerate, none for the native row.
    assert grown.skipped == 3 and grown.done == 4 and grown.total == 7
    assert fake_server.requests["/v1/chat/completions"] - before == 4
    out = {r["id"]: r for r in _lines(tmp_path / "run" / "regenerated.jsonl")}
    first_id, native_id = rows[0]["id"], rows[2]["id"]
    assert set(out) == {first_id, f"{first_id}#s1", f"{first_id}#s2", rows[1]["id"], f"{rows[1]['id']}#s1",
                        f"{rows[1]['id']}#s2", native_id}
    extra = out[f"{first_id}#s2"]["meta"]
    assert extra["sample"] == 2 and extra["prompt_id"] == first_id and extra["sampling"]["seed"] == 7
    assert out[f"{first_id}#s2"]["conversations"][:2] == out[first_id]["conversations"][:2]  # the same prompt
    question = next(m["content"] for m in rows[0]["messages"] if m["role"] == "user")
    seeds = sorted(b["seed"] for b in fake_server.bodies if b["messages"][-1]["content"] == question)
    assert seeds == [5, 6, 7]  # a server answers one prompt with one seed identically: each sample has its own
    assert out[native_id]["meta"]["regenerated"] is False


def test_sample_ids_that_clash_with_input_ids_are_refused(tmp_path: Path, fake_server: FakeServer) -> None:
    from inference.records import InputError

    rows = write_samples(tmp_path / "in.jsonl", 2)
    rows[0]["id"], rows[1]["id"] = "a", "a#s1"
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match="both an input id and a sample id"):
        regenerate(_config(tmp_path, [fake_server.url], samples=2), OpenAIChatBackend())
    with pytest.raises(InputError, match="at least 1"):
        regenerate(_config(tmp_path, [fake_server.url], samples=0), OpenAIChatBackend())
