"""Which nodes a task's replicas may use (its ``nodeSelector`` and required node affinity), and
which it would rather use (preferred node affinity).

A container executor (Kubernetes) puts both on each pod, and the kubelet refuses a pod bound
to a node they do not match (the pod fails with reason ``NodeAffinity``). kiban binds pods to
the nodes it chooses, so its placement must honour them as the Kubernetes scheduler does: every
``nodeSelector`` label, and one of the ``nodeSelectorTerms`` of
``requiredDuringSchedulingIgnoredDuringExecution`` (the operators of the Kubernetes API:
https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#operators).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Operator(StrEnum):
    """The operators of a node selector requirement."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


NAME_FIELD = "metadata.name"
"""The one node field a ``matchFields`` requirement may name."""


def _integer(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions`` (a label) or ``matchFields`` (the node's name) requirement."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()
    on_name: bool = False
    """A ``matchFields`` requirement: ``key`` is ``metadata.name``, compared with the name."""

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        value = name if self.on_name else labels.get(self.key)
        operator = self.operator
        if operator is Operator.IN:
            return value is not None and value in self.values
        if operator is Operator.NOT_IN:
            return value is None or value not in self.values
        if operator is Operator.EXISTS:
            return value is not None
        if operator is Operator.DOES_NOT_EXIST:
            return value is None
        have, bound = _integer(value), _integer(self.values[0] if self.values else None)
        if have is None or bound is None:
            return False  # as Kubernetes: a label that is not an integer matches neither
        return have > bound if operator is Operator.GT else have < bound

    def __str__(self) -> str:
        listed = ",".join(self.values)
        return {
            Operator.IN: f"{self.key} in ({listed})",
            Operator.NOT_IN: f"{self.key} notin ({listed})",
            Operator.EXISTS: self.key,
            Operator.DOES_NOT_EXIST: f"!{self.key}",
            Operator.GT: f"{self.key}>{listed}",
            Operator.LT: f"{self.key}<{listed}",
        }[self.operator]


@dataclass(frozen=True, slots=True)
class NodeTerm:
    """One node selector term: all its requirements hold (an empty term matches no node)."""

    requirements: tuple[Requirement, ...]

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        return bool(self.requirements) and all(r.matches(name, labels) for r in self.requirements)

    def __str__(self) -> str:
        return ", ".join(str(r) for r in self.requirements) or "(empty term)"


@dataclass(frozen=True, slots=True)
class NodeConstraint:
    """Every ``selector`` label, and one of ``terms`` when there are any; never a node of
    ``excluded`` (nodes a job must keep off for a while: one that failed its preflight)."""

    selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[NodeTerm, ...] = ()
    excluded: frozenset[str] = frozenset()

    def allows(self, name: str, labels: Mapping[str, str]) -> bool:
        if name in self.excluded:
            return False
        for key, value in self.selector:
            if labels.get(key) != value:
                return False
        return not self.terms or any(term.matches(name, labels) for term in self.terms)

    def __str__(self) -> str:
        parts = []
        if self.selector:
            parts.append("nodeSelector " + ",".join(f"{k}={v}" for k, v in self.selector))
        if self.terms:
            parts.append("node affinity " + " or ".join(f"({t})" for t in self.terms))
        if self.excluded:
            parts.append("node exclusions (not " + ", ".join(sorted(self.excluded)) + ")")
        return " and ".join(parts)


def excluding(constraint: NodeConstraint | None, names: frozenset[str]) -> NodeConstraint | None:
    """``constraint`` that also keeps off the nodes ``names`` (unchanged when there are none)."""
    if not names:
        return constraint
    if constraint is None:
        return NodeConstraint(excluded=names)
    return NodeConstraint(constraint.selector, constraint.terms, constraint.excluded | names)


@dataclass(frozen=True, slots=True)
class NodePreference:
    """Preferred node affinity: each node scores the weights of the terms it matches, and among
    the nodes a replica fits the highest score wins, as in the scheduler's NodeAffinity score."""

    terms: tuple[tuple[int, NodeTerm], ...]

    def score(self, name: str, labels: Mapping[str, str]) -> int:
        return sum(weight for weight, term in self.terms if term.matches(name, labels))
