"""The root of every error the campaign graph raises on purpose, so a caller can catch the stage as one name.

    GraphError
    ├── CampaignError              a campaign request that cannot be carried out (campaign)
    │   ├── CampaignFinishedError, CampaignAlreadyStartedError, CategoryNotInCampaignError
    │   ├── CampaignBusyError          someone (another process, or another task here) works on it now
    │   ├── CampaignLeaseLostError     this process stalled past its lease and another took over
    │   └── CampaignRunError           the graph itself failed; the campaign is marked failed
    ├── UnsupportedDatabaseError   a catalog URL the checkpointer cannot use (checkpoint)
    ├── LeaseHeldElsewhere         the campaign's lease is held by another process (lease)
    └── LeaseLost                  the lease expired mid-run and another process took it (lease)

Each subclass also keeps the builtin base it had (ValueError), so older handlers still match.
"""

from __future__ import annotations


class GraphError(Exception):
    """Base of every error the campaign graph raises on purpose."""
