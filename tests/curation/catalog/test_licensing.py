"""Entry licences from every source that states one: metadata, Hub `license:` tags and card data, the mirror index."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Engine

from curation.catalog import store
from curation.catalog.models import CatalogEntry

Seeder = Callable[..., CatalogEntry]


def test_licences_come_from_tags_and_card_data_when_the_field_is_empty(engine: Engine, seed: Seeder) -> None:
    tagged = seed("acme/tagged", metadata={"license": None, "tags": ["task:chat", "license:cc-by-nc-4.0"]})
    carded = seed("acme/carded", metadata={"card_data": {"license": ["cc-by-nc-sa-4.0"]}})
    plain = seed("acme/plain", metadata={"license": "mit", "tags": ["license:apache-2.0"]})
    assert (tagged.license, carded.license, plain.license) == ("cc-by-nc-4.0", "cc-by-nc-sa-4.0", "mit")
    assert tagged.license_risk() == "non_commercial" and plain.license_risk() == "ok"


def test_the_mirror_index_fills_only_missing_licences_and_a_later_campaign_keeps_them(
    engine: Engine, seed: Seeder
) -> None:
    seed("acme/none", metadata={"license": None})
    seed("acme/stated", metadata={"license": "apache-2.0"})
    with store.open_session(engine) as session:
        changed = store.adopt_licenses(session,
                                       {"acme/none": "CC BY-NC 4.0", "acme/stated": "MIT", "acme/absent": "MIT"},
                                       source="mirror index")
        assert [e.hub_id for e in changed] == ["acme/none"]
    again = seed("acme/none", metadata={"license": None, "downloads": 3})  # found again offline: still no licence
    assert again.license == "CC BY-NC 4.0" and again.dataset_metadata["license_source"] == "mirror index"
    with store.open_session(engine) as session:
        assert store.adopt_licenses(session, {"acme/none": "MIT"}, source="mirror index") == []
        stated = session.get(CatalogEntry, store.get_entry(session, hub_id="acme/stated").id)
        assert stated is not None and stated.license == "apache-2.0"
        audit = store.entry_history(session, hub_id="acme/none")["audit"]
        assert [a.detail for a in audit if a.action == "license_set"] == [
            {"license": "CC BY-NC 4.0", "source": "mirror index"}
        ]
