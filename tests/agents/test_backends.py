"""Backend selection: offline mode and an unreachable Hub both leave the offline index alone, and say so."""

from __future__ import annotations

import httpx
import pytest
from huggingface_hub import constants

from agents.backends import default_backends, probe_hub
from agents.search.hub import HubSearch
from agents.search.offline import OfflineIndex
from agents.search.web import WebSearch
from core.settings import Settings


def test_offline_setting_uses_the_offline_index_alone_without_probing() -> None:
    probed: list[bool] = []
    backends, notes = default_backends(Settings(offline=True), probe=lambda: probed.append(True) or None)
    assert [b.name for b in backends] == ["offline"] and isinstance(backends[0], OfflineIndex)
    assert probed == []
    assert notes and "offline index alone" in notes[0] and "DATAHUNT_OFFLINE" in notes[0]


def test_huggingface_hub_offline_mode_is_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    backends, notes = default_backends(Settings(offline=False), probe=lambda: None)
    assert [b.name for b in backends] == ["offline"]
    assert "HF_HUB_OFFLINE" in notes[0]


def test_an_unreachable_hub_falls_back_to_the_offline_index_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    backends, notes = default_backends(
        Settings(offline=False), probe=lambda: "ConnectError: connection refused"
    )
    assert [b.name for b in backends] == ["offline"]
    assert notes == [
        "Hub unreachable (ConnectError: connection refused): searched the embedded offline index alone",
        f"offline index retrieval: {OfflineIndex.default().retrieval}",
    ]
    assert notes[1].startswith("offline index retrieval: hybrid (BM25 + sentence-transformers/all-MiniLM-L6-v2")


def test_a_reachable_hub_enables_all_three_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    backends, notes = default_backends(Settings(offline=False, hf_token="hf_x"), probe=lambda: None)
    assert [type(b) for b in backends] == [HubSearch, WebSearch, OfflineIndex]
    assert notes == [f"offline index retrieval: {OfflineIndex.default().retrieval}"]


def test_probe_reports_why_the_hub_cannot_be_reached() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    assert probe_hub(transport=httpx.MockTransport(refuse)) == "ConnectError: [Errno 111] Connection refused"
    assert probe_hub(transport=httpx.MockTransport(lambda r: httpx.Response(503))) == "HTTP 503"
    assert probe_hub(transport=httpx.MockTransport(lambda r: httpx.Response(200, json=[]))) is None
