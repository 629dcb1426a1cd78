"""deploy/kubernetes: the manifests that run kiban in a cluster are valid (server-side apply,
dry run, on the real API server), and the ServiceAccount's RBAC covers every call the executor
makes (the executor runs a job with a token of that ServiceAccount) and no more than those."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_platform import empty_the_cluster, get, job_pods, manifest, state, submit
from kube_support import eventually
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from kiban.control.loop_settings import LoopSettings
from kiban.devtools.kube import ControlPlane
from kiban.domain.manifests import load_document
from kiban.executors.kubernetes import KubernetesExecutor, KubernetesOptions
from kiban.platform import build_platform
from kiban.services import jobs
from kiban.testing.platform_jobs import ADMIN

pytestmark = pytest.mark.kube

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
API_MODULE = ROOT / "src" / "kiban" / "executors" / "kubernetes" / "api.py"
NAMESPACE = "kiban-system"
MANAGER = "kiban-tests"

# Each CoreV1Api method kiban calls, as the (resource, verb) RBAC checks.
CALLS = {
    "list_node": ("nodes", "list"),
    "read_node": ("nodes", "get"),  # a taint rule reads the node's taints (health remediation)
    "patch_node": ("nodes", "patch"),  # and writes them back
    "list_pod_for_all_namespaces": ("pods", "list"),  # with watch=True it is the watch verb too
    "list_service_for_all_namespaces": ("services", "list"),
    "create_namespace": ("namespaces", "create"),
    "create_namespaced_service": ("services", "create"),
    "read_namespaced_service": ("services", "get"),
    "delete_namespaced_service": ("services", "delete"),
    "create_namespaced_pod": ("pods", "create"),
    "read_namespaced_pod": ("pods", "get"),
    "delete_namespaced_pod": ("pods", "delete"),
    "read_namespaced_pod_log": ("pods/log", "get"),
    "create_namespaced_config_map": ("configmaps", "create"),  # an MPI job's hostfile
    "delete_namespaced_config_map": ("configmaps", "delete"),
    "create_namespaced_secret": ("secrets", "create"),  # an MPI job's ssh keys
    "read_namespaced_secret": ("secrets", "get"),  # a restarted kiban's deferred launcher
    "delete_namespaced_secret": ("secrets", "delete"),
    # a notebook's directory: made at its first start, never deleted by kiban
    "create_namespaced_persistent_volume_claim": ("persistentvolumeclaims", "create"),
}


def documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def granted() -> set[tuple[str, str]]:
    (role,) = [
        d
        for d in documents()
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "kiban-executor"
    ]
    return {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}


@pytest.fixture(scope="module")
def admin(control_plane: ControlPlane) -> Iterator[client.ApiClient]:
    from kubernetes import config

    api_client = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def applied(admin: client.ApiClient) -> None:
    """The namespace, ServiceAccount and RBAC applied for real (the token test needs them)."""
    dynamic = DynamicClient(admin)
    for doc in documents():
        if doc["kind"] in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
            apply(dynamic, doc, dry_run=False)


def apply(dynamic: DynamicClient, doc: dict[str, Any], *, dry_run: bool) -> Any:
    resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    extra = {"dry_run": "All"} if dry_run else {}
    return resource.server_side_apply(
        body=doc,
        name=doc["metadata"]["name"],
        namespace=doc["metadata"].get("namespace"),
        field_manager=MANAGER,
        force_conflicts=True,
        **extra,
    )


def test_every_manifest_applies_server_side_in_a_dry_run(
    admin: client.ApiClient, applied: None
) -> None:
    dynamic = DynamicClient(admin)
    kinds = []
    for doc in documents():
        result = apply(dynamic, doc, dry_run=True)
        assert result.metadata.name == doc["metadata"]["name"]
        kinds.append(doc["kind"])
    assert {"Deployment", "Service", "ServiceAccount", "ClusterRole", "Secret"} <= set(kinds)
    apps = client.AppsV1Api(admin)
    with pytest.raises(ApiException) as missing:  # a dry run leaves nothing behind
        apps.read_namespaced_deployment("kiban", NAMESPACE)
    assert missing.value.status == 404


def test_the_deployment_runs_kiban_up_on_kubernetes_with_the_db_url_from_the_secret() -> None:
    (deployment,) = [d for d in documents() if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["serviceAccountName"] == "kiban"
    assert container["args"][:2] == ["up", "--backend=kubernetes"]
    assert "--db=$(KIBAN_DB_URL)" in container["args"]
    (env,) = container["env"]
    assert env["valueFrom"]["secretKeyRef"] == {"name": "kiban-db", "key": "url"}


def test_the_role_grants_exactly_the_calls_in_the_executors_api_module() -> None:
    """Static: every CoreV1Api method api.py calls is in CALLS, and the role grants just those."""
    tree = ast.parse(API_MODULE.read_text())
    called = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "_core"
    }
    assert called == set(CALLS), f"update CALLS and deploy/kubernetes/rbac.yaml: {called}"
    needed = set(CALLS.values()) | {("pods", "watch")}
    assert granted() == needed


def sa_client(admin: client.ApiClient, control_plane: ControlPlane) -> client.ApiClient:
    """An API client authenticated as kiban's ServiceAccount, by a token from TokenRequest."""
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    token = (
        client.CoreV1Api(admin)
        .create_namespaced_service_account_token("kiban", NAMESPACE, request)
        .status.token
    )
    configuration = client.Configuration()
    configuration.host = admin.configuration.host
    configuration.ssl_ca_cert = admin.configuration.ssl_ca_cert
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)


