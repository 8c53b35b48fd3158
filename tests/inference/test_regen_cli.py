"""The `regen`, `monitor` and `plan` commands: the target-model check, one-line errors, monitor and plan output."""

from __future__ import annotations

import json
from pathlib import Path

from regen_fake_server import FakeServer, write_samples
from typer.testing import CliRunner

from server.cli import app

runner = CliRunner()


def _manifest(path: Path, model: str) -> Path:
    path.write_text(json.dumps({"schema_version": 1, "target": {"model": model}, "sources": [
        {"hub_id": "org/chat-set", "category": "general_chat", "max_rows": 100}], "budget": {"total": 100}}))
    return path


def test_regen_refuses_a_server_serving_another_model_unless_forced(tmp_path: Path) -> None:
    server = FakeServer(model="someone/Other-Model").start()
    try:
        write_samples(tmp_path / "in.jsonl", 3)
        manifest = _manifest(tmp_path / "m.json", "meta-llama/Llama-3.1-8B-Instruct")
        args = ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", server.url, "--out", str(tmp_path / "run"),
                "--manifest", str(manifest)]
        refused = runner.invoke(app, args)
        assert refused.exit_code == 1
        assert "serves 'someone/Other-Model', not the manifest's target" in refused.output
        assert not (tmp_path / "run" / "regenerated.jsonl").exists()
        forced = runner.invoke(app, [*args, "--force"])
        assert forced.exit_code == 0, forced.output
        assert "3 regenerated, 0 failed" in forced.output
    finally:
        server.stop()


