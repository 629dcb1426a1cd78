"""The evolving cluster between cycles: what is free, queued and running, as snapshots are made.

The simulator and ``kiban bench scheduler`` both run the pure core cycle after cycle on a
cluster that lives only in memory. This is that cluster: it makes each cycle's snapshot the way
the control loop's ``build_snapshot`` does (every node with what is free on it, the queues with
the GPUs their jobs use per flavor, the running jobs, and the first ``window`` waiting jobs of
each queue in the policy's order), rebuilding only the node and queue views that changed, and
applies a cycle's decisions: preempted jobs stop at once and wait again in their queues (the
nodes they free nominated for their preemptors, as the loop does), admitted gangs start where
the core placed them. A placement on GPUs that are not free, on a node that takes no work, or
that breaks a gang is an ``InvalidDecision``, never a number.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import Any, TypeVar

from kiban.scheduler.decisions import Admit, Decisions, Preempt
from kiban.scheduler.forward import as_pending
from kiban.scheduler.policy import OrderKey
from kiban.scheduler.reasons import SCHEDULING_WINDOW, ReasonCode
from kiban.scheduler.snapshot import (
    FlavorView,
    NodeView,
    PendingIndex,
    PendingJob,
    QueueView,
    RunningIndex,
    RunningJob,
    RunningReplica,
    Snapshot,
)
from kiban.scheduler.wait_replay import judged_reasons

MakeRunning = Callable[[PendingJob, Admit, tuple[RunningReplica, ...], float], RunningJob]
"""Builds the running job an admission starts (the simulator adds checkpoints and limits)."""
Requeue = Callable[[RunningJob, str], PendingJob]
"""The waiting job a preempted running job becomes, given its preemptor's id."""


_T = TypeVar("_T")
_COPIERS: dict[type, tuple[Callable[[Any], Any], frozenset[str]]] = {}


def _copier(cls: type) -> tuple[Callable[[Any], Any], frozenset[str]]:
    """A function copying every slot of a ``cls`` into a new one without ``__init__`` (made
    once per class, as ``dataclasses`` makes ``__init__``: a slot read by name per field is
    half again as slow), and the slots' names."""
    slots = [
        name
        for klass in cls.__mro__
        for name in getattr(klass, "__slots__", ())
        if name not in ("__weakref__", "__dict__") and name.isidentifier()
    ]
    lines = [f"    _set(made, {name!r}, obj.{name})" for name in slots]
    head = "def copy(obj, _new=object.__new__, _set=object.__setattr__, _cls=cls):"
    source = "\n".join([head, "    made = _new(_cls)", *lines, "    return made"])
    namespace: dict[str, Any] = {"cls": cls}
    exec(source, namespace)  # the class's own slot names, identifiers (checked above)
    return namespace["copy"], frozenset(slots)


def evolve(obj: _T, **changes: Any) -> _T:
    """``dataclasses.replace`` for the snapshot's frozen, slotted views when no field its
    ``__post_init__`` derives from changes (a checkpoint, an estimate, what is free): the
    other slots are copied as they are, without ``__init__`` (a third of the cost, once per
    running job per checkpoint and per revised waiting job, in every replay)."""
    cls = type(obj)
    known = _COPIERS.get(cls)
    if known is None:
        known = _COPIERS[cls] = _copier(cls)
    copy, slots = known
    made = copy(obj)
    for name, value in changes.items():
        if name not in slots:
            raise TypeError(f"{cls.__name__} has no field {name!r}")
        object.__setattr__(made, name, value)
    return made  # type: ignore[no-any-return]


class InvalidDecision(RuntimeError):
    """The core decided something the cluster cannot do (a bug in the core, never a number)."""


@dataclass(frozen=True, slots=True)
class Applied:
    """What one cycle's decisions did: jobs started, and jobs stopped with their preemption."""

    started: tuple[RunningJob, ...]
    stopped: tuple[tuple[RunningJob, Preempt], ...]


def default_running(
    job: PendingJob,
    admit: Admit,
    replicas: tuple[RunningReplica, ...],
    now: float,
    *,
    protected_until: float = 0.0,
    attained_service: float = 0.0,
) -> RunningJob:
    """A running job as ``advance`` makes one: started now, its GPUs counted on one flavor
    (the simulator adds its minRuntime's end and the service it attained before)."""
    return RunningJob(
        id=job.id,
        queue=job.queue,
        tenant=job.tenant,
        priority=job.priority,
        submitted_at=job.submitted_at,
        started_at=now,
        replicas=replicas,
        flavor_gpus={admit.flavor: sum(len(r.gpu_ids) for r in replicas)},
        max_runtime=job.max_runtime,
        tasks=job.tasks,
        member=job.member,
        estimated_runtime=job.estimated_runtime,  # its end plans backfill as in the live loop
        protected_until=protected_until,
        attained_service=attained_service,
    )


