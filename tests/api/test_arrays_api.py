"""Job arrays and dependencies through the API, on both stores, with the fake executor."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.platform import Platform
from kiban.services import jobs
from kiban.store.models import Job
from kiban.testing import FakeExecutor, manifest, submit

ARRAYS = "/api/v1/arrays"
JOBS = "/api/v1/jobs"


def job(api: TestClient, job_id: str) -> dict[str, Any]:
    found: dict[str, Any] = api.get(f"{JOBS}/{job_id}").json()
    return found


def state(api: TestClient, job_id: str) -> str:
    return str(job(api, job_id)["state"])


def array(api: TestClient, array_id: str, indices: bool = False) -> dict[str, Any]:
    answer = api.get(f"{ARRAYS}/{array_id}", params={"indices": indices})
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def passes(platform: Platform, count: int = 2) -> None:
    for _ in range(count):
        platform.loop.run_once()


def problem(answer: Any, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    error: dict[str, Any] = answer.json()["error"]
    return error


def nothing_stored(api: TestClient) -> None:
    assert api.get(JOBS).json() == []
    assert api.get(ARRAYS).json() == []


# -- arrays ------------------------------------------------------------------------------------


def test_an_array_runs_one_job_per_index_at_most_parallelism_at_once(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    """6 GPUs free, 10 one-GPU indices, parallelism 3: three run, the others wait with a
    reason that says so, and each end lets the next index (in order) through."""
    answer = submit(api, manifest("sweep", array={"indices": "0-9", "parallelism": 3}))
    assert answer["kind"] == "JobArray"
    array_id = answer["id"]
    assert (answer["size"], answer["parallelism"], answer["indices"]) == (10, 3, "0-9")
    passes(platform)
    running = sorted(r.request.job_id for r in executor.running())
    assert running == [f"{array_id}-0", f"{array_id}-1", f"{array_id}-2"]
    given = {r.job_id: r.api_env for r in executor.launches}  # joins each replica's env
    assert given[f"{array_id}-2"]["KIBAN_ARRAY_INDEX"] == "2"
    assert given[f"{array_id}-2"]["KIBAN_ARRAY_JOB_ID"] == array_id
    held = job(api, f"{array_id}-5")
    assert held["state"] == "Pending"
    assert held["reason"]["code"] == "WaitingForArraySlot"
    assert "at most 3" in held["reason"]["message"]
    assert (held["arrayId"], held["arrayIndex"]) == (array_id, 5)
    assert array(api, array_id)["counts"] == {"Running": 3, "Pending": 7}
    assert array(api, array_id)["held"] == {"ArraySlot": 7}

    executor.finish_all(f"{array_id}-1")
    passes(platform)
    assert state(api, f"{array_id}-1") == "Succeeded"
    assert state(api, f"{array_id}-3") == "Running"
    assert state(api, f"{array_id}-4") == "Pending"
    described = array(api, array_id, indices=True)
    assert described["indicesByState"] == {
        "Running": "0,2-3",
        "Succeeded": "1",
        "Pending": "4-9",
    }


def test_each_index_is_an_ordinary_job_under_the_queues_quota(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    """No parallelism: the indices compete as any jobs do; 6 GPUs hold six 1-GPU indices."""
    array_id = submit(api, manifest("wide", array={"indices": "0-7"}))["id"]
    passes(platform)
    assert len(executor.running()) == 6
    counts = array(api, array_id)["counts"]
    assert counts == {"Running": 6, "Pending": 2}
    waiting = api.get(JOBS, params={"array": array_id, "state": "Pending"}).json()
    assert {j["reason"]["code"] for j in waiting} == {"InsufficientCapacity"}


def test_indices_without_parallelism_are_queued_in_numeric_order(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    """All indices are submitted at one instant: 6 GPUs take indices 0-5, not the first six
    ids as strings (``-0, -1, -10, -11, -2, -3``)."""
    array_id = submit(api, manifest("ordered", array={"indices": "0-11"}))["id"]
    passes(platform)
    running = {r.request.job_id for r in executor.running()}
    assert running == {f"{array_id}-{i}" for i in range(6)}


def test_an_array_beyond_the_servers_limit_is_refused_and_nothing_stored(
    api: TestClient, platform: Platform
) -> None:
    error = problem(api.post(JOBS, json=manifest("big", array={"indices": "0-10000"})), 422)
    assert error["problems"][0]["field"] == "spec.array.indices"
    assert "more than 10000 indices" in error["problems"][0]["message"]
    platform.max_array_size = 5
    error = problem(api.post(JOBS, json=manifest("big", array={"indices": "0-5"})), 422)
    assert "more than 5" in error["problems"][0]["message"]
    nothing_stored(api)
    assert submit(api, manifest("fits", array={"indices": "0-4"}))["size"] == 5


@pytest.mark.parametrize(
    ("indices", "says"),
    [("5-1", "ends before it starts"), ("a-b", "not an index range"), ("", "at least 1")],
)
def test_a_malformed_index_range_is_refused(api: TestClient, indices: str, says: str) -> None:
    error = problem(api.post(JOBS, json=manifest("bad", array={"indices": indices})), 422)
    assert error["problems"][0]["field"] == "spec.array.indices"
    assert says in error["problems"][0]["message"]
    nothing_stored(api)


def test_an_array_that_cannot_be_stored_whole_leaves_nothing(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The array, its indices and their events go in one transaction: a failure while the
    last rows are written (here its dependencies) leaves no index behind."""
    first = submit(api, manifest("first"))["id"]

    def broken(*_args: Any) -> list[dict[str, Any]]:
        raise RuntimeError("the store went away")

    monkeypatch.setattr("kiban.services.job_arrays.dependencies.dependency_rows", broken)
    with pytest.raises(RuntimeError):
        api.post(JOBS, json=manifest("half", array={"indices": "0-99"}, dependsOn=[{"job": first}]))
    assert [j["id"] for j in api.get(JOBS).json()] == [first]
    assert api.get(ARRAYS).json() == []


