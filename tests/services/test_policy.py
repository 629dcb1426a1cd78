"""Applying the cluster policy: versions, queues, events, drain plans, and all or nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from kiban.domain.cluster import parse_cluster_config
from kiban.executors.base import NodeInfo
from kiban.platform import Platform, build_platform
from kiban.scheduler.snapshot import DEFAULT_FLAVOR
from kiban.services import jobs, nodes, policy
from kiban.services.auth import Principal
from kiban.services.errors import Conflict, Forbidden, InvalidInput
from kiban.services.policy import DrainStep, apply_policy
from kiban.services.queue_status import queue_statuses
from kiban.store.models import Event, Job, PolicyVersion, Queue, Tenant
from kiban.testing import FakeExecutor, ManualClock, manifest
from kiban.testing.platform_jobs import submit_to_platform

ADMIN = Principal(name="admin", tenant=None, is_admin=True)
ALICE = Principal(name="alice", tenant="vision", is_admin=False)


def gpu_node(name: str, product: str, block: str) -> NodeInfo:
    labels = {
        "gpu.product": product,
        "kubernetes.io/hostname": name,
        "oci.oraclecloud.com/rdma.local_block_id": block,
    }
    return NodeInfo(name=name, gpus=4, cpu_millis=16000, memory=64 * 2**30, labels=labels)


NODES = [
    gpu_node("h100-0", "H100", "b1"),
    gpu_node("h100-1", "H100", "b1"),
    gpu_node("a100-0", "A100", "b2"),
]


def policy_doc(**queue: Any) -> dict[str, Any]:
    """Two flavors, a cohort, a vision queue (fields replaced by ``queue``) and a speech queue."""
    vision: dict[str, Any] = {
        "name": "vision",
        "tenant": "vision",
        "cohort": "research",
        "quota": {"h100": {"gpu": 4}, "a100": {"gpu": 4}},
        "strategy": "BestEffortFIFO",
    }
    vision.update(queue)
    return {
        "flavors": [
            {"name": "h100", "nodeLabels": {"gpu.product": "H100"}},
            {"name": "a100", "nodeLabels": {"gpu.product": "A100"}},
        ],
        "cohorts": [{"name": "research"}],
        "queues": [
            {"name": "default", "quota": {"a100": {"gpu": 0}}},
            {k: v for k, v in vision.items() if v is not None},
            {"name": "speech", "tenant": "speech", "cohort": "research"},
        ],
        "priorityClasses": [
            {"name": "batch", "value": 10},
            {"name": "prod", "value": 100, "default": True, "minRuntime": "10m"},
        ],
        "topology": {
            "levels": [
                {"name": "local_block", "label": "oci.oraclecloud.com/rdma.local_block_id"},
                {"name": "host", "label": "kubernetes.io/hostname"},
            ]
        },
    }


@pytest.fixture
def gpus(tmp_path: Path, db_url: str, clock: ManualClock) -> Iterator[Platform]:
    """A platform on three labelled 4-GPU nodes (two H100, one A100), with the built-in policy."""
    executor = FakeExecutor(NODES, clock=clock)
    built = build_platform(home=tmp_path / "home", db_url=db_url, executor=executor, clock=clock)
    yield built
    built.close()


def apply(platform: Platform, document: dict[str, Any], **kwargs: Any) -> policy.PolicyChange:
    with platform.sessions() as session:
        change = apply_policy(session, document, actor="admin", at=platform.clock.now(), **kwargs)
        session.commit()
    platform.refresh_policy()
    return change


def stored(platform: Platform) -> dict[str, Any]:
    """Everything applying a policy may write."""
    with platform.sessions() as session:
        return {
            "versions": [(v.version, v.document) for v in session.scalars(select(PolicyVersion))],
            "queues": sorted(
                (q.name, q.tenant, q.cohort, str(q.quota), q.strategy, q.fair_share_weight)
                for q in session.scalars(select(Queue))
            ),
            "tenants": sorted(session.scalars(select(Tenant.name))),
            "events": len(session.scalars(select(Event.id)).all()),
        }


def events_of(platform: Platform, kind: str, name: str) -> list[tuple[str, str, str]]:
    with platform.sessions() as session:
        query = select(Event).where(Event.object_kind == kind, Event.object_name == name)
        return [(e.type, e.reason, e.message) for e in session.scalars(query.order_by(Event.id))]


def submit_to_queue(platform: Platform, queue: str, gpu: int = 4, **spec: Any) -> str:
    """Submit a job of one replica of ``gpu`` GPUs to ``queue`` as the admin; its id."""
    return submit_to_platform(platform, manifest(queue=queue, gpu=gpu, command=["t"], **spec))


def job_state(platform: Platform, job_id: str) -> str:
    with platform.sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job.state


# -- versions -------------------------------------------------------------------------------------


def test_a_new_store_starts_with_the_built_in_policy(platform: Platform) -> None:
    with platform.sessions() as session:
        record = policy.current_record(session)
        assert (record.version, record.document) == (1, {})
        assert record.created_by == "kiban up (built-in policy)"
        assert [q.name for q in session.scalars(select(Queue))] == ["default"]
    assert platform.policy.priority(None) is not None
    assert [e[1] for e in events_of(platform, "Policy", "cluster")] == ["Applied"]


def test_applying_a_policy_writes_a_version_its_queues_and_their_tenants(gpus: Platform) -> None:
    change = apply(gpus, policy_doc())
    assert (change.version, change.changed) == (2, True)
    assert change.created == ("vision", "speech") and change.updated == ("default",)
    with gpus.sessions() as session:
        row = session.get(PolicyVersion, 2)
        assert row is not None and row.document == policy_doc() and row.created_by == "admin"
        vision = session.get(Queue, "vision")
        assert vision is not None
        assert (vision.tenant, vision.cohort, vision.strategy) == (
            "vision",
            "research",
            "BestEffortFIFO",
        )
        assert vision.quota == {"h100": {"gpu": 4}, "a100": {"gpu": 4}}
        assert vision.nominal == {"h100": 4, "a100": 4}
        assert (vision.borrowing, vision.lending) == ({}, {})
        speech = session.get(Queue, "speech")
        assert speech is not None and speech.quota is None
        assert session.get(Tenant, "speech") is not None
    assert events_of(gpus, "Queue", "vision") == [
        (
            "Normal",
            "Created",
            "queue vision: quota h100:4 a100:4, cohort research, BestEffortFIFO (policy version 2)",
        )
    ]
    (applied,) = events_of(gpus, "Policy", "cluster")[1:]
    assert applied[:2] == ("Normal", "Applied")
    assert "policy version 2 applied" in applied[2] and "(by admin)" in applied[2]


def test_the_same_document_again_is_not_a_new_version(gpus: Platform) -> None:
    apply(gpus, policy_doc())
    before = stored(gpus)
    change = apply(gpus, policy_doc())
    assert (change.version, change.changed) == (2, False)
    assert "already the current one" in change.message
    assert stored(gpus) == before


def test_a_change_updates_only_the_queues_it_changes(gpus: Platform) -> None:
    apply(gpus, policy_doc())
    change = apply(
        gpus,
        policy_doc(
            quota={"h100": {"gpu": 8}},
            fairShareWeight=2,
            borrowingLimit={"h100": {"gpu": 2}},
            lendingLimit={"h100": {"gpu": 1}},
        ),
    )
    assert (change.version, change.created, change.updated, change.removed) == (
        3,
        (),
        ("vision",),
        (),
    )
    with gpus.sessions() as session:
        vision = session.get(Queue, "vision")
        assert vision is not None
        assert (vision.nominal, vision.fair_share_weight) == ({"h100": 8}, 2.0)
        assert (vision.borrowing, vision.lending) == ({"h100": 2}, {"h100": 1})
        assert vision.borrowing_limit == {"h100": {"gpu": 2}}
    assert [e[1] for e in events_of(gpus, "Queue", "vision")] == ["Created", "Updated"]
    assert [e[1] for e in events_of(gpus, "Queue", "speech")] == ["Created"]


def test_the_current_policy_and_its_cache(gpus: Platform) -> None:
    cache = policy.PolicyCache()
    with gpus.sessions() as session:
        first = cache.get(session)
        assert cache.get(session) is first  # not parsed again
    apply(gpus, policy_doc())
    with gpus.sessions() as session:
        assert policy.policy_generation(session) == 2
        current = cache.get(session)
        assert current is not first
        assert current == policy.current_policy(session)
        assert current.flavor_names == ("h100", "a100")


# -- refusals: nothing is written ------------------------------------------------------------------

# (case id, document, the error, a part of its message)
REFUSED: list[tuple[str, Any, type[Exception], str]] = [
    ("not-a-mapping", ["queues"], InvalidInput, "a policy is a mapping"),
    ("unknown-key", {**policy_doc(), "quotas": {}}, InvalidInput, "quotas: unknown field"),
    (
        "gpu-quota-with-flavors",
        policy_doc(quota={"gpu": 8}),
        InvalidInput,
        "queues[1].quota: this policy declares flavors",
    ),
    (
        "non-json-value",
        {"queues": [{"name": "q", "fairShareWeight": float("nan")}]},
        InvalidInput,
        "queues[0].fairShareWeight",
    ),
    (
        "flavor-no-node-has",
        {
            **policy_doc(),
            "flavors": [
                *policy_doc()["flavors"],
                {"name": "b200", "nodeLabels": {"gpu.product": "B200"}},
            ],
        },
        Conflict,
        "flavors[2]: flavor b200 (gpu.product=B200) matches none of the 3 nodes",
    ),
]


@pytest.mark.parametrize(
    ("document", "error", "message"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_a_refused_policy_changes_nothing(
    gpus: Platform, document: Any, error: type[Exception], message: str
) -> None:
    apply(gpus, policy_doc())
    before = stored(gpus)
    with gpus.sessions() as session, pytest.raises(error) as caught:
        apply_policy(session, document, actor="admin", at=gpus.clock.now())
    assert message in str(caught.value)
    assert stored(gpus) == before


def test_a_flavor_is_checked_against_nodes_only_when_they_are_known(gpus: Platform) -> None:
    document = {"flavors": [{"name": "b200", "nodeLabels": {"gpu.product": "B200"}}]}
    with pytest.raises(Conflict):
        apply(gpus, document)
    assert apply(gpus, document, nodes_known=False).changed


def test_a_queue_with_unfinished_jobs_is_not_removed(gpus: Platform) -> None:
    apply(gpus, policy_doc())
    job_id = submit_to_queue(gpus, "speech")
    without_speech = policy_doc()
    without_speech["queues"] = without_speech["queues"][:2]
    before = stored(gpus)
    with pytest.raises(Conflict, match="queue speech is not in the policy but has 1 unfinished"):
        apply(gpus, without_speech)
    assert stored(gpus) == before
    with gpus.sessions() as session:
        jobs.cancel(session, ADMIN, job_id, at=gpus.clock.now())
        session.commit()
    change = apply(gpus, without_speech)
    assert change.removed == ("speech",)
    with gpus.sessions() as session:
        assert session.get(Queue, "speech") is None
        assert session.get(Job, job_id) is not None  # finished jobs keep their history
    assert events_of(gpus, "Queue", "speech")[-1][:2] == ("Normal", "Removed")


def test_a_queue_with_unfinished_jobs_keeps_its_tenant(gpus: Platform) -> None:
    apply(gpus, policy_doc())
    submit_to_queue(gpus, "vision")
    with pytest.raises(Conflict, match=r"queues\[1\].tenant: queue vision has 1 unfinished"):
        apply(gpus, policy_doc(tenant="speech"))
    assert apply(gpus, policy_doc(strategy="StrictFIFO")).updated == ("vision",)


def test_a_concurrent_change_is_a_conflict(gpus: Platform, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two admins apply at once: the second to write its version gets a 409, and writes nothing."""
    original = policy.latest_record

    def read_then_lose_the_race(session: Any) -> policy.PolicyRecord | None:
        record = original(session)
        with gpus.sessions() as other:  # another admin's apply commits meanwhile
            version = (record.version if record else 0) + 1
            other.add(PolicyVersion(version=version, document={}, created_at=0.0, created_by="bob"))
            other.commit()
        return record

    monkeypatch.setattr(policy, "latest_record", read_then_lose_the_race)
    with pytest.raises(Conflict, match="changed by someone else"):
        apply(gpus, policy_doc())
    monkeypatch.undo()
    with gpus.sessions() as session:
        assert session.get(Queue, "vision") is None
        assert policy.current_record(session).created_by == "bob"


