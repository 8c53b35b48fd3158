"""The discovery campaign as a LangGraph `StateGraph`: supervisor, ten-way `Send` fan-out, verifier, persist.

`graph.campaign` is the entry point (run, resume, re-run one category); `graph.builder` wires the nodes;
`graph.verifier` holds the candidate checks; `graph.checkpoint` opens the checkpointer on the catalog database.
Nothing here compiles a graph at import time.
"""
