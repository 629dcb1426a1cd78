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

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import Field, PrivateAttr, ValidationError, model_validator

from kiban.domain.budgets import BudgetDecl, BudgetUnit, PriceDecl, Prices
from kiban.domain.declarations import (
    DEFAULT_HALF_LIFE_S,
    DEFAULT_QUEUE,
    NO_PRIORITY_CLASS,
    CohortDecl,
    FairShareDecl,
    FlavorDecl,
    GpuAmount,
    GpusByFlavor,
    Loc,
    NodeDecl,
    PriorityClassDecl,
    PriorityLevel,
    QueueAllocationDecl,
    QueueDecl,
    TenantLimitDecl,
    TopologyDecl,
    default_priority_classes,
    default_queues,
    problems_error,
    repeated_names,
    unknown_name,
)
from kiban.domain.errors import SpecError
from kiban.domain.idle_gpus import IdleGpusDecl
from kiban.domain.jobspec import SpecModel
from kiban.domain.manifests import problems_from_validation
from kiban.domain.remediation import HealthPolicyDecl
from kiban.scheduler.snapshot import DEFAULT_FLAVOR, FlavorView

__all__ = [
    "DEFAULT_HALF_LIFE_S",
    "DEFAULT_QUEUE",
    "NO_PRIORITY_CLASS",
    "ClusterConfig",
    "ClusterPolicy",
    "PriorityLevel",
    "QueueDecl",
    "parse_cluster_config",
    "parse_policy",
]