class ClusterState:
    """Nodes' free capacity, queues' use per flavor, running jobs and ordered waiting jobs."""

    def __init__(
        self,
        *,
        nodes: Iterable[NodeView],
        queues: Iterable[QueueView],
        order_key: OrderKey,
        flavors: tuple[FlavorView, ...],
        topology_levels: tuple[str, ...] = (),
        window: int = SCHEDULING_WINDOW,
    ) -> None:
        self.views: list[NodeView] = list(nodes)
        self.index = {view.name: i for i, view in enumerate(self.views)}
        self.free: list[set[int]] = [set(v.free_gpu_ids) for v in self.views]
        self.free_cpu = [v.free_cpu_millis for v in self.views]
        self.free_memory = [v.free_memory for v in self.views]
        self.dirty: set[int] = set()
        self.queues = {q.name: q for q in queues}
        self.used: dict[str, dict[str, int]] = {q.name: dict(q.used) for q in self.queues.values()}
        self.queues_dirty: set[str] = set()
        self.order_key = order_key
        self.flavors = flavors
        self.topology_levels = topology_levels
        self.window = window
        self.running: dict[str, RunningJob] = {}  # change it only through the methods below
        self._by_queue: dict[str, dict[str, RunningJob]] = {}  # the same jobs, by queue
        self._stopping: dict[str, RunningJob] = {}  # those with preempted_by set
        self._queue_jobs: dict[str, tuple[RunningJob, ...]] = {}  # last snapshot's, by queue
        self._queues_changed: set[str] = set()
        self.waiting: dict[str, list[PendingJob]] = {name: [] for name in self.queues}
        self._waiting_count = 0
        # per queue, its waiting jobs counted by (tenant, member): see ``_one_member``
        self._members: dict[str, Counter[tuple[str, str | None]]] = {}
        self._one_member_names: frozenset[str] | None = None  # None: count again
        self.in_window: dict[str, PendingJob] = {}  # the last snapshot's windows, by job id
        self.nominated: set[str] = set()  # waiting jobs holding nominated nodes
        # the queues the last ``apply`` started jobs from that held more than a window: the
        # jobs behind moved into their windows
        self.refilled: set[str] = set()
        # What the last snapshot was made of, kept until it changes: a cycle after which no
        # queue's window, node, queue view or running job changed costs no rebuilding.
        self._windows: dict[str, tuple[PendingJob, ...]] = {}  # each queue's window, made last
        self._stale: set[str] = set(self.waiting)  # queues whose window may have changed
        self._pending: tuple[PendingJob, ...] = ()
        self._by_queue_windows: dict[str, tuple[PendingJob, ...]] = {}
        self._nodes: tuple[NodeView, ...] | None = None
        self._queue_views: tuple[QueueView, ...] | None = None
        self._running: tuple[RunningJob, ...] | None = None
        self._index: RunningIndex | None = None

    # -- reading ---------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """How many jobs wait, in all queues."""
        return self._waiting_count

    def beyond_window(self) -> bool:
        """Whether some queue holds more waiting jobs than one snapshot takes of it."""
        return any(len(jobs) > self.window for jobs in self.waiting.values())

    def snapshot(
        self,
        now: float,
        standings: Mapping[str, float],
        members: tuple[Mapping[tuple[str, str], float], Mapping[tuple[str, str], float]] = ({}, {}),
    ) -> Snapshot:
        """The cycle's snapshot: nodes and queues changed since the last one are rebuilt;
        ``members`` is fair share's second level (the members' standings and weights)."""
        if self.dirty or self._nodes is None:
            for i in self.dirty:
                self.views[i] = evolve(
                    self.views[i],
                    free_gpu_ids=tuple(sorted(self.free[i])),
                    free_cpu_millis=self.free_cpu[i],
                    free_memory=self.free_memory[i],
                )
            self.dirty.clear()
            self._nodes = tuple(self.views)
        if self._stale:
            self._refresh_windows()
        if self.queues_dirty or self._queue_views is None:
            for name in self.queues_dirty:
                used = {flavor: gpus for flavor, gpus in self.used[name].items() if gpus}
                self.queues[name] = evolve(self.queues[name], used=used)
            self.queues_dirty.clear()
            self._queue_views = tuple(self.queues.values())
        if self._running is None:
            self._running = tuple(self.running.values())
        nominated = [self.in_window[i] for i in sorted(self.nominated) if i in self.in_window]
        return Snapshot(
            now=now,
            nodes=self._nodes,
            queues=self._queue_views,
            pending=self._pending,
            running=self._running,
            flavors=self.flavors,
            standings=standings,
            topology_levels=self.topology_levels,
            running_index=self._running_index(),
            member_standings=members[0],
            member_weights=members[1],
            pending_index=PendingIndex(
                self._by_queue_windows, nominated, self.order_key, self._one_member()
            ),
        )

    def _refresh_windows(self) -> None:
        """Make again the windows of the queues whose first ``window`` jobs may have changed
        (``in_window`` follows), and the snapshot's pending jobs from all the windows."""
        window = self.window
        for name in self._stale:
            for job in self._windows.pop(name, ()):
                self.in_window.pop(job.id, None)
            jobs = self.waiting.get(name)
            if jobs:
                made = self._windows[name] = tuple(jobs[:window])
                for job in made:
                    self.in_window[job.id] = job
        self._stale.clear()
        # in the queues' order, as ``waiting`` holds them
        self._by_queue_windows = {n: self._windows[n] for n in self.waiting if n in self._windows}
        self._pending = tuple(chain.from_iterable(self._by_queue_windows.values()))

    def _running_index(self) -> RunningIndex:
        """The running jobs by queue (a queue's tuple made again only once it changed; the
        whole index kept while no running job changed)."""
        if self._index is not None and not self._queues_changed:
            return self._index
        for name in self._queues_changed:
            jobs = self._by_queue.get(name)
            if jobs:
                self._queue_jobs[name] = tuple(jobs.values())
            else:
                self._queue_jobs.pop(name, None)
        self._queues_changed.clear()
        self._index = RunningIndex(dict(self._queue_jobs), tuple(self._stopping.values()))
        return self._index

    def _one_member(self) -> frozenset[str]:
        """The queues whose waiting jobs are all of one (tenant, member) or name no member:
        the core need not look at each of their jobs for fair share's second level. Counted
        again only after a queue's (tenant, member) pairs changed."""
        if self._one_member_names is None:
            self._one_member_names = frozenset(
                name
                for name, counts in self._members.items()
                if len(counts) < 2 or all(member is None for _tenant, member in counts)
            )
        return self._one_member_names

    def _count_waiting(self, job: PendingJob, sign: int) -> None:
        self._waiting_count += sign
        counts = self._members.setdefault(job.queue, Counter())
        key = (job.tenant, job.member)
        before = counts[key]
        counts[key] = before + sign
        if not counts[key]:
            del counts[key]
            self._one_member_names = None
        elif not before:
            self._one_member_names = None

    # -- changing --------------------------------------------------------------------------------
    def add_waiting(self, job: PendingJob) -> None:
        """A job joins its queue at its place in the policy's order."""
        self._count_waiting(job, 1)
        jobs = self.waiting.setdefault(job.queue, [])
        key = self.order_key(job)
        if not jobs or self.order_key(jobs[-1]) <= key:
            at = len(jobs)  # arrivals in submit order: the usual case, no search
        else:
            at = bisect.bisect_right(jobs, key, key=self.order_key)
        jobs.insert(at, job)
        if at < self.window:
            self._stale.add(job.queue)

    def add_running(self, job: RunningJob, *, take: bool = True) -> None:
        """Count a running job (``take``: also take its replicas' capacity off their nodes)."""
        self._keep(job)
        if take:
            for r in job.replicas:
                i = self.index[r.node]
                self.free[i].difference_update(r.gpu_ids)
                self.free_cpu[i] -= r.cpu_millis
                self.free_memory[i] -= r.memory
                self.dirty.add(i)
            self._count(job, 1)

    def finish(self, job_id: str) -> RunningJob:
        """A running job ended: its capacity and quota are free again."""
        job = self._forget(job_id)
        assert job is not None, f"{job_id} is not running"
        self._release(job)
        return job

    def replace_running(self, job: RunningJob) -> None:
        """A running job's new view (a checkpoint, say); what it holds is unchanged."""
        self._keep(job)

    def _keep(self, job: RunningJob) -> None:
        self.running[job.id] = job
        self._running = None
        self._by_queue.setdefault(job.queue, {})[job.id] = job
        self._queues_changed.add(job.queue)
        if job.preempted_by is not None:
            self._stopping[job.id] = job
        else:
            self._stopping.pop(job.id, None)

    def _forget(self, job_id: str) -> RunningJob | None:
        job = self.running.pop(job_id, None)
        if job is not None:
            self._running = None
            del self._by_queue[job.queue][job_id]
            self._queues_changed.add(job.queue)
            self._stopping.pop(job_id, None)
        return job

    def apply(
        self,
        decisions: Decisions,
        now: float,
        make_running: MakeRunning = default_running,
        requeue: Requeue = as_pending,
    ) -> Applied:
        """Stop the preempted jobs (back to their queues), then start the admitted ones."""
        self.refilled.clear()
        stopped = self._evict(decisions.preempted, requeue)
        started = [self._start(admit, now, make_running) for admit in decisions.admitted]
        if started:
            reach = self.window + len(stopped)  # requeued victims may have pushed them back
            by_queue: dict[str, set[str]] = {}
            for job in started:
                by_queue.setdefault(job.queue, set()).add(job.id)
            for name, ids in by_queue.items():
                if len(self.waiting[name]) > self.window:
                    self.refilled.add(name)
                self._take_started(self.waiting[name], ids, reach)
                self._stale.add(name)
        if self.nominated:
            self._drop_stale_nominations(decisions)
        return Applied(tuple(started), tuple(stopped))

    def _take_started(self, jobs: list[PendingJob], ids: set[str], reach: int) -> None:
        """Take the jobs that started out of their queue's first ``reach`` jobs (where they
        were), scanning only as far as the last of them rather than the whole window."""
        found: list[int] = []
        for k in range(min(reach, len(jobs))):
            if jobs[k].id in ids:
                found.append(k)
                if len(found) == len(ids):
                    break
        for k in reversed(found):
            self._count_waiting(jobs.pop(k), -1)

    def _start(self, admit: Admit, now: float, make_running: MakeRunning) -> RunningJob:
        job = self.in_window.pop(admit.job_id, None)
        if job is None:
            raise InvalidDecision(f"the core admitted {admit.job_id}, which was not waiting")
        if len(admit.placements) < job.gang_size:
            raise InvalidDecision(
                f"the core admitted {job.id} with {len(admit.placements)} replicas of a "
                f"gang of {job.gang_size}"
            )
        demand = {t.name: t for t in job.tasks}
        replicas = []
        for p in admit.placements:
            i = self.index.get(p.node)
            task = demand.get(p.task)
            if i is None or not self.views[i].schedulable:
                raise InvalidDecision(f"the core placed {job.id} on {p.node}, not schedulable")
            if task is None or len(set(p.gpu_ids)) != task.gpu or len(p.gpu_ids) != task.gpu:
                raise InvalidDecision(f"the core gave {job.id} GPUs {p.gpu_ids} on {p.node}")
            if not self.free[i].issuperset(p.gpu_ids):
                raise InvalidDecision(
                    f"the core placed {job.id} on GPUs {sorted(p.gpu_ids)} of {p.node}, "
                    f"of which only {sorted(self.free[i] & set(p.gpu_ids))} are free"
                )
            if self.free_cpu[i] < p.cpu_millis or self.free_memory[i] < p.memory:
                raise InvalidDecision(f"the core overcommits CPU or memory of {p.node}")
            replicas.append(RunningReplica(p.node, p.gpu_ids, p.cpu_millis, p.memory))
        running = make_running(job, admit, tuple(replicas), now)
        self.nominated.discard(job.id)
        self.add_running(running)
        return running

    def _evict(
        self, preempted: tuple[Preempt, ...], requeue: Requeue
    ) -> list[tuple[RunningJob, Preempt]]:
        stopped = []
        nominated: dict[str, set[str]] = {}
        for preempt in preempted:
            nominated.setdefault(preempt.preemptor_id, set()).update(preempt.nodes)
            job = self._forget(preempt.victim_id)
            if job is None:
                raise InvalidDecision(
                    f"the core preempted {preempt.victim_id}, which was not running"
                )
            self._release(job)
            self.add_waiting(requeue(job, preempt.preemptor_id))
            stopped.append((job, preempt))
        for job_id, nodes in nominated.items():
            self._replace_waiting(job_id, nominated_nodes=tuple(sorted(nodes)))
            self.nominated.add(job_id)
        return stopped

    def _drop_stale_nominations(self, decisions: Decisions) -> None:
        """Nominations last while a job waits for its preemptions, as the loop keeps them only
        while the job's recorded reason is WaitingForPreemption."""
        for job_id, reason in judged_reasons(decisions.waiting):
            if job_id in self.nominated and reason.code is not ReasonCode.WAITING_FOR_PREEMPTION:
                self.nominated.discard(job_id)
                self._replace_waiting(job_id, nominated_nodes=())

    def revise_waiting(
        self, tenants: Container[str], revise: Callable[[PendingJob], PendingJob]
    ) -> None:
        """Revise the waiting jobs of these tenants, in place; a queue whose order a revision
        changed (an order key that reads estimates) is sorted again, as the live loop orders
        each cycle's jobs by what it knows then."""
        key = self.order_key
        window = self.window
        members = self._members
        for name, jobs in self.waiting.items():
            counts = members.get(name)
            if not counts or not any(tenant in tenants for tenant, _member in counts):
                continue  # none of its waiting jobs is of these tenants
            moved: list[PendingJob] = []  # revised jobs whose place changed
            gone: set[int] = set()  # and where they were
            first = len(jobs)  # the first place a revision changed
            for k, job in enumerate(jobs):
                if job.tenant in tenants:
                    revised = revise(job)
                    if revised is job:
                        continue
                    first = min(first, k)
                    if key(revised) == key(job):
                        jobs[k] = revised
                    else:
                        moved.append(revised)
                        gone.add(k)
            if moved:
                # Every key ends with the job's id, so no two are equal: taking the moved jobs
                # out and putting each back at its place gives the order a full sort would.
                jobs[:] = [job for k, job in enumerate(jobs) if k not in gone]
                for job in moved:
                    at = bisect.bisect_right(jobs, key(job), key=key)
                    jobs.insert(at, job)
                    first = min(first, at)
            if first < window:
                self._stale.add(name)

    def _replace_waiting(self, job_id: str, **changes: object) -> None:
        job = self.in_window.get(job_id)
        if job is None:
            return
        jobs = self.waiting[job.queue]
        for k, candidate in enumerate(jobs):
            if candidate.id == job_id:
                jobs[k] = evolve(candidate, **changes)
                self.in_window[job_id] = jobs[k]
                self._stale.add(job.queue)
                return

    def _release(self, job: RunningJob) -> None:
        for r in job.replicas:
            i = self.index[r.node]
            self.free[i].update(r.gpu_ids)
            self.free_cpu[i] += r.cpu_millis
            self.free_memory[i] += r.memory
            self.dirty.add(i)
        self._count(job, -1)

    def _count(self, job: RunningJob, sign: int) -> None:
        used = self.used.setdefault(job.queue, {})
        for flavor, gpus in job.flavor_gpus.items():
            used[flavor] = used.get(flavor, 0) + sign * gpus
        self.queues_dirty.add(job.queue)

    # -- checking --------------------------------------------------------------------------------
    def check(self) -> None:
        """Every GPU is free or held by exactly one running replica; queue use adds up."""
        held: list[set[int]] = [set() for _ in self.views]
        per_queue: dict[str, dict[str, int]] = {name: {} for name in self.used}
        for job in self.running.values():
            mine = per_queue.setdefault(job.queue, {})
            for flavor, gpus in job.flavor_gpus.items():
                mine[flavor] = mine.get(flavor, 0) + gpus
            for r in job.replicas:
                i = self.index[r.node]
                if held[i] & set(r.gpu_ids):
                    raise InvalidDecision(
                        f"GPUs {sorted(held[i] & set(r.gpu_ids))} of {r.node} held twice"
                    )
                held[i].update(r.gpu_ids)
        for i, view in enumerate(self.views):
            if held[i] & self.free[i] or len(held[i]) + len(self.free[i]) != view.gpus:
                raise InvalidDecision(f"{view.name}: held {held[i]} and free {self.free[i]} differ")
        counted = {q: {f: g for f, g in u.items() if g} for q, u in self.used.items()}
        summed = {q: {f: g for f, g in u.items() if g} for q, u in per_queue.items()}
        if {q: u for q, u in counted.items() if u} != {q: u for q, u in summed.items() if u}:
            raise InvalidDecision("the queues' GPUs in use do not add up to their running jobs'")
