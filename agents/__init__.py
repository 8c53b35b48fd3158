"""The ten category subagents: query planning, search backends, candidate scoring, optional LLM.

Subagents only return candidates (a `Deliverable`); the graph verifies and stores them. This package may
import `core` (and the `prompts` data package) only.
"""
