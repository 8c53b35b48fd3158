"""Measured values: what a source or a category is worth to the draft, per value run.

Revision ID: 0006
Revises: 0004
Create Date: 2026-12-10
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "measured_value",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("subject", sa.String(length=256), nullable=False),
        sa.Column("op", sa.String(length=16), nullable=False),
        sa.Column("budget", sa.Integer(), nullable=False),
        sa.Column("rows_swapped", sa.Float(), nullable=False),
        sa.Column("seeds", sa.Integer(), nullable=False),
        sa.Column("noise_dof", sa.Integer(), nullable=False),
        sa.Column("per_10k", sa.Float(), nullable=False),
        sa.Column("low", sa.Float(), nullable=True),
        sa.Column("high", sa.Float(), nullable=True),
        sa.Column("delta", sa.Float(), nullable=False),
        sa.Column("per_set", sa.JSON(), nullable=False),
        sa.Column("run", sa.String(length=512), nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("kind", "subject", "op", "run", name="uq_measured_value_run"),
    )
    op.create_index("ix_measured_value_subject", "measured_value", ["subject"], unique=False)
    op.create_index("ix_measured_value_measured_at", "measured_value", ["measured_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_measured_value_measured_at", table_name="measured_value")
    op.drop_index("ix_measured_value_subject", table_name="measured_value")
    op.drop_table("measured_value")
