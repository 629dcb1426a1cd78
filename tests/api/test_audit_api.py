"""The audit log through the API, on both stores: every state-changing request leaves a record
(denials and refusals included), only admins read it, its chain shows a changed or removed
record, concurrent appends keep one chain, and no token's secret reaches it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from kiban.api.app import create_app
from kiban.domain.audit import (
    AuditAction,
    AuditEntry,
    AuditOutcome,
    chain,
    is_audited,
    operation_of,
)
from kiban.platform import Platform, build_platform
from kiban.services import audit
from kiban.store.db import make_engine, session_factory
from kiban.store.models_audit import AuditRecord
from kiban.testing import FakeExecutor, ManualClock

JOB = {
    "apiVersion": "kiban/v1",
    "kind": "Job",
    "metadata": {"name": "train"},
    "spec": {"tasks": [{"replicas": 1, "resources": {"gpu": 1}, "command": ["python", "t.py"]}]},
}


def member_client(api: TestClient, platform: Platform, tenant: str, name: str) -> TestClient:
    assert api.post("/api/v1/tenants", json={"name": tenant}).status_code in (201, 409)
    created = api.post(f"/api/v1/tenants/{tenant}/tokens", json={"name": name})
    assert created.status_code == 201, created.text
    token = created.json()["token"]
    return TestClient(create_app(platform), headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
def alice(api: TestClient, platform: Platform) -> Iterator[TestClient]:
    assert api.post("/api/v1/tenants", json={"name": "vision"}).status_code == 201
    queue = api.post("/api/v1/queues", json={"name": "vision-q", "tenant": "vision"})
    assert queue.status_code == 201, queue.text
    with member_client(api, platform, "vision", "alice") as client:
        yield client


def log(api: TestClient, **params: Any) -> list[dict[str, Any]]:
    """The audit records, oldest first."""
    response = api.get("/api/v1/audit", params={"limit": 10000, **params})
    assert response.status_code == 200, response.text
    return list(reversed(response.json()))


def last(api: TestClient) -> dict[str, Any]:
    return log(api)[-1]


def test_a_submission_and_a_cancel_are_recorded_with_who_and_what(
    api: TestClient, alice: TestClient, clock: ManualClock
) -> None:
    job = {**JOB, "spec": {**JOB["spec"], "queue": "vision-q"}}  # type: ignore[dict-item]
    submitted = alice.post("/api/v1/jobs", json=job)
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["id"]
    record = last(api)
    assert record["action"] == "jobs.submit"
    assert record["target"] == job_id  # taken from the answer: the id the job was given
    assert (record["member"], record["role"], record["tenant"]) == ("alice", "member", "vision")
    assert (record["status"], record["outcome"]) == (201, "succeeded")
    assert record["source"] == "testclient"
    assert record["at"] == clock.now()
    assert (record["method"], record["path"]) == ("POST", "/api/v1/jobs")

    assert alice.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200
    record = last(api)
    assert (record["action"], record["target"], record["outcome"]) == (
        "jobs.cancel",
        job_id,
        "succeeded",
    )


def test_reads_leave_no_record(api: TestClient, alice: TestClient) -> None:
    before = len(log(api))
    assert alice.get("/api/v1/jobs").status_code == 200
    assert alice.get("/api/v1/queues").status_code == 200
    assert api.get("/api/v1/nodes").status_code == 200
    assert len(log(api)) == before


def test_denials_and_refusals_are_recorded(
    api: TestClient, alice: TestClient, platform: Platform
) -> None:
    # an unknown token: refused by admission, nobody to name
    with TestClient(create_app(platform)) as anonymous:
        refused = anonymous.post(
            "/api/v1/nodes/node-0/cordon", headers={"Authorization": "Bearer kbn_not-a-token"}
        )
    assert refused.status_code == 401
    record = last(api)
    assert (record["action"], record["target"]) == ("nodes.cordon", "node-0")
    assert (record["member"], record["role"], record["outcome"], record["status"]) == (
        None,
        None,
        "unauthenticated",
        401,
    )

    # a member at an admin's endpoint
    assert alice.post("/api/v1/nodes/node-1/cordon").status_code == 403
    record = last(api)
    assert (record["member"], record["action"], record["target"], record["outcome"]) == (
        "alice",
        "nodes.cordon",
        "node-1",
        "denied",
    )
    assert alice.put("/api/v1/policy", json={"queues": []}).status_code == 403
    assert (last(api)["action"], last(api)["outcome"]) == ("policy.apply", "denied")

    # bad input: refused, naming no target (nothing was created)
    bad = alice.post("/api/v1/jobs", json={"kind": "Job", "spec": {"tasks": "many"}})
    assert bad.status_code == 422
    record = last(api)
    assert (record["action"], record["target"], record["outcome"], record["status"]) == (
        "jobs.submit",
        None,
        "refused",
        422,
    )

    # a job of another tenant, or none: refused
    assert alice.post("/api/v1/jobs/nobody-abcdef/cancel").status_code == 404
    assert last(api)["outcome"] == "refused"


def test_a_refused_queue_creation_names_the_queue(api: TestClient, alice: TestClient) -> None:
    """Nothing was created, so no answer names it: the endpoint read the name from the request
    (a tenant-admin's refusal above the ceiling: ``test_tenant_admin_queues``)."""
    again = api.post("/api/v1/queues", json={"name": "vision-q", "tenant": "vision"})
    assert again.status_code == 409, again.text
    record = last(api)
    assert (record["action"], record["target"], record["outcome"], record["status"]) == (
        "queues.create",
        "vision-q",
        "refused",
        409,
    )
    # (a member is denied before the endpoint reads the request: that record names no queue)


def test_a_job_token_beyond_its_job_is_recorded_as_denied(
    api: TestClient, platform: Platform
) -> None:
    from kiban.services.auth import create_job_token

    submitted = api.post("/api/v1/jobs", json=JOB)
    job_id = submitted.json()["id"]
    with platform.sessions() as session:
        token = create_job_token(session, job_id=job_id, tenant="default", at=0.0)
        session.commit()
    with TestClient(
        create_app(platform), headers={"Authorization": f"Bearer {token}"}
    ) as job_client:
        assert job_client.post("/api/v1/jobs", json=JOB).status_code == 403
    record = last(api)
    assert (record["member"], record["role"], record["action"], record["outcome"]) == (
        f"job {job_id}",
        "job",
        "jobs.submit",
        "denied",
    )


def test_only_admins_read_the_log_or_verify_it(api: TestClient, alice: TestClient) -> None:
    for path in ("/api/v1/audit", "/api/v1/audit/verify"):
        assert alice.get(path).status_code == 403, path
        assert api.get(path).status_code == 200, path


def test_filters(api: TestClient, alice: TestClient, clock: ManualClock) -> None:
    alice.post("/api/v1/nodes/node-1/cordon")
    clock.advance(100)
    later = clock.now()
    api.post("/api/v1/nodes/node-1/cordon")
    api.post("/api/v1/nodes/node-1/uncordon")
    assert {r["member"] for r in log(api, member="alice")} == {"alice"}
    assert [r["action"] for r in log(api, since=later)] == ["nodes.cordon", "nodes.uncordon"]
    assert [r["member"] for r in log(api, action="nodes.uncordon")] == ["admin"]
    assert api.get("/api/v1/audit", params={"action": "nodes.explode"}).status_code == 422


def test_no_token_secret_reaches_the_log(
    api: TestClient, platform: Platform, admin_token: str
) -> None:
    created = api.post("/api/v1/tenants/default/tokens", json={"name": "bob"})
    secret = created.json()["token"]
    with TestClient(create_app(platform)) as anonymous:
        anonymous.post("/web/session", json={"token": secret})
        anonymous.post("/api/v1/jobs", json=JOB, headers={"Authorization": f"Bearer {secret}x"})
    records = log(api)
    assert {"tokens.create", "session.sign-in"} <= {r["action"] for r in records}
    sign_in = next(r for r in records if r["action"] == "session.sign-in")
    assert (sign_in["target"], sign_in["outcome"]) == ("bob", "succeeded")
    with platform.sessions() as session:
        dump = repr([tuple(row) for row in session.execute(select(AuditRecord)).all()])
    for token in (secret, admin_token):
        assert token not in dump
        assert token[4:20] not in dump


def test_the_store_refuses_to_change_or_remove_a_record(
    api: TestClient, platform: Platform
) -> None:
    api.post("/api/v1/nodes/node-1/cordon")
    assert platform.audit is not None and platform.audit.flush()
    for statement in ("UPDATE audit_log SET member = 'mallory'", "DELETE FROM audit_log"):
        with platform.sessions() as session, pytest.raises(Exception, match="append-only"):
            session.execute(text(statement))
            session.commit()


def drop_guards(platform: Platform) -> None:
    """What someone with the database's owner's rights can do: take the triggers away."""
    with platform.engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("DROP TRIGGER audit_log_append_only ON audit_log"))
        else:
            connection.execute(text("DROP TRIGGER audit_log_no_update"))
            connection.execute(text("DROP TRIGGER audit_log_no_delete"))


