"""The target tokenizer is not downloaded (with retries) when the Hub does not answer its one probe."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from core.settings import get_settings
from curation.manifest import Manifest

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"


def test_a_hub_tokenizer_is_not_downloaded_when_the_hub_does_not_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from curation.manifest import TargetModel
    from curation.pipeline import make_context
    from curation.tokens import APPROXIMATE

    monkeypatch.delenv("DATAHUNT_OFFLINE")
    get_settings.cache_clear()
    asked: list[int] = []

    def probe() -> str | None:
        asked.append(1)
        return "connection refused"

    manifest = Manifest(target=TargetModel(model="org/not-a-local-tokenizer"), mirror=str(MIRROR))
    with caplog.at_level(logging.WARNING):
        ctx = make_context(manifest, tmp_path / "out", None, None, probe, settings=get_settings())
    assert get_settings().offline is False and asked == [1]
    assert ctx.params.counter.name == APPROXIMATE and ctx.hub_problem() == "connection refused" and asked == [1]
    assert any("is not a local folder and datahunt is offline" in r.getMessage() for r in caplog.records)
