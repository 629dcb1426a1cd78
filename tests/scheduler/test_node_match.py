"""Node constraints match nodes as the Kubernetes scheduler's node selector and affinity do."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiban.scheduler.node_match import NodeConstraint, NodeTerm, Operator, Requirement

LABELS = {"gpu.product": "H100", "rack": "r7", "generation": "9"}


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        (Requirement("gpu.product", Operator.IN, ("A100", "H100")), True),
        (Requirement("gpu.product", Operator.IN, ("A100",)), False),
        (Requirement("missing", Operator.IN, ("x",)), False),
        (Requirement("gpu.product", Operator.NOT_IN, ("H100",)), False),
        (Requirement("gpu.product", Operator.NOT_IN, ("A100",)), True),
        (Requirement("missing", Operator.NOT_IN, ("x",)), True),  # absent is not in the list
        (Requirement("rack", Operator.EXISTS), True),
        (Requirement("missing", Operator.EXISTS), False),
        (Requirement("missing", Operator.DOES_NOT_EXIST), True),
        (Requirement("rack", Operator.DOES_NOT_EXIST), False),
        (Requirement("generation", Operator.GT, ("8",)), True),
        (Requirement("generation", Operator.GT, ("9",)), False),
        (Requirement("generation", Operator.LT, ("10",)), True),
        (Requirement("rack", Operator.GT, ("1",)), False),  # not an integer: neither Gt nor Lt
        (Requirement("rack", Operator.LT, ("1",)), False),
        (Requirement("missing", Operator.LT, ("1",)), False),
        (Requirement("metadata.name", Operator.IN, ("gpu-3",), on_name=True), True),
        (Requirement("metadata.name", Operator.NOT_IN, ("gpu-3",), on_name=True), False),
    ],
    ids=str,
)
def test_each_operator(requirement: Requirement, expected: bool) -> None:
    assert requirement.matches("gpu-3", LABELS) is expected


def test_terms_are_alternatives_and_their_requirements_all_hold() -> None:
    h100 = NodeTerm((Requirement("gpu.product", Operator.IN, ("H100",)),))
    rack8 = NodeTerm(
        (Requirement("rack", Operator.IN, ("r8",)), Requirement("gpu.product", Operator.EXISTS))
    )
    assert NodeConstraint(terms=(rack8, h100)).allows("n", LABELS)
    assert not NodeConstraint(terms=(rack8,)).allows("n", LABELS)
    assert not NodeTerm(()).matches("n", LABELS)  # an empty term matches no node


def test_the_selector_and_the_affinity_must_both_hold() -> None:
    h100 = NodeTerm((Requirement("gpu.product", Operator.IN, ("H100",)),))
    assert NodeConstraint((("rack", "r7"),), (h100,)).allows("n", LABELS)
    assert not NodeConstraint((("rack", "r8"),), (h100,)).allows("n", LABELS)


@given(
    st.dictionaries(st.sampled_from("abc"), st.sampled_from("xy"), max_size=3),
    st.dictionaries(st.sampled_from("abc"), st.sampled_from("xy"), max_size=3),
)
def test_a_selector_alone_is_every_label_equal(
    selector: dict[str, str], labels: dict[str, str]
) -> None:
    constraint = NodeConstraint(tuple(sorted(selector.items())))
    assert constraint.allows("n", labels) == all(labels.get(k) == v for k, v in selector.items())


def test_described_for_people() -> None:
    term = NodeTerm(
        (
            Requirement("gpu.product", Operator.IN, ("A100", "H100")),
            Requirement("spot", Operator.DOES_NOT_EXIST),
        )
    )
    described = str(NodeConstraint((("rack", "r7"),), (term,)))
    assert described == "nodeSelector rack=r7 and node affinity (gpu.product in (A100,H100), !spot)"