def test_only_admins_change_the_policy(gpus: Platform) -> None:
    with gpus.sessions() as session:
        with pytest.raises(Forbidden):
            policy.change_policy(session, ALICE, policy_doc(), at=gpus.clock.now())
        with pytest.raises(Forbidden):
            policy.list_versions(session, ALICE)


# -- quotas below use: accepted, with a drain plan -------------------------------------------------


def running_h100_job(platform: Platform, queue: str, gpu: int) -> str:
    """A job running on an H100 node (the A100 node is cordoned while it is placed)."""
    job_id = submit_to_queue(platform, queue, gpu=gpu)
    with platform.sessions() as session:
        nodes.cordon(session, ADMIN, "a100-0", at=platform.clock.now())
        session.commit()
    platform.loop.run_once()
    with platform.sessions() as session:
        nodes.uncordon(session, ADMIN, "a100-0", at=platform.clock.now())
        session.commit()
        (node,) = {r.node for r in jobs.replicas_of(session, session.get_one(Job, job_id))}
    assert job_state(platform, job_id) == "Running" and node.startswith("h100-")
    return job_id


@pytest.mark.parametrize(
    ("vision", "drain"),
    [
        # Not in a cohort: use above the nominal quota is drained.
        (
            {"cohort": None, "quota": {"h100": {"gpu": 2}}},
            [DrainStep("vision", "h100", 4, 2)],
        ),
        # A flavor dropped from the quota: all of its use is drained.
        ({"cohort": None, "quota": {"a100": {"gpu": 4}}}, [DrainStep("vision", "h100", 4, 0)]),
        # In a cohort where no queue lends h100: a borrowing limit lets it borrow, but there is
        # nothing to borrow; without a limit, the same. Use above nominal is lent by no one.
        (
            {"quota": {"h100": {"gpu": 1}}, "borrowingLimit": {"h100": {"gpu": 2}}},
            [DrainStep("vision", "h100", 4, 1, cohort="research")],
        ),
        ({"quota": {"h100": {"gpu": 1}}}, [DrainStep("vision", "h100", 4, 1, cohort="research")]),
        # Enough quota: nothing to drain.
        ({"cohort": None, "quota": {"h100": {"gpu": 4}}}, []),
        # No quota: no limit.
        ({"cohort": None, "quota": None}, []),
    ],
    ids=[
        "below-use",
        "flavor-dropped",
        "borrowing-limit-nobody-lends",
        "cohort-nobody-lends",
        "enough",
        "no-quota",
    ],
)
def test_a_quota_below_use_is_accepted_with_a_drain_plan(
    gpus: Platform, vision: dict[str, Any], drain: list[DrainStep]
) -> None:
    apply(gpus, policy_doc(quota={"h100": {"gpu": 8}}))
    job_id = running_h100_job(gpus, "vision", gpu=4)
    change = apply(gpus, policy_doc(**vision))
    assert list(change.drain) == drain
    assert job_state(gpus, job_id) == "Running"  # the policy change preempts nothing itself
    warnings = [e for e in events_of(gpus, "Queue", "vision") if e[1] == "QuotaBelowUsage"]
    assert len(warnings) == len(drain)
    for step, (kind, _, message) in zip(drain, warnings, strict=True):
        assert kind == "Warning"
        assert str(step) in message
    if drain:
        assert "drain plan: queue vision uses 4 h100 GPUs" in change.message
        assert events_of(gpus, "Policy", "cluster")[-1][0] == "Warning"
    with gpus.sessions() as session:  # kiban queues agrees: what is not lent is over quota
        statuses = queue_statuses(session, ADMIN, policy.current_policy(session), 0.0)
        (status,) = [s for s in statuses if s.queue.name == "vision"]
        h100 = next(f for f in status.flavors if f.flavor == "h100")
        assert (h100.used, h100.borrowed, h100.over_quota) == (
            4,
            0,
            sum(step.over_quota for step in drain),
        )