def test_verify_names_an_edited_record_and_a_removed_one(
    api: TestClient, alice: TestClient, platform: Platform
) -> None:
    for node in ("node-0", "node-1", "node-2"):
        alice.post(f"/api/v1/nodes/{node}/cordon")  # denied, and recorded
    intact = api.get("/api/v1/audit/verify").json()
    assert intact["intact"] is True and intact["breakSeq"] is None
    records = log(api)
    victim = next(r for r in records if r["target"] == "node-1")

    drop_guards(platform)
    with platform.engine.begin() as connection:
        connection.execute(
            text("UPDATE audit_log SET outcome = 'succeeded' WHERE seq = :seq"),
            {"seq": victim["seq"]},
        )
    verdict = api.get("/api/v1/audit/verify").json()
    assert (verdict["intact"], verdict["breakSeq"], verdict["reason"]) == (
        False,
        victim["seq"],
        "edited",
    )

    with platform.engine.begin() as connection:  # undo it, then remove the record instead
        connection.execute(
            text("UPDATE audit_log SET outcome = 'denied' WHERE seq = :seq"),
            {"seq": victim["seq"]},
        )
    assert api.get("/api/v1/audit/verify").json()["intact"] is True
    with platform.engine.begin() as connection:
        connection.execute(text("DELETE FROM audit_log WHERE seq = :seq"), {"seq": victim["seq"]})
    verdict = api.get("/api/v1/audit/verify").json()
    assert (verdict["breakSeq"], verdict["reason"]) == (victim["seq"] + 1, "missing")


