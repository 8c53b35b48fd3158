"""Dataset licences: where a licence is read from, and which sources are a risk to publish.

A dataset's licence can be stated in three places: the local mirror's index (`MIRROR.json`, the licence of the
very files curation loads), the Hub's card data or its `license:` tags, and the metadata a search backend
recorded. `license_from_metadata` reads the last two, `mirror_licenses` the first; what a licence means (`ok`,
`non_commercial`, `restricted`, `unknown`) is the one licence rule in `core/licenses.py`, which the verifier
asks too, so a verdict and a publish warning never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from core.licenses import RISKY, LicenseRisk, license_risk


def _first_text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, list):
        return next((str(v).strip() for v in value if isinstance(v, str) and v.strip()), None)
    return None


def license_from_metadata(metadata: Mapping[str, Any]) -> str | None:
    """Return the licence a dataset's recorded metadata states: its `license` field, else a `license:` tag,
    else the Hub card data's `license` (`card_data` or `cardData`); None when none says."""
    stated = _first_text(metadata.get("license"))
    if stated:
        return stated
    tags = [str(t) for t in metadata.get("tags") or [] if isinstance(t, str)]
    tagged = [t.split(":", 1)[1] for t in tags if t.startswith("license:") and t.split(":", 1)[1]]
    if tagged:
        return tagged[0]
    for key in ("card_data", "cardData"):
        card = metadata.get(key)
        if isinstance(card, Mapping):
            found = _first_text(card.get("license"))
            if found:
                return found
    return None


def mirror_licenses(entries: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Return `{hub_id: licence}` from mirror index entries (`curation.mirror.read_mirror_index`).

    A dataset mirrored in several configs takes its riskiest stated licence, so one non-commercial config is
    never hidden behind a permissive one; entries that state none are left out."""
    order = {"non_commercial": 0, "restricted": 1, "unknown": 2, "ok": 3}
    found: dict[str, str] = {}
    for entry in entries:
        text = _first_text(entry.get("license"))
        hub_id = str(entry.get("id") or "")
        if not text or not hub_id:
            continue
        if hub_id not in found or order[license_risk(text)] < order[license_risk(found[hub_id])]:
            found[hub_id] = text
    return found


def risky_sources(sources: Iterable[Mapping[str, Any]]) -> list[tuple[str, str | None, LicenseRisk]]:
    """Return `(hub_id, licence, risk)` of every source whose licence is not plainly `ok`, in the given order."""
    risky = []
    for source in sources:
        text = source.get("license")
        risk = license_risk(text)
        if risk in RISKY:
            risky.append((str(source.get("hub_id")), text, risk))
    return risky