def test_matching_model_runs_and_monitor_shows_the_finished_run(tmp_path: Path, fake_server: FakeServer) -> None:
    write_samples(tmp_path / "in.jsonl", 5)
    _manifest(tmp_path / "manifest.json", "/models/Llama-3.1-8B-Instruct")  # found beside the input
    run = tmp_path / "run"
    result = runner.invoke(app, ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", fake_server.url,
                                 "--out", str(run), "--temperature", "0", "--seed", "3"])
    assert result.exit_code == 0, result.output
    row = json.loads((run / "regenerated.jsonl").read_text().splitlines()[0])
    assert row["meta"]["sampling"] == {"temperature": 0.0, "top_p": 0.95, "max_tokens": 2048, "seed": 3}
    assert row["meta"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    shown = runner.invoke(app, ["monitor", str(run), "--once"])
    assert shown.exit_code == 0 and "5 done · 0 failed · 0 pending" in shown.output and "finished" in shown.output
    raw = runner.invoke(app, ["monitor", str(run), "--json"])
    assert json.loads(raw.output)["rows"]["done"] == 5


def test_bad_input_is_one_line_and_non_zero(tmp_path: Path, fake_server: FakeServer) -> None:
    missing = runner.invoke(app, ["regen", "--input", str(tmp_path / "nope.jsonl"), "--server", fake_server.url,
                                  "--out", str(tmp_path / "run")])
    assert missing.exit_code == 2 and missing.output.strip().count("\n") == 0 and "does not exist" in missing.output
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    bad = runner.invoke(app, ["regen", "--input", str(tmp_path / "bad.jsonl"), "--server", fake_server.url,
                              "--out", str(tmp_path / "run")])
    assert bad.exit_code == 1 and "bad.jsonl:1: not valid JSON" in bad.output and "Traceback" not in bad.output
    reasoning = runner.invoke(app, ["regen", "--input", str(tmp_path / "bad.jsonl"), "--server", fake_server.url,
                                    "--out", str(tmp_path / "run"), "--reasoning", "maybe"])
    assert reasoning.exit_code == 2 and "served-off, served-on, keep or drop" in reasoning.output
    no_tokenizer = runner.invoke(app, ["regen", "--input", str(tmp_path / "bad.jsonl"), "--server", fake_server.url,
                                       "--out", str(tmp_path / "run"), "--api", "sglang"])
    assert no_tokenizer.exit_code == 1 and "--tokenizer" in no_tokenizer.output
    nothing = runner.invoke(app, ["monitor", str(tmp_path), "--once"])
    assert nothing.exit_code == 1 and "no status file" in nothing.output


def test_plan_measures_the_server_and_writes_markdown_and_json(tmp_path: Path) -> None:
    server = FakeServer(delay_s=0.01).start()
    try:
        write_samples(tmp_path / "samples.jsonl", 40, turns=2)
        _manifest(tmp_path / "manifest.json", "meta-llama/Llama-3.1-8B-Instruct")
        result = runner.invoke(app, ["plan", "--curated", str(tmp_path), "--server", server.url, "--probe-rows", "8"])
    finally:
        server.stop()
    assert result.exit_code == 0, result.output
    plan = json.loads((tmp_path / "regen_plan.json").read_text())
    assert plan["rows"]["to_regenerate"] == 40 and plan["rows"]["user_turns_to_answer"] == 80
    assert plan["probe"]["requests"] == 8 and plan["probe"]["tok_s"] > 0
    assert plan["time_to_finish_s"]["low"] <= plan["time_to_finish_s"]["expected"] <= plan["time_to_finish_s"]["high"]
    assert plan["target"] == "meta-llama/Llama-3.1-8B-Instruct"
    text = (tmp_path / "regen_plan.md").read_text()
    assert "Time to finish" in text and "org/chat-set" in text and "Evaluation plan" in text
    assert plan["manifest"]["path"] == str((tmp_path / "manifest.json").resolve())


def test_plan_reads_a_manifest_without_target_beside_the_curated_set(tmp_path: Path, fake_server: FakeServer) -> None:
    curated = tmp_path / "curated"
    curated.mkdir()
    write_samples(curated / "samples.jsonl", 4)
    (curated / "manifest.json").write_text(json.dumps({"schema_version": 1, "sources": [
        {"hub_id": "openai/gsm8k", "category": "math"}]}))
    result = runner.invoke(app, ["plan", "--curated", str(curated), "--server", fake_server.url, "--probe-rows", "2"])
    assert result.exit_code == 0, result.output
    text = (curated / "regen_plan.md").read_text()
    assert f"not named by the manifest (`{(curated / 'manifest.json').resolve()}`)" in text
    assert "no manifest" not in text and "openai/gsm8k" in text


def test_native_api_through_the_cli_sends_token_ids_by_default(tmp_path: Path, fake_server: FakeServer,
                                                                tiny_tokenizer_dir: Path) -> None:
    write_samples(tmp_path / "in.jsonl", 3, turns=2)
    result = runner.invoke(app, ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", fake_server.url,
                                 "--out", str(tmp_path / "run"), "--api", "sglang",
                                 "--tokenizer", str(tiny_tokenizer_dir),
                                 "--reasoning", "disable", "--max-tokens", "64"])
    assert result.exit_code == 0, result.output
    assert fake_server.requests["/generate"] == 6
    assert fake_server.requests["/server_info"] >= 1 and fake_server.requests["/get_server_info"] == 0
    sent = fake_server.bodies[0]
    assert "input_ids" in sent and "text" not in sent and sent["sampling_params"]["max_new_tokens"] == 64
    row = json.loads((tmp_path / "run" / "regenerated.jsonl").read_text().splitlines()[0])
    assert row["meta"]["api"] == "sglang" and row["meta"]["spec_verify_ct"] == 10
    assert (row["meta"]["spec_num_correct_drafts"], row["meta"]["spec_num_proposed_drafts"]) == (24, 30)
    assert row["meta"]["turns"][0]["spec_accept_length"] == 3.4


def test_the_native_prompt_reaches_sglang_with_one_bos(tmp_path: Path, bos_tokenizer_dir: Path) -> None:
    from transformers import AutoTokenizer

    write_samples(tmp_path / "in.jsonl", 2, turns=2)
    server = FakeServer(tokenizer=AutoTokenizer.from_pretrained(str(bos_tokenizer_dir))).start()
    args = ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", server.url, "--api", "sglang",
            "--tokenizer", str(bos_tokenizer_dir), "--max-tokens", "8"]
    try:
        ids = runner.invoke(app, [*args, "--out", str(tmp_path / "ids")])
        sent_ids = list(server.prompt_ids)
        text = runner.invoke(app, [*args, "--out", str(tmp_path / "text"), "--send-text"])
        sent_text = server.prompt_ids[len(sent_ids):]
    finally:
        server.stop()
    assert ids.exit_code == 0 and text.exit_code == 0, ids.output + text.output
    assert len(sent_ids) == 4 and all(p[0] == 1 and p.count(1) == 1 for p in sent_ids)  # one BOS, every turn
    assert len(sent_text) == 4 and all(p[:2] == [1, 1] for p in sent_text)  # text: SGLang adds a second one
    second_turn = [p for p in sent_ids if p.count(3) == 2]  # <|user|> twice: the history holds the first answer
    assert second_turn and all(p.count(1) == 1 for p in second_turn)


