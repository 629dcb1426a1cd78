"""Fair share per member within a tenant, over simulated time (traces with a ``user`` column):
a member who used more waits behind a teammate who used less, and how a tenant's members split
its jobs changes nothing between tenants."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from sim_support import replay, runs_by_line, write_csv

from kiban.scheduler.decisions import Decisions
from kiban.scheduler.fair_tree import member_key
from kiban.scheduler.snapshot import Snapshot
from kiban.sim.engine import Simulator
from kiban.sim.policies import policy_named
from kiban.sim.run import SimOptions, prepare
from kiban.sim.traces import load_trace

HEADER = "submit_time,duration,gpus,tenant,user"
USERS = ("alice", "bob", "carol")


def test_a_member_who_used_more_waits_behind_a_teammate(tmp_path: Path) -> None:
    """Alice submits three hours of whole-cluster work, Bob one a little later: Bob's starts
    once Alice's first ends, not after all of hers (first come, first served would)."""
    rows = ["0,3600,4,vision,alice"] * 3 + ["10,3600,4,vision,bob"]  # lines 2 to 5
    report = replay(write_csv(tmp_path / "t.csv", rows, HEADER), gpus_per_node=4)
    runs = runs_by_line(report)
    starts = {
        line: -1.0 if run.first_start is None else run.first_start for line, run in runs.items()
    }
    assert starts[5] == 3600.0  # bob's, second
    assert sorted(s for line, s in starts.items() if line != 5) == [0.0, 7200.0, 10800.0]


def test_a_trace_without_users_replays_first_come_first_served(tmp_path: Path) -> None:
    rows = ["0,3600,4,vision,"] * 3 + ["10,3600,4,vision,"]
    report = replay(write_csv(tmp_path / "t.csv", rows, HEADER), gpus_per_node=4)
    assert runs_by_line(report)[5].first_start == 10800.0


def test_the_user_column_is_read_and_checked(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", ["0,60,1,vision,alice", "5,60,1,vision,"], HEADER)
    assert [r.user for r in load_trace(path)] == ["alice", None]


jobs_of_one_tenant = st.lists(
    st.tuples(
        st.sampled_from(USERS),
        st.integers(min_value=0, max_value=20_000),  # submit
        st.integers(min_value=60, max_value=7200),  # duration
    ),
    min_size=2,
    max_size=25,
)


def _replay_noting(rows: list[str], note: object) -> Simulator:
    with tempfile.TemporaryDirectory() as directory:
        path = write_csv(Path(directory) / "t.csv", rows, HEADER)
        prepared = prepare(SimOptions(path, nodes=1, gpus_per_node=4, rho=False))
    simulator = Simulator(
        prepared.jobs,
        prepared.cluster,
        prepared.queues,
        policy_named("kiban"),
        on_cycle=note,  # type: ignore[arg-type]
    )
    simulator.run()
    return simulator


@settings(max_examples=40, deadline=None)
@given(jobs_of_one_tenant)
def test_a_member_starts_only_when_no_waiting_teammate_used_less(
    jobs: list[tuple[str, int, int]],
) -> None:
    """Every job takes the whole cluster, so each cycle starts at most one: whenever one
    starts, its member's standing is the lowest of the members with a job waiting then."""
    rows = [f"{at},{duration},4,vision,{user}" for user, at, duration in jobs]
    starts: list[tuple[float, str, float, float]] = []

    def note(snapshot: Snapshot, decisions: Decisions) -> None:
        pending = {j.id: j for j in snapshot.pending}
        for admit in decisions.admitted:
            job = pending[admit.job_id]
            mine = snapshot.member_standings.get(member_key(job.tenant, job.member), 0.0)
            for other in snapshot.pending:
                if other.member != job.member:
                    theirs = snapshot.member_standings.get(
                        member_key(other.tenant, other.member), 0.0
                    )
                    starts.append((snapshot.now, job.id, mine, theirs))

    _replay_noting(rows, note)
    assert all(mine <= theirs for _now, _id, mine, theirs in starts), starts


@settings(max_examples=40, deadline=None)
@given(
    jobs_of_one_tenant,
    st.lists(st.integers(min_value=0, max_value=20_000), min_size=1, max_size=15),
    st.integers(min_value=60, max_value=7200),
    st.integers(min_value=60, max_value=7200),
)
def test_tenant_shares_do_not_depend_on_how_members_split_them(
    vision: list[tuple[str, int, int]], speech: list[int], vision_s: int, speech_s: int
) -> None:
    """Vision's jobs are all alike (1 GPU, ``vision_s``), as are speech's (2 GPUs): whichever
    of its members submitted each, every tenant's jobs start at the same times as when one
    member submitted them all, or none did."""

    def tenant_starts(users: list[str]) -> dict[str, list[float]]:
        rows = [
            f"{at},{vision_s},1,vision,{u}" for u, (_m, at, _d) in zip(users, vision, strict=True)
        ]
        rows += [f"{at},{speech_s},2,speech,sam" for at in speech]
        with tempfile.TemporaryDirectory() as directory:
            report = replay(write_csv(Path(directory) / "t.csv", rows, HEADER), gpus_per_node=4)
        result: dict[str, list[float]] = {"vision": [], "speech": []}
        for run in runs_by_line(report).values():
            assert run.first_start is not None
            result[run.job.tenant].append(run.first_start)
        return {tenant: sorted(times) for tenant, times in result.items()}

    split = tenant_starts([user for user, _at, _d in vision])
    assert split == tenant_starts(["alice"] * len(vision))
    assert split == tenant_starts([""] * len(vision))
