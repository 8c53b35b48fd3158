"""The catalog's exception tree: every error the store raises on purpose is a `CatalogError`.

Callers (graph nodes, API routes, the CLI) catch `CatalogError` to turn a bad id or a refused review into a
clear message; anything else escaping the store is a bug or a database outage.
"""

from __future__ import annotations

from curation.errors import CurationError


class CatalogError(CurationError):
    """Base of every error the catalog store raises on purpose."""


class CampaignNotFoundError(CatalogError):
    """No campaign with that id."""


class RunNotFoundError(CatalogError):
    """No subagent run with that id (or it belongs to another campaign)."""


class EntryNotFoundError(CatalogError):
    """No catalog entry with that Hub id."""


class OverrideRequiredError(CatalogError):
    """Approving an entry the verifier rejected needs an explicit override."""


class InvalidValueError(CatalogError, ValueError):
    """A status, decision, category or id the catalog does not know."""


class ConcurrentUpdateError(CatalogError):
    """The entry kept changing under a review until the retries ran out; try again."""


class DatabaseError(CatalogError):
    """The catalog database could not be opened or migrated (bad URL, unreachable server)."""
