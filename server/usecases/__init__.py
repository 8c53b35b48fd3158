"""Use cases both front doors call: each joins stages for one operation (the CLI's commands and the API's routes
parse, call one of these, and print or answer; nothing here reads the environment, prints, exits or raises an
HTTP error).

Small modules of keyword-only functions: `catalog` opens the catalog and reviews entries, `licenses` adopts the
mirror's licences (after a campaign, at a review, at an export), `manifest` builds and exports the approved
set's manifest, `engine_features` the target's features from a serving engine.
"""
