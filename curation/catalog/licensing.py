"""Licences of catalog entries from sources beyond the search backend: the local mirror's index.

An offline campaign finds most datasets in a metadata snapshot that states no licence, while the mirror that
curation loads from records one for each dataset it holds (`CC BY-NC 4.0` for tatsu-lab/alpaca). `adopt_licenses`
copies such licences onto the entries that have none, notes where it came from in the entry's metadata
(`license_source`), and writes an audit row for each, so the catalog, the review page and a manifest export all
show it. A licence an entry already has (from the Hub's card or tags) is never overwritten. The entry's own
`license_unknown` reasons, given when nothing stated a licence, are replaced by what the one licence rule
(`core/licenses.py`) says of the adopted one, so the entry never shows a licence beside a verdict saying it is
unknown; the verdicts themselves stay as history.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlmodel import Session, col, select

from core.licenses import license_risk
from core.types import Reason, ReasonCode
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
        entry.reasons = restated_reasons(entry.reasons, entry.license, source=source)
        entry.version += 1
        entry.updated_at = utcnow()
        session.add(entry)
        record_audit(session, entity="entry", entity_id=entry.hub_id, action="license_set",
                     from_status=entry.status, to_status=entry.status,
                     detail={"license": entry.license, "source": source})
        changed.append(entry)
    session.flush()
    return changed


def restated_reasons(reasons: list[Reason], license: str, *, source: str) -> list[Reason]:
    """Return `reasons` with each `license_unknown` replaced by what the licence rule says of `license`, read
    from `source`: nothing for a permissive one, a non-commercial, restricted or unrecognised licence flag
    (never blocking: the verdict was given without it) tagged with the same category."""
    risk = license_risk(license)
    said = {
        "non_commercial": (ReasonCode.LICENSE_NON_COMMERCIAL,
                           f"license {license!r} (from the {source}) is non-commercial"),
        "restricted": (ReasonCode.LICENSE_RESTRICTED,
                       f"license {license!r} (from the {source}) restricts training or derivatives"),
        "unknown": (ReasonCode.LICENSE_UNKNOWN,
                    f"license {license!r} (from the {source}) is none datahunt recognises: read its terms"),
    }.get(risk)
    out: list[Reason] = []
    for reason in reasons:
        if reason.get("code") != ReasonCode.LICENSE_UNKNOWN:
            out.append(reason)
        elif said is not None:
            restated: Reason = {"code": said[0].value, "detail": said[1], "blocking": False}
            if "category" in reason:
                restated["category"] = reason["category"]
            out.append(restated)
    return out
