"""Initial catalog tables: campaign, subagentrun, candidate, verdict, catalogentry, auditevent.

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "auditevent",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("entity", sa.String(length=32), nullable=False),
        sa.Column("entity_id", sa.String(length=256), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("from_status", sa.String(length=32), nullable=True),
        sa.Column("to_status", sa.String(length=32), nullable=True),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_auditevent_at", "auditevent", ["at"], unique=False)
    op.create_index("ix_auditevent_entity", "auditevent", ["entity"], unique=False)
    op.create_index("ix_auditevent_entity_id", "auditevent", ["entity_id"], unique=False)

    op.create_table(
        "campaign",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("categories", sa.JSON(), nullable=False),
        sa.Column("offline", sa.Boolean(), nullable=False),
        sa.Column("backends", sa.JSON(), nullable=False),
        sa.Column("thread_id", sa.String(length=128), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_campaign_status", "campaign", ["status"], unique=False)

    op.create_table(
        "catalogentry",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hub_id", sa.String(length=256), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("categories", sa.JSON(), nullable=False),
        sa.Column("relevance", sa.JSON(), nullable=False),
        sa.Column("best_relevance", sa.Float(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("verifier_decision", sa.String(length=16), nullable=True),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("dataset_metadata", sa.JSON(), nullable=False),
        sa.Column("license", sa.String(length=128), nullable=True),
        sa.Column("format_guess", sa.String(length=64), nullable=True),
        sa.Column("revision", sa.String(length=64), nullable=True),
        sa.Column("config", sa.String(length=128), nullable=True),
        sa.Column("split", sa.String(length=64), nullable=True),
        sa.Column("field_mapping", sa.JSON(), nullable=False),
        sa.Column("reviewer", sa.String(length=128), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_catalogentry_best_relevance", "catalogentry", ["best_relevance"], unique=False)
    op.create_index("ix_catalogentry_hub_id", "catalogentry", ["hub_id"], unique=True)
    op.create_index("ix_catalogentry_license", "catalogentry", ["license"], unique=False)
    op.create_index("ix_catalogentry_status", "catalogentry", ["status"], unique=False)

    op.create_table(
        "subagentrun",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.String(length=64), nullable=False),
        sa.Column("category", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("planner", sa.String(length=32), nullable=True),
        sa.Column("queries", sa.JSON(), nullable=False),
        sa.Column("results_per_backend", sa.JSON(), nullable=False),
        sa.Column("candidates_found", sa.Integer(), nullable=False),
        sa.Column("candidates_accepted", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("elapsed_s", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["campaign_id"],
            ["campaign.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("campaign_id", "category", "attempt", name="uq_subagentrun_attempt"),
    )
    op.create_index("ix_subagentrun_campaign_id", "subagentrun", ["campaign_id"], unique=False)
    op.create_index("ix_subagentrun_category", "subagentrun", ["category"], unique=False)

    op.create_table(
        "candidate",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("category", sa.String(length=64), nullable=False),
        sa.Column("hub_id", sa.String(length=256), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("dataset_metadata", sa.JSON(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("relevance", sa.Float(), nullable=False),
        sa.Column("relevance_reason", sa.Text(), nullable=False),
        sa.Column("format_guess", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["campaign_id"],
            ["campaign.id"],
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["subagentrun.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_candidate_campaign_id", "candidate", ["campaign_id"], unique=False)
    op.create_index("ix_candidate_category", "candidate", ["category"], unique=False)
    op.create_index("ix_candidate_hub_id", "candidate", ["hub_id"], unique=False)
    op.create_index("ix_candidate_run_id", "candidate", ["run_id"], unique=False)

    op.create_table(
        "verdict",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("candidate_id", sa.Integer(), nullable=True),
        sa.Column("hub_id", sa.String(length=256), nullable=True),
        sa.Column("decision", sa.String(length=16), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["campaign_id"],
            ["campaign.id"],
        ),
        sa.ForeignKeyConstraint(
            ["candidate_id"],
            ["candidate.id"],
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["subagentrun.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_verdict_campaign_id", "verdict", ["campaign_id"], unique=False)
    op.create_index("ix_verdict_candidate_id", "verdict", ["candidate_id"], unique=False)
    op.create_index("ix_verdict_hub_id", "verdict", ["hub_id"], unique=False)
    op.create_index("ix_verdict_run_id", "verdict", ["run_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_verdict_run_id", table_name="verdict")
    op.drop_index("ix_verdict_hub_id", table_name="verdict")
    op.drop_index("ix_verdict_candidate_id", table_name="verdict")
    op.drop_index("ix_verdict_campaign_id", table_name="verdict")

    op.drop_table("verdict")
    op.drop_index("ix_candidate_run_id", table_name="candidate")
    op.drop_index("ix_candidate_hub_id", table_name="candidate")
    op.drop_index("ix_candidate_category", table_name="candidate")
    op.drop_index("ix_candidate_campaign_id", table_name="candidate")

    op.drop_table("candidate")
    op.drop_index("ix_subagentrun_category", table_name="subagentrun")
    op.drop_index("ix_subagentrun_campaign_id", table_name="subagentrun")

    op.drop_table("subagentrun")
    op.drop_index("ix_catalogentry_status", table_name="catalogentry")
    op.drop_index("ix_catalogentry_license", table_name="catalogentry")
    op.drop_index("ix_catalogentry_hub_id", table_name="catalogentry")
    op.drop_index("ix_catalogentry_best_relevance", table_name="catalogentry")

    op.drop_table("catalogentry")
    op.drop_index("ix_campaign_status", table_name="campaign")

    op.drop_table("campaign")
    op.drop_index("ix_auditevent_entity_id", table_name="auditevent")
    op.drop_index("ix_auditevent_entity", table_name="auditevent")
    op.drop_index("ix_auditevent_at", table_name="auditevent")

    op.drop_table("auditevent")
