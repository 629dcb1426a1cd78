"""A task's ``nodeSelector`` and node affinity, read into the scheduler's constraint and
preference.

``affinity`` is kept as the user wrote it (the pod carries it unchanged); its
``nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`` limits where kiban places
replicas, and its ``preferredDuringSchedulingIgnoredDuringExecution`` orders the nodes that fit.
Both are checked here as the API server would check them, so a bad one is refused at
submission, naming the field, rather than failing every pod.

Pod (anti-)affinity does not steer kiban's placement (kiban binds each pod to the node it
chose), with one exception that says exactly what kiban can do: a required pod anti-affinity
term on ``kubernetes.io/hostname`` whose label selector selects the task's own pods and none of
its job's other tasks' keeps the task's replicas on distinct nodes, which is
``maxReplicasPerNode: 1`` (``read_pod_affinity``). Whether it would also keep them from other
jobs' pods is not kept: kiban never places by other jobs' pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


HOSTNAME = "kubernetes.io/hostname"
POD_TASK_LABEL = "kiban.dev/task"
"""The label of a replica's pod that names its task (the Kubernetes executor's TASK_LABEL)."""

_TERM_FIELDS = {"labelSelector", "topologyKey", "namespaces"}
_SELECTOR_OPERATORS = {Operator.IN, Operator.NOT_IN, Operator.EXISTS, Operator.DOES_NOT_EXIST}


@dataclass(frozen=True)
class PodAffinity:
    """What a task's pod (anti-)affinity means under kiban: whether it keeps the task's replicas
    one per node, and the parts that change nothing (paths inside ``affinity``)."""

    one_per_node: bool = False
    without_effect: tuple[str, ...] = ()


def read_pod_affinity(
    affinity: Mapping[str, Any] | None,
    own: Mapping[str, str],
    others: Sequence[Mapping[str, str]] = (),
) -> PodAffinity:
    """Read a task's pod (anti-)affinity: ``own`` are the labels of the task's pods, ``others``
    those of each other task of its job. A required anti-affinity term on the node's hostname
    whose selector matches ``own`` and none of ``others`` keeps the task's replicas one per
    node; every other part (podAffinity, preferred terms, other topology keys, selectors of
    other pods, namespaces) changes nothing, since kiban binds each pod to the node it chose."""
    if not isinstance(affinity, Mapping):
        return PodAffinity()
    unused: list[str] = []
    if affinity.get("podAffinity"):
        unused.append("podAffinity")
    anti = affinity.get("podAntiAffinity")
    one_per_node = False
    if isinstance(anti, Mapping):
        for key, value in anti.items():
            if not value:
                continue
            if key == REQUIRED and isinstance(value, list):
                for i, term in enumerate(value):
                    if _keeps_own_apart(term, own, others):
                        one_per_node = True
                    else:
                        unused.append(f"podAntiAffinity.{REQUIRED}[{i}]")
            else:
                unused.append(f"podAntiAffinity.{key}")
    elif anti:
        unused.append("podAntiAffinity")
    return PodAffinity(one_per_node, tuple(unused))


def _keeps_own_apart(
    term: Any, own: Mapping[str, str], others: Sequence[Mapping[str, str]]
) -> bool:
    if not isinstance(term, Mapping) or term.get("topologyKey") != HOSTNAME:
        return False
    if set(term) - _TERM_FIELDS or term.get("namespaces"):
        return False  # other namespaces' pods, or fields whose meaning kiban does not keep
    selector = term.get("labelSelector")
    if not isinstance(selector, Mapping) or not selector:
        return False
    return selects(selector, own) is True and not any(selects(selector, o) for o in others)


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool | None:
    """Whether a Kubernetes label selector (``matchLabels``, ``matchExpressions``) selects pods
    with these labels; None when it is malformed."""
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if set(selector) - {"matchLabels", "matchExpressions"}:
        return None
    if not isinstance(match_labels, Mapping) or not isinstance(expressions, list):
        return None
    found = all(labels.get(str(k)) == v for k, v in match_labels.items())
    for item in expressions:
        if not isinstance(item, Mapping):
            return None
        key, values = item.get("key"), item.get("values") or []
        try:
            operator = Operator(str(item.get("operator")))
        except ValueError:
            return None
        if operator not in _SELECTOR_OPERATORS or not isinstance(key, str):
            return None
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            return None
        found = found and Requirement(key, operator, tuple(values)).matches("", labels)
    return found


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
