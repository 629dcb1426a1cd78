"""The ``health:`` section of the cluster policy: what kiban does when a node's check fails.

Rules map a condition (a health check's type, True or Unknown) to an action: ``none`` (record
only), ``cordon`` (no new work), ``drain`` (cordon, then requeue the jobs running there, keeping
their submit time and their ``backoffLimit``), ``taint`` (a Kubernetes taint, where the executor
offers it) or ``hook`` (an admin's command, run as an argument list with a timeout). A circuit
breaker bounds the automatic actions; a node cordoned by the rules returns to service after K
consecutive healthy checks, more after a flap. The engine that applies these is
``kiban.health.remediation``; the domain names the check types itself (it may not import
``kiban.health``), and a test keeps the two lists equal.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StrictInt, field_validator, model_validator

from kiban.domain.check_types import CheckType
from kiban.domain.declarations import (
    Duration,
    Loc,
    check_label_key,
    problems_error,
    repeated_names,
)
from kiban.domain.jobspec import SpecModel, check_dns_label
from kiban.domain.preflight_policy import PreflightDecl

DEFAULT_AGENT_TIMEOUT_S = 3 * 30.0  # three missed reports at the agent's default interval
DEFAULT_HOOK_TIMEOUT_S = 60.0
MAX_HOOK_TIMEOUT_S = 3600.0


class RuleStatus(StrEnum):
    """The condition status a rule acts on: True (the problem is present) or Unknown."""

    TRUE = "True"
    UNKNOWN = "Unknown"


class RemediationActionKind(StrEnum):
    """What a rule does to a node whose condition matches it."""

    NONE = "none"  # record the event, nothing else
    CORDON = "cordon"  # no new work; running jobs keep running
    DRAIN = "drain"  # cordon, then requeue the jobs running there
    TAINT = "taint"  # a taint on the node (an executor that offers NodeTaints)
    HOOK = "hook"  # run an admin's command (an argument list) with a timeout

    @property
    def takes_out(self) -> bool:
        """Whether the action takes the node out of scheduling (so returning it is kiban's)."""
        return self in (RemediationActionKind.CORDON, RemediationActionKind.DRAIN)


class TaintEffect(StrEnum):
    """Kubernetes' taint effects."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


def _status(value: Any) -> Any:
    # YAML reads an unquoted True as a boolean: accept it as the status "True".
    if value is True:
        return RuleStatus.TRUE.value
    if value is False:
        raise ValueError("a rule acts on True or Unknown; False means the check passes")
    return value


PositiveCount = Annotated[StrictInt, Field(ge=1, le=1_000_000)]


class TaintDecl(SpecModel):
    """The taint a ``taint`` rule puts on the node."""

    key: str
    value: str = Field(default="", max_length=63)
    effect: TaintEffect = TaintEffect.NO_SCHEDULE

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        return check_label_key(value)


class RemediationRuleDecl(SpecModel):
    """One rule: ``condition`` at ``status`` -> ``action`` (with its ``taint`` or ``command``)."""

    name: str
    condition: CheckType
    status: Annotated[RuleStatus, BeforeValidator(_status)] = RuleStatus.TRUE
    action: RemediationActionKind
    taint: TaintDecl | None = None
    command: list[Annotated[str, Field(min_length=1, max_length=4096)]] | None = Field(
        default=None, min_length=1, max_length=64
    )
    timeout_seconds: Duration = DEFAULT_HOOK_TIMEOUT_S

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns_label(value, "rule name")

    @field_validator("command")
    @classmethod
    def _argv(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any("\0" in arg for arg in value):
            raise ValueError("an argument may not hold a NUL character")
        return value

    @field_validator("timeout_seconds")
    @classmethod
    def _timeout(cls, value: float) -> float:
        if not 0 < value <= MAX_HOOK_TIMEOUT_S:
            raise ValueError(f"timeoutSeconds must be above 0 and at most {MAX_HOOK_TIMEOUT_S:g}")
        return value

    @model_validator(mode="after")
    def _parts(self) -> RemediationRuleDecl:
        problems: list[tuple[Loc, str, Any]] = []
        taint_wanted = self.action is RemediationActionKind.TAINT
        hook_wanted = self.action is RemediationActionKind.HOOK
        if taint_wanted and self.taint is None:
            problems.append((("taint",), "a taint rule needs taint: {key, value, effect}", None))
        if not taint_wanted and self.taint is not None:
            message = f"only a taint rule takes a taint (this one's action is {self.action})"
            problems.append((("taint",), message, self.taint.model_dump(by_alias=True)))
        if hook_wanted and self.command is None:
            message = "a hook rule needs command: a list of arguments, e.g. [/sbin/reboot-node]"
            problems.append((("command",), message, None))
        if not hook_wanted and self.command is not None:
            message = f"only a hook rule takes a command (this one's action is {self.action})"
            problems.append((("command",), message, self.command))
        if problems:
            raise problems_error(type(self).__name__, problems)
        return self


class CircuitBreakerDecl(SpecModel):
    """At most ``maxNodes`` nodes, and at most ``maxPercent`` % of the cluster (at least one
    node), acted on automatically within ``windowSeconds``; beyond that actions are suppressed
    and recorded as such."""

    max_nodes: PositiveCount = 10
    max_percent: Annotated[float, Field(strict=True, gt=0, le=100, allow_inf_nan=False)] = 10.0
    window_seconds: Duration = 3600.0

    @field_validator("window_seconds")
    @classmethod
    def _window(cls, value: float) -> float:
        if not 0 < value < math.inf:
            raise ValueError("windowSeconds must be a positive duration (examples: 600, 1h)")
        return value

    def limit(self, cluster_nodes: int) -> int:
        """How many nodes may be acted on within the window in a cluster of this size."""
        by_percent = math.floor(cluster_nodes * self.max_percent / 100.0)
        return max(1, min(self.max_nodes, by_percent))


class ReturnToServiceDecl(SpecModel):
    """A node cordoned by the rules takes work again after ``healthyChecks`` consecutive
    healthy reports of every check that failed."""

    healthy_checks: PositiveCount = 3


class FlapDampingDecl(SpecModel):
    """A node that fails again within ``windowSeconds`` of returning to service needs
    ``factor`` times as many healthy checks to return the next time."""

    window_seconds: Duration = 3600.0
    factor: PositiveCount = 4

    @field_validator("window_seconds")
    @classmethod
    def _window(cls, value: float) -> float:
        if not 0 <= value < math.inf:
            raise ValueError("windowSeconds must be a duration of 0 or more (examples: 0, 1h)")
        return value


def _rule(name: str, check: CheckType, action: RemediationActionKind) -> RemediationRuleDecl:
    return RemediationRuleDecl(name=name, condition=check, action=action)


def default_rules() -> list[RemediationRuleDecl]:
    """Faults that make a GPU unusable drain the node; degraded links cordon it; thermal
    throttling is recorded only."""
    drain, cordon, none = (
        RemediationActionKind.DRAIN,
        RemediationActionKind.CORDON,
        RemediationActionKind.NONE,
    )
    return [
        _rule("gpu-bus", CheckType.GPU_BUS, drain),
        _rule("gpu-ecc", CheckType.GPU_ECC, drain),
        _rule("gpu-xid", CheckType.GPU_XID, drain),
        _rule("gpu-row-remap", CheckType.GPU_ROW_REMAP, drain),
        _rule("gpu-count", CheckType.GPU_COUNT, drain),
        _rule("gpu-fabric-manager", CheckType.GPU_FABRIC_MANAGER, drain),
        _rule("gpu-pcie", CheckType.GPU_PCIE, cordon),
        _rule("gpu-nvlink", CheckType.GPU_NVLINK, cordon),
        _rule("allreduce-degraded", CheckType.ALLREDUCE_DEGRADED, cordon),
        _rule("gpu-thermal", CheckType.GPU_THERMAL, none),
    ]


class HealthPolicyDecl(SpecModel):
    """The ``health:`` section: rules, circuit breaker, return to service, flap damping, how
    long an agent may be silent before its node's conditions become Unknown, and what preflight
    makes of an agent that does not answer (``kiban.domain.preflight_policy``)."""

    rules: list[RemediationRuleDecl] = Field(default_factory=default_rules, max_length=256)
    circuit_breaker: CircuitBreakerDecl = Field(default_factory=CircuitBreakerDecl)
    return_to_service: ReturnToServiceDecl = Field(default_factory=ReturnToServiceDecl)
    flap_damping: FlapDampingDecl = Field(default_factory=FlapDampingDecl)
    agent_timeout_seconds: Duration = DEFAULT_AGENT_TIMEOUT_S
    preflight: PreflightDecl = Field(default_factory=PreflightDecl)

    @field_validator("agent_timeout_seconds")
    @classmethod
    def _agent_timeout(cls, value: float) -> float:
        if not 0 < value < math.inf:
            raise ValueError("agentTimeoutSeconds must be a positive duration (examples: 90, 5m)")
        return value

    @model_validator(mode="after")
    def _unique(self) -> HealthPolicyDecl:
        problems = [
            (("rules", i, "name"), f"rule {name} is declared twice (also rules[{first}])", name)
            for i, name, first in repeated_names([r.name for r in self.rules])
        ]
        if problems:
            raise problems_error(type(self).__name__, problems)
        return self

    def rules_for(self, check: str, status: str) -> list[RemediationRuleDecl]:
        """The rules that act on a condition of this type at this status, in policy order."""
        return [r for r in self.rules if r.condition.value == check and r.status.value == status]
