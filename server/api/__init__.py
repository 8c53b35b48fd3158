"""The HTTP API of datahunt: one router module per resource (campaigns, catalog, manifest, pages, runs).

Routers hold HTTP only; data access goes through `curation.catalog.store`, campaigns through `graph`.
`server.app.create_app` assembles them.
"""
