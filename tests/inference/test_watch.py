"""`datahunt watch` against a local server answering with recorded vLLM and SGLang shapes, on the CPU.

The vLLM answers are the recorded ones (`tests/data/recorded/vllm/`, a real vLLM 0.32.0 CPU server) with the
counter values replaced by a script: each `/metrics` request is answered by the next reading of the script,
so what the watcher sees does not depend on timing. The real-server version of these checks is
`test_watch_realserver.py` (marked `vllm`). Checked here: the readings, `--once` (exit 1 on an alert, 0 when
healthy), and the loop: a healthy stretch, a restart (no alarm), then a draft fed the wrong layers (the
position-0 alert, on stderr and to the webhook), with the watcher's own `/metrics` read by prometheus_client's
parser while it runs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from core.draft_expectations import DraftExpectations, RoundCost, SetAcceptance, expectations_bytes
from inference.spec_readings import sglang_totals, vllm_totals
from server.cli import app

REPO = Path(__file__).resolve().parents[2]
RECORDED = REPO / "tests" / "data" / "recorded"
METRICS = (RECORDED / "vllm" / "metrics_after_6_prompts.txt").read_text()


def test_vllm_readings_from_its_recorded_metrics() -> None:
    totals = vllm_totals(METRICS)
    assert totals is not None
    assert (totals.rounds, totals.accepted, totals.tokens, totals.requests) == (313, 65, 384, 6)
    assert totals.per_position == (61, 4, 0, 0, 0) and totals.running == 0
    assert totals.epoch == pytest.approx(1.79621428201e9)
    without = "\n".join(line for line in METRICS.splitlines() if "spec_decode" not in line)
    assert vllm_totals(without) is None


def test_sglang_readings_estimate_rounds_from_its_mean_acceptance() -> None:
    totals = sglang_totals((RECORDED / "sglang" / "metrics_speculative.txt").read_text(), 3.2891)
    assert totals.tokens == 65782 and totals.rounds == pytest.approx(20000)
    assert totals.accepted == pytest.approx(45782) and totals.per_position == () and totals.running == 4
    assert sglang_totals("", None).rounds == 0


@dataclass(frozen=True)
class Reading:
    """What one `/metrics` answer says (cumulative, as vLLM keeps them)."""

    rounds: int
    per_position: tuple[int, int]
    started: float = 1.79621428201e9

    def render(self) -> str:
        values = {"vllm:spec_decode_num_drafts_total": self.rounds,
                  "vllm:spec_decode_num_draft_tokens_total": 2 * self.rounds,
                  "vllm:spec_decode_num_accepted_tokens_total": sum(self.per_position),
                  "vllm:generation_tokens_total": self.rounds + sum(self.per_position),
                  "process_start_time_seconds": self.started}
        lines = []
        for line in METRICS.splitlines():
            name = re.split(r"[{ ]", line, maxsplit=1)[0]
            if name in values:
                line = f"{line.rsplit(' ', 1)[0]} {values[name]}"
            elif name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
                position = int(re.search(r'position="(\d+)"', line).group(1))  # type: ignore[union-attr]
                count = self.per_position[position] if position < 2 else 0
                line = f"{line.rsplit(' ', 1)[0]} {count}"
            lines.append(line)
        return "\n".join(lines) + "\n"


def _healthy(start: Reading, n: int, per: int = 60) -> list[Reading]:
    """n readings adding `per` rounds each, position 0 accepted at 0.70 and position 1 at 25/42 (AL 2.117)."""
    out, now = [], start
    for _ in range(n):
        now = replace(now, rounds=now.rounds + per, per_position=(now.per_position[0] + 42,
                                                                  now.per_position[1] + 25))
        out.append(now)
    return out


class Scripted:
    """A local server: `/version` and `/v1/models` as recorded, `/metrics` the script's next reading (the last
    one repeated once it ends), and a webhook at `/hook` that keeps what it is sent."""

    def __init__(self, script: list[Reading], draft_path: Path | None = None) -> None:
        self.script, self.hits = script, 0
        self.hooks: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: str, kind: str = "application/json") -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/version":
                    self._send(200, (RECORDED / "vllm" / "version.json").read_text())
                elif self.path == "/v1/models":
                    self._send(200, (RECORDED / "vllm" / "models.json").read_text())
                elif self.path.startswith("/server_info") and draft_path is not None:  # dev mode, as recorded
                    info = json.loads((RECORDED / "vllm" / "server_info_dev_mode.json").read_text())
                    info["vllm_config"]["speculative_config"]["model"] = str(draft_path)
                    self._send(200, json.dumps(info))
                elif self.path == "/metrics":
                    reading = owner.script[min(owner.hits, len(owner.script) - 1)]
                    owner.hits += 1
                    self._send(200, reading.render(), "text/plain; version=0.0.4")
                else:
                    self._send(404, '{"detail": "Not Found"}')

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                owner.hooks.append(json.loads(body))
                self._send(200, "{}")

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_port}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


@pytest.fixture
def scripted() -> Iterator[Any]:
    servers: list[Scripted] = []

    def make(script: list[Reading], draft_path: Path | None = None) -> Scripted:
        servers.append(Scripted(script, draft_path))
        return servers[-1]

    yield make
    for server in servers:
        server.http.shutdown()
        server.http.server_close()


@pytest.fixture
def draft(tmp_path: Path) -> Path:
    """A draft folder whose expectations say: position 0 at 0.70, break-even 1.25 at batch 1."""
    folder = tmp_path / "draft"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 15, 27]}}))
    expectations = DraftExpectations(
        engine="vllm", aux_layer_ids=[2, 15, 27], aux_layer_ids_input_of_layer=[2, 15, 27], target_num_hidden_layers=30,
        sets={"chat": SetAcceptance(label="heldout", prompts_file="p.jsonl", prompts_sha256="0" * 64, prompts=8, k=2,
                                    rounds=1000, tokens=1450, attempted=[1000, 700], accepted=[700, 420])},
        round_costs=[RoundCost(batch=1, k=2, device="cpu", round_cost_target_steps=1.25, break_even_accept_length=1.25),
                     RoundCost(batch=8, k=2, device="cpu", round_cost_target_steps=1.6, break_even_accept_length=1.6)])
    (folder / "expectations.json").write_bytes(expectations_bytes(expectations))
    return folder


def test_once_judges_everything_since_start(scripted: Any, draft: Path) -> None:
    runner = CliRunner()
    good = scripted([Reading(300, (210, 125))])  # AL 1 + 335/300, position 0 at 0.70 as recorded
    ok = runner.invoke(app, ["watch", "--server", good.url, "--draft", str(draft), "--once", "--window", "100"])
    assert ok.exit_code == 0, ok.output
    line = ok.stdout.strip().split(" ", 1)[1]  # after the time of day
    assert line.startswith("paying: AL 2.117 over 300 rounds; break-even 1.250 (recorded at batch 1, k=2 (cpu)), "
                           "1.69x expected speedup; recorded AL 1.450 (+46.0%); per position 0.70 0.60 0.00 0.00 "
                           "0.00, recorded 0.70 (+0.0%)"), line
    bad = scripted([Reading(400, (12, 1))])  # position 0 at 0.03: the draft is fed the wrong layers
    alarm = runner.invoke(app, ["watch", "--server", bad.url, "--draft", str(draft), "--once", "--window", "100"])
    assert alarm.exit_code == 1
    assert "ALERT position0: position-0 acceptance 0.030 is below 0.5 × the draft's recorded 0.700" in alarm.stderr
    assert "ALERT no_acceptance" in alarm.stderr and "ALERT below_break_even" in alarm.stderr
    assert "NOT paying: AL 1.03" in alarm.stdout


def test_a_server_feeding_the_draft_other_layers_is_misconfigured_before_any_round(
        scripted: Any, draft: Path, tmp_path: Path) -> None:
    """The served folder (named by the server's own config) says other aux layer ids than the draft was checked
    for: an alarm from the configuration, before a single speculative round, whatever the counters will say."""
    served = tmp_path / "served"
    served.mkdir()
    (served / "config.json").write_text(json.dumps({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 12, 21]}}))
    runner = CliRunner()
    wrong = scripted([Reading(0, (0, 0))], draft_path=served)
    alarm = runner.invoke(app, ["watch", "--server", wrong.url, "--draft", str(draft), "--once", "--window", "100"])
    assert alarm.exit_code == 1, alarm.output
    assert (f"ALERT misconfigured: the server serves {served} whose aux layer ids [2, 12, 21] differ from the ids "
            "the draft was checked for, [2, 15, 27] (vllm)") in alarm.stderr
    right = scripted([Reading(0, (0, 0))], draft_path=draft)
    fine = runner.invoke(app, ["watch", "--server", right.url, "--draft", str(draft), "--once", "--window", "100"])
    assert fine.exit_code == 0 and "ALERT" not in fine.stderr, fine.output


def test_loop_survives_a_restart_then_alerts_on_the_wrong_layers(scripted: Any, draft: Path, tmp_path: Path) -> None:
    first = _healthy(Reading(0, (0, 0)), 5)  # 300 rounds, AL 2.117, position 0 at 0.70
    again = _healthy(Reading(0, (0, 0), started=1.8e9), 4)  # restarted: counters from zero, a new start time
    wrong, bad = again[-1], []
    for _ in range(6):  # then position 0 at 0.10: the wrong layers
        wrong = replace(wrong, rounds=wrong.rounds + 60, per_position=(wrong.per_position[0] + 6,
                                                                      wrong.per_position[1] + 1))
        bad.append(wrong)
    server = scripted([Reading(0, (0, 0)), *first, *again, *bad])
    command = [sys.executable, "-c", "from server.cli import app; app()", "watch", "--server", server.url, "--draft",
               str(draft), "--interval", "0.2", "--window", "100", "--metrics-port", "0", "--webhook",
               server.url + "/hook", "--json"]
    watch = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert watch.stderr is not None and watch.stdout is not None
        metrics_url = None
        errors: list[str] = []
        while not any(e.startswith("ALERT") for e in errors):
            line = watch.stderr.readline()
            assert line, "watch ended: " + "".join(errors)
            errors.append(line)
            if line.startswith("metrics: "):
                metrics_url = line.split(" ", 1)[1].strip()
        assert metrics_url is not None
        scraped = {(s.name, s.labels.get("kind", s.labels.get("position", ""))): s.value
                   for f in text_string_to_metric_families(httpx.get(metrics_url, timeout=10).text)
                   for s in f.samples}
    finally:
        watch.kill()
        out, _rest = watch.communicate()
    alerts = [e for e in errors if e.startswith("ALERT")]
    assert alerts[0].startswith("ALERT position0: position-0 acceptance 0.100 is below 0.5")
    ticks = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    restarts = [t for t in ticks if t["restarted"]]
    assert len(restarts) == 1 and not restarts[0]["firing"]
    before = ticks[: ticks.index(restarts[0]) + 4]  # the healthy stretch, the restart and what followed it
    assert all(not t["firing"] for t in before) and before[3]["accept_length"] == pytest.approx(2.1167, abs=1e-4)
    assert server.hooks and server.hooks[0]["kind"] == "position0" and server.hooks[0]["state"] == "firing"
    assert scraped[("datahunt_watch_alert", "position0")] == 1.0
    assert scraped[("datahunt_watch_alert", "drift")] == 0.0
    assert scraped[("datahunt_watch_server_restarts_total", "")] == 1.0
    assert scraped[("datahunt_watch_recorded_position0_accept", "")] == pytest.approx(0.7)
    assert scraped[("datahunt_watch_break_even_accept_length", "")] == pytest.approx(1.25)
    assert scraped[("datahunt_watch_position_accept", "0")] == pytest.approx(0.1)


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["watch", "--server", "http://127.0.0.1:9", "--draft", str(tmp_path)])
    assert missing.exit_code == 2 and missing.output.strip().endswith("is not a draft folder (no config.json)")
    down = runner.invoke(app, ["watch", "--server", "http://127.0.0.1:9", "--once"])
    assert down.exit_code == 1 and down.output.startswith("error: ") and "unreachable" in down.output
    baseline = runner.invoke(app, ["watch", "--server", "http://127.0.0.1:9", "--baseline", "nope"])
    assert baseline.exit_code == 2 and "neither an acceptance length nor a file" in baseline.output


def test_an_sglang_server_is_read_from_its_metrics_and_server_info() -> None:
    import asyncio

    from inference.spec_readings import read_totals

    def handle(request: httpx.Request) -> httpx.Response:
        files = {"/metrics": "metrics_speculative.txt", "/server_info": "server_info.json",
                 "/model_info": "model_info.json"}
        name = files.get(request.url.path)
        return httpx.Response(200, text=(RECORDED / "sglang" / name).read_text()) if name else httpx.Response(404)

    async def run() -> Any:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
            return await read_totals(client, "http://sglang:30000", "sglang")

    totals = asyncio.run(run())
    assert totals.rounds == pytest.approx(20000) and totals.tokens == 65782 and totals.requests == 320