def test_a_seed_sglang_will_ignore_is_warned_about(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    write_samples(tmp_path / "in.jsonl", 1)
    for deterministic, warned in ((False, True), (True, False)):
        server = FakeServer(info={"enable_deterministic_inference": deterministic}).start()
        try:
            result = runner.invoke(app, ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", server.url,
                                         "--out", str(tmp_path / f"run{deterministic}"), "--api", "sglang",
                                         "--tokenizer", str(tiny_tokenizer_dir), "--seed", "5"])
        finally:
            server.stop()
        assert result.exit_code == 0, result.output
        assert ("--enable-deterministic-inference" in result.output) is warned
        assert server.bodies[-1]["sampling_params"]["sampling_seed"] == 5


def test_answers_without_spec_counters_are_kept_and_summed_over_those_that_have_them(
        tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    write_samples(tmp_path / "in.jsonl", 1, turns=2)
    server = FakeServer(counters_every=2).start()  # the first turn's answer verified nothing
    try:
        result = runner.invoke(app, ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", server.url,
                                     "--out", str(tmp_path / "run"), "--api", "sglang",
                                     "--tokenizer", str(tiny_tokenizer_dir)])
    finally:
        server.stop()
    assert result.exit_code == 0, result.output
    row = json.loads((tmp_path / "run" / "regenerated.jsonl").read_text().splitlines()[0])
    assert "spec_verify_ct" not in row["meta"]["turns"][0] and row["meta"]["turns"][1]["spec_verify_ct"] == 5
    assert row["meta"]["spec_verify_ct"] == 5


def test_no_server_up_at_start_fails_fast_with_one_line(tmp_path: Path) -> None:
    dead = FakeServer().start()
    url = dead.url
    dead.stop()
    write_samples(tmp_path / "in.jsonl", 2)
    result = runner.invoke(app, ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", url,
                                 "--out", str(tmp_path / "run")])
    assert result.exit_code == 1
    assert result.output.startswith("error: no server answers its health check") and "Traceback" not in result.output
    assert json.loads((tmp_path / "run" / "status.json").read_text())["state"] == "failed"


def _rows(path: Path, questions: dict[str, str]) -> Path:
    rows = [{"id": f"r{i}", "category": category, "needs_regeneration": True,
             "messages": [{"role": "user", "content": question}]}
            for i, (question, category) in enumerate(questions.items())]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_answers_cut_at_the_limit_or_looping_are_counted_per_category_and_warned(
    tmp_path: Path, fake_server: FakeServer
) -> None:
    source = _rows(tmp_path / "in.jsonl", {"LONG 1": "math", "LONG 2": "math", "LONG 3": "math", "fine": "math",
                                           "LOOP a": "general_chat", "LOOP b": "general_chat", "ok": "tool_use"})
    run = tmp_path / "run"
    result = runner.invoke(app, ["regen", "--input", str(source), "--server", fake_server.url, "--out", str(run),
                                 "--max-tokens", "64"])
    assert result.exit_code == 0, result.output
    quality = json.loads((run / "status.json").read_text())["quality"]
    assert quality["math"] == {"rows": 4, "cut_at_limit": 3, "cut_share": 0.75, "repetitive": 0,
                               "repetition_share": 0.0}
    assert quality["general_chat"]["repetitive"] == 2 and quality["tool_use"]["cut_at_limit"] == 0
    assert "warning: math: 3 of 4 answers cut at the token limit (--max-tokens 64)" in result.stderr
    assert "warning: general_chat: 2 of 2 answers repeat a phrase of 8 words (looping)" in result.stderr
    assert "tool_use" not in result.stderr and "warning" not in result.stdout
    shown = runner.invoke(app, ["monitor", str(run), "--once"])
    assert "answer quality" in shown.output and "3 (75%)" in shown.output
    # a resumed run starts from the rows earlier runs finished
    (run / "status.json").unlink()
    again = runner.invoke(app, ["regen", "--input", str(source), "--server", fake_server.url, "--out", str(run),
                                "--max-tokens", "64"])
    assert again.exit_code == 0 and json.loads((run / "status.json").read_text())["quality"] == quality


def test_empty_input_is_an_error(tmp_path: Path, fake_server: FakeServer) -> None:
    (tmp_path / "empty.jsonl").write_text("\n")
    result = runner.invoke(app, ["regen", "--input", str(tmp_path / "empty.jsonl"), "--server", fake_server.url,
                                 "--out", str(tmp_path / "run")])
    assert result.exit_code == 1 and "holds no rows to regenerate" in result.output
    assert not (tmp_path / "run").exists()


