"""``kiban admin create-token --role --expires``, ``tokens [-o json]``, ``revoke-token``,
``delete-tenant``/``delete-queue`` (issue 27, point 4), run in-process against the API."""

from __future__ import annotations

import json
from collections.abc import Callable

from cli_support import Run


def test_tokens_with_roles_are_listed_without_secrets_and_revoked(
    kiban: Run, run_as: Callable[[str], Run]
) -> None:
    assert kiban("admin", "create-tenant", "vision").code == 0
    made = kiban("admin", "create-token", "vision", "tina", "--role", "tenant-admin")
    assert made.code == 0, made.err
    tina = run_as(made.out.strip())
    viewer = tina("admin", "create-token", "vision", "vic", "--role", "viewer", "--expires", "30d")
    assert viewer.code == 0, viewer.err
    refused = tina("admin", "create-token", "vision", "eve", "--role", "admin")
    assert refused.code == 1
    assert "a token with the admin role needs an admin" in refused.err
    listed = kiban("admin", "tokens", "vision", "-o", "json")
    assert listed.code == 0, listed.err
    rows = json.loads(listed.out)
    assert [(r["member"], r["role"]) for r in rows] == [("tina", "tenant-admin"), ("vic", "viewer")]
    assert rows[1]["expiresAt"] == rows[1]["createdAt"] + 30 * 86400
    assert made.out.strip() not in listed.out and viewer.out.strip() not in listed.out
    table = kiban("admin", "tokens")
    assert table.code == 0 and "LAST USE" in table.out and "vic" in table.out
    vic = run_as(viewer.out.strip())
    assert vic("queues").code == 0
    assert kiban("admin", "revoke-token", str(rows[1]["id"])).code == 0
    after = vic("queues")
    assert after.code == 1 and "invalid token" in after.err


def test_a_bad_role_is_named(kiban: Run) -> None:
    assert kiban("admin", "create-tenant", "vision").code == 0
    done = kiban("admin", "create-token", "vision", "x", "--role", "root")
    assert done.code == 1
    assert "role" in done.err and "'tenant-admin'" in done.err


def test_delete_tenant_and_queue(kiban: Run) -> None:
    assert kiban("admin", "create-tenant", "vision").code == 0
    assert kiban("admin", "create-queue", "vision-q", "--tenant", "vision").code == 0
    assert kiban("admin", "delete-queue", "vision-q").code == 0
    assert "vision-q" not in kiban("queues").out
    done = kiban("admin", "delete-tenant", "vision")
    assert done.code == 0, done.err
    assert "vision" not in kiban("admin", "tenants").out.split()
