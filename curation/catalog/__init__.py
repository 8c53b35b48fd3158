"""The SQL catalog: SQLModel tables, the store (all data access), Alembic migrations."""
