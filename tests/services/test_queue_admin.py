"""Tenant-admins create and change their tenant's queues within the limits admins set (issue
27, point 4): quota moved between their queues (allowed), raised above the ceiling (403 naming
the field, the ceiling and the total), up to a declared ceiling, another tenant's queue (404),
members and viewers (403), and what stays the admins' (cohort, limits: 403 naming the field)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from kiban.domain.roles import Role
from kiban.executors.base import NodeInfo
from kiban.platform import Platform, build_platform
from kiban.services import policy, queue_admin
from kiban.services.auth import Principal
from kiban.services.errors import Forbidden, InvalidInput, NotFound
from kiban.store.models import PolicyVersion
from kiban.testing import FakeExecutor, ManualClock

ADMIN = Principal("admin", None, is_admin=True)
TINA = Principal("tina", "vision", role=Role.TENANT_ADMIN)
SAM = Principal("sam", "speech", role=Role.TENANT_ADMIN)
ALICE = Principal("alice", "vision", role=Role.MEMBER)
VIC = Principal("vic", "vision", role=Role.VIEWER)

NODES = [
    NodeInfo("h100-0", gpus=8, cpu_millis=16000, memory=2**36, labels={"gpu.product": "H100"}),
    NodeInfo("a100-0", gpus=8, cpu_millis=16000, memory=2**36, labels={"gpu.product": "A100"}),
]


def document(**extra: Any) -> dict[str, Any]:
    """vision: two queues, 6 H100 and 2 A100 in all; speech: one queue in a cohort."""
    return {
        "flavors": [
            {"name": "h100", "nodeLabels": {"gpu.product": "H100"}},
            {"name": "a100", "nodeLabels": {"gpu.product": "A100"}},
        ],
        "cohorts": [{"name": "research"}],
        "queues": [
            {"name": "vision-a", "tenant": "vision", "quota": {"h100": {"gpu": 4}}},
            {
                "name": "vision-b",
                "tenant": "vision",
                "quota": {"h100": {"gpu": 2}, "a100": {"gpu": 2}},
            },
            {
                "name": "speech-q",
                "tenant": "speech",
                "cohort": "research",
                "quota": {"h100": {"gpu": 8}},
            },
        ],
        **extra,
    }


@pytest.fixture
def platform(tmp_path: Path, db_url: str, clock: ManualClock) -> Iterator[Platform]:
    built = build_platform(
        home=tmp_path / "home",
        db_url=db_url,
        executor=FakeExecutor(NODES, clock=clock),
        clock=clock,
    )
    with built.sessions() as session:
        policy.apply_policy(session, document(), actor="admin", at=clock.now())
        session.commit()
    yield built
    built.close()


def change(platform: Platform, who: Principal, name: str, **changes: Any) -> None:
    with platform.sessions() as session:
        queue_admin.change_queue(session, who, name, changes, platform.clock.now())
        session.commit()


def create(platform: Platform, who: Principal, **entry: Any) -> None:
    with platform.sessions() as session:
        queue_admin.create_queue(session, who, entry, platform.clock.now())
        session.commit()


def queues(platform: Platform) -> dict[str, dict[str, Any]]:
    """The current policy's queue entries, by name."""
    with platform.sessions() as session:
        entries = policy.current_record(session).document["queues"]
    return {q["name"]: q for q in entries}


def versions(platform: Platform) -> int:
    with platform.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(PolicyVersion)) or 0)


def refused(platform: Platform, call: Any, *args: Any, **kwargs: Any) -> Forbidden:
    """The Forbidden ``call`` raises, having changed nothing."""
    before, written = versions(platform), queues(platform)
    with pytest.raises(Forbidden) as caught:
        call(platform, *args, **kwargs)
    assert (versions(platform), queues(platform)) == (before, written)
    return caught.value


def fields(error: Forbidden) -> list[str]:
    return [p.field for p in error.problems]


def limits(platform: Platform) -> Any:
    with platform.sessions() as session:
        return policy.current_record(session).document.get("tenantLimits")


