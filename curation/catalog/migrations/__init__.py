"""Alembic migrations of the catalog, shipped as package data so an installed datahunt can upgrade its database.

`curation.catalog.store.upgrade_database` configures Alembic programmatically with this folder as the script
location; `env.py` runs on the connection the store hands it. Nothing here is imported at run time.
"""
