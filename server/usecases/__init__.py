"""The work both front doors do: small modules of keyword-only functions that the CLI (`server/commands/`) and
the API (`server/api/`) call alike, so an operation behaves the same whichever door it came through.

A command or a route parses its input, calls one of these, and prints or answers what it returns; nothing here
prints, exits or raises an HTTP error. `catalog` opens the catalog and reviews entries, `licenses` adopts the
mirror's licences (after a campaign, at a review, at an export), `manifest` builds and exports the approved
set's manifest.
"""