def test_redistributing_within_the_ceiling_is_allowed(platform: Platform) -> None:
    change(platform, TINA, "vision-a", strategy="BestEffortFIFO")
    assert limits(platform) is None  # nothing of the ceiling moved: nothing written
    start = versions(platform)
    change(platform, TINA, "vision-a", quota={"h100": {"gpu": 1}})
    change(platform, TINA, "vision-b", quota={"h100": {"gpu": 4}, "a100": {"gpu": 1}})
    create(platform, TINA, name="vision-c", tenant="vision", quota={"h100": {"gpu": 1}})
    create(platform, TINA, name="vision-d", tenant="vision", quota={"a100": {"gpu": 1}})
    written = queues(platform)
    assert written["vision-a"]["quota"] == {"h100": {"gpu": 1}}
    assert written["vision-b"]["quota"] == {"h100": {"gpu": 4}, "a100": {"gpu": 1}}
    assert written["vision-c"] == {
        "name": "vision-c",
        "tenant": "vision",
        "quota": {"h100": {"gpu": 1}},
    }
    assert versions(platform) == start + 4  # each a new policy version
    # what admins gave was written down at the first step, so lowering vision-a first did
    # not lower the ceiling that raising vision-b then needed
    assert limits(platform) == [
        {
            "tenant": "vision",
            "quota": {"a100": {"gpu": 2}, "h100": {"gpu": 6}},
            "fairShareWeight": 1.0,
        }
    ]
    with platform.sessions() as session:
        assert (
            session.scalar(
                select(PolicyVersion.created_by).order_by(PolicyVersion.version.desc()).limit(1)
            )
            == "tina (create queue vision-d)"
        )


def test_raising_above_the_ceiling_names_the_field_the_ceiling_and_the_total(
    platform: Platform,
) -> None:
    error = refused(platform, change, TINA, "vision-a", quota={"h100": {"gpu": 5}})
    assert fields(error) == ["quota.h100.gpu"]
    message = error.problems[0].message
    assert "would hold 7 h100 gpu in all (now 6), above its ceiling of 6" in message
    assert "what admins gave its queues" in message
    assert "quota.h100.gpu" in error.message and "tina" in error.message
    # a flavor the tenant was given none of
    error = refused(
        platform, create, TINA, name="vision-c", tenant="vision", quota={"a100": {"gpu": 1}}
    )
    assert fields(error) == ["quota.a100.gpu"]
    assert (
        "would hold 3 a100 gpu in all (now 2), above its ceiling of 2" in error.problems[0].message
    )


def test_a_declared_ceiling_allows_up_to_it(platform: Platform) -> None:
    limits = [{"tenant": "vision", "quota": {"h100": {"gpu": 10}, "a100": {"gpu": 2}}}]
    with platform.sessions() as session:
        policy.apply_policy(session, document(tenantLimits=limits), actor="admin", at=0.0)
        session.commit()
    change(platform, TINA, "vision-a", quota={"h100": {"gpu": 8}})  # 10 in all
    error = refused(platform, change, TINA, "vision-b", quota={"h100": {"gpu": 3}})
    assert "would hold 11 h100 gpu in all (now 10), above its ceiling of 10" in (
        error.problems[0].message
    )
    assert "set by admins in tenantLimits" in error.problems[0].message


def test_a_tenant_left_above_its_ceiling_may_shrink_but_not_grow(platform: Platform) -> None:
    limits = [{"tenant": "vision", "quota": {"h100": {"gpu": 4}, "a100": {"gpu": 2}}}]
    with platform.sessions() as session:
        policy.apply_policy(session, document(tenantLimits=limits), actor="admin", at=0.0)
        session.commit()
    change(platform, TINA, "vision-a", quota={"h100": {"gpu": 3}})  # 5: above 4, below 6
    error = refused(platform, change, TINA, "vision-a", quota={"h100": {"gpu": 4}})
    assert fields(error) == ["quota.h100.gpu"]


