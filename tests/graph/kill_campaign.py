"""A campaign in a child process, for the kill-and-resume test: some categories finish, the rest hang.

Usage: python kill_campaign.py DATABASE_URL CAMPAIGN_ID LOG_PATH SLOW_CATEGORY[,…]
Every subagent call appends `start <category>` to the log, and `done <category>` once it delivers; the slow
categories sleep far longer than the test waits, so the parent can SIGKILL the process mid-campaign.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from campaign_fakes import FakeIndex, ScriptedSubagent, deliverable_for

from core.settings import get_settings
from core.types import Category
from curation.catalog import store
from graph.campaign import run_campaign


def main(database_url: str, campaign_id: str, log_path: str, slow: str) -> None:
    log = Path(log_path)
    slow_categories = set(slow.split(","))

    def note(line: str) -> None:
        with log.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")

    async def behave(category: Category) -> object:
        note(f"start {category.value}")
        if category.value in slow_categories:
            await asyncio.sleep(600)
        note(f"done {category.value}")
        return deliverable_for(category)

    engine = store.make_engine(database_url)
    store.upgrade_database(engine)
    subagent = ScriptedSubagent({c.value: behave for c in Category})
    asyncio.run(run_campaign(engine=engine, settings=get_settings(), campaign_id=campaign_id,
                             subagent=subagent, backends=[FakeIndex()]))


if __name__ == "__main__":
    main(*sys.argv[1:5])
