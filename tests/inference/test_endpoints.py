"""The endpoint pool: least-outstanding choice, capacity, ejection, re-admission, and giving up."""

from __future__ import annotations

import asyncio

import pytest
from regen_fake_server import FakeServer

from inference.backend import Timeouts
from inference.endpoints import AllEndpointsDown, EndpointPool
from inference.openai_api import OpenAIChatBackend


def test_least_outstanding_requests_spreads_load_and_respects_limits() -> None:
    async def run() -> list[str]:
        pool = EndpointPool.from_urls(["http://a", "http://b", "http://c"], concurrency=2)
        picked = [(await pool.acquire()).url for _ in range(6)]
        waiter = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0.01)
        assert not waiter.done()  # every slot taken
        await pool.release(pool.endpoints[1])
        assert (await waiter).url == "http://b"
        return picked

    picked = asyncio.run(run())
    assert sorted(picked) == ["http://a", "http://a", "http://b", "http://b", "http://c", "http://c"]
    assert picked[:3] == ["http://a", "http://b", "http://c"]


def test_hard_fault_ejects_at_once_soft_faults_after_a_run() -> None:
    async def run() -> EndpointPool:
        pool = EndpointPool.from_urls(["http://a", "http://b"], concurrency=4, eject_after=3)
        a, b = pool.endpoints
        for _ in range(2):
            await pool.acquire()
        await pool.release(a, error="connection refused", fault="hard")
        for _ in range(3):
            b.in_flight += 1
            await pool.release(b, error="HTTP 503", fault="soft")
        return pool

    pool = asyncio.run(run())
    a, b = pool.endpoints
    assert not a.healthy and a.ejections == 1
    assert not b.healthy and b.errors == 3


def test_reprobe_readmits_an_endpoint_that_answers_again() -> None:
    dead = FakeServer().start()
    port = dead.port
    dead.stop()
    revived: list[FakeServer] = []

    async def run() -> bool:
        pool = EndpointPool.from_urls([f"http://127.0.0.1:{port}"], concurrency=1, reprobe_interval_s=0.02)
        backend = OpenAIChatBackend()  # the health checks go through the backend's own session
        backend.start(1, Timeouts(connect_s=1.0, request_s=1.0))
        try:
            await pool.probe_all(backend.healthy)
            assert not pool.endpoints[0].healthy
            task = asyncio.create_task(pool.reprobe_forever(backend.healthy))
            revived.append(FakeServer(port=port).start())
            endpoint = await asyncio.wait_for(pool.acquire(), timeout=5)
            task.cancel()
            return endpoint.healthy
        finally:
            await backend.aclose()

    try:
        assert asyncio.run(run()) is True
    finally:
        for server in revived:
            server.stop()


def test_all_endpoints_down_for_too_long_raises() -> None:
    async def run() -> None:
        pool = EndpointPool.from_urls(["http://a"], concurrency=1, reprobe_interval_s=0.01, dead_after_s=0.05)
        pool.endpoints[0].healthy = False
        await pool.acquire()

    with pytest.raises(AllEndpointsDown, match="no endpoint answered"):
        asyncio.run(run())
