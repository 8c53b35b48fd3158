"""Human review: approve/reject, idempotency, the verifier override, and concurrent reviews of one entry."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from sqlalchemy import Engine

from curation.catalog import store
from curation.catalog.models import AuditEvent, CatalogEntry

Seeder = Callable[..., CatalogEntry]
GATED = {"code": "gated", "detail": "manual approval on the Hub", "blocking": True}


def _history(engine: Engine, hub_id: str) -> tuple[CatalogEntry, list[AuditEvent]]:
    with store.open_session(engine) as session:
        history = store.entry_history(session, hub_id=hub_id)
    return history["entry"], [a for a in history["audit"] if a.action in ("approved", "rejected")]


def test_approve_then_reject(engine: Engine, seed: Seeder) -> None:
    seed("org/data")
    with store.open_session(engine) as session:
        entry = store.review_entry(
            session, hub_id="org/data", approve=True, reviewer="ana", note="looks clean"
        )
        assert (entry.status, entry.reviewer, entry.note, entry.version) == (
            "approved",
            "ana",
            "looks clean",
            2,
        )
    with store.open_session(engine) as session:
        entry = store.review_entry(session, hub_id=" org/data ", approve=False, reviewer="bo", note="license")
    entry, audit = _history(engine, "org/data")
    assert (entry.status, entry.reviewer, entry.note, entry.version) == ("rejected", "bo", "license", 3)
    assert [(a.action, a.from_status, a.to_status, a.actor, a.note) for a in audit] == [
        ("approved", "pending_review", "approved", "ana", "looks clean"),
        ("rejected", "approved", "rejected", "bo", "license"),
    ]
    assert all(a.at.utcoffset() is not None for a in audit)


def test_same_decision_again_keeps_state_but_is_audited(engine: Engine, seed: Seeder) -> None:
    seed("org/data")
    for _ in range(3):
        with store.open_session(engine) as session:
            store.review_entry(session, hub_id="org/data", approve=True, reviewer="ana")
    entry, audit = _history(engine, "org/data")
    assert (entry.status, entry.version) == ("approved", 2)
    assert [a.detail["changed"] for a in audit] == [True, False, False]


def test_a_repeated_decision_with_a_new_note_reaches_the_entry(engine: Engine, seed: Seeder) -> None:
    """Re-approving (or re-rejecting) to add a reason used to reach only the audit trail."""
    seed("org/data")
    for approve in (True, False):
        with store.open_session(engine) as session:
            store.review_entry(session, hub_id="org/data", approve=approve, reviewer="ana", note="first look")
        with store.open_session(engine) as session:
            store.review_entry(session, hub_id="org/data", approve=approve, reviewer="bo", note="checked the licence")
        entry, audit = _history(engine, "org/data")
        assert (entry.note, entry.reviewer) == ("checked the licence", "bo")
        assert audit[-1].note == "checked the licence" and audit[-1].detail["changed"] is False
    with store.open_session(engine) as session:  # no note: the entry keeps the one it has
        store.review_entry(session, hub_id="org/data", approve=False, reviewer="bo")
    assert _history(engine, "org/data")[0].note == "checked the licence"


def test_approving_a_verifier_rejection_needs_override(engine: Engine, seed: Seeder) -> None:
    seed("org/gated", decision="reject", reasons=[GATED])
    with pytest.raises(store.OverrideRequiredError, match="gated"), store.open_session(engine) as session:
        store.review_entry(session, hub_id="org/gated", approve=True, reviewer="ana")
    entry, audit = _history(engine, "org/gated")
    assert (entry.status, audit) == ("pending_review", [])
    with store.open_session(engine) as session:
        store.review_entry(
            session, hub_id="org/gated", approve=False, reviewer="ana"
        )  # rejecting needs nothing
    with store.open_session(engine) as session:
        store.review_entry(
            session, hub_id="org/gated", approve=True, reviewer="ana", note="we have access", override=True
        )
    entry, audit = _history(engine, "org/gated")
    assert entry.status == "approved"
    assert [(a.to_status, a.detail["override"]) for a in audit] == [("rejected", False), ("approved", True)]


def test_review_of_unknown_entry(engine: Engine) -> None:
    with pytest.raises(store.EntryNotFoundError), store.open_session(engine) as session:
        store.review_entry(session, hub_id="org/missing", approve=True, reviewer="ana")


def test_concurrent_reviews_serialise(engine: Engine, seed: Seeder) -> None:
    seed("org/hot")
    decisions = [True, False, True, True, False, True, False, False]
    errors: list[BaseException] = []
    start = threading.Barrier(len(decisions))

    def review(approve: bool, who: int) -> None:
        try:
            start.wait()
            with store.open_session(engine) as session:
                store.review_entry(session, hub_id="org/hot", approve=approve, reviewer=f"r{who}")
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=review, args=(d, i)) for i, d in enumerate(decisions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    entry, audit = _history(engine, "org/hot")
    assert len(audit) == len(decisions)
    assert sorted(a.actor for a in audit) == sorted(f"r{i}" for i in range(len(decisions)))
    changes = [a for a in audit if a.from_status != a.to_status]
    assert entry.version == 1 + len(changes)
    # The audit trail is one consistent chain: each review starts from the state the previous one left.
    chain = ["pending_review"] + [a.to_status for a in audit]
    assert [a.from_status for a in audit] == chain[:-1]
    assert entry.status == audit[-1].to_status
    assert entry.reviewer == changes[-1].actor
