"""The discrete-event simulator: the scheduler core, cycle after cycle, on a simulated clock.

Events are arrivals and ends of runs. Everything that happens at one instant is one batch:

1. Bring usage, allocation and the checkpoints of running jobs up to the instant.
2. End the runs that end now (their GPUs are free) and submit the jobs that arrive now.
3. If any job waits, run one cycle of the core (``schedule``) on a snapshot of the cluster and
   apply its decisions: preempted jobs stop at once, lose the work since their last checkpoint
   and wait again in their queues; admitted jobs start where the core placed them and run for
   what is left of their trace duration (or until their time limit).
4. Run another cycle at the same instant when the last one preempted (its preemptors start in
   the next, as the control loop starts them once their victims have stopped) or admitted jobs
   while some queue holds more than a snapshot's window of them.

A policy whose order depends on attained service (LAS) also wakes the core when a running job
moves to its next level, so that a waiting job now ahead of it may preempt it then rather than
at the next arrival or end. Every job carries the GPU-seconds it has run (``attained_service``).

A job checkpoints every ``checkpoint_s`` of its run (each attempt from its start); the core sees
the last one as ``last_progress_at`` when it picks victims. No randomness: the same jobs give
the same run.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from kiban.domain.runtime_estimate import JobFeatures, RuntimeEstimate, RuntimeEstimator
from kiban.domain.usage import Decay, standing
from kiban.scheduler.attained_service import with_queue_strategies
from kiban.scheduler.capacity_index import CapacityCache
from kiban.scheduler.core import schedule
from kiban.scheduler.decisions import Admit, Decisions, Wait
from kiban.scheduler.fair_tree import MemberKey, member_key
from kiban.scheduler.reasons import SCHEDULING_WINDOW, ReasonCode
from kiban.scheduler.snapshot import (
    PendingJob,
    QueueStrategy,
    QueueView,
    RunningJob,
    RunningReplica,
    Snapshot,
)
from kiban.scheduler.wait_replay import judged_reasons
from kiban.sim.cluster import SimCluster
from kiban.sim.policies import SimPolicy, within_partition
from kiban.sim.state import ClusterState, default_running, evolve
from kiban.sim.workload import SimJob

DEFAULT_CHECKPOINT_S = 1800.0


def features_of(job: SimJob) -> JobFeatures:
    """What the estimator knows a trace's job by: its tenant, user (when the trace has one),
    queue and GPUs; traces carry no job names or commands (the Philly file: team and size)."""
    return JobFeatures(
        tenant=job.tenant, user=job.member, name=None, command=None, gpus=job.gpus, queue=job.queue
    )


OnCycle = Callable[[Snapshot, Decisions], None]
"""Called with each cycle's snapshot and decisions, before they are applied (tests, tracing)."""
MAX_CYCLES_PER_INSTANT = 64


MAX_REPEATS = 3
"""A job preempted for the same preemptor more often than this, while the preemptor never
started in between, is a preemption loop. (A preemptor that starts, is preempted or reclaimed
in its turn and preempts the same job again later is making progress, if wastefully.)"""


class PreemptionLoop(RuntimeError):
    """The core preempts the same job for the same preemptor again and again: the replay stops
    rather than spin (the figures would measure the loop, not the policy)."""


class ConservationError(AssertionError):
    """GPU-seconds served differ from the work done plus the work lost: a simulator bug."""


@dataclass(slots=True)
class JobRun:
    """What happened to one job: its attempts' time, work kept and lost, when it ran."""

    job: SimJob
    done_s: float = 0.0  # work kept: checkpointed by preempted attempts, or finished
    run_s: float = 0.0  # time spent running, all attempts
    lost_s: float = 0.0  # run time thrown away by preemptions
    preemptions: int = 0
    attempt: int = 0
    started_at: float | None = None  # of the current attempt
    first_start: float | None = None
    finished_at: float | None = None
    killed: bool = False  # reached its time limit before its work was done
    waiting_reason: str | None = None  # its last reason, if it never finished

    @property
    def remaining_s(self) -> float:
        return self.job.duration_s - self.done_s


