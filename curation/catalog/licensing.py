"""Licences of catalog entries from sources beyond the search backend: the local mirror's index.

An offline campaign finds most datasets in a metadata snapshot that states no licence, while the mirror that
curation loads from records one for each dataset it holds (`CC BY-NC 4.0` for tatsu-lab/alpaca). `adopt_licenses`
copies such licences onto the entries that have none, notes where it came from in the entry's metadata
(`license_source`), and writes an audit row for each, so the catalog, the review page and a manifest export all
show it. A licence an entry already has (from the Hub's card or tags) is never overwritten.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlmodel import Session, col, select

from curation.catalog.audit import record_audit
from curation.catalog.models import CatalogEntry, utcnow


def adopt_licenses(session: Session, licenses: Mapping[str, str], *, source: str) -> list[CatalogEntry]:
    """Give every entry without a licence the one `licenses` states for its Hub id; return the entries changed.

    `source` names where the licences come from (`mirror index`); it is kept as the entry's
    `dataset_metadata["license_source"]` and in the audit row."""
    if not licenses:
        return []
    stmt = select(CatalogEntry).where(col(CatalogEntry.hub_id).in_(sorted(licenses)))
    changed = []
    for entry in session.exec(stmt).all():
        if entry.license:
            continue
        entry.license = licenses[entry.hub_id][:128]
        entry.dataset_metadata = {**entry.dataset_metadata, "license_source": source}
        entry.version += 1
        entry.updated_at = utcnow()
        session.add(entry)
        record_audit(session, entity="entry", entity_id=entry.hub_id, action="license_set",
                     from_status=entry.status, to_status=entry.status,
                     detail={"license": entry.license, "source": source})
        changed.append(entry)
    session.flush()
    return changed
