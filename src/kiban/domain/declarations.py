"""The entries of a cluster policy, each validated on its own: nodes of the local executor,
flavors, cohorts, queues with their quotas and limits, priority classes, fair share, topology
levels. ``kiban.domain.cluster`` puts them together and checks the rules across entries.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    StrictBool,
    TypeAdapter,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from kiban.domain.budgets import Instant, end_of
from kiban.domain.extended_resources import (
    is_extended_name,
    parse_extended,
    parse_extended_amount,
)
from kiban.domain.jobspec import CpuMillis, MemoryBytes, Seconds, SpecModel, check_dns_label
from kiban.domain.priority import (
    DEFAULT_PRIORITY_CLASS,
    DEFAULT_PRIORITY_CLASSES,
    PREEMPTING_PRIORITY_CLASSES,
)
from kiban.domain.quantity import parse_duration
from kiban.scheduler.snapshot import DEFAULT_FLAVOR

MAX_GPUS = 1_000_000  # far above any cluster, well inside the store's integer columns
MAX_PRIORITY = 1_000_000_000  # as Kubernetes' user-defined priority classes
MAX_WEIGHT = 1_000_000.0
DEFAULT_HALF_LIFE_S = 7 * 86400.0
DEFAULT_QUEUE = "default"
DEFAULT_TENANT = "default"  # a queue's tenant when the policy names none

LEVEL_NAME = re.compile(r"^[a-z]([a-z0-9_-]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
LABEL_KEY = re.compile(rf"^({_DNS_SUBDOMAIN}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?$")

Loc = tuple[str | int, ...]


def problems_error(title: str, problems: Iterable[tuple[Loc, str, Any]]) -> ValidationError:
    """A pydantic error with one entry per ``(location, message, input)``.

    Raised from a validator, its locations are taken relative to the validated value, so
    checks across fields report the path of the field at fault, as shape errors do.
    """
    return ValidationError.from_exception_data(
        title,
        [
            InitErrorDetails(
                type=PydanticCustomError("policy", "{message}", {"message": message}),
                loc=loc,
                input=value,
            )
            for loc, message, value in problems
        ],
    )


def _whole(value: Any) -> Any:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError("GPUs are whole numbers")
    return value


def _duration(value: Any) -> float:
    return parse_duration(value)


GpuCount = Annotated[int, BeforeValidator(_whole), Field(ge=0, le=MAX_GPUS)]
Duration = Annotated[float, BeforeValidator(_duration)]
Weight = Annotated[float, Field(ge=0, le=MAX_WEIGHT, allow_inf_nan=False)]


def check_label_key(value: str) -> str:
    if len(value) > 317 or not LABEL_KEY.match(value):
        raise ValueError(
            f"{value!r} is not a label key (examples: gpu.product, kubernetes.io/hostname)"
        )
    return value


class NodeDecl(SpecModel):
    """A virtual node of the local executor; ``resources`` are the extended resources it
    advertises (``{nvidia.com/hostdev: 8, hugepages-2Mi: 4Gi}``)."""

    name: str
    gpus: int = Field(default=0, ge=0, le=1024)
    cpus: CpuMillis = 8000
    memory: MemoryBytes = 32 * 2**30
    labels: dict[str, str] = Field(default_factory=dict)
    resources: dict[str, int] = Field(default_factory=dict)

    @field_validator("resources", mode="plain")
    @classmethod
    def _resources(cls, value: Any) -> dict[str, int]:
        return {} if value is None else parse_extended(value)

    @field_serializer("resources")
    def _dump_resources(self, value: dict[str, int]) -> dict[str, int]:
        return dict(value)


class GpuAmount(SpecModel):
    """GPUs of one flavor, and in a quota the extended resources it limits (``extended``,
    written flat beside ``gpu``: ``{gpu: 64, nvidia.com/hostdev: 64}``). CPU and memory come
    with the node; a resource a quota does not name is not limited."""

    gpu: GpuCount
    extended: dict[str, int] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _gpus_and_extended(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "extended" in data:
            return data
        problems: list[tuple[Loc, str, Any]] = []
        extended: dict[str, int] = {}
        for key, value in data.items():
            name = str(key)
            if name == "gpu":
                continue
            if not is_extended_name(name):
                problems.append(
                    (
                        (name,),
                        f"unknown resource {name!r}; quotas count gpu and extended resources "
                        "(nvidia.com/hostdev, rdma/hca, hugepages-2Mi)",
                        value,
                    )
                )
                continue
            try:
                extended[name] = parse_extended_amount(name, value)
            except ValueError as error:
                problems.append(((name,), str(error), value))
        if problems:
            raise problems_error(cls.__name__, problems)
        out: dict[str, Any] = {"extended": extended}
        if "gpu" in data:
            out["gpu"] = data["gpu"]
        return out

    def as_written(self) -> dict[str, Any]:
        """``{gpu: N, <resource>: M, ...}``: the flat form it was written in."""
        return {"gpu": self.gpu, **self.extended}


_GPUS_BY_FLAVOR: TypeAdapter[dict[str, GpuAmount]] = TypeAdapter(dict[str, GpuAmount])
GpusByFlavor = dict[str, GpuAmount] | GpuAmount  # a GpuAmount alone: the default flavor's


def _gpus_by_flavor(value: Any) -> GpusByFlavor | None:
    """``{flavor: {gpu: N}}``, or ``{gpu: N}`` (the implicit default flavor's, kept as written)."""
    if value is None or isinstance(value, GpuAmount):
        return value
    if (
        isinstance(value, dict)
        and value
        and not any(isinstance(v, dict | GpuAmount) for v in value.values())
    ):
        return GpuAmount.model_validate(value)
    return _GPUS_BY_FLAVOR.validate_python(value)


def extended_per_flavor(amounts: GpusByFlavor | None) -> dict[str, dict[str, int]]:
    """``{flavor: {resource: amount}}`` of the extended resources a quota names."""
    if amounts is None:
        return {}
    if isinstance(amounts, GpuAmount):
        return {DEFAULT_FLAVOR: dict(amounts.extended)} if amounts.extended else {}
    return {flavor: dict(a.extended) for flavor, a in amounts.items() if a.extended}


def gpus_per_flavor(amounts: GpusByFlavor | None) -> dict[str, int]:
    """``{flavor: GPUs}``; the resource form ``{gpu: N}`` counts for the default flavor."""
    if amounts is None:
        return {}
    if isinstance(amounts, GpuAmount):
        return {DEFAULT_FLAVOR: amounts.gpu}
    return {flavor: amount.gpu for flavor, amount in amounts.items()}


class FlavorDecl(SpecModel):
    """A kind of GPU node: the nodes whose labels include all of ``nodeLabels``.

    ``queues``, when given, restricts the flavor to those queues (e.g. the H100s only for the
    teams allowed to use them).
    """

    name: str
    node_labels: dict[str, str] = Field(default_factory=dict)
    queues: list[str] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns_label(value, "flavor name")

    @field_validator("node_labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            check_label_key(key)
        return value

    @field_validator("queues")
    @classmethod
    def _queues(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("list at least one queue, or leave queues out to let every queue in")
        return value

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == wanted for key, wanted in self.node_labels.items())

    def labels_text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in sorted(self.node_labels.items())) or "(any)"


class CohortDecl(SpecModel):
    """Queues that lend idle quota to each other; cohorts may nest under a ``parent`` (a tree of
    cohorts shares one pool, see ``ClusterPolicy.sharing_cohort``)."""

    name: str
    parent: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns_label(value, "cohort name")


class QueueAllocationDecl(SpecModel):
    """A queue's time-bounded allocation (``allocation: {quota: {h100: {gpu: 16}},
    fairShareWeight: 4, until: 2026-12-31}``): while it holds, its quota and weight replace the
    queue's own; after ``until`` (a date: through that day, UTC) the queue's own apply again."""

    until: Instant
    quota: GpusByFlavor | None = None
    fair_share_weight: float | None = Field(default=None, gt=0, le=MAX_WEIGHT, allow_inf_nan=False)

    @field_validator("quota", mode="plain")
    @classmethod
    def _quota(cls, value: Any) -> GpusByFlavor | None:
        amounts = _gpus_by_flavor(value)
        return None if amounts == {} else amounts

    @field_serializer("quota")
    def _dump_quota(self, amounts: GpusByFlavor | None) -> dict[str, Any] | None:
        if amounts is None or isinstance(amounts, GpuAmount):
            return None if amounts is None else amounts.as_written()
        return {flavor: amount.as_written() for flavor, amount in amounts.items()}

    @property
    def ends_at(self) -> float:
        return end_of(self.until)

    def holds_at(self, now: float) -> bool:
        return now < self.ends_at


class QueueDecl(SpecModel):
    """A queue of a tenant: nominal quota per flavor, cohort limits, ordering and weight.

    ``quota`` absent (or ``{}``) means no quota: every flavor, no limit. ``{gpu: N}`` is the
    quota of a policy without flavors (the implicit ``default`` flavor). ``borrowingLimit``:
    how much more than its nominal it may borrow from its cohort (a flavor not listed: no
    limit); ``lendingLimit``: how much of its unused nominal it lends (not listed: all of it).
    ``scavenger: true``: its jobs run only on otherwise idle capacity: any waiting job of any
    queue whose placement needs their nodes preempts them first, and they preempt nothing.
    """

    name: str
    tenant: str = DEFAULT_TENANT
    cohort: str | None = None
    quota: GpusByFlavor | None = None
    borrowing_limit: GpusByFlavor | None = None
    lending_limit: GpusByFlavor | None = None
    strategy: Literal[
        "StrictFIFO", "BestEffortFIFO", "LeastAttainedService", "ShortestExpectedService"
    ] = "StrictFIFO"
    fair_share_weight: float = Field(default=1.0, gt=0, le=MAX_WEIGHT, allow_inf_nan=False)
    allocation: QueueAllocationDecl | None = None  # time-bounded quota and weight
    scavenger: StrictBool = False  # idle capacity only: preempted by any job needing its nodes

    @field_validator("name", "tenant")
    @classmethod
    def _names(cls, value: str) -> str:
        return check_dns_label(value, "name")

    @field_validator("quota", mode="plain")
    @classmethod
    def _quota(cls, value: Any) -> GpusByFlavor | None:
        amounts = _gpus_by_flavor(value)
        return None if amounts == {} else amounts

    @field_validator("borrowing_limit", "lending_limit", mode="plain")
    @classmethod
    def _limits(cls, value: Any) -> GpusByFlavor | None:
        amounts = _gpus_by_flavor(value)
        named = extended_per_flavor(amounts)
        if named:
            flavor, resources = next(iter(named.items()))
            raise ValueError(
                f"{flavor}: {next(iter(resources))} may not be lent or borrowed: a queue's "
                "quota of an extended resource is its nominal amount (limits count gpu only)"
            )
        return amounts

    @field_serializer("quota", "borrowing_limit", "lending_limit")
    def _dump_amounts(self, amounts: GpusByFlavor | None) -> dict[str, Any] | None:
        if amounts is None or isinstance(amounts, GpuAmount):
            return None if amounts is None else amounts.as_written()
        return {flavor: amount.as_written() for flavor, amount in amounts.items()}

    @property
    def nominal(self) -> dict[str, int] | None:
        """GPUs per flavor it may use, in the order written; None: no quota (any flavor)."""
        return None if self.quota is None else gpus_per_flavor(self.quota)

    @property
    def extended_nominal(self) -> dict[str, dict[str, int]]:
        """The extended resources its quota limits, per flavor (none named: not limited)."""
        return extended_per_flavor(self.quota)

    @property
    def borrowing(self) -> dict[str, int]:
        return gpus_per_flavor(self.borrowing_limit)

    @property
    def lending(self) -> dict[str, int]:
        return gpus_per_flavor(self.lending_limit)

    @property
    def gpu_quota(self) -> int | None:
        """All its nominal GPUs together (None: no quota)."""
        nominal = self.nominal
        return None if nominal is None else sum(nominal.values())


class TenantLimitDecl(SpecModel):
    """The ceiling admins set on what a tenant's own tenant-admins may give its queues
    (``tenantLimits: [{tenant: vision, quota: {h100: {gpu: 16}}, fairShareWeight: 4}]``).

    ``quota``: the most its queues' nominal quotas may add up to, per flavor and resource (a
    flavor or resource it does not name: none). ``fairShareWeight``: the highest weight a
    tenant-admin may give one of its queues. Left out (or no entry for the tenant): what admins
    already gave it, the sum of its queues' quotas and their highest weight as the policy stands
    (``kiban.domain.tenant_limits``). Admins themselves are not held to it.
    """

    tenant: str
    quota: GpusByFlavor | None = None
    fair_share_weight: float | None = Field(default=None, gt=0, le=MAX_WEIGHT, allow_inf_nan=False)

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        return check_dns_label(value, "tenant name")

    @field_validator("quota", mode="plain")
    @classmethod
    def _quota(cls, value: Any) -> GpusByFlavor | None:
        return _gpus_by_flavor(value)

    @field_serializer("quota")
    def _dump_quota(self, amounts: GpusByFlavor | None) -> dict[str, Any] | None:
        if amounts is None or isinstance(amounts, GpuAmount):
            return None if amounts is None else amounts.as_written()
        return {flavor: amount.as_written() for flavor, amount in amounts.items()}


class PriorityClassDecl(SpecModel):
    """A named priority; a job names one in ``spec.priorityClass`` (or gets the default).

    ``preemptionPolicy: PreemptLowerPriority`` lets its jobs preempt lower-priority ones
    (the default is Never); ``minRuntime`` protects its jobs from preemption after they start.
    """

    name: str
    value: int = Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY)
    default: bool = False
    preemption_policy: Literal["Never", "PreemptLowerPriority"] = "Never"
    min_runtime: Seconds = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns_label(value, "priority class name")

    @field_validator("value", mode="before")
    @classmethod
    def _integer(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("a priority is a whole number")
        return value

    @property
    def preempts(self) -> bool:
        return self.preemption_policy == "PreemptLowerPriority"

    @property
    def min_runtime_s(self) -> float:
        return self.min_runtime or 0.0


def default_priority_classes() -> list[PriorityClassDecl]:
    return [
        PriorityClassDecl.model_validate(
            {
                "name": name,
                "value": value,
                "default": name == DEFAULT_PRIORITY_CLASS,
                "preemptionPolicy": (
                    "PreemptLowerPriority" if name in PREEMPTING_PRIORITY_CLASSES else "Never"
                ),
            }
        )
        for name, value in DEFAULT_PRIORITY_CLASSES.items()
    ]


DEFAULT_QUEUE_ENTRY: dict[str, Any] = {"name": DEFAULT_QUEUE, "strategy": "BestEffortFIFO"}
"""The queue of a policy that declares none. BestEffortFIFO, so that a job that cannot start
yet does not hold up the smaller ones behind it (as Kueue's default; the README gives the
replay that chose it); a job given a maxRuntime keeps its place by a reservation."""


def default_queues() -> list[QueueDecl]:
    return [QueueDecl.model_validate(DEFAULT_QUEUE_ENTRY)]


@dataclass(frozen=True)
class PriorityLevel:
    """What a job's priority class means for it: its value, whether it preempts, minRuntime."""

    name: str | None  # None: no class named and none is the default
    value: int
    preempts: bool = False
    min_runtime_s: float = 0.0


NO_PRIORITY_CLASS = PriorityLevel(name=None, value=0)


class ResourceWeights(SpecModel):
    """What one unit of use costs in fair share: per GPU, per CPU, per GiB of memory (per hour)."""

    gpu: Weight = 1.0
    cpu: Weight = 0.0
    memory: Weight = 0.0


class MemberWeightDecl(SpecModel):
    """A member's weight within its tenant, fair share's second level (members not listed: 1).

    A member with weight 2 may use twice what a teammate of weight 1 uses before waiting behind
    them; the tenant's own share (its queues' weight) does not change.
    """

    tenant: str
    member: str = Field(min_length=1, max_length=128)
    weight: float = Field(default=1.0, gt=0, le=MAX_WEIGHT, allow_inf_nan=False)

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        return check_dns_label(value, "tenant")

    @field_validator("member")
    @classmethod
    def _member(cls, value: str) -> str:
        if not value.isprintable() or value.strip() != value:
            raise ValueError("member must be printable, without leading or trailing spaces")
        return value


class FairShareDecl(SpecModel):
    """Fair share by past use: use decays with ``halfLife``; ``resourceWeights`` price it;
    ``members`` weighs members within their tenant (Fair Tree's second level)."""

    half_life: Duration = DEFAULT_HALF_LIFE_S
    resource_weights: ResourceWeights = Field(default_factory=ResourceWeights)
    members: list[MemberWeightDecl] = Field(default_factory=list, max_length=100_000)

    @field_validator("members")
    @classmethod
    def _distinct_members(cls, value: list[MemberWeightDecl]) -> list[MemberWeightDecl]:
        seen: set[tuple[str, str]] = set()
        for decl in value:
            key = (decl.tenant, decl.member)
            if key in seen:
                message = f"member {decl.member!r} of tenant {decl.tenant!r} is listed twice"
                raise ValueError(message)
            seen.add(key)
        return value

    def member_weights(self) -> dict[tuple[str, str], float]:
        """Each listed member's weight, by (tenant, member)."""
        return {(m.tenant, m.member): m.weight for m in self.members}

    @field_validator("half_life")
    @classmethod
    def _positive(cls, value: float) -> float:
        if not 0 < value < math.inf:
            raise ValueError("halfLife must be a positive duration (examples: 12h, 7d)")
        return value

    @field_validator("resource_weights")
    @classmethod
    def _some_weight(cls, value: ResourceWeights) -> ResourceWeights:
        if not (value.gpu or value.cpu or value.memory):
            raise ValueError("at least one resource weight must be positive")
        return value


class TopologyLevelDecl(SpecModel):
    """A level of network locality and the node label that names a node's domain at it."""

    name: str
    label: str

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not LEVEL_NAME.match(value):
            raise ValueError(
                f"{value!r} must be lowercase letters, digits, '_' and '-', start with a letter"
            )
        return value

    @field_validator("label")
    @classmethod
    def _label(cls, value: str) -> str:
        return check_label_key(value)


class TopologyDecl(SpecModel):
    """Topology levels, outermost first (e.g. island, network_block, local_block, host)."""

    levels: list[TopologyLevelDecl] = Field(default_factory=list, max_length=16)


def unknown_name(what: str, name: str, declared: list[str]) -> str:
    return f"unknown {what} {name!r}; declared: {', '.join(declared) or 'none'}"


def repeated_names(names: list[str]) -> Iterable[tuple[int, str, int]]:
    """``(index, name, index of its first use)`` for every name used before."""
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in first:
            yield i, name, first[name]
        else:
            first[name] = i
