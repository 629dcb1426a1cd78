"""The node agent's loop: every interval, for each node it serves, read, check, report.

One pass for one node:
  1. read its GPUs (NVML or the readings directory) in a worker thread with a deadline; a read
     that hangs or fails gives a reading without NVML, so every check says Unknown;
  2. run every check at once, each with the same deadline; one that hangs is cut off and
     reported Unknown with reason ``CheckTimedOut``;
  3. keep the reading, the conditions and each check's duration (for ``/metrics``);
  4. send the report to the control plane and keep the reply's GPU allocations (metric labels);
     when several nodes are due together, their reports go in one batch;
  5. hand the conditions to the sinks (the Kubernetes Node writer).
The loop runs on an injected clock: tests call ``tick()`` after moving a manual clock.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kiban.clock import Clock
from kiban.health.checks import CHECKS, HealthReason, Verdict, conclude, judge
from kiban.health.conditions import CheckType, Condition, ConditionStatus
from kiban.health.deadline import TimedOut, call_all_with_deadline, call_with_deadline
from kiban.health.readings import NodeReading
from kiban.health.report import GpuAllocation, NodeHealthReply, NodeHealthReport
from kiban.health.sources import ReadingSource
from kiban.health.thresholds import HealthThresholds

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 30.0
DEFAULT_CHECK_TIMEOUT_S = 10.0

Judge = Callable[
    [
        CheckType,
        NodeReading,
        NodeReading | None,
        HealthThresholds,
        int | None,
        float,
        Mapping[CheckType, Condition],
    ],
    Condition,
]


class Reporter(Protocol):
    """Where reports go (the control plane); None back when it could not take one."""

    def report(self, report: NodeHealthReport) -> NodeHealthReply | None: ...

    def report_many(
        self, reports: Sequence[NodeHealthReport]
    ) -> Mapping[str, NodeHealthReply | None]: ...


class ConditionSink(Protocol):
    """Something else that wants each node's conditions (the Kubernetes Node writer)."""

    def write(self, node: str, conditions: Sequence[Condition], now: float) -> None: ...


@dataclass
class NodeState:
    """What the agent knows of one node between passes."""

    expected_gpus: int | None = None  # configured, or learned from the first healthy reading
    reading: NodeReading | None = None  # the latest reading
    previous: NodeReading | None = None  # the latest reading NVML answered (rise baselines)
    conditions: dict[CheckType, Condition] = field(default_factory=dict)
    allocations: list[GpuAllocation] = field(default_factory=list)
    last_xid: dict[str, int] = field(default_factory=dict)  # GPU UUID (or index) -> code
    next_due: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


def healthy_count(reading: NodeReading) -> int | None:
    """The GPU count a reading vouches for: NVML answered and every GPU answered."""
    if not reading.nvml_available or not reading.gpus:
        return None
    if any(gpu.lost or not gpu.responding for gpu in reading.gpus):
        return None
    return len(reading.gpus)


