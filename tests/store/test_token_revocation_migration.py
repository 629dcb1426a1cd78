"""0027_token_revocation: tokens stored before stay active; a downgrade deletes the revoked
ones (without the columns they would be valid again) and keeps the others (both stores)."""

from __future__ import annotations

from sqlalchemy import select, text
from sqlalchemy.orm import Session
from test_migrations import move_to

from kiban.store.db import make_engine, migrate
from kiban.store.models import ApiToken

BEFORE = "0026_drop_pid_start_time"


def test_stored_tokens_stay_active_and_a_downgrade_drops_the_revoked(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        move_to(engine, BEFORE)
        with engine.begin() as connection:
            connection.execute(text("INSERT INTO tenants (name, created_at) VALUES ('t', 1)"))
            for name in ("alice", "bob"):
                connection.execute(
                    text(
                        "INSERT INTO api_tokens (token_hash, name, role, tenant, created_at) "
                        "VALUES (:hash, :name, 'member', 't', 1)"
                    ),
                    {"hash": name * 8, "name": name},
                )
        migrate(engine)
        with Session(engine) as session:
            rows = session.scalars(select(ApiToken).order_by(ApiToken.name)).all()
            assert [(r.name, r.revoked_at, r.revoked_by) for r in rows] == [
                ("alice", None, None),
                ("bob", None, None),
            ]
            rows[1].revoked_at, rows[1].revoked_by = 2.0, "admin"
            session.commit()
        move_to(engine, BEFORE, down=True)
        with engine.connect() as connection:
            names = connection.execute(text("SELECT name FROM api_tokens")).scalars().all()
            assert names == ["alice"]
            columns = connection.execute(text("SELECT * FROM api_tokens LIMIT 0")).keys()
            assert "revoked_at" not in columns
    finally:
        engine.dispose()