def with_speech(document: dict[str, Any], **speech: Any) -> dict[str, Any]:
    queues = [dict(q, **speech) if q["name"] == "speech" else q for q in document["queues"]]
    return {**document, "queues": queues}


def test_what_a_lender_of_the_cohort_covers_is_borrowed_and_the_rest_reclaimable(
    gpus: Platform,
) -> None:
    apply(gpus, policy_doc(quota={"h100": {"gpu": 8}}))
    running_h100_job(gpus, "vision", gpu=4)
    # speech lends 4 h100: the 3 vision uses beyond its quota of 1 are borrowed, nothing drains
    vision_cut = policy_doc(quota={"h100": {"gpu": 1}})
    change = apply(gpus, with_speech(vision_cut, quota={"h100": {"gpu": 4}}))
    assert change.drain == ()
    # speech lends 2: 1 is over quota, and speech takes it back by preemption when it needs it
    change = apply(gpus, with_speech(vision_cut, quota={"h100": {"gpu": 2}}))
    assert list(change.drain) == [
        DrainStep("vision", "h100", 4, 3, cohort="research", reclaimable=True)
    ]
    reclaim = "a queue of cohort research that needs its own h100 quota takes them back by "
    assert reclaim + "preemption" in change.message


def test_the_drain_plan_says_when_by_the_jobs_max_runtime(gpus: Platform) -> None:
    apply(gpus, policy_doc(cohort=None, quota={"h100": {"gpu": 8}}))
    started = gpus.clock.now()
    short = submit_to_queue(gpus, "vision", gpu=2, maxRuntime="1h")
    long = submit_to_queue(gpus, "vision", gpu=2, maxRuntime="3h")
    gpus.loop.run_once()
    assert {job_state(gpus, short), job_state(gpus, long)} == {"Running"}
    # 1 over quota: the first job to end gives it back, within the hour
    (step,) = apply(gpus, policy_doc(cohort=None, quota={"h100": {"gpu": 3}})).drain
    assert (step.over_quota, step.by) == (1, pytest.approx(started + 3600, abs=5))
    # 3 over quota: both must end, within three hours
    (step,) = apply(gpus, policy_doc(cohort=None, quota={"h100": {"gpu": 1}})).drain
    assert (step.over_quota, step.by) == (3, pytest.approx(started + 3 * 3600, abs=5))
    assert "its jobs' maxRuntime gives them back by " in str(step)


