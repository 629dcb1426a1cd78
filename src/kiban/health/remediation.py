"""The remediation engine: a node's conditions and the policy's rules in, typed decisions out.

Pure: no store, no clock, no I/O. The control plane gathers a node's conditions (with their
streaks), who cordoned it, the actions already taken on it and the circuit breaker's record,
asks ``decide`` (or ``decide_batch`` for several nodes), and applies what comes back.

- A rule acts once per episode of its condition: not again while the condition keeps the
  status it had when the rule acted (an action suppressed by the breaker is tried again on the
  next report, and recorded as suppressed only once).
- The circuit breaker counts the nodes acted on (cordon, drain, taint, hook) within its window;
  a batch is decided one node at a time against the running count, so no burst passes it.
- A node cordoned by the rules returns to service once every check that took it out has been
  healthy (False) for K consecutive reports and no take-out rule matches any more; K is
  multiplied by the flap-damping factor when the node had returned to service less than the
  damping window before it was taken out again. An admin's cordon is never lifted here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from kiban.domain.remediation import (
    CircuitBreakerDecl,
    HealthPolicyDecl,
    RemediationActionKind,
    RemediationRuleDecl,
)
from kiban.health.conditions import CheckType, ConditionStatus

RETURN_TO_SERVICE_RULE = "return-to-service"  # the rule name of an automatic uncordon


class RemediationKind(StrEnum):
    """What a decision does (the store's ``remediation_actions.action``)."""

    NONE = "none"
    CORDON = "cordon"
    DRAIN = "drain"
    TAINT = "taint"
    HOOK = "hook"
    UNCORDON = "uncordon"  # returned to service after enough healthy checks

    @classmethod
    def of(cls, action: RemediationActionKind) -> RemediationKind:
        return cls(action.value)

    @property
    def disruptive(self) -> bool:
        """Counted by the circuit breaker: it takes the node out, marks it, or runs a hook."""
        return self in (self.CORDON, self.DRAIN, self.TAINT, self.HOOK)

    @property
    def takes_out(self) -> bool:
        return self in (self.CORDON, self.DRAIN)


class Outcome(StrEnum):
    """How an action ended (``remediation_actions.outcome``). ``pending``: decided and recorded,
    not carried out yet (a drain's requeues, a taint, a hook run after the commit)."""

    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"
    SUPPRESSED = "suppressed"  # the circuit breaker was open


class CordonSource(StrEnum):
    """Who cordoned a node (``nodes.cordon_source``)."""

    NONE = ""
    ADMIN = "admin"
    REMEDIATION = "remediation"


@dataclass(frozen=True, slots=True)
class ConditionState:
    """A condition as the control plane keeps it: its status and how many reports in a row."""

    type: CheckType
    status: ConditionStatus
    streak: int
    last_transition_time: float
    message: str = ""


@dataclass(frozen=True, slots=True)
class PastAction:
    """An action already recorded on the node."""

    kind: RemediationKind
    rule: str
    check: CheckType | None
    outcome: Outcome
    at: float


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """What the engine knows of one node. ``actions``: its recorded actions, oldest first (the
    ones since its last return to service are enough)."""

    name: str
    conditions: Mapping[CheckType, ConditionState]
    cordon_source: CordonSource
    actions: tuple[PastAction, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    """One thing to do (or not done, and why) to one node, with what triggered it."""

    node: str
    kind: RemediationKind
    outcome: Outcome
    rule: str
    check: CheckType | None
    reading: str  # the condition's message: what was read
    detail: str
    decl: RemediationRuleDecl | None = None  # the rule (its taint, command, timeout)


@dataclass
class Breaker:
    """The circuit breaker's running record: when each node was last acted on automatically.

    ``acted`` holds the nodes acted on within the window (node -> time of the latest action).
    A node already in it may be acted on again; another node only while fewer than ``limit``
    are in it.
    """

    policy: CircuitBreakerDecl
    cluster_nodes: int
    acted: dict[str, float] = field(default_factory=dict)

    @property
    def limit(self) -> int:
        return self.policy.limit(self.cluster_nodes)

    def in_window(self, now: float) -> dict[str, float]:
        start = now - self.policy.window_seconds
        return {node: at for node, at in self.acted.items() if at > start}

    def is_open(self, now: float) -> bool:
        """No node beyond those already acted on may be acted on now."""
        return len(self.in_window(now)) >= self.limit

    def allows(self, node: str, now: float) -> bool:
        window = self.in_window(now)
        return node in window or len(window) < self.limit

    def record(self, node: str, at: float) -> None:
        self.acted[node] = at

    def why_open(self, now: float) -> str:
        count = len(self.in_window(now))
        return (
            f"circuit breaker open: {count} node(s) acted on automatically within "
            f"{self.policy.window_seconds:g}s, the limit is {self.limit} "
            f"(maxNodes {self.policy.max_nodes}, maxPercent {self.policy.max_percent:g} "
            f"of {self.cluster_nodes} nodes)"
        )


@dataclass(frozen=True, slots=True)
class Episode:
    """The node's current time out of service, read from its actions."""

    causes: frozenset[CheckType]  # the checks whose rules took it out since its last return
    cordoned_at: float | None  # the first take-out since its last return
    returned_at: float | None  # its last return to service before that


def episode(actions: Sequence[PastAction]) -> Episode:
    returned_at: float | None = None
    causes: set[CheckType] = set()
    cordoned_at: float | None = None
    for action in actions:
        if action.kind is RemediationKind.UNCORDON and action.outcome is Outcome.DONE:
            returned_at, causes, cordoned_at = action.at, set(), None
        elif action.kind.takes_out and action.outcome in (Outcome.DONE, Outcome.PENDING):
            if action.check is not None:
                causes.add(action.check)
            if cordoned_at is None:
                cordoned_at = action.at
    return Episode(frozenset(causes), cordoned_at, returned_at)


def required_healthy_checks(policy: HealthPolicyDecl, past: Episode) -> int:
    """K, or K times the damping factor after a flap (taken out again within the window)."""
    k = policy.return_to_service.healthy_checks
    returned, cordoned = past.returned_at, past.cordoned_at
    if returned is not None and cordoned is not None:
        flapped = cordoned - returned <= policy.flap_damping.window_seconds
        return k * policy.flap_damping.factor if flapped else k
    return k


def _latest(actions: Sequence[PastAction], rule: str, check: CheckType) -> PastAction | None:
    for action in reversed(actions):
        if (
            action.rule == rule
            and action.check is check
            and action.kind is not RemediationKind.UNCORDON
        ):
            return action
    return None


def _matching(
    node: NodeHealth, policy: HealthPolicyDecl
) -> Iterable[tuple[ConditionState, RemediationRuleDecl]]:
    for check in CheckType:  # in the checks' own order, so decisions are deterministic
        condition = node.conditions.get(check)
        if condition is None or condition.status is ConditionStatus.FALSE:
            continue
        for rule in policy.rules_for(check.value, condition.status.value):
            yield condition, rule


def _return_to_service(node: NodeHealth, policy: HealthPolicyDecl) -> Decision | None:
    if node.cordon_source is not CordonSource.REMEDIATION:
        return None
    if any(RemediationKind.of(rule.action).takes_out for _, rule in _matching(node, policy)):
        return None
    past = episode(node.actions)
    causes = sorted(past.causes) or sorted(node.conditions)
    required = required_healthy_checks(policy, past)
    for check in causes:
        condition = node.conditions.get(check)
        if condition is None or condition.status is not ConditionStatus.FALSE:
            return None
        if condition.streak < required:
            return None
    damped = required > policy.return_to_service.healthy_checks
    names = ", ".join(causes) or "no check"
    detail = f"{required} consecutive healthy checks of {names}"
    if damped:
        window = policy.flap_damping.window_seconds
        detail += f" (flap damping: it failed again within {window:g}s of its last return)"
    return Decision(
        node.name,
        RemediationKind.UNCORDON,
        Outcome.DONE,
        RETURN_TO_SERVICE_RULE,
        CheckType(causes[0]) if causes else None,
        "",
        detail,
    )


def decide(
    node: NodeHealth, policy: HealthPolicyDecl, breaker: Breaker, now: float
) -> list[Decision]:
    """What to do to one node now; records the disruptive actions it allows in ``breaker``."""
    returned = _return_to_service(node, policy)
    if returned is not None:
        return [returned]
    decisions: list[Decision] = []
    for condition, rule in _matching(node, policy):
        kind = RemediationKind.of(rule.action)
        latest = _latest(node.actions, rule.name, condition.type)
        this_episode = latest is not None and latest.at >= condition.last_transition_time
        if this_episode and latest is not None and latest.outcome is not Outcome.SUPPRESSED:
            continue  # acted on (or failed) already while the condition has this status
        reading = condition.message
        why = f"{condition.type} is {condition.status}"
        if not kind.disruptive:
            decisions.append(
                Decision(
                    node.name, kind, Outcome.DONE, rule.name, condition.type, reading, why, rule
                )
            )
        elif kind is RemediationKind.CORDON and node.cordon_source is CordonSource.ADMIN:
            # Nothing to do (and nothing for the breaker to count): recorded as such.
            detail = f"{why}; cordon: already cordoned by an admin, left as it is"
            none = RemediationKind.NONE
            decisions.append(
                Decision(
                    node.name, none, Outcome.DONE, rule.name, condition.type, reading, detail, rule
                )
            )
        elif breaker.allows(node.name, now):
            breaker.record(node.name, now)
            outcome = Outcome.DONE if kind is RemediationKind.CORDON else Outcome.PENDING
            decisions.append(
                Decision(node.name, kind, outcome, rule.name, condition.type, reading, why, rule)
            )
        elif not this_episode:  # suppressed once per episode; tried again on each report
            detail = f"{why}; {breaker.why_open(now)}"
            decisions.append(
                Decision(
                    node.name,
                    kind,
                    Outcome.SUPPRESSED,
                    rule.name,
                    condition.type,
                    reading,
                    detail,
                    rule,
                )
            )
    return decisions


def decide_batch(
    nodes: Sequence[NodeHealth], policy: HealthPolicyDecl, breaker: Breaker, now: float
) -> list[Decision]:
    """Decisions for several nodes, made one node at a time against the breaker's running
    count (so a burst of faults is bounded exactly as the same faults one by one)."""
    decisions: list[Decision] = []
    for node in nodes:
        decisions.extend(decide(node, policy, breaker, now))
    return decisions