@dataclass(slots=True)
class Series:
    """The cluster over time, one point per instant something changed (steps, not samples)."""

    times: list[float] = field(default_factory=list)
    allocated: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    by_tenant: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class SimOutcome:
    """A finished replay: every job's run, the series, the counts and the wall time."""

    runs: tuple[JobRun, ...]
    total_gpus: int
    allocated_gpu_s: float
    start_s: float
    end_s: float
    cycles: int
    core_s: float
    wall_s: float
    series: Series | None
    capped_instants: int
    preemption_loops: int = 0
    estimate_error: dict[str, float] | None = None  # the run-time estimator's, when it had one


class Simulator:
    """Replays jobs through the core on a cluster; ``run`` returns what happened."""

    def __init__(
        self,
        jobs: Sequence[SimJob],
        cluster: SimCluster,
        queues: Sequence[QueueView],
        policy: SimPolicy,
        *,
        checkpoint_s: float = DEFAULT_CHECKPOINT_S,
        window: int = SCHEDULING_WINDOW,
        series: bool = False,
        on_cycle: OnCycle | None = None,
    ) -> None:
        strategy = policy.strategy
        if strategy is not None:
            queues = [replace(q, strategy=strategy) for q in queues]
        self.policy = policy
        self.core = with_queue_strategies(policy.core, queues)  # the state orders as the core
        if policy.standing == "share":  # the in-cycle charge, in dominant-share units
            self.core = replace(self.core, admission_charge_s=1.0 / max(cluster.total_gpus, 1))
        if self.core.may_preempt is not None:
            self.core = replace(
                self.core, may_preempt=within_partition(self.core.may_preempt, queues)
            )
        self.cluster = cluster
        self.state = ClusterState(
            nodes=cluster.nodes,
            queues=queues,
            order_key=self.core.order_key,
            flavors=cluster.flavors,
            topology_levels=cluster.topology_levels,
            window=window,
        )
        self.jobs = sorted(jobs, key=lambda j: (j.submit_s, j.sequence))
        # run times learned online from the jobs that finished, as the live loop learns them
        self.estimator = RuntimeEstimator() if policy.estimates and not policy.oracle else None
        self.learned_for: set[str] = set()  # tenants whose estimates changed since the last cycle
        # the estimator's answers since it last learned (it answers the same until then), by
        # the ``id`` of the one JobFeatures object kept per distinct value (a hash of an int,
        # not of six fields, per waiting job revised)
        self.estimates: dict[int, RuntimeEstimate | None] = {}
        self.distinct: dict[JobFeatures, JobFeatures] = {}  # each value's one object
        self.features: dict[str, JobFeatures] = {}  # each job's, made once
        self.runs = {j.id: JobRun(j) for j in self.jobs}
        self.checkpoint_s = checkpoint_s if checkpoint_s > 0 else math.inf
        self.now = self.jobs[0].submit_s if self.jobs else 0.0
        self.ends: list[tuple[float, int, str, int]] = []  # (time, seq, job, attempt)
        self.ends_at: dict[str, float] = {}  # running job -> when its attempt ends
        self.checkpoints: list[tuple[float, str, int]] = []  # (time, job, attempt)
        self.wakeups: list[tuple[float, str, int]] = []  # (time, job, attempt): level changes
        self.seq = 0
        self.weights: dict[str, float] = {}
        for q in queues:
            self.weights[q.tenant] = max(self.weights.get(q.tenant, 0.0), q.weight)
        self.half_life_s = cluster.policy.half_life_s
        self.usage: dict[str, float] = {}
        self.held: dict[str, list[float]] = {}  # tenant -> [gpus, cpu millis, memory]
        # Fair share's second level: GPUs held and decayed usage per (tenant, member).
        self.member_weights = cluster.policy.fair_share.member_weights()
        self.member_usage: dict[MemberKey, float] = {}
        self.member_held: dict[MemberKey, int] = {}
        self.totals = (
            max(sum(n.gpus for n in cluster.nodes), 1),
            max(sum(n.cpu_millis for n in cluster.nodes), 1),
            max(sum(n.memory for n in cluster.nodes), 1),
        )
        self.allocated = 0
        self.allocated_gpu_s = 0.0
        self.series = Series() if series else None
        self.cycles = 0
        self.core_s = 0.0
        self.capacity = CapacityCache()  # the core's capacity index, kept as the loop keeps it
        self.capped = 0
        self.loops = 0
        self.repeats: dict[tuple[str, str], int] = {}  # since the preemptor last started
        self.preempted_for: dict[str, set[str]] = {}  # preemptor -> its victims in repeats
        self.start_s = self.now
        self.last_waits: Sequence[Wait] = ()  # read once, at the end: see _note_never_started
        self.on_cycle = on_cycle
        # no preemption, no backfill, no fair share: see ``_window_refilled``
        self.monotone = (
            not self.core.preemption
            and not self.core.backfill
            and policy.standing == "none"
            and self.core.admission_charge_s == 0
        )

    # -- the event loop --------------------------------------------------------------------------
    def run(self) -> SimOutcome:
        """Replay every job; stop when nothing more will happen."""
        started = time.perf_counter()
        start_s = self.now
        arrivals = self.jobs
        next_arrival = 0
        while True:
            upcoming = [self.ends[0][0]] if self.ends else []
            if self.wakeups:
                upcoming.append(self.wakeups[0][0])
            if next_arrival < len(arrivals):
                upcoming.append(arrivals[next_arrival].submit_s)
            if not upcoming:
                break
            self._advance(min(upcoming))
            self._end_runs()
            while next_arrival < len(arrivals) and arrivals[next_arrival].submit_s <= self.now:
                job = arrivals[next_arrival]
                self.state.add_waiting(
                    self._estimated(job.pending(self._max_runtime(self.runs[job.id])))
                )
                next_arrival += 1
            if self.state.pending:
                self._cycles()
            self._record()
        self._note_never_started()
        outcome = SimOutcome(
            runs=tuple(self.runs[j.id] for j in self.jobs),
            total_gpus=self.totals[0],
            allocated_gpu_s=self.allocated_gpu_s,
            start_s=start_s,
            end_s=self.now,
            cycles=self.cycles,
            core_s=self.core_s,
            wall_s=time.perf_counter() - started,
            series=self.series,
            capped_instants=self.capped,
            preemption_loops=self.loops,
            estimate_error=None if self.estimator is None else self.estimator.error_summary(),
        )
        check_conservation(outcome)
        return outcome

    def _advance(self, now: float) -> None:
        """Move the clock: allocation and usage accrue, checkpoints pass."""
        dt = now - self.now
        if dt > 0:
            self.allocated_gpu_s += self.allocated * dt
            if self.policy.standing == "usage":
                decayed = Decay(dt, self.half_life_s)  # one exp for every tenant and member
                decayed.step(self.usage, {tenant: held[0] for tenant, held in self.held.items()})
                decayed.step(self.member_usage, self.member_held)  # as the tenants
        self.now = now
        while self.checkpoints and self.checkpoints[0][0] <= now:
            at, job_id, attempt = heapq.heappop(self.checkpoints)
            run = self.runs[job_id]
            running = self.state.running.get(job_id)
            if running is None or run.attempt != attempt:
                continue
            self.state.replace_running(evolve(running, last_progress_at=at))
            heapq.heappush(self.checkpoints, (at + self.checkpoint_s, job_id, attempt))
        while self.wakeups and self.wakeups[0][0] <= now:
            _at, job_id, attempt = heapq.heappop(self.wakeups)
            running = self.state.running.get(job_id)
            if running is not None and self.runs[job_id].attempt == attempt:
                self._wake_at_next_level(running, now)

    def _end_runs(self) -> None:
        while self.ends and self.ends[0][0] <= self.now:
            _at, _seq, job_id, attempt = heapq.heappop(self.ends)
            run = self.runs[job_id]
            if run.attempt != attempt or run.started_at is None:
                continue  # preempted since
            running = self.state.finish(job_id)
            del self.ends_at[job_id]
            self._hold(running, -1)
            elapsed = self.now - run.started_at
            run.run_s += elapsed
            run.done_s += elapsed
            run.killed = run.remaining_s > 1e-6 * max(run.job.duration_s, 1.0)
            run.finished_at = self.now
            run.started_at = None
            if self.estimator is not None and not run.killed:
                self.estimator.observe(features_of(run.job), run.job.duration_s, self.now)
                self.estimates.clear()
                self.learned_for.add(run.job.tenant)

    def _cycles(self) -> None:
        seen: set[tuple[str, str]] = set()  # (victim, preemptor) pairs at this instant
        if self.learned_for:  # waiting jobs plan on what was learned since (as the live loop)
            self.state.revise_waiting(self.learned_for, self._estimated)
            self.learned_for.clear()
        # Decayed usage moves only with the clock: one instant's cycles share its standings
        # (dominant shares move with every start and stop: made again each cycle).
        standings = self._standings() if self.policy.standing == "usage" else None
        members = self._members()
        for _ in range(MAX_CYCLES_PER_INSTANT):
            snapshot = self.state.snapshot(
                self.now, self._standings() if standings is None else standings, members
            )
            t0 = time.perf_counter()
            decisions = schedule(snapshot, self.core, self.capacity)
            self.core_s += time.perf_counter() - t0
            self.cycles += 1
            if self.on_cycle is not None:
                self.on_cycle(snapshot, decisions)
            self._apply(decisions, waited=len(snapshot.pending) > len(decisions.admitted))
            pairs = {(p.victim_id, p.preemptor_id) for p in decisions.preempted}
            for pair in pairs:
                self.repeats[pair] = self.repeats.get(pair, 0) + 1
                self.preempted_for.setdefault(pair[1], set()).add(pair[0])
                if self.repeats[pair] > MAX_REPEATS:
                    preempt = next(p for p in decisions.preempted if p.victim_id == pair[0])
                    raise PreemptionLoop(
                        f"at t={self.now - self.start_s:.0f} s the core preempted {pair[0]} for "
                        f"{pair[1]} for the {self.repeats[pair]}th time "
                        f"({preempt.reason.details.get('ground')}): the preemptor never starts"
                    )
            if pairs and pairs <= seen:
                # The core preempts the same victims for the same jobs again: a loop (see
                # docs/benchmarks.md). Move on to the next event rather than spin here.
                self.loops += 1
                return
            seen |= pairs
            again = (
                bool(pairs)
                or decisions.more
                or (bool(decisions.admitted) and self._window_refilled(decisions))
            )
            if not again:
                return
        self.capped += 1

    def _window_refilled(self, decisions: Decisions) -> bool:
        """Whether the admissions let jobs into some queue's window that the next cycle, at
        once, may start (the cycles after admissions, as the control loop runs them).

        Where nothing in a cycle depends on the order of queues' standings, on reservations or
        on victims (no preemption, no backfill, no fair share: ``monotone``), a cycle at the
        same instant can start only jobs that just came into a window: every other waiting
        job was judged on more free capacity and less quota used than it finds now. And none
        behind a StrictFIFO head that waited for capacity or quota (not ``Unschedulable``):
        that head is still first and still does not fit. Such a cycle would admit nothing."""
        if not self.state.beyond_window():
            return False
        if not self.monotone:
            return True
        refilled = self.state.refilled
        strict = {
            name
            for name in refilled
            if self.state.queues[name].strategy is QueueStrategy.STRICT_FIFO
        }
        if len(strict) < len(refilled):
            return True
        blocked: set[str] = set()
        in_window = self.state.in_window
        for job_id, reason in judged_reasons(decisions.waiting):
            job = in_window.get(job_id)
            if job is not None and reason.code is not ReasonCode.UNSCHEDULABLE:
                blocked.add(job.queue)
        return not strict <= blocked

    def _apply(self, decisions: Decisions, *, waited: bool) -> None:
        applied = self.state.apply(decisions, self.now, self._start, self._requeue)
        for stopped, _preempt in applied.stopped:
            self._hold(stopped, -1)
        for running in applied.started:
            self._hold(running, 1)
            for victim in self.preempted_for.pop(running.id, ()):
                del self.repeats[(victim, running.id)]
        if not self.state.pending:
            self.last_waits = ()
        elif waited:  # kept unread: the core numbers its waits only when they are read
            self.last_waits = decisions.waiting

    def _start(
        self, job: PendingJob, admit: Admit, replicas: tuple[RunningReplica, ...], now: float
    ) -> RunningJob:
        """An admitted job starts: it ends when its remaining work (or its time limit) is up."""
        run = self.runs[job.id]
        run.attempt += 1
        run.started_at = now
        if run.first_start is None:
            run.first_start = now
        length = run.remaining_s
        limit = run.job.time_limit_s
        if limit is not None:
            length = min(length, limit)
        self.seq += 1
        heapq.heappush(self.ends, (now + length, self.seq, job.id, run.attempt))
        self.ends_at[job.id] = now + length
        if self.core.preemption and now + self.checkpoint_s < now + length:
            heapq.heappush(self.checkpoints, (now + self.checkpoint_s, job.id, run.attempt))
        running = default_running(
            job,
            admit,
            replicas,
            now,
            protected_until=now + run.job.min_runtime_s,
            attained_service=job.attained_service,
        )
        self._wake_at_next_level(running, now)
        return running

    def _wake_at_next_level(self, running: RunningJob, now: float) -> None:
        """Wake the core when the running job reaches its next level (policies that have them)."""
        next_level = self.policy.next_level
        if next_level is None or not self.core.preemption:
            return
        attained = running.attained_service + running.gpus * (now - running.started_at)
        after = next_level(attained, running.gpus)
        if after is not None and after > 0 and now + after < self.ends_at[running.id]:
            heapq.heappush(self.wakeups, (now + after, running.id, self.runs[running.id].attempt))

    def _requeue(self, running: RunningJob, preemptor: str) -> PendingJob:
        """A preempted job keeps the work up to its last checkpoint and waits again."""
        run = self.runs[running.id]
        assert run.started_at is not None
        elapsed = self.now - run.started_at
        kept = min(math.floor(elapsed / self.checkpoint_s) * self.checkpoint_s, elapsed)
        if math.isinf(self.checkpoint_s):
            kept = 0.0
        run.run_s += elapsed
        run.done_s += kept
        run.lost_s += elapsed - kept
        run.preemptions += 1
        run.started_at = None
        del self.ends_at[running.id]
        return self._estimated(
            run.job.pending(
                self._max_runtime(run),
                preempted_by=preemptor,
                attained_service=run.run_s * run.job.gpus,
            )
        )

    def _estimated(self, job: PendingJob) -> PendingJob:
        """A waiting job without a time limit, with the run time estimated for it (if any)."""
        if self.estimator is None or job.max_runtime is not None:
            return job
        features = self.features.get(job.id)
        if features is None:
            made = features_of(self.runs[job.id].job)
            features = self.features[job.id] = self.distinct.setdefault(made, made)
        key = id(features)
        estimates = self.estimates
        if key in estimates:
            estimate = estimates[key]
        else:
            estimate = estimates[key] = self.estimator.estimate(features)
        if estimate is None or estimate.seconds == job.estimated_runtime:
            return job
        return evolve(job, estimated_runtime=estimate.seconds)

    def _max_runtime(self, run: JobRun) -> float | None:
        """What the core knows of a job's run time: all of it for oracles, else its limit."""
        if self.policy.oracle:
            return run.remaining_s
        return run.job.time_limit_s

    # -- fair share ------------------------------------------------------------------------------
    def _hold(self, job: RunningJob, sign: int) -> None:
        held = self.held.setdefault(job.tenant, [0.0, 0.0, 0.0])
        gpus = job.gpus
        held[0] += sign * gpus
        for r in job.replicas:
            held[1] += sign * r.cpu_millis
            held[2] += sign * r.memory
        self.allocated += sign * gpus
        if held[0] <= 0 and held[1] <= 0:
            del self.held[job.tenant]
        key = member_key(job.tenant, job.member)
        member_gpus = self.member_held[key] = self.member_held.get(key, 0) + sign * gpus
        if member_gpus <= 0:
            del self.member_held[key]

    def _members(
        self,
    ) -> tuple[dict[MemberKey, float], dict[MemberKey, float]]:
        """The members' standings (decayed usage per weight) and weights for the snapshot."""
        if self.policy.standing != "usage":
            return {}, {}
        weights = self.member_weights
        return {k: standing(u, weights.get(k, 1.0)) for k, u in self.member_usage.items()}, weights

    def _standings(self) -> dict[str, float]:
        kind = self.policy.standing
        if kind == "usage":
            return {t: standing(u, self.weights.get(t, 1.0)) for t, u in self.usage.items()}
        if kind == "share":
            gpus, cpu, memory = self.totals
            return {
                t: max(h[0] / gpus, h[1] / cpu, h[2] / memory) / self.weights.get(t, 1.0)
                for t, h in self.held.items()
            }
        return {}

    # -- recording -------------------------------------------------------------------------------
    def _record(self) -> None:
        series = self.series
        if series is None:
            return
        waiting = self.state.pending
        if (
            series.times
            and series.allocated[-1] == self.allocated
            and (series.waiting[-1] == waiting)
        ):
            return
        series.times.append(self.now)
        series.allocated.append(self.allocated)
        series.waiting.append(waiting)
        for tenant in self.held.keys() - series.by_tenant.keys():
            series.by_tenant[tenant] = [0] * (len(series.times) - 1)
        for tenant, points in series.by_tenant.items():
            held = self.held.get(tenant)
            points.append(int(held[0]) if held else 0)

    def _note_never_started(self) -> None:
        for wait in self.last_waits:
            run = self.runs.get(wait.job_id)
            if run is not None and run.finished_at is None:
                run.waiting_reason = wait.reason.code.value


