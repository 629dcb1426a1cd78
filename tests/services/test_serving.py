"""Services: applying manifests makes revisions; promote, rollback and delete move traffic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from kiban.domain.rollout import RevisionState
from kiban.domain.service import ServiceSpec
from kiban.executors.base import Capability
from kiban.platform import Platform
from kiban.services import serving
from kiban.services.auth import Principal
from kiban.services.errors import Conflict, InvalidInput, NotFound
from kiban.services.jobs import ClusterFacts
from kiban.services.service_warnings import scaling_warnings
from kiban.store.models import Event
from kiban.store.models_serving import ServiceRevision, ServiceRow

ADMIN = Principal(name="admin", tenant=None, is_admin=True)
ALICE = Principal(name="alice", tenant="default", is_admin=False)
MALLORY = Principal(name="mallory", tenant="other", is_admin=False)


def service_doc(name: str = "chat", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": {"name": "tiny", "storageUri": "file:///models/tiny"},
        "resources": {"gpu": 1},
        **spec,
    }
    return {"apiVersion": "kiban/v1", "kind": "Service", "metadata": {"name": name}, "spec": body}


def custom_service_doc(args: list[str]) -> dict[str, Any]:
    """Service "own" on a custom runtime (its own server, whose args are its own)."""
    return service_doc(
        "own",
        runtime="custom",
        command=["serve"],
        port=9000,
        readinessPath="/ready",
        model={"name": "m", "args": args},
    )


def apply(platform: Platform, document: dict[str, Any], who: Principal = ALICE) -> ServiceRow:
    with platform.sessions() as session:
        applied = serving.apply(
            session, who, document, facts=platform.facts, at=platform.clock.now()
        )
        session.commit()
        session.refresh(applied.service)
        session.expunge(applied.service)
        return applied.service


def revisions(platform: Platform, name: str = "chat") -> list[tuple[int, str]]:
    with platform.sessions() as session:
        row = session.scalars(select(ServiceRow).where(ServiceRow.name == name)).one()
        return [(r.number, r.state) for r in serving.revisions_of(session, row)]


def set_state(platform: Platform, number: int, state: RevisionState) -> None:
    with platform.sessions() as session:
        revision = session.scalars(
            select(ServiceRevision).where(ServiceRevision.number == number)
        ).one()
        revision.state = state.value
        session.commit()


def test_a_new_service_has_one_revision_that_takes_all_traffic_once_ready(
    platform: Platform,
) -> None:
    row = apply(platform, service_doc())
    assert row.tenant == "default"
    assert (row.stable_revision, row.canary_revision, row.canary_percent) == (None, 1, 100)
    assert revisions(platform) == [(1, "Loading")]


def test_scaling_changes_make_no_revision_but_a_model_change_does(platform: Platform) -> None:
    apply(platform, service_doc())
    apply(platform, service_doc(minReplicas=2, maxReplicas=4, timeout="20m"))
    assert revisions(platform) == [(1, "Loading")]
    changed = service_doc(minReplicas=2, maxReplicas=4)
    changed["spec"]["model"]["storageUri"] = "file:///models/tiny-v2"
    row = apply(platform, changed)
    assert revisions(platform) == [(1, "Retired"), (2, "Loading")]
    assert row.canary_revision == 2


def test_a_canary_takes_its_share_and_promote_and_rollback_move_it(platform: Platform) -> None:
    apply(platform, service_doc())
    with platform.sessions() as session:
        row = serving.get_visible(session, ALICE, "chat")
        serving.promote_canary(session, row, platform.clock.now(), by="test")
        session.commit()
    v2 = service_doc(canaryTrafficPercent=20)
    v2["spec"]["model"]["args"] = ["--dtype", "float32"]
    row = apply(platform, v2)
    assert (row.stable_revision, row.canary_revision, row.canary_percent) == (1, 2, 20)
    with platform.sessions() as session, pytest.raises(Conflict, match="not Ready"):
        serving.promote(session, ALICE, "chat", platform.clock.now())
    set_state(platform, 2, RevisionState.READY)
    with platform.sessions() as session:
        promoted = serving.promote(session, ALICE, "chat", platform.clock.now())
        session.commit()
        assert (promoted.stable_revision, promoted.canary_revision) == (2, None)
    assert revisions(platform) == [(1, "Retired"), (2, "Ready")]
    # With no canary, rollback brings the revision before the stable one back.
    with platform.sessions() as session:
        back = serving.rollback(session, ALICE, "chat", platform.clock.now())
        session.commit()
        assert (back.stable_revision, back.canary_revision, back.canary_percent) == (2, 1, 100)
    assert revisions(platform) == [(1, "Loading"), (2, "Ready")]
    # And a rollback with a canary drops the canary.
    with platform.sessions() as session:
        dropped = serving.rollback(session, ALICE, "chat", platform.clock.now())
        session.commit()
        assert (dropped.stable_revision, dropped.canary_revision) == (2, None)
    assert revisions(platform) == [(1, "Retired"), (2, "Ready")]


def test_a_new_share_moves_the_canary_and_a_newer_revision_replaces_it(
    platform: Platform,
) -> None:
    apply(platform, service_doc())
    with platform.sessions() as session:
        row = serving.get_visible(session, ALICE, "chat")
        serving.promote_canary(session, row, platform.clock.now(), by="test")
        session.commit()
    set_state(platform, 1, RevisionState.READY)
    v2 = service_doc(canaryTrafficPercent=20)
    v2["spec"]["model"]["args"] = ["--dtype", "float32"]
    apply(platform, v2)
    # The same template with another share: no new revision, the canary's share moves.
    row = apply(platform, {**v2, "spec": {**v2["spec"], "canaryTrafficPercent": 60}})
    assert (row.stable_revision, row.canary_revision, row.canary_percent) == (1, 2, 60)
    assert revisions(platform) == [(1, "Ready"), (2, "Loading")]
    # A newer template while the canary is out: it is retired, the newer one is the canary.
    v3 = service_doc(canaryTrafficPercent=10)
    v3["spec"]["model"]["args"] = ["--dtype", "bfloat16"]
    row = apply(platform, v3)
    assert (row.stable_revision, row.canary_revision, row.canary_percent) == (1, 3, 10)
    assert revisions(platform) == [(1, "Ready"), (2, "Retired"), (3, "Loading")]


def test_bad_services_are_refused_naming_the_field(platform: Platform) -> None:
    with pytest.raises(InvalidInput) as missing_queue:
        apply(platform, service_doc(queue="nope"))
    assert missing_queue.value.problems[0].field == "spec.queue"
    with pytest.raises(InvalidInput) as too_big:
        apply(platform, service_doc(resources={"gpu": 64}))
    assert too_big.value.problems[0].field.startswith("spec.resources")
    with pytest.raises(InvalidInput) as bad_class:
        apply(platform, service_doc(priorityClass="urgent"))
    assert bad_class.value.problems[0].field == "spec.priorityClass"
    with platform.sessions() as session:
        assert session.scalars(select(ServiceRow)).all() == []  # nothing half-written


def test_tenants_see_only_their_services(platform: Platform) -> None:
    apply(platform, service_doc())
    with platform.sessions() as session:
        assert [s.name for s in serving.list_services(session, ALICE)] == ["chat"]
        assert serving.list_services(session, MALLORY) == []
        with pytest.raises(NotFound):
            serving.get_visible(session, MALLORY, "chat")
        with pytest.raises(NotFound):
            serving.promote(session, MALLORY, "chat", platform.clock.now())


def test_delete_retires_every_revision_and_refuses_a_reapply_meanwhile(
    platform: Platform,
) -> None:
    apply(platform, service_doc())
    with platform.sessions() as session:
        serving.delete(session, ALICE, "chat", platform.clock.now())
        session.commit()
    assert revisions(platform) == [(1, "Retired")]
    with pytest.raises(Conflict, match="being deleted"):
        apply(platform, service_doc())
    with platform.sessions() as session:
        reasons = [
            e.reason for e in session.scalars(select(Event).where(Event.object_kind == "Service"))
        ]
    assert reasons == ["Created", "RevisionRetired", "Deleted"]


def test_cpu_scaling_warns_of_what_it_cannot_do_here(platform: Platform) -> None:
    """cpu does not scale to zero; an executor without CPU readings scales on concurrency."""
    spec = ServiceSpec.model_validate(
        {"runtime": "huggingface", "model_name": "m", "model_id": "o/m", "scale_metric": "cpu"}
    )
    everything = frozenset(Capability)
    assert scaling_warnings(spec, everything) == []
    at_zero = spec.model_copy(update={"min_replicas": 0})
    (warning,) = scaling_warnings(at_zero, everything)
    assert "minReplicas 0 with scaleMetric cpu: one replica is kept" in warning
    (warning,) = scaling_warnings(spec, everything - {Capability.CPU_USAGE})
    assert "scales on concurrency" in warning
    concurrency = spec.model_copy(update={"scale_metric": "concurrency", "min_replicas": 0})
    assert scaling_warnings(concurrency, frozenset()) == []

    with platform.sessions() as session:
        applied = serving.apply(
            session,
            ALICE,
            service_doc(scaleMetric="cpu", minReplicas=0, maxReplicas=2),
            facts=platform.facts,
            at=platform.clock.now(),
        )
        session.commit()
        assert len(applied.warnings) == 1 and "one replica is kept" in applied.warnings[0]
        reasons = [e.reason for e in session.scalars(select(Event).order_by(Event.id))]
    assert reasons[-1] == "AppliedWithWarnings"


def test_unknown_runtime_args_are_warned_and_recorded(platform: Platform) -> None:
    args = ["--dtype=bfloat16", "--max_model_len=4096", "--backend", "vllm", "--max_batch=4"]
    document = service_doc(
        model={"name": "tiny", "storageUri": "file:///models/tiny", "args": args}
    )
    with platform.sessions() as session:
        applied = serving.apply(
            session, ALICE, document, facts=platform.facts, at=platform.clock.now()
        )
        session.commit()
        events = [e.message for e in session.scalars(select(Event).order_by(Event.id))]
    assert applied.warnings == (
        "spec.model.args[2]: ignored (--backend is not an option of kiban's huggingface runtime)",
        "spec.model.args[4]: ignored (--max_batch is not an option of kiban's huggingface "
        "runtime; did you mean --max_batch_size?)",
    )
    assert events[-1] == "; ".join(applied.warnings)
    custom = custom_service_doc(["--backend", "x"])
    assert apply_warnings(platform, custom) == ()  # a custom server's args are its own


def test_runtime_args_that_could_never_serve_are_refused_naming_the_argument(
    platform: Platform,
) -> None:
    def refused(args: list[str]) -> list[tuple[str, str]]:
        document = service_doc(
            model={"name": "tiny", "storageUri": "file:///models/tiny", "args": args}
        )
        with pytest.raises(InvalidInput) as caught:
            apply(platform, document)
        return [(p.field, p.message) for p in caught.value.problems]

    assert refused(["--dtype", "float32", "--help"]) == [
        ("spec.model.args[2]", "--help makes the model server print its usage and exit")
    ]
    assert refused(["--http_port=8080", "--uds", "/tmp/s"]) == [
        ("spec.model.args[0]", "--http_port is set by kiban for each replica; remove it"),
        ("spec.model.args[1]", "--uds is set by kiban for each replica; remove it"),
    ]
    assert refused(["--task", "embed", "--max-batch-size", "0"]) == [
        ("spec.model.args[2]", "--max-batch-size: must be at least 1, got 0")
    ]
    assert refused(["--dtype", "float8"])[0][0] == "spec.model.args[0]"
    assert "unknown dtype 'float8'" in refused(["--dtype", "float8"])[0][1]
    inference_service = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "chat"},
        "spec": {
            "predictor": {
                "model": {
                    "modelFormat": {"name": "huggingface"},
                    "storageUri": "file:///models/tiny",
                    "args": ["--model_name=tiny", "--max_length", "lots"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            }
        },
    }
    with pytest.raises(InvalidInput) as kserve:
        apply(platform, inference_service)
    assert [(p.field, p.message) for p in kserve.value.problems] == [
        ("spec.predictor.model.args[1]", "--max_length: must be a whole number, got 'lots'")
    ]
    with platform.sessions() as session:
        assert session.scalars(select(ServiceRow)).all() == []  # nothing half-written
    custom = custom_service_doc(["--port", "9000", "--help"])
    assert apply(platform, custom).name == "own"  # a custom server's args are its own


def test_a_manifest_is_refused_with_every_problem_at_once(platform: Platform) -> None:
    """The issue's cases: spec.scaleTarget and maxReplicas < minReplicas, and --port with
    --max_batch_size 0, all in the one answer."""
    args = ["--port", "9000", "--max_batch_size", "0"]
    document = service_doc(
        model={"name": "tiny", "storageUri": "file:///models/tiny", "args": args},
        scaleTarget=0,
        minReplicas=3,
        maxReplicas=2,
    )
    with pytest.raises(InvalidInput) as caught:
        apply(platform, document)
    assert [(p.field, p.message) for p in caught.value.problems] == [
        ("spec.scaleTarget", "Input should be greater than 0"),
        ("spec.maxReplicas", "maxReplicas (2) is less than minReplicas (3)"),
        ("spec.model.args[0]", "--port is set by kiban for each replica; remove it"),
        ("spec.model.args[2]", "--max_batch_size: must be at least 1, got 0"),
    ]


def apply_warnings(
    platform: Platform, document: dict[str, Any], facts: ClusterFacts | None = None
) -> tuple[str, ...]:
    with platform.sessions() as session:
        applied = serving.apply(
            session, ALICE, document, facts=facts or platform.facts, at=platform.clock.now()
        )
        session.commit()
        return applied.warnings


def local_facts(platform: Platform) -> ClusterFacts:
    """The facts of an executor that runs replicas as local processes (no containers)."""
    return ClusterFacts(
        nodes=platform.facts.nodes,
        capabilities=platform.facts.capabilities - {Capability.CONTAINERS},
    )


def test_a_local_executor_warns_of_the_container_fields_it_ignores(
    platform: Platform, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    local = local_facts(platform)
    claims = tmp_path / "claims"
    (claims / "store" / "llm" / "v1").mkdir(parents=True)
    monkeypatch.setenv("KIBAN_PVC_ROOT", str(claims))
    volume = {"name": "cache", "claimName": "hf-cache", "mountPath": "/cache"}
    document = service_doc(
        model={"name": "tiny", "storageUri": "pvc://store/llm/v1"},
        image="registry.example/hf:v1",
        volumes=[volume],
    )
    (warning,) = apply_warnings(platform, document, local)
    assert warning == (
        "the local executor runs each replica as a local process and ignores container-only "
        "fields: spec.image, spec.volumes, spec.model.storageUri (pvc://store/llm/v1: no claim "
        f"is mounted; the model is read from {claims}/store/llm/v1 ($KIBAN_PVC_ROOT/<claim>/...)"
        " on this machine)"
    )
    assert apply_warnings(platform, document) == ()  # an executor with containers mounts them
    # the claim mounted by the service itself: the runtime reads the mount's path
    mount = tmp_path / "models"
    (mount / "llm").mkdir(parents=True)
    mounted = service_doc(
        "mounted",
        model={"name": "tiny", "storageUri": "pvc://store/llm"},
        volumes=[{"name": "store", "claimName": "store", "mountPath": str(mount)}],
    )
    (warning,) = apply_warnings(platform, mounted, local)
    assert "spec.volumes, spec.model.storageUri (pvc://store/llm:" in warning
    assert f"read from {mount}/llm (the volume's mountPath)" in warning
    plain = service_doc("plain", model={"name": "tiny", "storageUri": f"file://{mount}/llm"})
    assert apply_warnings(platform, plain, local) == ()


def test_a_model_path_missing_where_local_replicas_read_it_is_refused_naming_it(
    platform: Platform, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    local = local_facts(platform)
    monkeypatch.setenv("KIBAN_PVC_ROOT", str(tmp_path / "claims"))
    (tmp_path / "a-file").write_text("not a model directory")

    def refused(model: dict[str, Any], facts: ClusterFacts = local, **spec: Any) -> list[str]:
        with pytest.raises(InvalidInput) as caught:
            apply_warnings(platform, service_doc(model={"name": "m", **model}, **spec), facts)
        return [str(p) for p in caught.value.problems]

    assert refused({"storageUri": f"file://{tmp_path}/nope"}) == [
        f"spec.model.storageUri: file://{tmp_path}/nope: {tmp_path}/nope does not exist on this "
        "machine, where the local executor's replicas read the model"
    ]
    assert refused({"storageUri": f"file://{tmp_path}/a-file"}) == [
        f"spec.model.storageUri: file://{tmp_path}/a-file: {tmp_path}/a-file is not a directory "
        "on this machine, where the local executor's replicas read the model"
    ]
    assert refused({"storageUri": "pvc://store/llm"}) == [
        f"spec.model.storageUri: pvc://store/llm: {tmp_path}/claims/store/llm does not exist on "
        "this machine, where the local executor's replicas read the model ($KIBAN_PVC_ROOT/"
        f"<claim>/<path>, $KIBAN_PVC_ROOT being {tmp_path}/claims)"
    ]
    volume = {"name": "s", "claimName": "store", "mountPath": str(tmp_path / "mnt")}
    (problem,) = refused({"storageUri": "pvc://store/llm"}, volumes=[volume])
    assert f"{tmp_path}/mnt/llm does not exist" in problem
    assert "(the claim's mountPath in spec.volumes, which it does not mount)" in problem
    # with the manifest's other problems, in one answer
    assert refused({"storageUri": f"file://{tmp_path}/nope"}, minReplicas=2, maxReplicas=1) == [
        "spec.maxReplicas: maxReplicas (1) is less than minReplicas (2)",
        f"spec.model.storageUri: file://{tmp_path}/nope: {tmp_path}/nope does not exist on this "
        "machine, where the local executor's replicas read the model",
    ]
    with platform.sessions() as session:
        assert session.scalars(select(ServiceRow)).all() == []  # nothing stored
    # Replicas in containers read the image's files or a mounted claim, which the control
    # plane cannot see: accepted, and nothing said about the path.
    in_containers = service_doc(model={"name": "m", "storageUri": "pvc://x/y"})
    assert apply_warnings(platform, in_containers) == ()
    # A model from the Hugging Face cache is looked up where the replica runs: not checked.
    hub = service_doc("hub", model={"name": "m", "storageUri": "hf://org/model"})
    assert apply_warnings(platform, hub, local) == ()