def test_resuming_with_other_sampling_settings_is_refused_unless_forced(
        tmp_path: Path, fake_server: FakeServer) -> None:
    write_samples(tmp_path / "in.jsonl", 3)
    args = ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", fake_server.url, "--out", str(tmp_path / "run")]
    assert runner.invoke(app, [*args, "--limit", "2"]).exit_code == 0
    refused = runner.invoke(app, [*args, "--temperature", "0.2"])
    assert refused.exit_code == 1 and "was started with sampling" in refused.output and "--force" in refused.output
    assert len((tmp_path / "run" / "regenerated.jsonl").read_text().splitlines()) == 2
    forced = runner.invoke(app, [*args, "--temperature", "0.2", "--force"])
    assert forced.exit_code == 0 and "1 regenerated" in forced.output


def test_a_llama_cpp_server_named_by_its_gguf_file_is_told_to_use_alias(tmp_path: Path) -> None:
    """llama.cpp's /v1/models reports the GGUF path as the model id; the refusal says how to name it instead."""
    write_samples(tmp_path / "in.jsonl", 3)
    manifest = _manifest(tmp_path / "m.json", "google/gemma-3-270m-it")
    for model, refused_expected in (("/models/gemma-3-270m-it-Q4_K_M.gguf", True), ("google/gemma-3-270m-it", False)):
        server = FakeServer(model=model).start()
        try:
            result = runner.invoke(app, ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", server.url,
                                         "--out", str(tmp_path / f"run{refused_expected}"),
                                         "--manifest", str(manifest)])
        finally:
            server.stop()
        if refused_expected:
            assert result.exit_code == 1
            assert "start llama-server with --alias google/gemma-3-270m-it" in result.output
        else:  # served under the alias: the same model, no --force needed
            assert result.exit_code == 0, result.output
            assert "next: datahunt train --data" in result.output


def test_sample_spreads_a_trial_run_over_the_categories(tmp_path: Path, fake_server: FakeServer) -> None:
    """A curated set lists its rows category by category: `--limit 6` takes six of the first category, while
    `--sample 6` takes two of each of the three, in input order."""
    rows = [{"id": f"{cat}-{i}", "category": cat, "needs_regeneration": True,
             "messages": [{"role": "user", "content": f"question {i} about {cat}"}]}
            for cat in ("math", "code_review", "tool_use") for i in range(10)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", fake_server.url]

    def categories(run: str) -> list[str]:
        out = (tmp_path / run / "regenerated.jsonl").read_text().splitlines()
        return sorted(json.loads(line)["id"].split("-")[0] for line in out)

    assert runner.invoke(app, [*base, "--out", str(tmp_path / "first"), "--limit", "6"]).exit_code == 0
    assert categories("first") == ["math"] * 6
    sampled = runner.invoke(app, [*base, "--out", str(tmp_path / "spread"), "--sample", "6"])
    assert sampled.exit_code == 0, sampled.output
    assert categories("spread") == ["code_review"] * 2 + ["math"] * 2 + ["tool_use"] * 2
    both = runner.invoke(app, [*base, "--out", str(tmp_path / "x"), "--sample", "6", "--limit", "3"])
    assert both.exit_code == 2 and "not both" in both.output


def test_ctrl_c_of_regen_says_interrupted_and_no_cancelled_error_line(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    server = FakeServer(delay_s=0.5).start()
    try:
        write_samples(tmp_path / "in.jsonl", 40)
        run = subprocess.Popen([sys.executable, "-c", "from server.cli import app; app()", "regen", "--input",
                                str(tmp_path / "in.jsonl"), "--server", server.url, "--out", str(tmp_path / "run"),
                                "--concurrency", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not (tmp_path / "run" / "status.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        run.send_signal(signal.SIGINT)
        _out, err = run.communicate(timeout=60)
    finally:
        server.stop()
    assert run.returncode == 130 and "CancelledError" not in err and "Traceback" not in err, err
    assert "interrupted; run the same command again to resume" in err
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "interrupted" and "CancelledError" not in (status["error"] or "")
    shown = runner.invoke(app, ["monitor", str(tmp_path / "run"), "--once"])
    assert "CancelledError" not in shown.output and "stopped by the user" in shown.output