def test_concurrent_requests_make_one_chain(api: TestClient, platform: Platform) -> None:
    before = len(log(api))
    errors: list[BaseException] = []

    def cordon_many(k: int) -> None:
        try:
            for i in range(10):
                assert api.post(f"/api/v1/nodes/node-{(k + i) % 3}/cordon").status_code == 200
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=cordon_many, args=(k,)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    records = log(api)
    assert len(records) == before + 60
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    assert api.get("/api/v1/audit/verify").json()["intact"] is True


def test_two_writers_on_their_own_connections_keep_one_chain(
    db_url: str, platform: Platform
) -> None:
    """As two processes on one database would: each locks the chain head before it appends."""
    writers = []
    engines = [make_engine(db_url) for _ in range(2)]
    try:
        writers = [audit.AuditWriter(session_factory(e), max_batch=3) for e in engines]
        futures = []
        for n in range(60):
            entry = AuditEntry(
                at=float(n),
                member=f"m{n % 2}",
                role="admin",
                tenant=None,
                source=None,
                method="POST",
                path="/api/v1/nodes/node-0/cordon",
                action=AuditAction.NODES_CORDON,
                target="node-0",
                status=200,
                outcome=AuditOutcome.SUCCEEDED,
            )
            futures.append(writers[n % 2].record(entry))
        seqs = sorted(f.result(timeout=60) for f in futures)
        assert seqs == list(range(1, 61))
        with platform.sessions() as session:
            assert audit.verify(session).intact
    finally:
        for writer in writers:
            writer.stop()
        for engine in engines:
            engine.dispose()


