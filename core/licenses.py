"""The one licence rule: what a dataset's stated licence means for training a draft on it and publishing it.

`license_risk` sorts any stated licence (a Hub id, `CC BY-NC 4.0 (DATA_LICENSE); code Apache-2.0`, prose) into
`ok`, `non_commercial`, `restricted` or `unknown`. The verifier (`graph/verifier.py`) turns the class into a
verdict (restricted blocks, the other two flag), the catalog shows it, and approval and `publish` warn about it
(`curation/licenses.py` reads licences from metadata and the mirror); one rule, so a dataset's verdict and its
publish warning never disagree.

* **restricted**: no derivatives (`cc-by-nd-*`, `cc-by-nc-nd-*`, "no derivatives") or `other` (custom terms a
  human must read before anything is trained). Checked first: no-derivatives is the stronger restriction, so a
  licence that is both non-commercial and no-derivatives is restricted.
* **non_commercial**: an `-nc` licence, or text that says non-commercial, research (use) only or academic
  (use) only, whatever else it says (the Academic Free License is no such text). A research-only licence
  restricts *use* exactly as CC BY-NC does (research, not a product), so it is flagged like one rather than
  refused: the reviewer knows what their draft is for.
* **unknown**: none stated, or text naming no licence datahunt knows (a human must read it). The verifier flags
  both alike (c-uda and the NVIDIA Open Model License among them: stated, but not in `HUB_LICENSES`).
"""

from __future__ import annotations

import re
from typing import Literal

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
_NON_COMMERCIAL_TEXT = re.compile(
    r"\bby-nc\b|\bnon-?commercial\b|\b(research|academic)[- ]((use|purposes?)[- ])?only\b", re.IGNORECASE
)
# Raw text that says no derivatives: `CC BY-NC-ND 4.0`, `cc-by-nd`, "no derivatives".
_NO_DERIVATIVES_TEXT = re.compile(r"(\bby|-nc)-nd\b|\bno-?deriv|\bno derivatives?\b", re.IGNORECASE)
_RESTRICTED = {"other", "cc-by-nd-4.0", "cc-by-nc-nd-4.0", "cc-by-nd-3.0", "cc-by-nc-nd-3.0"}
UNSTATED = {"", "unknown", "none", "n/a", "not stated"}
RISKY: frozenset[LicenseRisk] = frozenset({"non_commercial", "restricted", "unknown"})


def hub_license(text: str | None) -> str | None:
    """Return the Hub license id a free-text license names (`CC BY-NC 4.0 (…)` → `cc-by-nc-4.0`), or None."""
    if not text:
        return None
    head = re.split(r"[;(]", text, maxsplit=1)[0].strip().lower()
    key = re.sub(r"[\s_]+", "-", head).replace("license", "").strip("-")
    key = {"apache-2": "apache-2.0", "apache": "apache-2.0", "cc0": "cc0-1.0", "bsd-3": "bsd-3-clause"}.get(key, key)
    return key if key in HUB_LICENSES else None


def is_stated(text: str | None) -> bool:
    """Return whether `text` states a licence at all (not empty, `unknown`, `none`, `n/a`, `not stated`)."""
    return (text or "").strip().lower() not in UNSTATED


def license_risk(text: str | None) -> LicenseRisk:
    """Return how risky training on and publishing data under `text` is: `restricted` (no derivatives, `other`),
    `non_commercial` (it or a clause of it says so, research or academic use only), `unknown` (none, or no
    licence datahunt recognises), else `ok`."""
    raw = (text or "").strip()
    if not is_stated(raw):
        return "unknown"
    hub_id = hub_license(raw)
    if hub_id in _RESTRICTED or _NO_DERIVATIVES_TEXT.search(raw):
        return "restricted"
    if _NON_COMMERCIAL_TEXT.search(raw) or NON_COMMERCIAL.search(hub_id or ""):
        return "non_commercial"
    return "ok" if hub_id else "unknown"
