"""The pending and running job builders: the facts both carry, set the same way on each."""

from __future__ import annotations

from kiban.testing.builders import cluster, job, running, snapshot


def test_shared_setters_reach_pending_and_running_jobs() -> None:
    pending = (
        job("p")
        .queue("q")
        .tenant("t")
        .member("ann")
        .priority(7)
        .submitted(3.0)
        .max_runtime(60.0)
        .estimated_runtime(40.0)
        .preempted_by("hi")
        .attained(12.5)
        .build()
    )
    snap = snapshot(
        nodes=cluster().nodes(1, gpus=2),
        running=[
            running("r")
            .queue("q")
            .tenant("t")
            .member("bob")
            .priority(5)
            .submitted(1.0)
            .started(2.0)
            .max_runtime(90.0)
            .estimated_runtime(80.0)
            .preempted_by("hi")
            .attained(4.0)
            .on("node-0", gpus=2)
        ],
    )
    (run,) = snap.running
    assert (pending.queue, pending.tenant, pending.member, pending.priority) == ("q", "t", "ann", 7)
    assert (pending.submitted_at, pending.max_runtime) == (3.0, 60.0)
    assert pending.estimated_runtime == 40.0
    assert (pending.preempted_by, pending.attained_service) == ("hi", 12.5)
    assert (run.queue, run.tenant, run.member, run.priority) == ("q", "t", "bob", 5)
    assert (run.submitted_at, run.started_at, run.max_runtime) == (1.0, 2.0, 90.0)
    assert (run.estimated_runtime, run.preempted_by, run.attained_service) == (80.0, "hi", 4.0)
    assert run.replicas[0].gpu_ids == (0, 1)


def test_replicas_replaces_the_tasks_and_task_adds_one() -> None:
    built = job("j").task("launcher", gpu=0).replicas(2, gpu=4).task("extra", 3, gpu=1).build()
    assert [(t.name, t.replicas, t.gpu) for t in built.tasks] == [("worker", 2, 4), ("extra", 3, 1)]
    assert built.gang_size == 5