def test_every_changing_operation_of_the_api_has_an_action(platform: Platform) -> None:
    """A new route that changes state gets its own action (``kiban.domain.audit``), not
    ``other``: add it to ``AUDITED_ROUTES``."""
    paths = create_app(platform).openapi()["paths"]
    unnamed = []
    for path, operations in paths.items():
        for method in operations:
            concrete = path.replace("{", "x").replace("}", "")
            if not is_audited(method.upper(), concrete):
                continue
            if operation_of(method.upper(), concrete).action is AuditAction.OTHER:
                unnamed.append(f"{method.upper()} {path}")
    assert unnamed == []


def test_no_records_when_auditing_is_off(
    tmp_path: Any, db_url: str, executor: FakeExecutor, clock: ManualClock
) -> None:
    quiet = build_platform(
        home=tmp_path / "quiet", db_url=db_url, executor=executor, clock=clock, audit=False
    )
    try:
        token = (quiet.home / "token").read_text().strip()
        with TestClient(create_app(quiet), headers={"Authorization": f"Bearer {token}"}) as client:
            assert client.post("/api/v1/nodes/node-0/cordon").status_code == 200
            assert client.get("/api/v1/audit").json() == []
    finally:
        quiet.close()


def test_records_queued_at_a_stop_are_written(
    tmp_path: Any, db_url: str, executor: FakeExecutor, clock: ManualClock
) -> None:
    """Stopping the platform writes what its writer has queued (records of requests that
    never got their answer out, say) before it stops."""
    first = build_platform(home=tmp_path / "h", db_url=db_url, executor=executor, clock=clock)
    assert first.audit is not None
    for node in ("node-0", "node-1", "node-2"):
        first.audit.record(cordon_entry(node, clock.now()))
    first.close()  # no flush before: close stops the writer, which writes its queue first
    again = build_platform(home=tmp_path / "h", db_url=db_url, executor=executor, clock=clock)
    try:
        with again.sessions() as session:
            targets = [r.entry.target for r in audit.records(session, audit.AuditQuery())]
            assert targets == ["node-2", "node-1", "node-0"]
            assert audit.verify(session).intact
    finally:
        again.close()


def cordon_entry(node: str, at: float) -> AuditEntry:
    return AuditEntry(
        at=at,
        member="admin",
        role="admin",
        tenant=None,
        source=None,
        method="POST",
        path=f"/api/v1/nodes/{node}/cordon",
        action=AuditAction.NODES_CORDON,
        target=node,
        status=200,
        outcome=AuditOutcome.SUCCEEDED,
    )


def test_an_answer_leaves_only_once_its_record_is_stored(
    api: TestClient, platform: Platform
) -> None:
    """Read from the store itself, not through the API (whose listing flushes the writer
    first): a kill -9 right after an answer cannot lose its record."""
    for n in range(6):
        node = f"node-{n % 3}"
        verb = "cordon" if n < 3 else "uncordon"
        assert api.post(f"/api/v1/nodes/{node}/{verb}").status_code == 200
        with platform.sessions() as session:
            newest = audit.records(session, audit.AuditQuery(limit=1))
        assert [(r.entry.path, r.entry.target) for r in newest] == [
            (f"/api/v1/nodes/{node}/{verb}", node)
        ], f"request {n}'s record is not stored yet"


