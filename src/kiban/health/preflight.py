"""Preflight: before a multi-node gang starts, is each of its placed nodes fit to run it?

Pure: which nodes to ask their agent and which to judge from the conditions they reported a
moment ago, and the verdict on each node from the conditions it has. A node that fails (any
failing condition) is excluded from the job for a while and the gang is placed again; a node
without an agent passes with a note (nothing says it is bad). A node whose agent does not
answer is judged as its conditions would be shown (``health.preflight.unreachableAgent``): its
last report older than the agent timeout (its conditions Unknown, never healthy) fails it;
a recent one is judged on what it said, a healthy one passing with a note.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from kiban.domain.preflight_policy import UnreachableAgent
from kiban.health.conditions import Condition

AGENT_UNREACHABLE = "AgentUnreachable"
"""The reason of a preflight failure for an agent silent longer than the agent timeout."""


class PreflightSettingsError(ValueError):
    """A preflight setting out of its range; the message names the field."""


@dataclass(frozen=True, slots=True)
class PreflightSettings:
    """``enabled``: check gangs spanning at least ``min_nodes`` nodes before they start.
    ``timeout_s``: how long an agent's check may take. ``fresh_s``: a node whose agent reported
    this recently is judged on its stored conditions instead of asked. ``exclude_for_s``: how
    long a failed node stays excluded from the job (so the job is never unplaceable forever).
    """

    enabled: bool = True
    min_nodes: int = 2
    timeout_s: float = 5.0
    fresh_s: float = 5.0
    exclude_for_s: float = 1800.0

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise PreflightSettingsError(f"enabled: must be true or false, not {self.enabled!r}")
        if isinstance(self.min_nodes, bool) or not isinstance(self.min_nodes, int):
            raise PreflightSettingsError(
                f"min_nodes: must be a whole number, not {self.min_nodes!r}"
            )
        if self.min_nodes < 1:
            raise PreflightSettingsError(f"min_nodes: must be at least 1, not {self.min_nodes}")
        for name in ("timeout_s", "fresh_s", "exclude_for_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
                raise PreflightSettingsError(f"{name}: must be a number of seconds, not {value!r}")
            if name == "fresh_s" and value < 0:
                raise PreflightSettingsError(f"{name}: must be 0 seconds or more, not {value!r}")
            if name != "fresh_s" and value <= 0:
                raise PreflightSettingsError(f"{name}: must be more than 0 seconds, not {value!r}")


class Source(StrEnum):
    """Where a node's verdict came from."""

    STORED = "stored"  # conditions its agent reported within ``fresh_s``
    AGENT = "agent"  # its agent's /check, asked now
    NO_AGENT = "no-agent"  # no agent known: passes, with a note
    UNREACHABLE = "unreachable"  # its agent did not answer in time: judged on its last report


@dataclass(frozen=True, slots=True)
class NodeState:
    """What the store knows of a placed node's agent."""

    name: str
    agent_address: str
    reported_at: float | None


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    """One node's preflight: ``failing`` lists its failing conditions, ``refusal`` why it
    fails without one (its agent silent for too long); both empty: it passed."""

    node: str
    source: Source
    failing: tuple[Condition, ...] = ()
    note: str = ""
    refusal: str = ""

    @property
    def passed(self) -> bool:
        return not self.failing and not self.refusal


def needs_preflight(nodes: Iterable[str], settings: PreflightSettings) -> bool:
    """Whether a gang placed on ``nodes`` is checked before it starts."""
    return settings.enabled and len(set(nodes)) >= settings.min_nodes


def to_ask(states: Sequence[NodeState], now: float, settings: PreflightSettings) -> list[str]:
    """The nodes whose agent is asked now: those with an agent that has not reported within
    ``fresh_s`` (the others are judged on what they reported, or pass without an agent)."""
    return [
        s.name
        for s in states
        if s.agent_address and (s.reported_at is None or now - s.reported_at > settings.fresh_s)
    ]


def judge(
    node: str, source: Source, conditions: Iterable[Condition], note: str = ""
) -> NodeVerdict:
    """The verdict on a node from its conditions: it fails on any failing one (a warning-only
    condition such as GpuThermal, or an Unknown status, does not fail it)."""
    failing = tuple(sorted((c for c in conditions if c.failing), key=lambda c: c.type.value))
    return NodeVerdict(node, source, failing, note)


def judge_unreachable(
    state: NodeState,
    error: str,
    reported: Iterable[Condition],
    now: float,
    stale_after_s: float,
    rule: UnreachableAgent,
) -> NodeVerdict:
    """The verdict on a node whose agent did not answer (``error``): with ``failIfStale``, it
    fails when its last report is older than ``stale_after_s`` (or it never reported), and is
    judged on its ``reported`` conditions otherwise; with ``pass`` it passes with a note."""
    silent = f"its agent at {state.agent_address} did not answer: {error}"
    if rule is UnreachableAgent.PASS:
        return NodeVerdict(state.name, Source.UNREACHABLE, note=silent)
    if state.reported_at is None or now - state.reported_at > stale_after_s:
        last = (
            "it never reported"
            if state.reported_at is None
            else f"its last report is {now - state.reported_at:.0f} s old"
        )
        refusal = (
            f"AgentUnreachable ({silent}; {last}, more than the agent timeout of "
            f"{stale_after_s:g} s: its conditions are Unknown)"
        )
        return NodeVerdict(state.name, Source.UNREACHABLE, note=silent, refusal=refusal)
    age = now - state.reported_at
    note = f"{silent}; judged on its report of {age:.0f} s ago"
    return judge(state.name, Source.UNREACHABLE, reported, note)


def describe_failure(verdict: NodeVerdict) -> str:
    """``node-1: GpuEcc (EccUncorrectable: 2 volatile uncorrectable errors on GPU 0)``."""
    if verdict.refusal and not verdict.failing:
        return f"{verdict.node}: {verdict.refusal}"
    parts = [
        f"{c.type.value} ({c.reason}{': ' + c.message if c.message else ''})"
        for c in verdict.failing
    ]
    return f"{verdict.node}: {', '.join(parts)}"


def exclusions_after(
    stored: Sequence[dict[str, object]] | None,
    failed: Mapping[str, str],
    now: float,
    settings: PreflightSettings,
    healthy: Mapping[str, Mapping[str, int]] | None = None,
) -> list[dict[str, object]]:
    """A job's stored exclusions with the ``failed`` nodes added (node -> why) until
    ``now + exclude_for_s``, those already expired dropped, one entry per node. Each new entry
    records ``healthy``'s streaks of its node (``kiban.health.exclusions.healthy_streaks``), so
    that it ends early once the node has passed enough healthy checks since ``now``."""
    kept: dict[str, dict[str, object]] = {}
    for entry in stored or ():
        until = entry.get("until")
        if isinstance(until, int | float) and until > now:
            kept[str(entry["node"])] = dict(entry)
    for node, why in failed.items():
        kept[node] = {
            "node": node,
            "until": now + settings.exclude_for_s,
            "reason": why,
            "since": now,
            "streaks": dict((healthy or {}).get(node, {})),
        }
    return [kept[name] for name in sorted(kept)]


def failure_reason(verdict: NodeVerdict) -> str:
    """What an exclusion after a failed preflight says: its failing condition types (or
    ``AgentUnreachable``)."""
    if verdict.refusal and not verdict.failing:
        return AGENT_UNREACHABLE
    return ", ".join(c.type.value for c in verdict.failing)
