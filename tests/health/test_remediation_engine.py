"""The remediation engine: tables of single decisions, and properties over simulated time.

The simulation keeps what the control plane keeps (conditions with streaks and transition
times, cordons with their source, the actions taken) and applies each decision as
``kiban.services.node_health`` does; hypothesis draws the fault sequences.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from kiban.domain.remediation import HealthPolicyDecl
from kiban.health.conditions import CheckType, ConditionStatus
from kiban.health.remediation import (
    Breaker,
    ConditionState,
    CordonSource,
    Decision,
    NodeHealth,
    Outcome,
    PastAction,
    RemediationKind,
    decide,
    decide_batch,
)
from kiban.testing import ManualClock

WINDOW = 600.0


def policy(max_nodes: int = 2, k: int = 3, factor: int = 2) -> HealthPolicyDecl:
    return HealthPolicyDecl.model_validate(
        {
            "circuitBreaker": {"maxNodes": max_nodes, "maxPercent": 100, "windowSeconds": WINDOW},
            "returnToService": {"healthyChecks": k},
            "flapDamping": {"windowSeconds": 3600, "factor": factor},
        }
    )


def healthy(at: float, streak: int = 1) -> dict[CheckType, ConditionState]:
    return {c: ConditionState(c, ConditionStatus.FALSE, streak, at) for c in CheckType}


def test_default_rules_drain_cordon_or_record() -> None:
    by_check = {r.condition.value: r.action.value for r in HealthPolicyDecl().rules}
    assert by_check == {
        "GpuBus": "drain",
        "GpuEcc": "drain",
        "GpuXid": "drain",
        "GpuRowRemap": "drain",
        "GpuCount": "drain",
        "GpuFabricManager": "drain",
        "GpuPcie": "cordon",
        "GpuNvlink": "cordon",
        "AllreduceDegraded": "cordon",
        "GpuThermal": "none",
    }


def test_a_fault_decides_its_rules_action_naming_rule_check_and_reading() -> None:
    conditions = healthy(0.0)
    conditions[CheckType.GPU_ECC] = ConditionState(
        CheckType.GPU_ECC, ConditionStatus.TRUE, 1, 10.0, "2 DBE on GPU 3"
    )
    node = NodeHealth("n1", conditions, CordonSource.NONE)
    breaker = Breaker(policy().circuit_breaker, 10)
    (decision,) = decide(node, policy(), breaker, 10.0)
    assert (decision.kind, decision.outcome, decision.rule, decision.check) == (
        RemediationKind.DRAIN,
        Outcome.PENDING,
        "gpu-ecc",
        CheckType.GPU_ECC,
    )
    assert decision.reading == "2 DBE on GPU 3"
    assert breaker.acted == {"n1": 10.0}


def test_unknown_status_matches_no_default_rule() -> None:
    conditions = healthy(0.0)
    conditions[CheckType.GPU_ECC] = ConditionState(
        CheckType.GPU_ECC, ConditionStatus.UNKNOWN, 1, 10.0
    )
    breaker = Breaker(policy().circuit_breaker, 10)
    assert decide(NodeHealth("n1", conditions, CordonSource.NONE), policy(), breaker, 10.0) == []


def test_breaker_limit_is_the_smaller_of_count_and_percent_and_at_least_one() -> None:
    decl = HealthPolicyDecl.model_validate(
        {"circuitBreaker": {"maxNodes": 10, "maxPercent": 10}}
    ).circuit_breaker
    assert [decl.limit(n) for n in (3, 10, 50, 1000)] == [1, 1, 5, 10]


# -- simulation --------------------------------------------------------------------------------


@dataclass
class SimNode:
    name: str
    conditions: dict[CheckType, ConditionState]
    source: CordonSource = CordonSource.NONE
    actions: list[PastAction] = field(default_factory=list)
    # for the return-to-service property: consecutive False reports per check
    healthy_runs: dict[CheckType, int] = field(default_factory=dict)


@dataclass
class Sim:
    policy: HealthPolicyDecl
    nodes: dict[str, SimNode]
    clock: ManualClock
    taken: list[Decision] = field(default_factory=list)
    taken_at: list[float] = field(default_factory=list)

    def breaker(self) -> Breaker:
        breaker = Breaker(self.policy.circuit_breaker, len(self.nodes))
        for node in self.nodes.values():
            for action in node.actions:
                if action.kind.disruptive and action.outcome in (Outcome.DONE, Outcome.PENDING):
                    breaker.record(node.name, max(breaker.acted.get(node.name, 0.0), action.at))
        return breaker

    def report(self, names: list[str], faults: dict[str, set[CheckType]]) -> None:
        """Each node reports (faults or healthy); then decisions for the batch at once."""
        now = self.clock.now()
        for name in names:
            node = self.nodes[name]
            for check in CheckType:
                status = ConditionStatus.TRUE if check in faults[name] else ConditionStatus.FALSE
                old = node.conditions[check]
                if old.status is status:
                    new = ConditionState(check, status, old.streak + 1, old.last_transition_time)
                else:
                    new = ConditionState(check, status, 1, now)
                node.conditions[check] = new
                runs = node.healthy_runs.get(check, 0)
                node.healthy_runs[check] = runs + 1 if status is ConditionStatus.FALSE else 0
        views = [
            NodeHealth(
                n,
                dict(self.nodes[n].conditions),
                self.nodes[n].source,
                tuple(self.nodes[n].actions),
            )
            for n in names
        ]
        for decision in decide_batch(views, self.policy, self.breaker(), now):
            self.apply(decision, now)

    def apply(self, decision: Decision, now: float) -> None:
        node = self.nodes[decision.node]
        node.actions.append(
            PastAction(decision.kind, decision.rule, decision.check, decision.outcome, now)
        )
        self.taken.append(decision)
        self.taken_at.append(now)
        if decision.outcome is Outcome.SUPPRESSED:
            return
        if decision.kind.takes_out and node.source is CordonSource.NONE:
            node.source = CordonSource.REMEDIATION
        if decision.kind is RemediationKind.UNCORDON:
            assert node.source is CordonSource.REMEDIATION
            node.source = CordonSource.NONE


CHECKS = st.sampled_from([CheckType.GPU_ECC, CheckType.GPU_PCIE, CheckType.GPU_XID])
STEP = st.tuples(
    st.floats(min_value=1.0, max_value=400.0),  # time to the next reports
    st.lists(  # (node index, faults) reported together: a burst when several
        st.tuples(st.integers(0, 7), st.sets(CHECKS, max_size=2)), min_size=1, max_size=8
    ),
)


def new_sim(p: HealthPolicyDecl, admin: set[int]) -> Sim:
    clock = ManualClock()
    nodes = {
        f"n{i}": SimNode(
            f"n{i}",
            healthy(clock.now()),
            CordonSource.ADMIN if i in admin else CordonSource.NONE,
        )
        for i in range(8)
    }
    return Sim(p, nodes, clock)


def run(sim: Sim, steps: list[tuple[float, list[tuple[int, set[CheckType]]]]]) -> None:
    for dt, reports in steps:
        sim.clock.advance(dt)
        batch: dict[str, set[CheckType]] = {}
        for index, faults in reports:
            batch[f"n{index}"] = set(faults)  # a node reports once per batch
        sim.report(list(batch), batch)


@settings(max_examples=150, deadline=None)
@given(
    max_nodes=st.integers(1, 4),
    admin=st.sets(st.integers(0, 7), max_size=3),
    steps=st.lists(STEP, min_size=1, max_size=40),
)
def test_the_breaker_bound_holds_for_any_fault_sequence(
    max_nodes: int, admin: set[int], steps: list[tuple[float, list[tuple[int, set[CheckType]]]]]
) -> None:
    sim = new_sim(policy(max_nodes=max_nodes), admin)
    run(sim, steps)
    acted = [
        (at, d.node)
        for d, at in zip(sim.taken, sim.taken_at, strict=True)
        if d.kind.disruptive and d.outcome is not Outcome.SUPPRESSED
    ]
    for t, _ in acted:
        in_window = {node for at, node in acted if t - WINDOW < at <= t}
        assert len(in_window) <= max_nodes


@settings(max_examples=150, deadline=None)
@given(
    k=st.integers(1, 4),
    factor=st.integers(1, 3),
    admin=st.sets(st.integers(0, 7), max_size=3),
    steps=st.lists(STEP, min_size=1, max_size=40),
)
def test_no_return_before_k_healthy_checks_and_admin_cordons_untouched(
    k: int,
    factor: int,
    admin: set[int],
    steps: list[tuple[float, list[tuple[int, set[CheckType]]]]],
) -> None:
    sim = new_sim(policy(max_nodes=8, k=k, factor=factor), admin)
    checks: list[tuple[str, float]] = []
    for dt, reports in steps:
        sim.clock.advance(dt)
        batch = {f"n{i}": set(f) for i, f in reports}
        before = len(sim.taken)
        sim.report(list(batch), batch)
        for decision in sim.taken[before:]:
            node = sim.nodes[decision.node]
            if decision.kind is RemediationKind.UNCORDON:
                assert int(decision.node[1:]) not in admin
                # every check at fault since the cordon has k (or more) healthy reports in a row
                for check in CheckType:
                    condition = node.conditions[check]
                    assert condition.status is ConditionStatus.FALSE or check not in {
                        a.check for a in node.actions if a.kind.takes_out
                    }
                causes = {
                    a.check
                    for a in node.actions[:-1]
                    if a.kind.takes_out and a.outcome is not Outcome.SUPPRESSED
                }
                for check in causes:
                    assert check is not None
                    assert node.healthy_runs[check] >= k
                checks.append((decision.node, sim.clock.now()))
    for i in admin:
        assert sim.nodes[f"n{i}"].source is CordonSource.ADMIN


def test_a_burst_is_bounded_exactly_as_the_same_faults_one_by_one() -> None:
    p = policy(max_nodes=3)
    burst = new_sim(p, set())
    burst.report([f"n{i}" for i in range(8)], {f"n{i}": {CheckType.GPU_ECC} for i in range(8)})
    single = new_sim(p, set())
    for i in range(8):
        single.report([f"n{i}"], {f"n{i}": {CheckType.GPU_ECC}})
    outcomes = [(d.node, d.outcome) for d in burst.taken]
    assert outcomes == [(d.node, d.outcome) for d in single.taken]
    assert [o for _, o in outcomes].count(Outcome.PENDING) == 3
    assert [o for _, o in outcomes].count(Outcome.SUPPRESSED) == 5


def test_flap_damping_multiplies_the_healthy_checks_needed() -> None:
    sim = new_sim(policy(k=2, factor=3), set())

    def report(faults: set[CheckType]) -> None:
        sim.clock.advance(30)
        sim.report(["n0"], {"n0": faults})

    report({CheckType.GPU_ECC})
    report(set())
    report(set())
    assert sim.nodes["n0"].source is CordonSource.NONE  # back after 2
    report({CheckType.GPU_ECC})
    for _ in range(5):
        report(set())
        assert sim.nodes["n0"].source is CordonSource.REMEDIATION
    report(set())
    assert sim.nodes["n0"].source is CordonSource.NONE  # back after 2 x 3
    (last,) = [d for d in sim.taken if d.kind is RemediationKind.UNCORDON][-1:]
    assert "flap damping" in last.detail