def test_a_record_the_store_refuses_is_answered_logged_and_counted(
    api: TestClient, platform: Platform, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """The request was carried out: its answer goes out, and the lost record shows in the log
    and in ``kiban_audit_append_failures_total``."""

    def refuse(session: Any, entries: Any) -> Any:
        raise RuntimeError("the store refused the append")

    monkeypatch.setattr(audit, "append", refuse)
    with caplog.at_level("WARNING", logger="kiban.audit"):
        answer = api.post("/api/v1/nodes/node-1/cordon")
    assert (answer.status_code, answer.json()["cordoned"]) == (200, True)  # carried out
    assert "POST /api/v1/nodes/node-1/cordon was answered without its audit record" in caplog.text
    metrics = api.get("/metrics").text
    assert "kiban_audit_append_failures_total 1.0" in metrics
    monkeypatch.undo()
    assert api.post("/api/v1/nodes/node-2/cordon").status_code == 200
    assert "kiban_audit_append_failures_total 1.0" in api.get("/metrics").text


def test_a_submission_s_record_is_written_in_its_job_s_transaction(
    api: TestClient, alice: TestClient, platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One commit for a stored submission and its record (the answer does not wait for a
    second one): the audit writer is not asked for it, the record is stored as the job is, and
    a submission refused before it is stored is recorded by the middleware as before."""
    assert platform.audit is not None
    asked: list[AuditEntry] = []
    real_record = platform.audit.record

    def spy(entry: AuditEntry) -> Any:
        asked.append(entry)
        return real_record(entry)

    monkeypatch.setattr(platform.audit, "record", spy)
    job = {**JOB, "spec": {**JOB["spec"], "queue": "vision-q"}}  # type: ignore[dict-item]
    submitted = alice.post("/api/v1/jobs", json=job)
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["id"]
    assert asked == []  # not through the writer
    with platform.sessions() as session:  # stored, without any flush of the writer
        newest = audit.records(session, audit.AuditQuery(limit=1))
    assert [(r.entry.action, r.entry.target, r.entry.status, r.entry.member) for r in newest] == [
        (AuditAction.JOBS_SUBMIT, job_id, 201, "alice")
    ]

    refused = alice.post("/api/v1/jobs", json={**job, "spec": {"tasks": []}})
    assert refused.status_code == 422
    assert [(e.action, e.status, e.outcome) for e in asked] == [
        (AuditAction.JOBS_SUBMIT, 422, AuditOutcome.REFUSED)
    ]
    assert api.get("/api/v1/audit/verify").json()["intact"] is True


def anchored(api: TestClient, anchor: str) -> dict[str, Any]:
    answer = api.get("/api/v1/audit/verify", params={"anchor": anchor})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def move_head(platform: Platform, seq: int, hash_: str) -> None:
    with platform.engine.begin() as connection:
        connection.execute(
            text("UPDATE audit_chain_head SET seq = :seq, hash = :hash WHERE id = 1"),
            {"seq": seq, "hash": hash_},
        )


def test_an_anchor_shows_the_newest_records_removed_and_the_head_rewritten(
    api: TestClient, platform: Platform
) -> None:
    """Removing the newest records and moving the chain head back to the new last one leaves
    a chain that holds together: only the anchor kept outside the store shows it."""
    for node in ("node-0", "node-1", "node-2"):
        assert api.post(f"/api/v1/nodes/{node}/cordon").status_code == 200
    kept = api.get("/api/v1/audit/anchor").json()
    records = log(api)
    assert (kept["seq"], kept["hash"]) == (records[-1]["seq"], records[-1]["hash"])
    assert kept["anchor"] == f"{kept['seq']}:{kept['hash']}"
    assert api.post("/api/v1/nodes/node-0/uncordon").status_code == 200  # after the anchor
    verdict = anchored(api, kept["anchor"])
    assert (verdict["intact"], verdict["anchor"]) == (True, kept["anchor"])
    assert "holds the anchored record" in verdict["message"]

    drop_guards(platform)
    survivor = records[-3]  # the two newest before the anchor's, and everything after, go
    with platform.engine.begin() as connection:
        connection.execute(text("DELETE FROM audit_log WHERE seq > :seq"), {"seq": survivor["seq"]})
    move_head(platform, survivor["seq"], survivor["hash"])
    assert api.get("/api/v1/audit/verify").json()["intact"] is True  # not seen without it
    verdict = anchored(api, kept["anchor"])
    assert (verdict["intact"], verdict["breakSeq"], verdict["reason"]) == (
        False,
        kept["seq"],
        "anchor-gone",
    )


def test_an_anchor_shows_a_chain_rewritten_from_the_anchored_record_on(
    api: TestClient, platform: Platform
) -> None:
    """An edited record whose hash, and every hash after it, is recomputed (the head moved
    to match) holds together; its anchored hash does not. A plain edit shows as before."""
    for node in ("node-0", "node-1"):
        assert api.post(f"/api/v1/nodes/{node}/cordon").status_code == 200
    kept = api.get("/api/v1/audit/anchor").json()
    with platform.sessions() as session:
        stored = list(reversed(audit.records(session, audit.AuditQuery(limit=10000))))
    victim = stored[-1]

    drop_guards(platform)
    with platform.engine.begin() as connection:  # a plain edit: shows without the anchor too
        connection.execute(
            text("UPDATE audit_log SET member = 'mallory' WHERE seq = :seq"), {"seq": victim.seq}
        )
    for verdict in (api.get("/api/v1/audit/verify").json(), anchored(api, kept["anchor"])):
        assert (verdict["breakSeq"], verdict["reason"]) == (victim.seq, "edited")

    forged = chain(victim.prev_hash, victim.seq - 1, [replace(victim.entry, member="mallory")])
    with platform.engine.begin() as connection:
        connection.execute(
            text("UPDATE audit_log SET hash = :hash WHERE seq = :seq"),
            {"hash": forged[0].hash, "seq": victim.seq},
        )
    move_head(platform, victim.seq, forged[0].hash)
    assert api.get("/api/v1/audit/verify").json()["intact"] is True  # not seen without it
    verdict = anchored(api, kept["anchor"])
    assert (verdict["breakSeq"], verdict["reason"]) == (victim.seq, "anchor-changed")


def test_the_anchor_is_for_admins_and_a_read(
    api: TestClient, alice: TestClient, platform: Platform
) -> None:
    before = len(log(api))
    assert alice.get("/api/v1/audit/anchor").status_code == 403
    assert api.get("/api/v1/audit/anchor").status_code == 200
    assert alice.get("/api/v1/audit/verify", params={"anchor": "1:" + "a" * 64}).status_code == 403
    assert len(log(api)) == before  # reads of the log are not recorded
    bad = api.get("/api/v1/audit/verify", params={"anchor": "7:not-a-hash"})
    assert bad.status_code == 422
    problems = bad.json()["error"]["problems"]  # the declared SEQ:HASH pattern, checked first
    assert [p["field"] for p in problems] == ["anchor"] and "pattern" in problems[0]["message"]


def test_no_anchor_of_a_log_whose_head_names_another_record(
    api: TestClient, platform: Platform
) -> None:
    assert api.post("/api/v1/nodes/node-0/cordon").status_code == 200
    assert api.get("/api/v1/audit/anchor").status_code == 200
    head = api.get("/api/v1/audit/anchor").json()
    move_head(platform, head["seq"], "f" * 64)
    refused = api.get("/api/v1/audit/anchor")
    assert refused.status_code == 409
    assert "verify" in refused.text