class ClusterPolicy(SpecModel):
    """The scheduling policy: flavors, cohorts, queues, priority classes, fair share, topology.

    Absent parts get defaults: no flavors (one implicit flavor, ``default``, of every node), one
    ``default`` queue without quota, the built-in priority classes (low 100, interactive 500
    for notebooks, normal 1000 as the default, serving 5000 and high 10000 with
    PreemptLowerPriority), fair share with a 7-day half-life priced by GPUs, no topology
    levels, the default health rules (``kiban.domain.remediation``).
    ``queues: []`` (written out) means no queues at all.
    """

    flavors: list[FlavorDecl] = Field(default_factory=list, max_length=256)
    cohorts: list[CohortDecl] = Field(default_factory=list, max_length=1000)
    queues: list[QueueDecl] = Field(default_factory=default_queues, max_length=10_000)
    priority_classes: list[PriorityClassDecl] = Field(
        default_factory=default_priority_classes, max_length=100
    )
    fair_share: FairShareDecl = Field(default_factory=FairShareDecl)
    topology: TopologyDecl = Field(default_factory=TopologyDecl)
    idle_gpus: IdleGpusDecl = Field(default_factory=IdleGpusDecl)
    health: HealthPolicyDecl = Field(default_factory=HealthPolicyDecl)
    notebook_priority_class: str | None = None
    """The class notebooks' jobs run at (None: ``interactive`` where declared, else the
    default class)."""
    prices: list[PriceDecl] = Field(default_factory=list, max_length=256)
    budgets: list[BudgetDecl] = Field(default_factory=list, max_length=10_000)
    tenant_limits: list[TenantLimitDecl] = Field(default_factory=list, max_length=10_000)
    """Ceilings on what tenant-admins may give their tenant's queues
    (``kiban.domain.tenant_limits``)."""
    _allocations: dict[str, QueueAllocationDecl] | None = PrivateAttr(default=None)
    _scavengers: frozenset[str] | None = PrivateAttr(default=None)

    def notebook_class(self) -> str | None:
        """The priority class a notebook's job names (None: the policy's default)."""
        if self.notebook_priority_class is not None:
            return self.notebook_priority_class
        return "interactive" if self.priority_class("interactive") is not None else None

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
            if queue.allocation is not None:
                where: Loc = ("queues", i, "allocation", "quota")
                yield from self._amount_problems(where, queue, queue.allocation.quota)
        yield from self._price_problems()
        yield from self._budget_problems()
        yield from self._tenant_limit_problems()
        defaults = [c.name for c in self.priority_classes if c.default]
        notebooks = self.notebook_priority_class
        if notebooks is not None and self.priority_class(notebooks) is None:
            message = unknown_name(
                "priority class", notebooks, [c.name for c in self.priority_classes]
            )
            yield ("notebookPriorityClass",), message, notebooks
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
            for i, name, first in repeated_names(names):
                message = f"{what} {name} is declared twice (also {where[-1]}[{first}])"
                yield (*where, i, key), message, name

    def _cohort_problems(self) -> Iterable[tuple[Loc, str, Any]]:
        parents = {c.name: c.parent for c in self.cohorts}
        for i, cohort in enumerate(self.cohorts):
            if cohort.parent is not None and cohort.parent not in parents:
                message = unknown_name("cohort", cohort.parent, list(parents))
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
                    message = unknown_name("queue", name, sorted(queues))
                    yield ("flavors", i, "queues", j), message, name

    def _queue_problems(self, i: int, queue: QueueDecl) -> Iterable[tuple[Loc, str, Any]]:
        cohorts = {c.name for c in self.cohorts}
        if queue.cohort is not None and queue.cohort not in cohorts:
            message = unknown_name("cohort", queue.cohort, [c.name for c in self.cohorts])
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
        self, where: Loc, queue: QueueDecl | None, amounts: GpusByFlavor | None
    ) -> Iterable[tuple[Loc, str, Any]]:
        """Amounts per flavor that name undeclared flavors (or, in a ``queue``'s quota, a
        flavor restricted to other queues)."""
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
                queue is not None
                and where[-1] == "quota"
                and flavor in restricted
                and queue.name not in (restricted[flavor] or [])
            ):
                allowed = ", ".join(restricted[flavor] or [])
                message = f"flavor {flavor} is restricted to queues {allowed}"
                yield (*where, flavor), message, {"gpu": amount.gpu}

    def _price_problems(self) -> Iterable[tuple[Loc, str, Any]]:
        seen: dict[str, int] = {}
        for i, price in enumerate(self.prices):
            if not self._declares(price.flavor):
                message = unknown_name("flavor", price.flavor, list(self.flavor_names))
                yield ("prices", i, "flavor"), message, price.flavor
            elif price.flavor in seen:
                first = seen[price.flavor]
                message = f"flavor {price.flavor} is priced twice (also prices[{first}])"
                yield ("prices", i, "flavor"), message, price.flavor
            seen.setdefault(price.flavor, i)

    def _budget_problems(self) -> Iterable[tuple[Loc, str, Any]]:
        tenants = sorted({q.tenant for q in self.queues})
        seen: dict[str, int] = {}
        for i, budget in enumerate(self.budgets):
            if budget.tenant not in tenants:
                message = unknown_name("tenant", budget.tenant, tenants) + " (tenants of queues)"
                yield ("budgets", i, "tenant"), message, budget.tenant
            if budget.queue is not None:
                queue = self.queue(budget.queue)
                if queue is None:
                    message = unknown_name("queue", budget.queue, [q.name for q in self.queues])
                    yield ("budgets", i, "queue"), message, budget.queue
                elif queue.tenant != budget.tenant:
                    message = f"queue {queue.name} belongs to tenant {queue.tenant}"
                    yield ("budgets", i, "queue"), message, budget.queue
            if budget.unit is BudgetUnit.COST and not self.prices:
                message = "a budget in cost needs prices; declare prices: [{flavor, gpuHour}]"
                yield ("budgets", i, "cost"), message, budget.cost
            if budget.key in seen:
                first = seen[budget.key]
                message = f"budget {budget.key} is declared twice (also budgets[{first}])"
                yield ("budgets", i, "tenant"), message, budget.tenant
            seen.setdefault(budget.key, i)

    def _tenant_limit_problems(self) -> Iterable[tuple[Loc, str, Any]]:
        seen: dict[str, int] = {}
        for i, limit in enumerate(self.tenant_limits):
            yield from self._amount_problems(("tenantLimits", i, "quota"), None, limit.quota)
            if limit.tenant in seen:
                first = seen[limit.tenant]
                message = f"tenant {limit.tenant} is limited twice (also tenantLimits[{first}])"
                yield ("tenantLimits", i, "tenant"), message, limit.tenant
            seen.setdefault(limit.tenant, i)

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

    def tenant_limit(self, tenant: str) -> TenantLimitDecl | None:
        """The ceiling admins declared for ``tenant`` (None: none declared)."""
        return next((t for t in self.tenant_limits if t.tenant == tenant), None)

    def allocation_at(self, queue: str, now: float) -> QueueAllocationDecl | None:
        """The time-bounded allocation of ``queue`` that holds at ``now`` (None: its own quota
        and weight apply, it has none or it has run out)."""
        if self._allocations is None:
            self._allocations = {
                q.name: q.allocation for q in self.queues if q.allocation is not None
            }
        allocation = self._allocations.get(queue)
        return allocation if allocation is not None and allocation.holds_at(now) else None

    def is_scavenger(self, queue: str) -> bool:
        """Whether ``queue`` is declared ``scavenger: true`` (its jobs use idle capacity only)."""
        if self._scavengers is None:
            self._scavengers = frozenset(q.name for q in self.queues if q.scavenger)
        return queue in self._scavengers

    @property
    def price_table(self) -> Prices:
        return Prices.of(self.prices)

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
            for i, name, first in repeated_names(names)
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