class NodeAgent:
    """Checks the nodes it serves; ``check(node)`` runs one pass now, ``tick()`` the due ones."""

    def __init__(
        self,
        nodes: Sequence[str],
        source: ReadingSource,
        clock: Clock,
        *,
        thresholds: HealthThresholds | None = None,
        expected_gpus: Mapping[str, int] | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        follow_reply_interval: bool = True,
        check_timeout_s: float = DEFAULT_CHECK_TIMEOUT_S,
        reporter: Reporter | None = None,
        sinks: Sequence[ConditionSink] = (),
        judge_check: Judge = judge,
    ) -> None:
        if not nodes:
            raise ValueError("the agent needs at least one node")
        self.nodes = list(dict.fromkeys(nodes))
        self.source = source
        self.clock = clock
        self.thresholds = thresholds or HealthThresholds()
        self.interval_s = interval_s
        self.follow_reply_interval = follow_reply_interval  # False: an interval set by hand
        self.check_timeout_s = check_timeout_s
        self.reporter = reporter
        self.sinks = list(sinks)
        self.judge_check = judge_check
        self.address = ""  # host:port of the agent's HTTP server, once it serves
        self.check_seconds: dict[CheckType, float] = {}
        self.state = {
            node: NodeState(expected_gpus=(expected_gpus or {}).get(node)) for node in self.nodes
        }

    def tick(self) -> list[NodeHealthReport]:
        """Run a pass for every node that is due; the reports of those passes, sent together
        when there are several."""
        now = self.clock.now()
        return self.check_many([node for node in self.nodes if self.state[node].next_due <= now])

    def check_many(self, nodes: Sequence[str]) -> list[NodeHealthReport]:
        """A pass for each of ``nodes`` now, their reports sent in one batch (one node's alone,
        on the per-node route)."""
        if len(nodes) < 2 or self.reporter is None:
            return [self.check(node) for node in nodes]
        # Due again together: timed from when the batch began, not from each node's own pass
        # (which would spread them apart by the passes' durations, one more tick each).
        began = self.clock.now()
        passes = [self._pass(node, began) for node in nodes]
        replies = self.reporter.report_many([report for report, _ in passes])
        for report, at in passes:
            node = report.reading.node
            self._take_reply(node, replies.get(node), began)
            self._write_sinks(node, report, at)
        return [report for report, _ in passes]

    def seconds_to_next(self) -> float:
        """How long until the next node is due (0: one is due now)."""
        due = min(state.next_due for state in self.state.values())
        return max(due - self.clock.now(), 0.0)

    def run(self, stop: threading.Event) -> None:
        """Pass after pass until ``stop`` is set; nothing a pass meets ends the loop."""
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # a bug in a pass must not stop the node's health reporting
                log.exception("a health pass failed")
            stop.wait(max(self.seconds_to_next(), 0.05))

    def check(self, node: str) -> NodeHealthReport:
        """One pass for ``node`` now: read, check, keep, report, write."""
        report, now = self._pass(node)
        if self.reporter is not None:
            self._take_reply(node, self.reporter.report(report), now)
        self._write_sinks(node, report, now)
        return report

    def _pass(self, node: str, due_from: float | None = None) -> tuple[NodeHealthReport, float]:
        """Read, check and keep: the report to send, and when the pass ran; the node is due
        again an interval after ``due_from`` (None: after this pass)."""
        state = self.state[node]
        with state.lock:
            now = self.clock.now()
            reading, failure = self._read(node, now)
            if state.expected_gpus is None:
                state.expected_gpus = healthy_count(reading)
            if failure is not None:  # the checks have nothing to judge
                verdict = Verdict(ConditionStatus.UNKNOWN, failure, reading.error)
                conditions = [conclude(c, verdict, now, state.conditions) for c in CHECKS]
            else:
                conditions = self._conditions(reading, state, now)
            state.reading = reading
            if reading.nvml_available:
                state.previous = reading
            state.conditions = {c.type: c for c in conditions}
            for gpu in reading.gpus:
                if gpu.xids:
                    state.last_xid[gpu.uuid or str(gpu.index)] = gpu.xids[-1].code
            state.next_due = (now if due_from is None else due_from) + self.interval_s
            report = NodeHealthReport(
                reading=reading,
                conditions=conditions,
                agent_address=self.address,
                interval_s=self.interval_s,
            )
        return report, now

    def _read(self, node: str, now: float) -> tuple[NodeReading, HealthReason | None]:
        """The node's reading stamped with ``now``; a read that hung or raised gives a reading
        without NVML and the reason every check is then Unknown for."""
        try:
            reading = call_with_deadline(
                lambda: self.source.read(node), self.check_timeout_s, f"reading {node}"
            )
        except TimedOut as exc:
            failed = NodeReading(node=node, taken_at=now, nvml_available=False, error=str(exc))
            return failed, HealthReason.CHECK_TIMED_OUT
        except Exception as exc:
            log.warning("reading %s failed: %s", node, exc)
            error = f"reading {node} failed: {type(exc).__name__}: {exc}"
            failed = NodeReading(node=node, taken_at=now, nvml_available=False, error=error)
            return failed, HealthReason.CHECK_FAILED
        return reading.model_copy(update={"node": node, "taken_at": now}), None

    def _conditions(self, reading: NodeReading, state: NodeState, now: float) -> list[Condition]:
        before = state.conditions
        calls = {
            check: functools.partial(
                self.judge_check,
                check,
                reading,
                state.previous,
                self.thresholds,
                state.expected_gpus,
                now,
                before,
            )
            for check in CHECKS
        }
        outcomes = call_all_with_deadline(calls, self.check_timeout_s)
        conditions = []
        for check, outcome in outcomes.items():
            self.check_seconds[check] = outcome.seconds
            if outcome.error is None and outcome.value is not None:
                conditions.append(outcome.value)
                continue
            if isinstance(outcome.error, TimedOut):
                verdict = Verdict(
                    ConditionStatus.UNKNOWN,
                    HealthReason.CHECK_TIMED_OUT,
                    f"{check.value} did not finish within {self.check_timeout_s:g} s",
                )
            else:
                log.error("check %s failed: %r", check.value, outcome.error)
                verdict = Verdict(
                    ConditionStatus.UNKNOWN,
                    HealthReason.CHECK_FAILED,
                    f"{check.value} failed: {outcome.error!r}",
                )
            conditions.append(conclude(check, verdict, now, before))
        return conditions

    def _take_reply(self, node: str, reply: NodeHealthReply | None, now: float) -> None:
        """Keep the reply's allocations (metric labels) and follow its interval."""
        if reply is None:
            return
        self.state[node].allocations = list(reply.allocations)
        if reply.interval_s <= 0 or not self.follow_reply_interval:
            return
        if reply.interval_s != self.interval_s:
            log.info("check interval now %g s (the control plane's)", reply.interval_s)
            self.interval_s = reply.interval_s
        # ``now``: what the pass timed the node from (several may have run before this reply)
        self.state[node].next_due = now + reply.interval_s

    def _write_sinks(self, node: str, report: NodeHealthReport, now: float) -> None:
        for sink in self.sinks:
            try:
                sink.write(node, report.conditions, now)
            except Exception as exc:
                log.warning("conditions of %s not written: %s", node, exc)
