"""Lease fencing: a generation per lease, one more with every new owner, that fences the holder's writes.

A lease is no longer deleted on release (its owner is emptied), so its generation never restarts; rows of
leases released before this revision are gone and start again at 1, which no live holder can still carry.

Revision ID: 0005
Revises: 0004
Create Date: 2027-01-10
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("lease") as batch:
        batch.add_column(sa.Column("generation", sa.BigInteger(), nullable=False, server_default="1"))


def downgrade() -> None:
    op.execute("DELETE FROM lease WHERE owner = ''")  # released leases: before this revision they had no row
    with op.batch_alter_table("lease") as batch:
        batch.drop_column("generation")
