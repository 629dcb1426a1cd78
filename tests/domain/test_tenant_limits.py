"""Tenant ceilings (issue 27, point 4): ``tenantLimits`` validated like every policy field, the
ceiling where none is declared (what admins gave), and which totals a change may not reach."""

from __future__ import annotations

from typing import Any

import pytest

from kiban.domain.cluster import parse_policy
from kiban.domain.errors import SpecError
from kiban.domain.tenant_limits import (
    Excess,
    ceiling_of,
    excesses,
    quota_amounts,
    quota_field,
    tenant_totals,
)

FLAVORS = [
    {"name": "h100", "nodeLabels": {"gpu.product": "H100"}},
    {"name": "a100", "nodeLabels": {"gpu.product": "A100"}},
]
QUEUES = [
    {"name": "vision-a", "tenant": "vision", "quota": {"h100": {"gpu": 4}, "a100": {"gpu": 2}}},
    {
        "name": "vision-b",
        "tenant": "vision",
        "quota": {"h100": {"gpu": 2, "nvidia.com/hostdev": 2}},
        "fairShareWeight": 3,
    },
    {"name": "vision-free", "tenant": "vision"},  # no quota: adds nothing to the ceiling
    {"name": "speech-q", "tenant": "speech", "quota": {"h100": {"gpu": 8}}},
]


def policy(**extra: Any) -> Any:
    return parse_policy({"flavors": FLAVORS, "queues": QUEUES, **extra})


def test_without_a_declaration_the_ceiling_is_what_admins_gave() -> None:
    ceiling = ceiling_of(policy(), "vision")
    assert ceiling.quota == {
        ("h100", "gpu"): 6,
        ("a100", "gpu"): 2,
        ("h100", "nvidia.com/hostdev"): 2,
    }
    assert ceiling.fair_share_weight == 3
    assert not ceiling.quota_declared and not ceiling.weight_declared
    nothing = ceiling_of(policy(), "newcomer")
    assert nothing.quota == {} and nothing.fair_share_weight == 1.0


def test_a_declared_ceiling_replaces_it_part_by_part() -> None:
    limits = [{"tenant": "vision", "quota": {"h100": {"gpu": 10}}}]
    ceiling = ceiling_of(policy(tenantLimits=limits), "vision")
    assert ceiling.quota == {("h100", "gpu"): 10}  # a flavor it does not name: none
    assert ceiling.quota_declared and not ceiling.weight_declared
    assert ceiling.fair_share_weight == 3  # not declared: the highest given
    weighted = [{"tenant": "vision", "fairShareWeight": 5}]
    ceiling = ceiling_of(policy(tenantLimits=weighted), "vision")
    assert ceiling.fair_share_weight == 5 and ceiling.weight_declared
    assert ceiling.quota[("h100", "gpu")] == 6  # quota not declared: what admins gave


def test_totals_count_only_the_tenants_queues() -> None:
    assert tenant_totals(policy().queues, "speech") == {("h100", "gpu"): 8}
    assert quota_amounts(None) == {}


@pytest.mark.parametrize(
    ("before", "after", "ceiling", "expected"),
    [
        pytest.param({("h", "gpu"): 6}, {("h", "gpu"): 6}, {("h", "gpu"): 6}, [], id="moved"),
        pytest.param({("h", "gpu"): 6}, {("h", "gpu"): 7}, {("h", "gpu"): 6}, [7], id="raised"),
        pytest.param({("h", "gpu"): 6}, {("h", "gpu"): 8}, {("h", "gpu"): 8}, [], id="up to it"),
        pytest.param({("h", "gpu"): 9}, {("h", "gpu"): 8}, {("h", "gpu"): 4}, [], id="shrinks"),
        pytest.param({("h", "gpu"): 5}, {("h", "gpu"): 6}, {("h", "gpu"): 4}, [6], id="grows"),
        pytest.param({}, {("a", "gpu"): 1}, {("h", "gpu"): 8}, [1], id="unnamed flavor"),
    ],
)
def test_excesses(
    before: dict[tuple[str, str], int],
    after: dict[tuple[str, str], int],
    ceiling: dict[tuple[str, str], int],
    expected: list[int],
) -> None:
    assert [e.total for e in excesses(before, after, ceiling)] == expected


def test_the_field_of_an_excess_is_as_the_quota_was_written() -> None:
    excess = Excess("h100", "gpu", ceiling=6, total=7, before=6)
    flavored = policy().queues[0].quota
    assert quota_field(flavored, excess) == "quota.h100.gpu"
    flavorless = parse_policy({"queues": [{"name": "q", "quota": {"gpu": 2}}]}).queues[0].quota
    assert quota_field(flavorless, Excess("default", "gpu", 2, 3, 2)) == "quota.gpu"


@pytest.mark.parametrize(
    ("limits", "field", "words"),
    [
        (
            [{"tenant": "vision", "quota": {"b200": {"gpu": 4}}}],
            "tenantLimits[0].quota.b200",
            "unknown flavor",
        ),
        ([{"tenant": "vision", "quota": {"gpu": 4}}], "tenantLimits[0].quota", "name the flavor"),
        (
            [{"tenant": "vision", "quota": {"h100": {"gpu": -1}}}],
            "tenantLimits[0].quota.h100.gpu",
            "",
        ),
        (
            [{"tenant": "vision"}, {"tenant": "vision"}],
            "tenantLimits[1].tenant",
            "limited twice (also tenantLimits[0])",
        ),
        ([{"tenant": "Vision!"}], "tenantLimits[0].tenant", ""),
        ([{"tenant": "vision", "fairShareWeight": 0}], "tenantLimits[0].fairShareWeight", ""),
        ([{"tenant": "vision", "gpus": 4}], "tenantLimits[0].gpus", ""),
    ],
)
def test_bad_limits_are_named(limits: list[dict[str, Any]], field: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        policy(tenantLimits=limits)
    problems = {p.field: p.message for p in caught.value.problems}
    assert field in problems, problems
    assert words in problems[field]
