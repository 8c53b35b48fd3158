"""The LLM path: query planning and relevance judgement through ChatOpenAI on recorded OpenAI answers.

The OpenAI client inside ChatOpenAI gets an `httpx.AsyncClient` whose mock transport replays recorded chat
completions, so langchain-openai's real request building and structured-output parsing run. Malformed answers
(text, wrong JSON shape, unknown ids, HTTP 500) must fall back to the deterministic path with a note.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from agents.llm import make_llm
from agents.search.base import SearchHit
from agents.subagent import run_subagent
from core.candidates import BackendName, DatasetMetadata, Deliverable
from core.settings import Settings
from core.types import Category

RECORDED = Path(__file__).parent.parent / "data" / "recorded" / "llm"
FOUND = ["ronantakizawa/github-codereview", "Nutanix/codereview-dataset", "bigcode/the-stack"]


class FixedBackend:
    name: BackendName = "offline"

    def __init__(self) -> None:
        self.queries: list[str] = []

    async def search(self, query: str, *, limit: int = 20) -> list[SearchHit]:
        self.queries.append(query)
        return [
            SearchHit(
                hub_id=h,
                backend="offline",
                query=query,
                rank=i,
                description="code review comments" if i < 3 else "source code",
            )
            for i, h in enumerate(FOUND, start=1)
        ]

    async def lookup(self, hub_id: str) -> DatasetMetadata | None:
        return None


def answer(name: str, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=json.loads((RECORDED / name).read_text()))


def run_with(plan: str, judge: str, *, status: int = 200) -> tuple[Deliverable, list[dict], FixedBackend]:
    """Run the code_review subagent with the LLM answering `plan` then `judge` recordings."""
    requests: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        requests.append(body)
        schema = body["response_format"]["json_schema"]["name"]
        return answer(plan if schema == "PlannedQueries" else judge, status)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    llm = make_llm(
        Settings(llm_base_url="http://llm.test/v1", llm_model="gpt-4o-mini"),
        http_async_client=client,
        max_retries=0,
    )
    assert llm is not None
    backend = FixedBackend()
    deliverable = asyncio.run(run_subagent(Category.CODE_REVIEW, backends=[backend], llm=llm, max_queries=6))
    return deliverable, requests, backend


def test_without_a_base_url_there_is_no_llm() -> None:
    assert make_llm(Settings()) is None


@pytest.mark.slow
def test_llm_plans_queries_and_judges_relevance() -> None:
    deliverable, requests, backend = run_with("plan_queries_ok.json", "judge_relevance_ok.json")
    assert deliverable.planner == "llm"
    assert backend.queries[:3] == ["code review", "code review comments", "codereviewer"]
    assert "code critique" in backend.queries and "code-review" in backend.queries
    assert len(backend.queries) == 6
    by_id = {c.hub_id: c for c in deliverable.candidates}
    assert by_id["ronantakizawa/github-codereview"].relevance == 0.95
    assert by_id["ronantakizawa/github-codereview"].relevance_reason.startswith("LLM: Real reviewer comments")
    assert by_id["bigcode/the-stack"].relevance == 0.1
    assert [c.hub_id for c in deliverable.candidates] == FOUND
    assert deliverable.notes == []
    prompt = requests[1]["messages"][0]["content"]
    assert "ronantakizawa/github-codereview: code review comments" in prompt
    assert "Category: code_review" in requests[0]["messages"][0]["content"]


@pytest.mark.parametrize("recording", ["not_json.json", "wrong_schema.json"])
def test_malformed_answers_fall_back_to_the_deterministic_path(recording: str) -> None:
    deliverable, _, backend = run_with(recording, recording)
    assert deliverable.planner == "deterministic"
    assert backend.queries[0] == "code review" and len(backend.queries) == 6
    assert any(n.startswith("LLM query planning failed") and "PlannedQueries" in n for n in deliverable.notes)
    assert any(
        n.startswith("LLM relevance judgement failed") and "Judgements" in n for n in deliverable.notes
    )
    assert sorted(c.hub_id for c in deliverable.candidates) == sorted(FOUND)
    assert all(not c.relevance_reason.startswith("LLM") for c in deliverable.candidates)


def test_judgements_of_invented_ids_are_ignored() -> None:
    deliverable, _, _ = run_with("plan_queries_ok.json", "judge_relevance_unknown_ids.json")
    assert deliverable.planner == "llm"
    assert any("judged none of the listed candidates" in n for n in deliverable.notes)
    assert sorted(c.hub_id for c in deliverable.candidates) == sorted(FOUND)


def test_a_server_error_is_recorded_and_nothing_is_lost() -> None:
    deliverable, requests, _ = run_with("error_500.json", "error_500.json", status=500)
    assert len(requests) == 2
    assert any("LLM call failed" in n and "500" in n for n in deliverable.notes)
    assert any(n.startswith("LLM relevance judgement failed") for n in deliverable.notes)
    assert sorted(c.hub_id for c in deliverable.candidates) == sorted(FOUND)


class _RecordedServer:
    """A real local HTTP server answering chat completions from the recordings (planning, then judging)."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.requests = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: the client pools its connections, as against a real API

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests += 1
                schema = body["response_format"]["json_schema"]["name"]
                name = "plan_queries_ok.json" if schema == "PlannedQueries" else "judge_relevance_ok.json"
                payload = (RECORDED / name).read_bytes()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_each_campaign_loop_gets_its_own_http_client_and_closes_it() -> None:
    """Two campaigns, each on an event loop of its own (as the server runs them), each with its own LLM over
    real sockets: both plan and judge with the model (a connection pooled by the first loop is never reused
    by the second, where it would fail), and each LLM's client is closed when its campaign ends."""
    server = _RecordedServer()
    try:
        settings = Settings(llm_base_url=server.url, llm_model="gpt-4o-mini")

        async def campaign() -> tuple[Deliverable, object]:
            llm = make_llm(settings, max_retries=0)
            assert llm is not None
            try:
                return await run_subagent(Category.CODE_REVIEW, backends=[FixedBackend()], llm=llm,
                                          max_queries=6), llm._owned_client
            finally:
                await llm.aclose()

        for _ in range(2):
            deliverable, client = asyncio.run(campaign())
            assert deliverable.planner == "llm" and deliverable.notes == []
            assert all(c.relevance_reason.startswith("LLM: ") for c in deliverable.candidates)
            assert isinstance(client, httpx.AsyncClient) and client.is_closed
        assert server.requests == 4
    finally:
        server.close()


def test_a_client_passed_in_is_left_to_its_owner() -> None:
    client = httpx.AsyncClient()
    llm = make_llm(Settings(llm_base_url="http://llm.test/v1"), http_async_client=client)
    assert llm is not None
    asyncio.run(llm.aclose())
    assert not client.is_closed
    asyncio.run(client.aclose())