def check_conservation(outcome: SimOutcome) -> None:
    """GPU-seconds served = the work kept + the work lost (to float rounding); the work kept by
    finished jobs is their trace duration (or what their time limit let them do); the
    allocation integral over time agrees with the runs."""
    served = sum(r.run_s * r.job.gpus for r in outcome.runs)
    kept = sum(r.done_s * r.job.gpus for r in outcome.runs)
    lost = sum(r.lost_s * r.job.gpus for r in outcome.runs)
    finished = [r for r in outcome.runs if r.finished_at is not None and not r.killed]
    finished_kept = sum(r.done_s * r.job.gpus for r in finished)
    durations = sum(r.job.duration_s * r.job.gpus for r in finished)
    tolerance = 1e-9 * max(served, 1.0) + 1e-6 * len(outcome.runs)
    problems = []
    if abs(finished_kept - durations) > tolerance:
        problems.append(f"finished jobs kept {finished_kept:.3f} GPU-s of {durations:.3f}")
    if abs(served - (kept + lost)) > tolerance:
        problems.append(f"served {served:.3f} GPU-s != kept {kept:.3f} + lost {lost:.3f}")
    if abs(served - outcome.allocated_gpu_s) > tolerance:
        problems.append(f"served {served:.3f} GPU-s != allocated {outcome.allocated_gpu_s:.3f}")
    if problems:
        raise ConservationError("; ".join(problems))
