"""Whether the CLI may use the Hub now: huggingface_hub's own offline mode, then one short probe of its API.

`curate` asks before it would download a source the mirror lacks, `publish` before it uploads; both say why
not instead of waiting on retries. The probe is the one a campaign's backend choice uses (`graph.search`).
"""

from __future__ import annotations


def hub_problem() -> str | None:
    """Return None when the Hub can be used, else why not (huggingface_hub offline mode, or a failed probe)."""
    from graph.search import hub_problem as problem

    return problem()