def test_the_drain_plan_says_what_happens() -> None:
    step = DrainStep("vision", "h100", 12, 8)
    assert str(step) == (
        "queue vision uses 12 h100 GPUs, 4 more than the 8 the policy now lets it use: its "
        "running jobs keep running; new h100 work waits until its use is back within 8; "
        "otherwise they come back as its jobs end (no maxRuntime says when)"
    )
    in_cohort = DrainStep("vision", "h100", 4, 1, cohort="research")
    assert str(in_cohort).startswith(
        "queue vision uses 4 h100 GPUs, 3 more than the 1 the policy now lets it use (its quota "
        "and what cohort research can lend it now): "
    )


# -- POST /queues: one more queue, a new version ---------------------------------------------------


def test_adding_a_queue_is_a_new_version(gpus: Platform) -> None:
    apply(gpus, policy_doc())
    with gpus.sessions() as session:
        entry = {"name": "nlp", "tenant": "speech", "quota": {"a100": {"gpu": 2}}}
        queue = policy.add_queue(session, ADMIN, entry, at=gpus.clock.now())
        session.commit()
        assert queue.nominal == {"a100": 2}
        record = policy.current_record(session)
    assert record.version == 3
    assert record.document["queues"][-1] == entry
    assert record.document["flavors"] == policy_doc()["flavors"]


