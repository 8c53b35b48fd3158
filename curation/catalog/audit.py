"""The audit trail: one `AuditEvent` row per status change of a campaign, run or catalog entry.

Only the store calls `record_audit`, inside the same transaction as the change it records, so a change and
its audit row are committed or rolled back together.
"""

from __future__ import annotations

from sqlmodel import Session

from core.json_types import JSONScalar
from curation.catalog.models import AuditEvent


def record_audit(
    session: Session,
    *,
    entity: str,
    entity_id: str,
    action: str,
    from_status: str | None,
    to_status: str | None,
    actor: str = "system",
    note: str | None = None,
    detail: dict[str, JSONScalar] | None = None,
) -> AuditEvent:
    """Add one audit row for `entity` (campaign | run | entry) and return it (flushed by the caller)."""
    event = AuditEvent(
        entity=entity,
        entity_id=entity_id,
        action=action,
        from_status=from_status,
        to_status=to_status,
        actor=actor,
        note=note,
        detail=detail or {},
    )
    session.add(event)
    return event
