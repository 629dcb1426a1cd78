"""A task's ``nodeSelector`` and node affinity, read into the scheduler's constraint and
preference.

``affinity`` is kept as the user wrote it (the pod carries it unchanged); its
``nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`` limits where kiban places
replicas, and its ``preferredDuringSchedulingIgnoredDuringExecution`` orders the nodes that fit.
Both are checked here as the API server would check them, so a bad one is refused at
submission, naming the field, rather than failing every pod. Pod (anti-)affinity does not steer
kiban's placement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kiban.scheduler.node_match import (
    NAME_FIELD,
    NodeConstraint,
    NodePreference,
    NodeTerm,
    Operator,
    Requirement,
)

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_OPERATORS = ", ".join(o.value for o in Operator)


def node_constraint(
    selector: Mapping[str, str], affinity: Mapping[str, Any] | None
) -> NodeConstraint | None:
    """The nodes a task may use, or None when it names no constraint."""
    terms = required_terms(affinity)
    if not selector and not terms:
        return None
    return NodeConstraint(tuple(sorted(selector.items())), terms)


def without_effect(affinity: Mapping[str, Any] | None) -> list[str]:
    """The parts of ``affinity`` that change nothing under kiban, as paths inside it: kiban
    binds each pod to the node it chose, so neither a scheduler nor the kubelet reads pod
    (anti-)affinity."""
    if not isinstance(affinity, Mapping):
        return []
    return [name for name in ("podAffinity", "podAntiAffinity") if affinity.get(name)]


def node_preference(affinity: Mapping[str, Any] | None) -> NodePreference | None:
    """The task's preferred node affinity, or None when it has none."""
    terms = preferred_terms(affinity)
    return NodePreference(terms) if terms else None


def preferred_terms(affinity: Mapping[str, Any] | None) -> tuple[tuple[int, NodeTerm], ...]:
    """(weight, term) of each preferred scheduling term; ValueError naming the field when one is
    malformed (a weight is 1 to 100, as the API server requires)."""
    node_affinity = _mapping((affinity or {}).get("nodeAffinity"), "nodeAffinity")
    listed = node_affinity.get(PREFERRED)
    if listed is None:
        return ()
    where = f"nodeAffinity.{PREFERRED}"
    if not isinstance(listed, list):
        raise ValueError(f"{where}: must be a list")
    found = []
    for i, item in enumerate(listed):
        item = _mapping(item, f"{where}[{i}]")
        weight = item.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise ValueError(f"{where}[{i}].weight: must be an integer from 1 to 100")
        if item.get("preference") is None:
            raise ValueError(f"{where}[{i}].preference: is required")
        found.append((weight, _term(item["preference"], f"{where}[{i}].preference")))
    return tuple(found)


def required_terms(affinity: Mapping[str, Any] | None) -> tuple[NodeTerm, ...]:
    """The required node selector terms; ValueError naming the field when one is malformed."""
    node_affinity = _mapping((affinity or {}).get("nodeAffinity"), "nodeAffinity")
    if node_affinity.get(REQUIRED) is None:
        return ()
    required = _mapping(node_affinity[REQUIRED], f"nodeAffinity.{REQUIRED}")
    where = f"nodeAffinity.{REQUIRED}.nodeSelectorTerms"
    listed = required.get("nodeSelectorTerms")
    if not isinstance(listed, list) or not listed:
        raise ValueError(f"{where}: must be a list of at least one term")
    return tuple(_term(term, f"{where}[{i}]") for i, term in enumerate(listed))


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: must be an object")
    return value


def _term(term: Any, where: str) -> NodeTerm:
    term = _mapping(term, where)
    requirements: list[Requirement] = []
    for field, on_name in (("matchExpressions", False), ("matchFields", True)):
        listed = term.get(field) or []
        if not isinstance(listed, list):
            raise ValueError(f"{where}.{field}: must be a list")
        for i, item in enumerate(listed):
            requirements.append(_requirement(item, f"{where}.{field}[{i}]", on_name))
    return NodeTerm(tuple(requirements))


def _requirement(item: Any, where: str, on_name: bool) -> Requirement:
    item = _mapping(item, where)
    key = item.get("key")
    if not isinstance(key, str) or not key:
        raise ValueError(f"{where}.key: must be a non-empty string")
    try:
        operator = Operator(item.get("operator"))
    except ValueError:
        raise ValueError(
            f"{where}.operator: {item.get('operator')!r} is not one of {_OPERATORS}"
        ) from None
    values = item.get("values") or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{where}.values: must be a list of strings")
    if on_name:
        if key != NAME_FIELD:
            raise ValueError(f"{where}.key: matchFields may only name {NAME_FIELD}, not {key!r}")
        if operator not in (Operator.IN, Operator.NOT_IN) or len(values) != 1:
            raise ValueError(f"{where}: a {NAME_FIELD} field needs In or NotIn and one value")
    elif operator in (Operator.IN, Operator.NOT_IN) and not values:
        raise ValueError(f"{where}.values: {operator.value} needs at least one value")
    elif operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and values:
        raise ValueError(f"{where}.values: {operator.value} takes no values")
    elif operator in (Operator.GT, Operator.LT) and (
        len(values) != 1 or not values[0].lstrip("-").isdigit()
    ):
        raise ValueError(f"{where}.values: {operator.value} needs exactly one integer value")
    return Requirement(key, operator, tuple(values), on_name)