def test_the_executor_runs_a_job_under_the_service_accounts_token(
    admin: client.ApiClient, applied: None, control_plane: ControlPlane, tmp_path: Path
) -> None:
    core = client.CoreV1Api(admin)
    empty_the_cluster(core)
    token_client = sa_client(admin, control_plane)
    denied = client.CoreV1Api(token_client)
    with pytest.raises(ApiException) as forbidden:  # the token works, and is limited
        denied.list_secret_for_all_namespaces()
    assert forbidden.value.status == 403
    options = KubernetesOptions(
        default_image="registry.example/train:1",
        node_sync_s=0.2,
        namespace_prefix="kiban-rbac-",  # a namespace the role must create
    )
    executor = KubernetesExecutor(token_client, options)
    platform = build_platform(
        home=tmp_path / "home",
        db_url=None,
        executor=executor,
        loop_settings=LoopSettings(tick_s=0.05, node_sync_s=0.2),
    )
    platform.loop.start()
    try:
        eventually(lambda: len(executor.nodes()) == 3, what="nodes listed")
        done = submit(platform, manifest("ok", replicas=2, annotations=SIM_2S))
        held = submit(platform, manifest("cancelled", replicas=1, annotations=SIM_LONG))
        eventually(
            lambda: len(job_pods(core, done)) == 2 and job_pods(core, held), what="both running"
        )
        assert executor.read_log(done, 0, 0, 100) == (b"", 0)  # KWOK serves no logs
        pod = job_pods(core, done)[0]
        try:  # RBAC answers before the (absent) kubelet would: anything but 403 is allowed
            denied.read_namespaced_pod_log(pod.metadata.name, pod.metadata.namespace)
        except ApiException as exc:
            assert exc.status != 403, exc
        eventually(lambda: state(platform, done) == "Succeeded", what="a succeeded job", timeout=30)
        # an MPI job's hostfile ConfigMap and key Secret are within the role too
        mpi = submit(platform, load_document(MPIJOB))
        eventually(lambda: state(platform, mpi) == "Succeeded", what="an MPI job", timeout=30)
        assert get(platform, mpi).message is None or "forbidden" not in get(platform, mpi).message
        for made in (core.list_config_map_for_all_namespaces, core.list_secret_for_all_namespaces):
            eventually(
                lambda made=made: not made(label_selector=f"kiban.dev/job={mpi}").items,
                what="the MPI job's objects deleted",
            )
        with platform.sessions() as session:
            jobs.cancel(session, ADMIN, held, platform.clock.now())
            session.commit()
        platform.loop.wake()
        eventually(
            lambda: state(platform, held) == "Cancelled", what="the cancelled job", timeout=30
        )
        eventually(lambda: not job_pods(core, held), what="its pods deleted")
        assert get(platform, done).message is None or "forbidden" not in get(platform, done).message
    finally:
        platform.close()
        token_client.close()
        empty_the_cluster(core)


SIM_2S = {"kiban.dev/sim-duration": "2s"}
MPIJOB = """
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: rbac-mpi}
spec:
  mpiReplicaSpecs:
    Launcher:
      template:
        metadata: {annotations: {kiban.dev/sim-duration: 2s}}
        spec: {containers: [{name: l, command: [mpirun, hostname]}]}
    Worker:
      replicas: 2
      template:
        spec: {containers: [{name: w, command: [/usr/sbin/sshd, -De]}]}
"""
SIM_LONG = {"kiban.dev/sim-duration": "10m"}
