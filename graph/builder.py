"""Wiring of the campaign graph: supervisor → `Send` fan-out of one branch per category → verifier → persist.

`build_graph()` returns a freshly compiled graph each call (nothing compiles at import time). The supervisor
routes with `Command(goto=[Send(...), ...])`; all branches run in one superstep, in parallel on the event
loop, and their results meet in the state's `results` list before the verifier runs once over all of them.
"""

from __future__ import annotations

import logging
from typing import Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command, Send

from core.types import Category
from graph.branch import run_branch
from graph.context import CampaignContext
from graph.persist import persist
from graph.state import BranchInput, CampaignState
from graph.verifier import verify

logger = logging.getLogger(__name__)


def supervisor(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["subagent", "verifier"]]:
    """Fan out one `subagent` branch per requested category (campaign order); none requested → verifier."""
    wanted = set(state.get("categories", []))
    categories = [c.value for c in Category if c.value in wanted]
    logger.info("campaign %s: fanning out to %s", state["campaign_id"], ", ".join(categories) or "nothing")
    if not categories:
        return Command(goto="verifier")
    return Command(
        goto=[Send("subagent", BranchInput(campaign_id=state["campaign_id"], category=c)) for c in categories]
    )


def build_graph(
    checkpointer: BaseCheckpointSaver[str] | None = None,
) -> CompiledStateGraph[CampaignState, CampaignContext, CampaignState, CampaignState]:
    """Return the compiled campaign graph, checkpointed by `checkpointer` when given."""
    builder = StateGraph(CampaignState, context_schema=CampaignContext)
    builder.add_node("supervisor", supervisor, destinations=("subagent", "verifier"))
    builder.add_node("subagent", run_branch, input_schema=BranchInput)
    builder.add_node("verifier", verify)
    builder.add_node("persist", persist)
    builder.add_edge(START, "supervisor")
    builder.add_edge("subagent", "verifier")
    builder.add_edge("verifier", "persist")
    builder.add_edge("persist", END)
    return builder.compile(checkpointer=checkpointer, name="campaign")