def test_the_weight_is_held_to_the_highest_admins_gave(platform: Platform) -> None:
    error = refused(platform, change, TINA, "vision-a", fairShareWeight=2)
    assert fields(error) == ["fairShareWeight"]
    assert "2 is above the highest weight tenant vision's queues may have, 1" in (
        error.problems[0].message
    )
    change(platform, TINA, "vision-a", fairShareWeight=0.5, strategy="BestEffortFIFO")
    limits = [{"tenant": "vision", "fairShareWeight": 4}]
    with platform.sessions() as session:
        record = policy.current_record(session)
        policy.apply_policy(
            session, {**record.document, "tenantLimits": limits}, actor="admin", at=0.0
        )
        session.commit()
    change(platform, TINA, "vision-a", fairShareWeight=4)
    assert queues(platform)["vision-a"]["fairShareWeight"] == 4


def test_another_tenants_queue_is_not_found_and_its_queues_not_theirs_to_create(
    platform: Platform,
) -> None:
    with pytest.raises(NotFound, match="queue speech-q not found"):
        change(platform, TINA, "speech-q", quota={"h100": {"gpu": 1}})
    error = refused(
        platform, create, TINA, name="sneaky", tenant="speech", quota={"h100": {"gpu": 1}}
    )
    assert fields(error) == ["tenant"]


@pytest.mark.parametrize("who", [ALICE, VIC], ids=["member", "viewer"])
def test_members_and_viewers_change_no_queue(platform: Platform, who: Principal) -> None:
    error = refused(platform, change, who, "vision-a", quota={"h100": {"gpu": 1}})
    assert "needs the tenant-admin role" in error.message
    error = refused(platform, create, who, name="mine", tenant="vision", quota={"h100": {"gpu": 0}})
    assert "needs the tenant-admin role" in error.message


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cohort": "research"}, "cohort"),
        ({"borrowingLimit": {"h100": {"gpu": 2}}}, "borrowingLimit"),
        ({"lendingLimit": {"h100": {"gpu": 0}}}, "lendingLimit"),
        ({"quota": None}, "quota"),  # no quota: no limit at all
    ],
)
def test_what_reaches_other_tenants_stays_the_admins(
    platform: Platform, changes: dict[str, Any], field: str
) -> None:
    error = refused(platform, change, TINA, "vision-a", **changes)
    assert fields(error) == [field]
    change(platform, ADMIN, "vision-a", **{"cohort": "research", **changes})  # an admin may


def test_a_tenant_admins_new_queue_needs_a_quota_and_no_cohort(platform: Platform) -> None:
    error = refused(platform, create, TINA, name="vision-c", tenant="vision")
    assert fields(error) == ["quota"]
    error = refused(
        platform,
        create,
        TINA,
        name="vision-c",
        tenant="vision",
        cohort="research",
        quota={"h100": {"gpu": 0}},
    )
    assert fields(error) == ["cohort"]


def test_bad_input_is_named_inside_the_entry_before_any_limit(platform: Platform) -> None:
    with pytest.raises(InvalidInput) as caught:
        change(platform, TINA, "vision-a", quota={"b200": {"gpu": 99}})
    assert [p.field for p in caught.value.problems] == ["quota.b200"]
    with pytest.raises(InvalidInput) as caught:
        change(platform, TINA, "vision-a")
    assert "nothing to change" in str(caught.value.problems[0])


def test_admins_are_not_held_to_ceilings(platform: Platform) -> None:
    change(platform, ADMIN, "vision-a", quota={"h100": {"gpu": 64}}, fairShareWeight=9)
    create(platform, ADMIN, name="vision-c", tenant="vision", quota={"a100": {"gpu": 8}})
    assert queues(platform)["vision-a"]["quota"] == {"h100": {"gpu": 64}}
    # and what they gave is the tenant-admin's to move from then on
    change(platform, TINA, "vision-c", quota={"h100": {"gpu": 0}})
    change(platform, TINA, "vision-b", quota={"h100": {"gpu": 2}, "a100": {"gpu": 10}})
