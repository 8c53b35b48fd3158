"""Fixtures for the catalog tests: a migrated engine on each backend, and a helper that seeds verified candidates."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine

from curation.catalog import store
from curation.catalog.models import CatalogEntry

Seeder = Callable[..., CatalogEntry]



@pytest.fixture
def seed(engine: Engine) -> Seeder:
    """Return `seed(hub_id, category, relevance, decision=..., reasons=..., **candidate fields)`: one campaign
    per call, one run, one candidate, one verdict and the upsert, committed; returns the entry."""

    def _seed(
        hub_id: str,
        category: str = "math",
        relevance: float = 0.5,
        *,
        decision: str = "accept",
        reasons: list[dict[str, Any]] | None = None,
        **fields: Any,
    ) -> CatalogEntry:
        with store.open_session(engine) as session:
            campaign = store.create_campaign(session, categories=[category], offline=True, backends=["offline"])
            run = store.start_run(session, campaign_id=campaign.id, category=category)
            assert run.id is not None
            candidate = {"hub_id": hub_id, "relevance": relevance, **fields}
            record = store.add_candidate(session, campaign_id=campaign.id, run_id=run.id, category=category,
                                         candidate=candidate)
            store.add_verdict(session, campaign_id=campaign.id, decision=decision, reasons=reasons or [],
                              candidate_id=record.id)
            return store.upsert_entry(session, candidate=record, decision=decision, reasons=reasons or [])

    return _seed
