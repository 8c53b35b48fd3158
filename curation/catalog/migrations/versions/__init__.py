"""Alembic revision scripts of the catalog, oldest first by their `down_revision` chain."""
