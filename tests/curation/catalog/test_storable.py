"""Text the databases cannot take (NUL, lone surrogates), on SQLite and PostgreSQL alike.

Typed input is refused with InvalidValueError naming the field; text from the outside world (a Hub
description, an exception message) is stored with U+FFFD in place of each bad character; and a write that
slips past both still fails as InvalidValueError, never as a driver error.
"""

from __future__ import annotations

import pytest
from sqlalchemy import Engine
from sqlmodel import select

from curation.catalog import store
from curation.catalog.models import AuditEvent
from curation.catalog.storable import storable, unstorable_reason


def _campaign_and_run(engine: Engine) -> tuple[str, int]:
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=["math"], offline=True, backends=["offline"])
        run = store.start_run(session, campaign_id=campaign.id, category="math")
        assert run.id is not None
        return campaign.id, run.id


def test_hub_text_with_nul_and_surrogates_is_stored_with_replacement_characters(engine: Engine) -> None:
    campaign_id, run_id = _campaign_and_run(engine)
    with store.open_session(engine) as session:
        record = store.add_candidate(session, campaign_id=campaign_id, run_id=run_id, category="math", candidate={
            "hub_id": "org/odd", "title": "t\x00", "description": "bad\x00desc \ud800 end",
            "metadata": {"license": "mit\x00", "tags": ["a\udfff"]},
        })
        store.upsert_entry(session, candidate=record, decision="accept",
                           reasons=[{"code": "license_unknown", "detail": "says \x00", "blocking": False}])
    with store.open_session(engine) as session:
        entry = store.get_entry(session, hub_id="org/odd")
    assert entry.description == "bad\ufffddesc \ufffd end" and entry.title == "t\ufffd"
    assert entry.license == "mit\ufffd" and entry.dataset_metadata["tags"] == ["a\ufffd"]
    assert entry.reasons[0]["detail"] == "says \ufffd"


def test_run_errors_and_campaign_errors_keep_their_text(engine: Engine) -> None:
    campaign_id, run_id = _campaign_and_run(engine)
    with store.open_session(engine) as session:
        store.finish_run(session, run_id=run_id, status="failed", planner=None,
                         queries=[{"query": "q\x00", "status": "failed"}], results_per_backend={},
                         candidates_found=0, candidates_accepted=0, error="backend said \x00\ud800",
                         reasons=[], notes=["note \x00"])
        store.set_campaign_status(session, campaign_id=campaign_id, status="failed", error="graph: \x00")
    with store.open_session(engine) as session:
        run = store.get_run(session, run_id=run_id)
        campaign = store.get_campaign(session, campaign_id=campaign_id)
    assert run.error == "backend said \ufffd\ufffd" and run.queries[0]["query"] == "q\ufffd"
    assert run.notes == ["note \ufffd"] and campaign.error == "graph: \ufffd"


def test_typed_text_is_refused_with_the_field_named(engine: Engine) -> None:
    campaign_id, run_id = _campaign_and_run(engine)
    with store.open_session(engine) as session:
        record = store.add_candidate(session, campaign_id=campaign_id, run_id=run_id, category="math",
                                     candidate={"hub_id": "org/fine"})
        store.upsert_entry(session, candidate=record, decision="accept", reasons=[])
    refusals = [
        (lambda s: store.list_entries(s, text="a\x00"), "search text contains a NUL"),
        (lambda s: store.list_entries(s, license="\ud800"), "license filter contains an unpaired surrogate"),
        (lambda s: store.get_campaign(s, campaign_id="\x00"), "campaign id contains a NUL"),
        (lambda s: store.get_entry(s, hub_id="org/\ud800"), "Hub id contains an unpaired surrogate"),
        (lambda s: store.create_campaign(s, categories=["math"], offline=True, backends=[], campaign_id="c\x00"),
         "campaign id contains a NUL"),
        (lambda s: store.review_entry(s, hub_id="org/fine", approve=True, reviewer="ann\x00"),
         "reviewer contains a NUL"),
        (lambda s: store.review_entry(s, hub_id="org/fine", approve=False, reviewer="ann", note="\udc80"),
         "note contains an unpaired surrogate"),
    ]
    for call, message in refusals:
        with pytest.raises(store.InvalidValueError, match=message), store.open_session(engine) as session:
            call(session)
    with store.open_session(engine) as session:
        assert store.get_entry(session, hub_id="org/fine").status == "pending_review"


def test_a_direct_write_of_bad_text_fails_as_a_catalog_error(engine: Engine) -> None:
    for bad in ("x\x00", "\ud800"):
        with pytest.raises(store.InvalidValueError, match=r"auditevent\.note contains"), \
                store.open_session(engine) as session:
            session.add(AuditEvent(entity="entry", entity_id="org/x", action="note", note=bad))
            session.flush()
        with pytest.raises(store.InvalidValueError, match=r"auditevent\.detail contains"), \
                store.open_session(engine) as session:
            session.add(AuditEvent(entity="entry", entity_id="org/x", action="note", detail={"k": [bad]}))
    with store.open_session(engine) as session:
        assert session.exec(select(AuditEvent).where(AuditEvent.entity_id == "org/x")).all() == []


def test_storable_replaces_only_the_bad_characters() -> None:
    assert storable({"k\x00": ["a\ud800b", 3, None, {"n": "ok \U0001f600"}]}) == {
        "k\ufffd": ["a\ufffdb", 3, None, {"n": "ok \U0001f600"}]}
    assert unstorable_reason("fine \U0001f600") is None
    assert unstorable_reason("\x00") == "a NUL character"