def test_cancelling_an_array_ends_every_index(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    array_id = submit(api, manifest("sweep", array={"indices": "0-4", "parallelism": 2}))["id"]
    passes(platform)
    answer = api.post(f"{ARRAYS}/{array_id}/cancel")
    assert answer.status_code == 200, answer.text
    assert answer.json()["counts"] == {"Stopping": 2, "Cancelled": 3}
    for _ in range(5):
        passes(platform)
        if array(api, array_id)["done"]:
            break
    assert array(api, array_id)["counts"] == {"Cancelled": 5}
    assert executor.running() == []
    assert problem(api.post(f"{ARRAYS}/{array_id}/cancel"), 409)


def test_listing_can_leave_indices_out_and_arrays_are_listed_with_counts(
    api: TestClient, platform: Platform
) -> None:
    single = submit(api, manifest("single"))["id"]
    array_id = submit(api, manifest("sweep", array={"indices": "1-3"}))["id"]
    listed = api.get(JOBS, params={"arrayIndices": "false"})
    assert [j["id"] for j in listed.json()] == [single]
    assert listed.headers["X-Total-Count"] == "1"
    assert len(api.get(JOBS).json()) == 4
    [shown] = api.get(ARRAYS).json()
    assert (shown["id"], shown["counts"]) == (array_id, {"Pending": 3})


def test_held_indices_are_not_read_by_a_scheduling_pass(
    api: TestClient, platform: Platform
) -> None:
    """2,000 indices with parallelism 2: a pass reads the two let through, not the others."""
    submit(api, manifest("many", gpu=0, array={"indices": "0-1999", "parallelism": 2}))
    before = platform.loop.counts.pending_read
    platform.loop.run_once()
    assert platform.loop.counts.pending_read - before == 2


# -- dependencies ------------------------------------------------------------------------------


def test_a_dependency_chain_runs_in_order(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    first = submit(api, manifest("prepare"))["id"]
    second = submit(api, manifest("train", dependsOn=[{"job": first}]))["id"]
    third = submit(api, manifest("report", dependsOn=[{"job": second, "condition": "Finished"}]))[
        "id"
    ]
    passes(platform)
    assert state(api, first) == "Running"
    assert not any(k.startswith("KIBAN_ARRAY") for r in executor.launches for k in r.api_env)
    waiting = job(api, second)
    assert waiting["state"] == "Pending"
    assert waiting["reason"]["code"] == "WaitingForDependency"
    assert waiting["reason"]["message"] == f"waits for job {first} to succeed"
    assert job(api, third)["reason"]["message"] == f"waits for job {second} to end"
    listed = api.get(JOBS, params={"reason": "WaitingForDependency"}).json()
    assert {j["id"] for j in listed} == {second, third}

    executor.finish_all(first)
    passes(platform)
    assert state(api, second) == "Running"
    assert state(api, third) == "Pending"
    executor.finish_all(second, exit_code=1)
    passes(platform)
    assert state(api, second) == "Failed"
    assert state(api, third) == "Running"  # Finished: any end will do


def test_a_dependency_that_can_never_hold_fails_the_dependent(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    first = submit(api, manifest("prepare"))["id"]
    on_success = submit(api, manifest("train", dependsOn=[{"job": first}]))["id"]
    on_failure = submit(
        api, manifest("cleanup", dependsOn=[{"job": first, "condition": "Failed"}])
    )["id"]
    passes(platform)
    executor.finish_all(first, exit_code=3)
    passes(platform)
    failed = job(api, on_success)
    assert failed["state"] == "Failed"
    assert failed["message"] == (
        f"dependency never satisfied: job {first} ended Failed, and it was to succeed"
    )
    events = api.get(f"{JOBS}/{on_success}/events").json()
    assert events[-1]["reason"] == "DependencyNeverSatisfied"
    assert state(api, on_failure) == "Running"


def test_a_job_may_wait_for_a_whole_array_and_an_array_for_a_job(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    first = submit(api, manifest("prepare"))["id"]
    array_id = submit(api, manifest("sweep", array={"indices": "0-2"}, dependsOn=[{"job": first}]))[
        "id"
    ]
    after = submit(api, manifest("gather", dependsOn=[{"job": array_id}]))["id"]
    passes(platform)
    assert array(api, array_id)["held"] == {"Dependency": 3}
    assert array(api, array_id)["dependsOn"] == [{"job": first, "condition": "Succeeded"}]
    assert job(api, after)["reason"]["message"] == (
        f"waits for every index of array {array_id} to succeed"
    )
    executor.finish_all(first)
    passes(platform)
    assert array(api, array_id)["counts"] == {"Running": 3}
    for index in range(3):
        executor.finish_all(f"{array_id}-{index}")
        passes(platform)
        expected = "Running" if index == 2 else "Pending"
        assert state(api, after) == expected


def test_a_failed_index_fails_a_job_waiting_for_the_array_to_succeed(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    array_id = submit(api, manifest("sweep", array={"indices": "0-1"}))["id"]
    after = submit(api, manifest("gather", dependsOn=[{"job": array_id}]))["id"]
    passes(platform)
    executor.finish_all(f"{array_id}-0", exit_code=1)
    passes(platform)
    found = job(api, after)
    assert found["state"] == "Failed"
    assert f"an index of array {array_id} ended without succeeding" in found["message"]


def test_a_dependency_on_no_such_job_is_not_found_and_nothing_is_stored(
    api: TestClient,
) -> None:
    error = problem(api.post(JOBS, json=manifest("x", dependsOn=[{"job": "ghost-abc123"}])), 404)
    assert "spec.dependsOn[0].job" in error["message"]
    assert "ghost-abc123" in error["message"]
    nothing_stored(api)


def test_a_dependency_on_itself_is_refused(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ids are the server's, so a new job can name itself only by guessing its id: refused
    all the same, as is an index of the array being submitted."""
    monkeypatch.setattr(jobs, "new_job_id", lambda name: f"{name}-fixed1")
    error = problem(api.post(JOBS, json=manifest("me", dependsOn=[{"job": "me-fixed1"}])), 422)
    assert error["problems"][0]["field"] == "spec.dependsOn[0].job"
    assert "itself" in error["problems"][0]["message"]
    document = manifest("arr", array={"indices": "0-3"}, dependsOn=[{"job": "arr-fixed1-2"}])
    assert problem(api.post(JOBS, json=document), 422)["problems"][0]["field"] == (
        "spec.dependsOn[0].job"
    )
    nothing_stored(api)


@pytest.fixture
def other_tenant(api: TestClient, platform: Platform) -> Iterator[TestClient]:
    policy = {"queues": [{"name": "default"}, {"name": "speech", "tenant": "speech"}]}
    assert api.put("/api/v1/policy", json=policy).status_code == 200
    token = api.post("/api/v1/tenants/speech/tokens", json={"name": "s"}).json()["token"]
    with TestClient(create_app(platform), headers={"Authorization": f"Bearer {token}"}) as c:
        yield c


def test_a_dependency_on_another_tenants_job_or_array_is_not_found(
    api: TestClient, other_tenant: TestClient
) -> None:
    theirs = submit(api, manifest("admins"))["id"]
    their_array = submit(api, manifest("admins", array={"indices": "0-1"}))["id"]
    for target in (theirs, their_array, f"{their_array}-0"):
        document = manifest("mine", queue="speech", dependsOn=[{"job": target}])
        error = problem(other_tenant.post(JOBS, json=document), 404)
        assert "spec.dependsOn[0].job" in error["message"]
    assert other_tenant.get(JOBS).json() == []
    assert problem(other_tenant.get(f"{ARRAYS}/{their_array}"), 404)
    assert problem(other_tenant.post(f"{ARRAYS}/{their_array}/cancel"), 404)
    assert other_tenant.get(ARRAYS).json() == []


def test_an_index_cancelled_while_held_is_skipped_by_the_slots(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    array_id = submit(api, manifest("sweep", array={"indices": "0-4", "parallelism": 2}))["id"]
    passes(platform)
    assert api.post(f"{JOBS}/{array_id}-2/cancel").status_code == 200
    assert array(api, array_id)["held"] == {"ArraySlot": 2}
    executor.finish_all(f"{array_id}-0")
    passes(platform)
    assert state(api, f"{array_id}-3") == "Running"
    assert state(api, f"{array_id}-4") == "Pending"
    assert array(api, array_id)["counts"] == {
        "Succeeded": 1,
        "Cancelled": 1,
        "Running": 2,
        "Pending": 1,
    }


def test_the_one_job_path_refuses_an_array_rather_than_drop_it(platform: Platform) -> None:
    """``jobs.submit`` stores one job: handed an array it says so, and stores nothing."""
    from kiban.services.errors import InvalidInput
    from kiban.testing.platform_jobs import submit_to_platform

    with pytest.raises(InvalidInput, match="through the API"):
        submit_to_platform(platform, manifest("sweep", array={"indices": "0-3"}))
    with platform.sessions() as session:
        assert session.query(Job).count() == 0
