"""The control plane's ``/metrics``: one ``ClusterState`` read per scrape, every family made
from it, with the scheduling cycle histogram and the idle jobs the control loop keeps.

Names follow Kueue's metrics in the ``kiban_`` namespace (README, "Metrics"). Series stay
bounded by what the cluster is, not by its history: per queue, flavor, tenant and reason a few;
per node four, plus one per node and condition (the condition's current status only); per job
only while its GPUs are idle. The text is written by ``exposition`` (prometheus-client's
generic path was too slow at 16,384 nodes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from prometheus_client import Counter, Histogram
from prometheus_client.core import HistogramMetricFamily, Metric
from sqlalchemy.orm import Session, sessionmaker

from kiban import __version__
from kiban.clock import Clock
from kiban.domain.cluster import ClusterPolicy
from kiban.observability.cluster_state import WAIT_BUCKETS, ClusterState, read_state
from kiban.observability.exposition import Family, render
from kiban.observability.idle_gpus import IdleJob


class IdleJobs(Protocol):
    """Where the jobs idle now are kept (the control loop's ``IdleGpuTracker``)."""

    @property
    def idle(self) -> tuple[IdleJob, ...]: ...


class BudgetFamily(Protocol):
    """Where budgets' used parts are kept (the control loop's budget gate)."""

    def family(self) -> Family: ...


class EstimateErrors(Protocol):
    """Where run-time estimates measure themselves (the loop's ``RuntimeEstimates``)."""

    def error_summary(self) -> dict[str, float]: ...


class ClusterMetrics:
    """Every control-plane metric, read from the store at each scrape."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        policy: Callable[[], ClusterPolicy],
        clock: Clock,
        cycles: Histogram | None = None,
        idle: IdleJobs | None = None,
        budgets: BudgetFamily | None = None,
        estimates: EstimateErrors | None = None,
        audit_failures: Counter | None = None,
    ) -> None:
        self.sessions = sessions
        self.policy = policy
        self.clock = clock
        self.cycles = cycles
        self.idle = idle
        self.budgets = budgets
        self.estimates = estimates
        self.audit_failures = audit_failures

    def render(self) -> bytes:
        """A scrape: the text Prometheus reads."""
        with self.sessions() as session:
            state = read_state(session, self.policy(), self.clock.now())
        found: list[Family | Metric] = list(
            families(state, () if self.idle is None else self.idle.idle)
        )
        if self.cycles is not None:
            found.extend(self.cycles.collect())
        if self.budgets is not None:
            found.append(self.budgets.family())
        if self.audit_failures is not None:
            found.extend(self.audit_failures.collect())
        if self.estimates is not None:
            summary = self.estimates.error_summary()
            found.append(
                _single(
                    "kiban_runtime_estimate_error_percent",
                    "Median absolute percentage error of run-time estimates, each made before "
                    "the job's true run time was known (NaN until one is checked).",
                    summary["mdape"],
                )
            )
            found.append(
                _single(
                    "kiban_runtime_estimate_checked",
                    "Run-time estimates checked against the true run time (the error's sample).",
                    summary["samples"],
                )
            )
        return render(found)


def families(state: ClusterState, idle: Iterable[IdleJob]) -> Iterator[Family | Metric]:
    """The metric families of one state of the cluster."""
    yield from _queue_families(state)
    yield from _quota_families(state)
    yield from _node_families(state)
    yield from _remediation_families(state)
    jobs = Family(
        "kiban_job_idle_gpus",
        "GPUs of a running job under the idle utilization for longer than the idle window.",
        labels=("job", "tenant", "queue"),
    )
    for job in idle:
        jobs.add((job.job, job.tenant, job.queue), job.idle_gpus)
    yield jobs
    yield _single(
        "kiban_idle_gpus_while_jobs_wait",
        "Free GPUs on schedulable nodes while jobs are pending (0 when none is).",
        state.idle_while_waiting,
    )
    info = Family("kiban_build_info", "kiban's version.", labels=("version",))
    info.add((__version__,), 1)
    yield info


def _single(name: str, documentation: str, value: float) -> Family:
    family = Family(name, documentation)
    family.add((), value)
    return family


def _queue_families(state: ClusterState) -> Iterator[Family | Metric]:
    pending = Family(
        "kiban_pending_jobs", "Pending jobs per queue and reason.", labels=("queue", "reason")
    )
    for key, count in sorted(state.pending.items()):
        pending.add(key, count)
    yield pending
    late = Family(
        "kiban_jobs_pending_past_forecast",
        "Pending jobs whose forecast start time has passed.",
        labels=("queue",),
    )
    # Every queue of the policy has a series (0 when none is late), so a dashboard shows 0
    # rather than no data on a cluster where all is well.
    queues = {row.queue for row in state.quotas} | set(state.past_forecast)
    for queue in sorted(queues):
        late.add((queue,), state.past_forecast.get(queue, 0))
    yield late
    waits = HistogramMetricFamily(
        "kiban_admission_wait_time_seconds",
        "Time from submission to admission, per queue.",
        labels=["queue"],
    )
    for queue, wait in sorted(state.waits.items()):
        bounds = (*WAIT_BUCKETS, float("inf"))
        counts = (*wait.buckets, wait.count)
        waits.add_metric(
            [queue], [(_le(b), c) for b, c in zip(bounds, counts, strict=True)], wait.total
        )
    yield waits
    admitted = Family(
        "kiban_admitted_jobs", "Admissions of jobs, per queue.", "counter", ("queue",)
    )
    for queue, count in sorted(state.admitted.items()):
        admitted.add((queue,), count)
    yield admitted
    preempted = Family(
        "kiban_preempted_jobs",
        "Running jobs stopped and sent back to their queue, per queue and reason "
        "(Preempted: for another job; NodeUnhealthy: their node failed).",
        "counter",
        ("queue", "reason"),
    )
    for key, count in sorted(state.preempted.items()):
        preempted.add(key, count)
    yield preempted
    finished = Family(
        "kiban_finished_jobs",
        "Jobs ended, per queue and final state.",
        "counter",
        ("queue", "state"),
    )
    for key, count in sorted(state.finished.items()):
        finished.add(key, count)
    yield finished
    yield _single(
        "kiban_forecast_horizon_seconds",
        "How far ahead of now the latest start-time forecast reaches (0: no estimate).",
        state.horizon_s,
    )


def _quota_families(state: ClusterState) -> Iterator[Family]:
    labels = ("queue", "flavor")
    nominal = Family(
        "kiban_quota_nominal_gpus", "A queue's nominal GPU quota of a flavor.", labels=labels
    )
    used = Family(
        "kiban_quota_used_gpus", "GPUs of a flavor held by a queue's jobs.", labels=labels
    )
    borrowed = Family(
        "kiban_quota_borrowed_gpus",
        "GPUs a queue uses beyond its nominal quota, lent by its cohort.",
        labels=labels,
    )
    lent = Family(
        "kiban_quota_lent_gpus", "A queue's idle quota used by others of its cohort.", labels=labels
    )
    for row in state.quotas:
        key = (row.queue, row.flavor)
        if row.nominal is not None:  # a queue without quota has none to show
            nominal.add(key, row.nominal)
        used.add(key, row.used)
        borrowed.add(key, row.borrowed)
        lent.add(key, row.lent)
    yield from (nominal, used, borrowed, lent)
    usage = Family(
        "kiban_tenant_decayed_usage_gpu_seconds",
        "A tenant's decayed usage (weighted GPU-seconds, halved every half-life).",
        labels=("tenant",),
    )
    standing = Family(
        "kiban_tenant_fair_share",
        "A tenant's part of all usage over its part of all weight (under 1: under its share).",
        labels=("tenant",),
    )
    for tenant, (decayed, share) in sorted(state.tenants.items()):
        usage.add((tenant,), decayed)
        standing.add((tenant,), share)
    yield from (usage, standing)


def _node_families(state: ClusterState) -> Iterator[Family]:
    node = ("node",)
    gpus = Family("kiban_node_gpus", "GPUs of a node.", labels=node)
    allocated = Family(
        "kiban_node_gpus_allocated", "GPUs of a node held by kiban's jobs.", labels=node
    )
    schedulable = Family(
        "kiban_node_schedulable",
        "1 when a node takes new work (healthy, not cordoned, not tainted).",
        labels=node,
    )
    age = Family(
        "kiban_node_agent_report_age_seconds",
        "Seconds since a node's agent last reported (nodes with an agent only).",
        labels=node,
    )
    gpus.rows = [((n.name,), n.gpus) for n in state.nodes]
    allocated.rows = [((n.name,), n.allocated) for n in state.nodes]
    schedulable.rows = [((n.name,), 1 if n.schedulable else 0) for n in state.nodes]
    age.rows = [((n.name,), n.report_age_s) for n in state.nodes if n.report_age_s is not None]
    yield from (gpus, allocated, schedulable, age)
    conditions = Family(
        "kiban_node_condition",
        "1 for each node condition's current status (True: the problem is present).",
        labels=("node", "condition", "status"),
    )
    conditions.ones = state.conditions
    yield conditions


def _remediation_families(state: ClusterState) -> Iterator[Family]:
    actions = Family(
        "kiban_remediation_actions",
        "Remediation actions per action, check and outcome (done, failed, suppressed).",
        "counter",
        ("action", "check", "outcome"),
    )
    for key, count in sorted(state.remediation.items()):
        actions.add(key, count)
    yield actions
    yield _single(
        "kiban_remediation_breaker_open",
        "1 while the circuit breaker holds remediation back (its newest action was suppressed).",
        1 if state.breaker_open else 0,
    )
    yield _single(
        "kiban_remediation_nodes_cordoned",
        "Nodes cordoned by remediation (not by admins).",
        state.cordoned_by_remediation,
    )


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))
