"""The control loop: settle running jobs from what the executor observes, then schedule.

Each pass:
1. Settle (``settling``): observe the replicas of running and stopping jobs; record exits and
   checkpoints; finish, fail, restart, requeue or stop jobs (grace period, then force).
2. Lift the gates of held jobs whose dependencies hold or whose array has a free slot
   (``gates``); take a snapshot of the store; add the usage held since the last pass to
   each tenant's decayed usage; requeue jobs on nodes found unhealthy; note running jobs' idle GPUs.
3. Run the pure scheduler core on the snapshot, and now and then the same core forward in
   simulated time for start-time forecasts.
4. Apply its decisions: stop preempted jobs (they return to their queues), launch admitted
   gangs through the executor; record every waiting job's reason, positions and forecast.

A pass reads each queue's first ``window`` pending jobs, so it costs the same with 300 or
50,000 waiting; and a submission stored behind a full window asks for no pass at all
(``kiban.control.window``), so that a long backlog taking submissions costs what the
submissions cost.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kiban.clock import Clock, SystemClock
from kiban.control.forecaster import EstimatedMarks, Forecaster
from kiban.control.gates import Gates
from kiban.control.launcher import Launcher
from kiban.control.loop_settings import LoopSettings
from kiban.control.preflight import Preflight
from kiban.control.settling import JobSettler, StopCause, replica_ref
from kiban.control.snapshot_builder import (
    NodeViews,
    PendingViews,
    RecordedWait,
    SpecCache,
    build_snapshot,
)
from kiban.control.waits import record_waits, wait_changed
from kiban.control.window import WindowEnds
from kiban.domain.cluster import ClusterPolicy
from kiban.domain.event_reasons import JobEventReason
from kiban.domain.states import JobState
from kiban.executors.base import Capability, Executor, NodeInfo
from kiban.observability.idle_tracker import IdleGpuTracker
from kiban.observability.scheduling_cycles import cycle_histogram
from kiban.scheduler.capacity_index import CapacityCache
from kiban.scheduler.core import schedule
from kiban.scheduler.decisions import Admit, Preempt
from kiban.scheduler.reasons import ReasonCode
from kiban.scheduler.snapshot import NodeView, RunningJob, Snapshot
from kiban.services.health_pass import HealthPass
from kiban.services.member_usage import accrue_member_usage
from kiban.services.nodes import sync_nodes
from kiban.services.policy import PolicyCache
from kiban.services.runtime_estimates import RuntimeEstimates
from kiban.services.transitions import transition
from kiban.services.usage import accrue_usage
from kiban.store.models import Job, Replica
from kiban.store.models_nodes import Node

log = logging.getLogger("kiban.control")

HEALTH_CHECKS_EVERY_S = 1.0  # how often the health hooks run
ADMIT_BATCH = 256  # admitted jobs recorded and launched together (bounds a transaction's locks)


@dataclass
class PassCounts:
    """What the scheduling passes have done since the loop started: the work a backlog would
    multiply if passes read, judged or wrote every waiting job."""

    scheduling_passes: int = 0
    pending_read: int = 0  # pending jobs read from the store
    views_made: int = 0  # of those, the core's views made anew (the others' were reused)
    judged: int = 0  # jobs the core judged: admitted, or waiting with a reason
    waits_written: int = 0  # waiting jobs whose reason, positions or forecast were written
    stored_behind: int = 0  # submissions stored behind a full window, for which no pass ran
    most_pending_read: int = 0  # the most one pass read


class ControlLoop:
    """Runs passes on its own thread, every ``settings.tick_s`` seconds or at once when woken."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        executor: Executor,
        clock: Clock | None = None,
        settings: LoopSettings | None = None,
        on_pass: Callable[[], None] | None = None,
        on_nodes_changed: Callable[[], None] | None = None,
        health_hooks: Sequence[Callable[[float], bool]] = (),
    ) -> None:
        """``on_pass``: called after each pass. ``on_nodes_changed``: called after the nodes a
        sync found changed are stored (the platform reads its submission facts again).
        ``health_hooks``: active health checks run each pass (allreduce sweeps, the epilogue
        check, notebooks' idle culling), each returning True when it changed what should be
        scheduled."""
        self.sessions = sessions
        self.executor = executor
        self.clock = clock or SystemClock()
        self.settings = settings or LoopSettings()
        self.specs = SpecCache()
        self.launcher = Launcher(executor, self.specs, self.clock)
        self.settler = JobSettler(sessions, executor, self.specs, self.launcher)
        self.preflight = Preflight(sessions, self.settings.preflight)
        # dependencies, array slots and budgets, before a pass (the policy the loop last read)
        self.gates = Gates(sessions, lambda s: self.policies.known or self.policies.get(s))
        self.capacity = CapacityCache()  # the core's capacity index, kept between passes
        self.node_views = NodeViews()
        self.pending_views = PendingViews()
        self.window_ends = WindowEnds()
        self.counts = PassCounts()
        self.cycle_seconds = cycle_histogram()  # /metrics: kiban_scheduling_cycle_seconds
        self.idle_gpus = IdleGpuTracker()  # /metrics: kiban_job_idle_gpus; GpusIdle events
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_pass = on_pass
        self.passes = 0
        self._last_pass_wanted = False
        self._more = False  # the last cycle stopped at its placement budget: run the next now
        self._last_schedule = float("-inf")
        self.policies = PolicyCache()
        self._last_forecast = float("-inf")
        self.forecaster = Forecaster()
        self.runtime_estimates = RuntimeEstimates()  # learned from finished runs; the API's too
        self.eta_marks = EstimatedMarks()
        self._last_node_sync = float("-inf")
        self._last_nodes: list[NodeInfo] | None = None
        self._on_nodes_changed = on_nodes_changed
        self.health = HealthPass(
            sessions, self._requeue_drained, executor.offers.taints, self.clock.now
        )
        self.health_hooks = tuple(health_hooks)
        self._last_health_checks = float("-inf")

    # -- thread --------------------------------------------------------------------------------
    def wake(self) -> None:
        self._wake.set()

    def jobs_stored(self, jobs: Sequence[Job]) -> None:
        """New submissions are in the store: ask for a pass unless each one stands behind its
        queue's full window, where the pass would not look (see ``kiban.control.window``)."""
        # Each one is looked at (not only up to the first in a window): during a pass, every
        # job looked at is checked again against the pass's new window ends.
        behind = [self.window_ends.behind(j.queue, j.priority, j.submitted_at) for j in jobs]
        if all(behind):
            self.counts.stored_behind += len(jobs)
        else:
            self.wake()

    def start(self) -> None:
        self.recover()
        self.forecaster.start()
        self._thread = threading.Thread(target=self._run, name="kiban-control-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.forecaster.stop()

    def _run(self) -> None:
        wanted = False  # a scheduling pass was asked for and has not run yet
        while not self._stopping.is_set():
            timeout = self.settings.tick_s
            if self._more:
                timeout = 0.0
            elif wanted:
                since = self.clock.now() - self._last_schedule
                timeout = min(timeout, max(self.settings.min_interval_s - since, 0.0))
            wanted = self._wake.wait(timeout) or wanted
            self._wake.clear()
            if self._stopping.is_set():
                break
            try:
                wanted = not self._pass(wanted)
            except Exception:  # the loop must survive a bad pass; the next one retries
                wanted = False
                log.exception("control loop pass failed")

    # -- passes --------------------------------------------------------------------------------
    def run_once(self) -> None:
        """One pass: settle running jobs, then schedule pending ones."""
        self._pass(wanted=True, min_interval_s=0.0)

    def _pass(self, wanted: bool, min_interval_s: float | None = None) -> bool:
        """Settle every pass; schedule when asked, or when a job ended. True if it scheduled.

        Submissions, cancels and policy changes wake the loop and ask for a pass. A pass asked
        for right after another asked-for pass waits until ``min_interval_s`` after it, so a
        burst of submissions is scheduled together; the first one of a burst is scheduled at
        once. A full pass also runs every ``resync_s``.
        """
        now = self.clock.now()
        nodes_changed = self._sync_nodes_if_due(now)
        changed = self.settle(now) or nodes_changed
        self.health(self.policies)  # stale agents' conditions Unknown; drains' requeues
        changed = self._health_checks(now) or changed
        now = self.clock.now()
        gap = self.settings.min_interval_s if min_interval_s is None else min_interval_s
        since = now - self._last_schedule
        in_burst = wanted and self._last_pass_wanted and since < gap
        scheduled = False
        if self._more or ((wanted or changed) and not in_burst) or since >= self.settings.resync_s:
            with self.cycle_seconds.time():
                self._more = self.schedule(now)
            self._last_pass_wanted = wanted
            scheduled = True
        self.passes += 1
        if self._on_pass is not None:
            self._on_pass()
        return (scheduled and not self._more) or not (wanted or changed or self._more)

    def _health_checks(self, now: float) -> bool:
        """The health hooks, at most every ``HEALTH_CHECKS_EVERY_S`` (a pass may come every
        0.2 s; sweeps and the epilogue need not look that often)."""
        if now - self._last_health_checks < HEALTH_CHECKS_EVERY_S:
            return False
        self._last_health_checks = now
        changed = False
        for hook in self.health_hooks:
            try:
                changed = hook(now) or changed
            except Exception:  # a check's trouble must not stop the loop
                log.exception("a health check's pass failed")
        return changed

    def _sync_nodes_if_due(self, now: float) -> bool:
        """Every ``node_sync_s``: store the executor's nodes; True when they changed."""
        every = self.settings.node_sync_s
        if every is None or now - self._last_node_sync < every:
            return False
        self._last_node_sync = now
        try:
            nodes = self.executor.nodes()
        except Exception:  # the cluster's API may be away for a while; the next sync retries
            log.exception("could not list the executor's nodes")
            return False
        if nodes == self._last_nodes:
            return False
        with self.sessions() as session:
            sync_nodes(session, nodes, now)
            session.commit()
        self._last_nodes = nodes
        if self._on_nodes_changed is not None:
            self._on_nodes_changed()
        return True

    def recover(self) -> None:
        """After a restart: a launch cut short is undone and its job requeued, and what the
        executor still runs for attempts no longer active is stopped (``_sweep``).

        Running jobs need nothing here: their replicas are observed by pid, process start time
        and exit file, whether or not this process started them.
        """
        now = self.clock.now()
        with self.sessions() as session:
            stuck = session.scalars(select(Job).where(Job.state == JobState.ADMITTED.value)).all()
            for job in stuck:
                # Replicas may have started before their pids were recorded: the executor
                # finds them by the attempt, and the attempt's rows are dropped with them.
                self.executor.abandon(job.id, job.attempt)
                for replica in self.settler.active_replicas(session, job):
                    self.executor.stop(replica_ref(replica), force=True)
                    session.delete(replica)
                transition(
                    session,
                    job,
                    JobState.PENDING,
                    reason=JobEventReason.REQUEUED,
                    message="the control plane restarted while launching; requeued",
                    at=now,
                )
            session.commit()
            self._sweep(session)

    def _sweep(self, session: Session) -> None:
        """Stop what the executor still runs for attempts the store holds no longer active
        (a control plane stopped between a job's end and its replicas' removal). Attempts of
        jobs this store does not know are left alone: another kiban's, perhaps."""
        query = select(Replica.job_id, Replica.attempt).where(Replica.active.is_(True))
        active = {(job_id, attempt) for job_id, attempt in session.execute(query.distinct())}
        left = self.executor.attempts() - active
        if not left:
            return
        known = set(
            session.scalars(select(Job.id).where(Job.id.in_({job_id for job_id, _ in left})))
        )
        for job_id, attempt in sorted(left):
            if job_id in known:
                log.warning("stopping attempt %d of job %s, which is not active", attempt, job_id)
                self.executor.abandon(job_id, attempt)
            else:
                log.warning("replicas of job %s, unknown to this store, are left alone", job_id)

    def settle(self, now: float) -> bool:
        """Observe running and stopping jobs; True if any of them changed state."""
        return self.settler.settle(now)

    # -- scheduling ----------------------------------------------------------------------------
    def schedule(self, now: float) -> bool:
        """One scheduling pass; True when the next should follow at once: its cycle stopped at
        the placement budget, or it admitted jobs from a queue with more waiting than the
        window."""
        recorded: dict[str, RecordedWait] = {}
        self.gates(now)
        self.window_ends.begin()
        try:
            with self.sessions() as session:
                cluster_policy = self.policies.get(session)
                snapshot = build_snapshot(
                    session,
                    self.specs,
                    now,
                    recorded,
                    self.settings.window,
                    cluster_policy,
                    self.node_views,
                    node_constraints=Capability.CONTAINERS in self.executor.capabilities,
                    pending_views=self.pending_views,
                    estimates=self.runtime_estimates,
                )
        except BaseException:
            self.window_ends.forget()
            raise
        if self.window_ends.update(snapshot.pending, self.settings.window):
            self.wake()  # a submission stored while the snapshot was read may be in a window
        counts = self.counts
        counts.scheduling_passes += 1
        counts.pending_read += len(snapshot.pending)
        counts.views_made += self.pending_views.made
        counts.most_pending_read = max(counts.most_pending_read, len(snapshot.pending))
        self._last_schedule = now
        self._accrue_usage(snapshot.running, now, cluster_policy)
        self._requeue_from_unhealthy_nodes(snapshot.running, now, snapshot.nodes)
        self.idle_gpus.observe(self.sessions, snapshot.running, cluster_policy, now)
        if not snapshot.pending:
            return False
        decisions = schedule(snapshot, self.settings.engine_policy, self.capacity)
        counts.judged += len(decisions.admitted) + len(decisions.waiting)
        for preempt in decisions.preempted:
            self._preempt(preempt, now)
        self._admit(decisions.admitted, now)
        self._refresh_forecast(snapshot, now)
        more = decisions.more or (bool(decisions.admitted) and self._window_full(snapshot))
        etas = self.forecaster.estimates()
        self.eta_marks.write(self.sessions, self.forecaster.estimated())
        changed = [
            w
            for w in decisions.waiting
            if w.reason.code is not ReasonCode.QUEUE_BACKLOG  # unconsidered: the next cycle's
            and wait_changed(w, recorded.get(w.job_id), etas.get(w.job_id))
        ]
        counts.waits_written += len(changed)
        if changed:
            with self.sessions() as session:
                record_waits(
                    session,
                    [(w, recorded.get(w.job_id), etas.get(w.job_id)) for w in changed],
                    now,
                )
                session.commit()
        return more

    def _window_full(self, snapshot: Snapshot) -> bool:
        """Whether some queue had more pending jobs than the snapshot's window holds: once
        admissions made room, the next pass (at once) considers the jobs behind them."""
        per_queue = Counter(job.queue for job in snapshot.pending)
        return any(count >= self.settings.window for count in per_queue.values())

    def _refresh_forecast(self, snapshot: Snapshot, now: float) -> None:
        """Ask for start-time estimates from this pass's snapshot, at most every few seconds
        (computed beside the loop once it runs; the newest ones are recorded)."""
        if now - self._last_forecast < self.settings.forecast_every_s:
            return
        self._last_forecast = now
        self.forecaster.submit(snapshot, self.settings.engine_policy)

    def _accrue_usage(
        self, running: tuple[RunningJob, ...], now: float, cluster_policy: ClusterPolicy
    ) -> None:
        with self.sessions() as session:
            accrue_usage(session, running, now, cluster_policy)
            accrue_member_usage(session, running, now, cluster_policy)
            session.commit()

    def _requeue_from_unhealthy_nodes(
        self, running: tuple[RunningJob, ...], now: float, node_views: Sequence[NodeView] = ()
    ) -> None:
        """Jobs with a replica on a node found unhealthy stop and return to their queues, kept
        off that node for a while when enough other nodes take work."""
        with self.sessions() as session:
            bad = set(session.scalars(select(Node.name).where(Node.healthy.is_(False))))
        if not bad:
            return
        schedulable = [n for n in node_views if n.schedulable]
        for job in running:
            if job.stopping or not any(r.node in bad for r in job.replicas):
                continue
            nodes = sorted({r.node for r in job.replicas if r.node in bad})
            self.settler.stop_for(job.id, StopCause.node_unhealthy(nodes), now)
            # Its retry lands elsewhere, even once the node is back (``exclude_for_s``); not
            # where too few other nodes are left for it (one node: it waits for that one).
            others = sum(1 for n in schedulable if n.name not in bad)
            if others >= len({r.node for r in job.replicas}):
                self.preflight.exclude(job.id, dict.fromkeys(nodes, "NodeUnhealthy"), now)

    def _requeue_drained(self, job_id: str, nodes: list[str]) -> None:
        """A drain's requeue: the job returns to its queue, keeping its submit time and not
        spending its backoffLimit (``StopIntent.REQUEUE``)."""
        self.settler.stop_for(job_id, StopCause.node_unhealthy(nodes), self.clock.now())

    def _preempt(self, preempt: Preempt, now: float) -> None:
        with self.sessions() as session:
            preemptor = session.get(Job, preempt.preemptor_id, with_for_update=True)
            if preemptor is not None and preemptor.state == JobState.PENDING.value:
                nodes = set(preemptor.nominated_nodes or ()) | set(preempt.nodes)
                preemptor.nominated_nodes = sorted(nodes)
                session.commit()
        self.settler.stop_for(preempt.victim_id, StopCause.preempted(preempt), now)

    def _admit(self, admits: Sequence[Admit], now: float) -> None:
        """Launch the admitted jobs still pending (one may have been cancelled since the
        snapshot), a batch at a time: one commit per batch each way, launches overlapped.
        Multi-node gangs pass their preflight first; one held back is placed again next pass."""
        admits, held = self.preflight.screen(admits, now)
        if held:
            self.wake()
        for first in range(0, len(admits), ADMIT_BATCH):
            batch = admits[first : first + ADMIT_BATCH]
            with self.sessions() as session:
                ids = [admit.job_id for admit in batch]
                jobs = {
                    job.id: job
                    for job in session.scalars(select(Job).where(Job.id.in_(ids)).with_for_update())
                }
                admitted = [
                    (jobs[admit.job_id], admit.placements)
                    for admit in batch
                    if admit.job_id in jobs and jobs[admit.job_id].state == JobState.PENDING.value
                ]
                flavors = {admit.job_id: admit.flavor for admit in batch}
                self.launcher.launch_all(session, admitted, now, flavors=flavors)
                session.commit()
