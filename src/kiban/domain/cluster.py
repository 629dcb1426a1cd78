"""The cluster file given to ``kiban up --config``: the local executor's nodes and the policy.

The policy is everything in the file but ``nodes``: flavors (kinds of GPU nodes, selected by
node labels), cohorts, queues with their quotas, priority classes, fair share and topology
levels. Admins read and change it through the API (``/api/v1/policy``); each change is
validated, versioned and recorded (``kiban.services.policy``).

Every problem names its field (``queues[0].borrowingLimit.h100: ...``): shape errors come from
pydantic, and the rules across fields (names that must exist, cycles, limits) are checked by
``ClusterPolicy`` itself and reported the same way, so a policy object is always consistent.
What needs the store (a flavor that no node matches, quotas below what is in use, queues with
jobs) is checked when the policy is applied.
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
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from kiban.domain.errors import SpecError
from kiban.domain.jobspec import CpuMillis, MemoryBytes, Seconds, SpecModel, check_dns_label
from kiban.domain.manifests import problems_from_validation
from kiban.domain.priority import (
    DEFAULT_PRIORITY_CLASS,
    DEFAULT_PRIORITY_CLASSES,
    PREEMPTING_PRIORITY_CLASSES,
)
from kiban.domain.quantity import parse_duration
from kiban.scheduler.snapshot import DEFAULT_FLAVOR, FlavorView

MAX_GPUS = 1_000_000  # far above any cluster, well inside the store's integer columns
MAX_PRIORITY = 1_000_000_000  # as Kubernetes' user-defined priority classes
MAX_WEIGHT = 1_000_000.0
DEFAULT_HALF_LIFE_S = 7 * 86400.0
DEFAULT_QUEUE = "default"

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
    """A virtual node of the local executor."""

    name: str
    gpus: int = Field(default=0, ge=0, le=1024)
    cpus: CpuMillis = 8000
    memory: MemoryBytes = 32 * 2**30
    labels: dict[str, str] = Field(default_factory=dict)


class GpuAmount(SpecModel):
    """GPUs of one flavor. Quotas and limits count GPUs; CPU and memory come with the node."""

    gpu: GpuCount

    @model_validator(mode="before")
    @classmethod
    def _only_gpus(cls, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = [key for key in data if key != "gpu"]
            if unknown:
                problems = [
                    ((str(key),), f"unknown resource {key!r}; quotas count gpu", data[key])
                    for key in unknown
                ]
                raise problems_error(cls.__name__, problems)
        return data


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


class QueueDecl(SpecModel):
    """A queue of a tenant: nominal quota per flavor, cohort limits, ordering and weight.

    ``quota`` absent (or ``{}``) means no quota: every flavor, no limit. ``{gpu: N}`` is the
    quota of a policy without flavors (the implicit ``default`` flavor). ``borrowingLimit``:
    how much more than its nominal it may borrow from its cohort (a flavor not listed: no
    limit); ``lendingLimit``: how much of its unused nominal it lends (not listed: all of it).
    """

    name: str
    tenant: str = "default"
    cohort: str | None = None
    quota: GpusByFlavor | None = None
    borrowing_limit: GpusByFlavor | None = None
    lending_limit: GpusByFlavor | None = None
    strategy: Literal["StrictFIFO", "BestEffortFIFO"] = "StrictFIFO"
    fair_share_weight: float = Field(default=1.0, gt=0, le=MAX_WEIGHT, allow_inf_nan=False)

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
        return _gpus_by_flavor(value)

    @field_serializer("quota", "borrowing_limit", "lending_limit")
    def _dump_amounts(self, amounts: GpusByFlavor | None) -> dict[str, Any] | None:
        if amounts is None or isinstance(amounts, GpuAmount):
            return None if amounts is None else {"gpu": amounts.gpu}
        return {flavor: {"gpu": amount.gpu} for flavor, amount in amounts.items()}

    @property
    def nominal(self) -> dict[str, int] | None:
        """GPUs per flavor it may use, in the order written; None: no quota (any flavor)."""
        return None if self.quota is None else gpus_per_flavor(self.quota)

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


def _default_priority_classes() -> list[PriorityClassDecl]:
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


def _default_queues() -> list[QueueDecl]:
    return [QueueDecl.model_validate({"name": DEFAULT_QUEUE})]


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


class FairShareDecl(SpecModel):
    """Fair share by past use: use decays with ``halfLife``; ``resourceWeights`` price it."""

    half_life: Duration = DEFAULT_HALF_LIFE_S
    resource_weights: ResourceWeights = Field(default_factory=ResourceWeights)

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


def _unknown(what: str, name: str, declared: list[str]) -> str:
    return f"unknown {what} {name!r}; declared: {', '.join(declared) or 'none'}"


def _repeats(names: list[str]) -> Iterable[tuple[int, str, int]]:
    """``(index, name, index of its first use)`` for every name used before."""
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in first:
            yield i, name, first[name]
        else:
            first[name] = i


class ClusterPolicy(SpecModel):
    """The scheduling policy: flavors, cohorts, queues, priority classes, fair share, topology.

    Absent parts get defaults: no flavors (one implicit flavor, ``default``, of every node), one
    ``default`` queue without quota, the built-in priority classes (low 100, normal 1000 as the
    default, high 10000 with PreemptLowerPriority), fair share with a 7-day half-life priced
    by GPUs, no topology levels. ``queues: []`` (written out) means no queues at all.
    """

    flavors: list[FlavorDecl] = Field(default_factory=list, max_length=256)
    cohorts: list[CohortDecl] = Field(default_factory=list, max_length=1000)
    queues: list[QueueDecl] = Field(default_factory=_default_queues, max_length=10_000)
    priority_classes: list[PriorityClassDecl] = Field(
        default_factory=_default_priority_classes, max_length=100
    )
    fair_share: FairShareDecl = Field(default_factory=FairShareDecl)
    topology: TopologyDecl = Field(default_factory=TopologyDecl)

    @model_validator(mode="after")
    def _consistent(self) -> ClusterPolicy:
        problems = list(self._problems())
        if problems:
            raise problems_error(type(self).__name__, problems)
        return self

    # -- the checks across fields ---------------------------------------------------------------
    def _problems(self) -> Iterable[tuple[Loc, str, Any]]:
        yield from self._unique_names()
        yield from self._cohort_problems()
        yield from self._flavor_problems()
        for i, queue in enumerate(self.queues):
            yield from self._queue_problems(i, queue)
        defaults = [c.name for c in self.priority_classes if c.default]
        for i, cls in enumerate(self.priority_classes):
            if cls.default and cls.name != defaults[0]:
                message = f"only one priority class may be the default; {defaults[0]} already is"
                yield ("priorityClasses", i, "default"), message, True

    def _unique_names(self) -> Iterable[tuple[Loc, str, Any]]:
        levels = self.topology.levels
        lists: list[tuple[Loc, str, str, list[str]]] = [
            (("flavors",), "name", "flavor", [f.name for f in self.flavors]),
            (("cohorts",), "name", "cohort", [c.name for c in self.cohorts]),
            (("queues",), "name", "queue", [q.name for q in self.queues]),
            (
                ("priorityClasses",),
                "name",
                "priority class",
                [c.name for c in self.priority_classes],
            ),
            (("topology", "levels"), "name", "topology level", [lv.name for lv in levels]),
            (("topology", "levels"), "label", "topology label", [lv.label for lv in levels]),
        ]
        for where, key, what, names in lists:
            for i, name, first in _repeats(names):
                message = f"{what} {name} is declared twice (also {where[-1]}[{first}])"
                yield (*where, i, key), message, name

    def _cohort_problems(self) -> Iterable[tuple[Loc, str, Any]]:
        parents = {c.name: c.parent for c in self.cohorts}
        for i, cohort in enumerate(self.cohorts):
            if cohort.parent is not None and cohort.parent not in parents:
                message = _unknown("cohort", cohort.parent, list(parents))
                yield ("cohorts", i, "parent"), message, cohort.parent
        reported: set[str] = set()
        for i, cohort in enumerate(self.cohorts):
            path = [cohort.name]
            parent = cohort.parent
            while parent is not None and parent in parents and parent not in path:
                path.append(parent)
                parent = parents[parent]
            if parent == cohort.name and cohort.name not in reported:
                reported.update(path)
                cycle = " -> ".join([*path, cohort.name])
                yield ("cohorts", i, "parent"), f"cohorts form a cycle: {cycle}", cohort.parent

    def _flavor_problems(self) -> Iterable[tuple[Loc, str, Any]]:
        queues = {q.name for q in self.queues}
        for i, flavor in enumerate(self.flavors):
            for j, name in enumerate(flavor.queues or []):
                if name not in queues:
                    message = _unknown("queue", name, sorted(queues))
                    yield ("flavors", i, "queues", j), message, name

    def _queue_problems(self, i: int, queue: QueueDecl) -> Iterable[tuple[Loc, str, Any]]:
        cohorts = {c.name for c in self.cohorts}
        if queue.cohort is not None and queue.cohort not in cohorts:
            message = _unknown("cohort", queue.cohort, [c.name for c in self.cohorts])
            yield ("queues", i, "cohort"), message, queue.cohort
        quota_problems = list(self._amount_problems(("queues", i, "quota"), queue, queue.quota))
        yield from quota_problems
        for key, amounts in (
            ("borrowingLimit", queue.borrowing_limit),
            ("lendingLimit", queue.lending_limit),
        ):
            yield from self._amount_problems(("queues", i, key), queue, amounts)
        if quota_problems:
            return  # the limits are checked against a quota that makes sense
        nominal = queue.nominal
        for key, limits in (("borrowingLimit", queue.borrowing), ("lendingLimit", queue.lending)):
            if not limits:
                continue
            where: Loc = ("queues", i, key)
            if queue.cohort is None:
                message = f"only a queue in a cohort borrows or lends; set cohort for {key}"
                yield where, message, limits
            elif nominal is None:
                message = f"queue {queue.name} has no quota; give it one to set a {key}"
                yield where, message, limits
            else:
                for flavor in limits:
                    if flavor not in nominal and self._declares(flavor):
                        message = (
                            f"queue {queue.name} has no quota for {flavor}; add "
                            f"{flavor}: {{gpu: 0}} to its quota to set a {key} for it"
                        )
                        yield (*where, flavor), message, limits[flavor]
        for flavor, lends in queue.lending.items():
            if nominal is not None and flavor in nominal and lends > nominal[flavor]:
                message = f"lends {lends} {flavor} GPUs, more than its quota of {nominal[flavor]}"
                yield ("queues", i, "lendingLimit", flavor), message, lends

    def _amount_problems(
        self, where: Loc, queue: QueueDecl, amounts: GpusByFlavor | None
    ) -> Iterable[tuple[Loc, str, Any]]:
        if amounts is None:
            return
        declared = [f.name for f in self.flavors]
        if isinstance(amounts, GpuAmount):
            if declared:
                example = f"{{{declared[0]}: {{gpu: {amounts.gpu}}}}}"
                message = (
                    f"this policy declares flavors ({', '.join(declared)}): name the flavor, "
                    f"e.g. {where[-1]}: {example}"
                )
                yield where, message, {"gpu": amounts.gpu}
            return
        restricted = {f.name: f.queues for f in self.flavors if f.queues is not None}
        for flavor, amount in amounts.items():
            if not self._declares(flavor):
                if declared:
                    message = f"unknown flavor {flavor!r}; declared: {', '.join(declared)}"
                else:
                    message = (
                        f"unknown flavor {flavor!r}: this policy declares no flavors; declare "
                        f"it under flavors, or write {where[-1]}: {{gpu: N}}"
                    )
                yield (*where, flavor), message, {"gpu": amount.gpu}
            elif (
                where[-1] == "quota"
                and flavor in restricted
                and queue.name not in (restricted[flavor] or [])
            ):
                allowed = ", ".join(restricted[flavor] or [])
                message = f"flavor {flavor} is restricted to queues {allowed}"
                yield (*where, flavor), message, {"gpu": amount.gpu}

    def _declares(self, flavor: str) -> bool:
        if not self.flavors:
            return flavor == DEFAULT_FLAVOR
        return any(f.name == flavor for f in self.flavors)

    # -- what the scheduler side reads -----------------------------------------------------------
    @property
    def flavor_names(self) -> tuple[str, ...]:
        """The declared flavors in order; ``(DEFAULT_FLAVOR,)`` when none are declared."""
        return tuple(f.name for f in self.flavors) or (DEFAULT_FLAVOR,)

    def flavor_of(self, labels: Mapping[str, str]) -> str | None:
        """The first declared flavor whose nodeLabels a node's labels all match.

        DEFAULT_FLAVOR when the policy declares no flavors; None when it declares some and
        the node matches none of them (such a node serves no queue's quota).
        """
        if not self.flavors:
            return DEFAULT_FLAVOR
        for flavor in self.flavors:
            if flavor.matches(labels):
                return flavor.name
        return None

    def flavor_views(self) -> tuple[FlavorView, ...]:
        """The flavors as the scheduler's snapshot holds them, in order."""
        if not self.flavors:
            return (FlavorView(DEFAULT_FLAVOR),)
        return tuple(
            FlavorView(f.name, None if f.queues is None else frozenset(f.queues))
            for f in self.flavors
        )

    def flavor(self, name: str) -> FlavorDecl | None:
        return next((f for f in self.flavors if f.name == name), None)

    def queue(self, name: str) -> QueueDecl | None:
        return next((q for q in self.queues if q.name == name), None)

    def cohort_ancestry(self, name: str) -> tuple[str, ...]:
        """The cohort and its parents, innermost first (``()`` for an unknown cohort)."""
        parents = {c.name: c.parent for c in self.cohorts}
        path: list[str] = []
        current: str | None = name
        while current is not None and current in parents and current not in path:
            path.append(current)
            current = parents[current]
        return tuple(path)

    def sharing_cohort(self, name: str) -> str:
        """The cohort whose pool a queue of cohort ``name`` lends to and borrows from: the root
        of its tree. Nested cohorts lend and borrow through their parents (as Kueue's
        hierarchical cohorts do); with no limits declared on cohorts themselves, the queues of
        a whole tree share one pool, while a cohort outside the tree shares nothing with it."""
        ancestry = self.cohort_ancestry(name)
        return ancestry[-1] if ancestry else name

    @property
    def topology_levels(self) -> tuple[str, ...]:
        """Names of the topology levels, outermost first."""
        return tuple(level.name for level in self.topology.levels)

    def topology_path(self, labels: Mapping[str, str]) -> tuple[str, ...]:
        """A node's domain at each topology level, outermost first, from its labels.

        The path stops at the first level whose label the node lacks: a node with a path of
        length ``k`` belongs to no domain at level ``k`` or deeper. Two nodes share a domain at
        level ``k`` when their paths agree on the first ``k + 1`` entries.
        """
        path: list[str] = []
        for level in self.topology.levels:
            value = labels.get(level.label)
            if value is None:
                break
            path.append(value)
        return tuple(path)

    def priority_class(self, name: str) -> PriorityClassDecl | None:
        return next((c for c in self.priority_classes if c.name == name), None)

    @property
    def default_priority_class(self) -> PriorityClassDecl | None:
        return next((c for c in self.priority_classes if c.default), None)

    def priority(self, name: str | None) -> PriorityLevel | None:
        """What ``spec.priorityClass`` (None: not given) means; None if no such class exists.

        A job that names no class gets the default class, or priority 0 when none is default.
        """
        cls = self.default_priority_class if name is None else self.priority_class(name)
        if cls is None:
            return NO_PRIORITY_CLASS if name is None else None
        return PriorityLevel(cls.name, cls.value, cls.preempts, cls.min_runtime_s)

    @property
    def half_life_s(self) -> float:
        return self.fair_share.half_life


class ClusterConfig(ClusterPolicy):
    """The cluster file: the local executor's ``nodes`` and the policy; unknown keys are errors."""

    nodes: list[NodeDecl] = Field(default_factory=list)
    _source: dict[str, Any] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _unique_nodes(self) -> ClusterConfig:
        names = [n.name for n in self.nodes]
        problems = [
            (("nodes", i, "name"), f"node {name} is declared twice (also nodes[{first}])", name)
            for i, name, first in _repeats(names)
        ]
        if problems:
            raise problems_error(type(self).__name__, problems)
        return self

    @property
    def declares_policy(self) -> bool:
        """Whether the file says anything about the policy (more than ``nodes``)."""
        return bool(self.model_fields_set - {"nodes"})

    def policy_document(self) -> dict[str, Any]:
        """The policy part of the file as written (everything but ``nodes``)."""
        if self._source is not None:
            return {k: v for k, v in self._source.items() if k != "nodes"}
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude={"nodes"})


def _spec_error(exc: ValidationError) -> SpecError:
    return SpecError(problems_from_validation(exc))


def parse_policy(doc: dict[str, Any]) -> ClusterPolicy:
    """Validate a policy document; a SpecError names every offending field."""
    if "nodes" in doc:
        raise SpecError.single(
            "nodes",
            "nodes are declared by the executor (or the cluster file given to kiban up "
            "--config), not in the policy",
        )
    try:
        return ClusterPolicy.model_validate(doc)
    except ValidationError as exc:
        raise _spec_error(exc) from None


def parse_cluster_config(doc: dict[str, Any]) -> ClusterConfig:
    """Validate a cluster file; a SpecError names every offending field."""
    try:
        config = ClusterConfig.model_validate(doc)
    except ValidationError as exc:
        raise _spec_error(exc) from None
    config._source = dict(doc)
    return config
