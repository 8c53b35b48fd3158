"""Licence adoption: the configured mirror's licences copied onto the catalog entries that state none.

Both doors adopt at the same moments: after a campaign (or a re-run, or a resume), before a review, and before
a manifest is built, so an entry approved and exported from the review page carries the same licence as one
approved and exported with `datahunt`. An unreadable mirror index is a warning, never a refused review.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlmodel import Session

from core.settings import Settings
from curation.catalog import store
from curation.licenses import mirror_licenses
from curation.manifest import ManifestError
from curation.mirror import read_mirror_index

logger = logging.getLogger(__name__)

LICENSE_SOURCE = "mirror index"


@dataclass(frozen=True)
class MirrorLicenses:
    """The licences the mirror's index states (`{hub_id: licence}`), and why none were read, if so."""

    licenses: dict[str, str] = field(default_factory=dict)
    warning: str | None = None


@dataclass(frozen=True)
class Adopted:
    """What one adoption changed: the Hub ids that got a licence, and a warning when the index was unreadable."""

    hub_ids: list[str] = field(default_factory=list)
    warning: str | None = None


def mirror_license_index(*, settings: Settings) -> MirrorLicenses:
    """Return the licences the configured mirror's index states: none without a mirror, and none with a
    warning saying why when its index cannot be read."""
    if not settings.mirror:
        return MirrorLicenses()
    try:
        return MirrorLicenses(licenses=mirror_licenses(read_mirror_index(settings.mirror)))
    except ManifestError as exc:
        return MirrorLicenses(warning=f"mirror licences not read: {exc}")


def adopt_in_session(*, session: Session, index: MirrorLicenses) -> Adopted:
    """Give each entry of the open `session` without a licence the one `index` states; return what changed."""
    changed = store.adopt_licenses(session, index.licenses, source=LICENSE_SOURCE) if index.licenses else []
    return Adopted(hub_ids=[e.hub_id for e in changed], warning=index.warning)


def adopt_mirror_licenses(*, engine: Engine, settings: Settings) -> Adopted:
    """Adopt the mirror's licences in a transaction of their own (after a campaign, its re-run or its resume)."""
    index = mirror_license_index(settings=settings)
    if not index.licenses:
        return Adopted(warning=index.warning)
    with store.open_session(engine) as session:
        adopted = adopt_in_session(session=session, index=index)
    if adopted.hub_ids:
        logger.info("adopted the mirror's licence for %d entries", len(adopted.hub_ids))
    return adopted