@pytest.mark.parametrize(
    ("entry", "error", "field_or_message"),
    [
        ({"name": "nlp", "tenant": "speech", "quota": {"gpu": 2}}, InvalidInput, "quota"),
        (
            {"name": "nlp", "tenant": "speech", "quota": {"tpu": {"gpu": 2}}},
            InvalidInput,
            "quota.tpu",
        ),
        ({"name": "nlp", "tenant": "nobody"}, InvalidInput, "tenant"),
        ({"name": "NLP", "tenant": "speech"}, InvalidInput, "name"),
        ({"name": "vision", "tenant": "vision"}, Conflict, "queue vision already exists"),
    ],
)
def test_adding_a_bad_queue_names_the_field_in_the_entry(
    gpus: Platform, entry: dict[str, Any], error: type[Exception], field_or_message: str
) -> None:
    apply(gpus, policy_doc())
    before = stored(gpus)
    with gpus.sessions() as session, pytest.raises(error) as caught:
        policy.add_queue(session, ADMIN, entry, at=gpus.clock.now())
    if isinstance(caught.value, InvalidInput):
        assert [p.field for p in caught.value.problems] == [field_or_message]
    else:
        assert field_or_message in str(caught.value)
    assert stored(gpus) == before


def test_adding_a_queue_to_the_built_in_policy_keeps_the_default_queue(platform: Platform) -> None:
    with platform.sessions() as session:
        policy.add_queue(session, ADMIN, {"name": "q", "tenant": "default"}, at=0.0)
        session.commit()
        assert sorted(session.scalars(select(Queue.name))) == ["default", "q"]


# -- kiban up --config ---------------------------------------------------------------------------


def start(home: Path, db_url: str, clock: ManualClock, config: dict[str, Any] | None) -> Platform:
    return build_platform(
        home=home,
        db_url=db_url,
        executor=FakeExecutor(NODES, clock=clock),
        clock=clock,
        config=None if config is None else parse_cluster_config(config),
    )


