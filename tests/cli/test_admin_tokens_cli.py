"""``kiban admin create-token --role --expires``, ``tokens [-o json]``, ``revoke-token``,
``delete-tenant``/``delete-queue``, a tenant-admin's ``create-queue``/``queue-quota`` (issue 27,
point 4), run in-process against the API."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from cli_support import Run

from kiban.cli.admin import quota_of
from kiban.domain.errors import SpecError


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
    assert after.code == 1 and f"token {rows[1]['id']} (vic) was revoked" in after.err
    active = json.loads(kiban("admin", "tokens", "vision", "-o", "json").out)
    assert [r["member"] for r in active] == ["tina"]
    every = json.loads(kiban("admin", "tokens", "vision", "--all", "-o", "json").out)
    assert [(r["member"], r["revokedBy"]) for r in every] == [("tina", None), ("vic", "admin")]
    assert every[1]["revokedAt"] >= every[1]["createdAt"]
    table = kiban("admin", "tokens", "--all")
    assert table.code == 0 and "REVOKED" in table.out
    (vic_line,) = [line for line in table.out.splitlines() if " vic " in line]
    assert vic_line.rstrip().endswith("by admin")
    assert "REVOKED" not in kiban("admin", "tokens").out


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


def test_a_tenant_admin_creates_queues_and_moves_quota_within_the_ceiling(
    kiban: Run, run_as: Callable[[str], Run]
) -> None:
    assert kiban("admin", "create-tenant", "vision").code == 0
    assert (
        kiban("admin", "create-queue", "vision-q", "--tenant", "vision", "--gpu-quota", "2").code
        == 0
    )
    made = kiban("admin", "create-token", "vision", "tina", "--role", "tenant-admin")
    tina = run_as(made.out.strip())
    above = tina("admin", "create-queue", "vision-dev", "--tenant", "vision", "--quota", "gpu=1")
    assert above.code == 1
    assert "quota.gpu" in above.err and "above its ceiling of 2" in above.err
    lowered = tina("admin", "queue-quota", "vision-q", "gpu=1")
    assert lowered.code == 0, lowered.err
    created = tina("admin", "create-queue", "vision-dev", "--tenant", "vision", "--quota", "gpu=1")
    assert created.code == 0, created.err
    listed = json.loads(tina("queues", "-o", "json").out)
    assert {q["name"]: q["gpuQuota"] for q in listed} == {"vision-q": 1, "vision-dev": 1}
    weighty = tina("admin", "queue-quota", "vision-q", "gpu=1", "--weight", "5")
    assert weighty.code == 1 and "fairShareWeight" in weighty.err
    bad = tina("admin", "queue-quota", "vision-q", "gpu=lots")
    assert bad.code == 1 and "amounts" in bad.err and "'gpu=lots'" in bad.err


@pytest.mark.parametrize(
    ("items", "quota"),
    [
        (["gpu=4"], {"gpu": 4}),
        (["h100=8", "a100=2"], {"h100": {"gpu": 8}, "a100": {"gpu": 2}}),
        (
            ["h100.nvidia.com/hostdev=8", "h100=8"],
            {"h100": {"gpu": 8, "nvidia.com/hostdev": 8}},
        ),
    ],
)
def test_quota_items(items: list[str], quota: dict[str, object]) -> None:
    assert quota_of(items) == quota


@pytest.mark.parametrize("items", [["h100"], ["h100=-1"], ["=3"], ["gpu=1", "h100=2"]])
def test_bad_quota_items_are_named(items: list[str]) -> None:
    with pytest.raises(SpecError) as caught:
        quota_of(items)
    assert [p.field for p in caught.value.problems] == ["--quota"]
