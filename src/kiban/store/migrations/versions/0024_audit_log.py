"""The audit log: one hash-chained record per state-changing request, append-only.

Revision ID: 0024_audit_log
Revises: 0023_token_roles
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024_audit_log"
down_revision = "0023_token_roles"
branch_labels = None
depends_on = None

GENESIS_HASH = "0" * 64  # kiban.domain.audit.GENESIS_HASH (a migration keeps its own copy)
REFUSAL = "audit_log is append-only"


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("member", sa.String(128), nullable=True),
        sa.Column("role", sa.String(16), nullable=True),
        sa.Column("tenant", sa.String(63), nullable=True),
        sa.Column("source", sa.String(64), nullable=True),
        sa.Column("method", sa.String(8), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("target", sa.String(253), nullable=True),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"])
    op.create_index("ix_audit_log_member_at", "audit_log", ["member", "at"])
    head = op.create_table(
        "audit_chain_head",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
    )
    op.bulk_insert(head, [{"id": 1, "seq": 0, "hash": GENESIS_HASH}])
    # Append-only in the store: an UPDATE or DELETE of a record is refused (whoever can drop
    # the trigger can change the log: the hash chain is what shows it then).
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN RAISE EXCEPTION '{REFUSAL}'; END $$"
        )
        op.execute(
            "CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log "
            "FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()"
        )
    else:
        for event in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_log_no_{event.lower()} BEFORE {event} ON audit_log "
                f"BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER audit_log_append_only ON audit_log")
        op.execute("DROP FUNCTION audit_log_append_only()")
    else:
        op.execute("DROP TRIGGER audit_log_no_update")
        op.execute("DROP TRIGGER audit_log_no_delete")
    op.drop_table("audit_chain_head")
    op.drop_index("ix_audit_log_member_at", "audit_log")
    op.drop_index("ix_audit_log_at", "audit_log")
    op.drop_table("audit_log")
