"""Dataset licences: where a licence is read from, its Hub id, and whether publishing under it is a risk.

A dataset's licence can be stated in three places: the local mirror's index (`MIRROR.json`, the licence of the
very files curation loads), the Hub's card data or its `license:` tags, and the metadata a search backend
recorded. `license_from_metadata` reads the last two, `mirror_licenses` the first; `license_risk` sorts any of
them into `ok`, `non_commercial`, `restricted` or `unknown`, the classes the catalog, approval and `publish`
warn about. Free text (`CC BY-NC 4.0 (DATA_LICENSE); code Apache-2.0`) is matched to a Hub id by its first
clause; text that names no licence datahunt knows is `unknown`: a human must read it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

LicenseRisk = Literal["ok", "non_commercial", "restricted", "unknown"]

# Hub license ids a free-text license is matched against (the common ones datasets use).
HUB_LICENSES = {
    "apache-2.0", "mit", "bsd-2-clause", "bsd-3-clause", "cc0-1.0", "cc-by-4.0", "cc-by-sa-4.0", "cc-by-nc-4.0",
    "cc-by-nc-sa-4.0", "cc-by-nd-4.0", "cc-by-nc-nd-4.0", "cc-by-3.0", "cc-by-sa-3.0", "cc-by-nc-3.0",
    "cc-by-nc-sa-3.0", "odc-by", "odbl", "pddl", "gpl-3.0", "lgpl-3.0", "agpl-3.0", "openrail", "llama3.1", "gemma",
    "other",
}
NON_COMMERCIAL = re.compile(r"(^|-)nc(-|$)")
# Raw text that says non-commercial whatever else it says ("… CC BY-NC 4.0 data", "research use only").
_NON_COMMERCIAL_TEXT = re.compile(r"\bby-nc\b|\bnon-?commercial\b|\bresearch[- ](use[- ])?only\b", re.IGNORECASE)
_RESTRICTED = {"other", "cc-by-nd-4.0", "cc-by-nc-nd-4.0", "cc-by-nd-3.0", "cc-by-nc-nd-3.0"}
_UNKNOWN_WORDS = {"", "unknown", "none", "n/a", "not stated"}
RISKY: frozenset[LicenseRisk] = frozenset({"non_commercial", "restricted", "unknown"})


def hub_license(text: str | None) -> str | None:
    """Return the Hub license id a free-text license names (`CC BY-NC 4.0 (…)` → `cc-by-nc-4.0`), or None."""
    if not text:
        return None
    head = re.split(r"[;(]", text, maxsplit=1)[0].strip().lower()
    key = re.sub(r"[\s_]+", "-", head).replace("license", "").strip("-")
    key = {"apache-2": "apache-2.0", "apache": "apache-2.0", "cc0": "cc0-1.0", "bsd-3": "bsd-3-clause"}.get(key, key)
    return key if key in HUB_LICENSES else None


def license_risk(text: str | None) -> LicenseRisk:
    """Return how risky publishing data under `text` is: `non_commercial` (it or a clause of it says so),
    `restricted` (no derivatives, `other`), `unknown` (none, or no licence datahunt recognises), else `ok`."""
    raw = (text or "").strip()
    if raw.lower() in _UNKNOWN_WORDS:
        return "unknown"
    hub_id = hub_license(raw)
    if _NON_COMMERCIAL_TEXT.search(raw) or NON_COMMERCIAL.search(hub_id or ""):
        return "non_commercial"
    if hub_id in _RESTRICTED:
        return "restricted"
    return "ok" if hub_id else "unknown"


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
