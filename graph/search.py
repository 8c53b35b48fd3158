"""Which search backends a campaign uses, chosen in one place for every way of running one.

A new campaign, a resume and a re-run of one category all get their backends from `choose_search`: the ones
a test or benchmark injects, else `agents.backends.default_backends` (the Hub, the web and the offline index
online; the offline index alone when offline, in huggingface_hub's offline mode, or when the Hub does not
answer a short probe). Entry points in `server/` ask here instead of reaching into `agents/`; `hub_problem`
answers the same question of Hub reachability for the commands that download or upload outside a campaign.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.search.base import SearchBackend
from core.settings import Settings


@dataclass(frozen=True)
class SearchPlan:
    """The backends a campaign searches with, whether it is offline, and notes saying why (recorded on events)."""

    backends: list[SearchBackend]
    offline: bool
    notes: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        """The backends' names, as the campaign row stores them."""
        return [b.name for b in self.backends]


def choose_search(
    settings: Settings, *, offline: bool | None = None, backends: list[SearchBackend] | None = None
) -> SearchPlan:
    """Return the search plan: `backends` when injected, else the default ones for `settings` (`offline`
    overriding the settings' own). Blocking: the default choice may probe the Hub for a few seconds."""
    offline = settings.offline if offline is None else offline
    if backends is not None:
        return SearchPlan(backends=list(backends), offline=offline)
    from agents.backends import default_backends

    chosen, notes = default_backends(settings.model_copy(update={"offline": offline}))
    return SearchPlan(backends=chosen, offline=offline, notes=notes)


def hub_problem() -> str | None:
    """Return None when the Hub can be used, else why not (huggingface_hub offline mode, or a failed probe)."""
    from agents import backends

    if backends.hub_offline_mode():
        return "huggingface_hub offline mode (HF_HUB_OFFLINE)"
    return backends.probe_hub()