def test_the_cluster_files_policy_is_applied_at_start(
    tmp_path: Path, db_url: str, clock: ManualClock
) -> None:
    home = tmp_path / "home"
    first = start(home, db_url, clock, policy_doc())
    try:
        with first.sessions() as session:
            record = policy.current_record(session)
            assert (record.version, record.created_by) == (1, "kiban up --config")
            assert record.document == policy_doc()
        assert first.policy.flavor_names == ("h100", "a100")
    finally:
        first.close()
    for config, version in (
        (policy_doc(), 1),  # the same file again: not a new version
        ({"nodes": [{"name": "x"}]}, 1),  # a file of nodes only keeps the policy in the store
        (None, 1),  # as does no file
        (policy_doc(strategy="StrictFIFO"), 2),  # a changed file is applied
    ):
        again = start(home, db_url, clock, config)
        try:
            with again.sessions() as session:
                assert policy.policy_generation(session) == version
                assert session.get(Queue, "vision") is not None
        finally:
            again.close()


def test_a_policy_in_force_is_not_checked_again_when_nodes_go(
    tmp_path: Path, db_url: str, clock: ManualClock
) -> None:
    home = tmp_path / "home"
    start(home, db_url, clock, policy_doc()).close()
    h100_only = NODES[:2]  # the A100 node is gone: the a100 flavor matches no node now
    again = build_platform(
        home=home,
        db_url=db_url,
        executor=FakeExecutor(h100_only, clock=clock),
        clock=clock,
        config=parse_cluster_config(policy_doc()),
    )
    try:
        with again.sessions() as session:
            assert policy.policy_generation(session) == 1
        with pytest.raises(Conflict, match="flavor a100"):
            apply(again, policy_doc(strategy="StrictFIFO"))  # but a change is checked
    finally:
        again.close()


def test_a_cluster_file_the_store_refuses_stops_the_start_and_writes_nothing(
    tmp_path: Path, db_url: str, clock: ManualClock
) -> None:
    document = policy_doc()
    document["flavors"][1]["nodeLabels"] = {"gpu.product": "B200"}
    with pytest.raises(Conflict, match="flavor a100"):
        start(tmp_path / "home", db_url, clock, document)
    assert not (tmp_path / "home" / "token").exists()
    retry = start(tmp_path / "home", db_url, clock, None)  # the store is as it was
    try:
        with retry.sessions() as session:
            assert policy.current_record(session).created_by == "kiban up (built-in policy)"
    finally:
        retry.close()


# -- submissions resolve priority classes and topology levels through the policy ------------------


def test_submission_takes_the_priority_of_the_policys_classes(gpus: Platform) -> None:
    apply(gpus, policy_doc())
    for spec, value in (({}, 100), ({"priorityClass": "batch"}, 10)):
        job_id = submit_to_queue(gpus, "vision", **spec)
        with gpus.sessions() as session:
            job = session.get(Job, job_id)
            assert job is not None and job.priority == value


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (
            {"priorityClass": "high"},
            "spec.priorityClass",
            "unknown priority class 'high'; known: batch, prod",
        ),
        (
            {"topology": {"level": "rack"}},
            "spec.topology.level",
            "unknown topology level 'rack'; known: local_block, host",
        ),
    ],
)
def test_submission_refuses_what_the_policy_does_not_declare(
    gpus: Platform, spec: dict[str, Any], field: str, message: str
) -> None:
    apply(gpus, policy_doc())
    with pytest.raises(InvalidInput) as caught:
        submit_to_queue(gpus, "vision", **spec)
    (problem,) = caught.value.problems
    assert (problem.field, problem.message) == (field, message)


def test_a_topology_level_the_policy_declares_is_accepted(gpus: Platform) -> None:
    apply(gpus, policy_doc())
    submit_to_queue(gpus, "vision", topology={"level": "local_block", "mode": "preferred"})


def test_without_topology_levels_no_level_is_known(platform: Platform) -> None:
    with pytest.raises(InvalidInput) as caught:
        submit_to_queue(platform, "default", gpu=1, topology={"level": "host"})
    assert "the cluster declares no topology" in str(caught.value)


def test_the_default_flavor_of_a_policy_without_flavors(platform: Platform) -> None:
    apply(platform, {"queues": [{"name": "default", "quota": {"gpu": 4}}]})
    with platform.sessions() as session:
        queue = session.get(Queue, "default")
        assert queue is not None and queue.quota == {DEFAULT_FLAVOR: {"gpu": 4}}
