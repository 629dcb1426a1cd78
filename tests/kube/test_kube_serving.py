"""A KServe InferenceService on kiban's Kubernetes executor, against the real API server: kiban
places a pod per replica (with the service's labels, image, port, model arguments and the
address to listen on), makes a Service per revision that takes traffic, and deletes everything
with the service, even one deleted while kiban was down. Simulated nodes serve no traffic: the
test's probe stands in for the model server's answer (requests themselves are tested on the
local executor).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_platform import NAMESPACE, empty_the_cluster, env_of, kube_platform
from kube_support import eventually

from kiban.devtools.kube import ControlPlane
from kiban.domain.manifests import load_document
from kiban.services import serving
from kiban.services.auth import Principal

pytestmark = pytest.mark.kube

ALICE = Principal(name="alice", tenant="default", is_admin=False)

INFERENCE_SERVICE = """
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: llm
  annotations:
    serving.kserve.io/deploymentMode: RawDeployment
spec:
  predictor:
    minReplicas: 2
    maxReplicas: 3
    model:
      modelFormat: {name: huggingface}
      image: registry.example/kiban-model-server:1
      args: [--model_name=llm, --model_id=org/tiny-llm, --dtype=float16]
      env:
        - {name: HF_HOME, value: /mnt/hf}
      resources:
        limits: {nvidia.com/gpu: "1", cpu: "2", memory: 8Gi}
        requests: {cpu: "1", memory: 4Gi}
"""


def serving_pods(core: Any) -> list[Any]:
    pods = core.list_namespaced_pod(NAMESPACE, label_selector="kiban.dev/service=llm").items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def revision_services(core: Any) -> list[str]:
    found = core.list_namespaced_service(NAMESPACE, label_selector="kiban.dev/service=llm")
    return sorted(s.metadata.name for s in found.items)


def apply(platform: Any, document: dict[str, Any]) -> None:
    with platform.sessions() as session:
        serving.apply(session, ALICE, document, facts=platform.facts, at=platform.clock.now())
        session.commit()
    platform.services.wake()


def test_an_inference_service_runs_as_pods_placed_by_kiban_with_a_service_per_revision(
    control_plane: ControlPlane, core: Any, tmp_path: Path
) -> None:
    empty_the_cluster(core)
    document = load_document(INFERENCE_SERVICE)
    with kube_platform(control_plane, tmp_path / "home") as platform:
        platform.services.interval_s = 0.2
        probed: set[str] = set()

        def probe(address: str, path: str) -> bool:  # every replica answers once running
            probed.add(address)
            return True

        platform.services.probe = probe
        platform.services.start()
        apply(platform, document)
        pods = eventually(
            lambda: len(serving_pods(core)) == 2 and serving_pods(core), what="2 pods"
        )
        for pod in pods:
            labels = pod.metadata.labels
            assert labels["kiban.dev/revision"] == "llm-00001"
            assert pod.spec.node_name  # bound by kiban, no scheduler involved
            container = pod.spec.containers[0]
            assert container.image == "registry.example/kiban-model-server:1"
            assert container.resources.limits["nvidia.com/gpu"] == "1"
            command = container.command
            assert command[command.index("--model_id") + 1] == "org/tiny-llm"
            assert "--dtype=float16" in command
            env = env_of(pod)
            assert env["HF_HOME"] == "/mnt/hf"
            assert env["MASTER_PORT"] == "8080"  # every replica of a revision on one port
            # The model server listens on the pod's IP (its default is loopback), where the
            # revision's Service and the control plane's probes reach it.
            assert env["KIBAN_REPLICA_HOST"] == "0.0.0.0"
        eventually(
            lambda: {f"{p.status.pod_ip}:8080" for p in serving_pods(core)} <= probed,
            what="the probes at each pod's IP and port 8080",
        )
        assert eventually(lambda: revision_services(core) == ["kbs-llm-00001"], what="its Service")
        service = core.read_namespaced_service("kbs-llm-00001", NAMESPACE)
        assert service.spec.selector == {
            "kiban.dev/service": "llm",
            "kiban.dev/revision": "llm-00001",
        }
        assert service.spec.ports[0].target_port == 8080

        # A new model makes revision 2 at 10%: its own pod, and once a replica of it is ready
        # (it takes traffic then) its own Service beside the first's.
        document["spec"]["predictor"]["canaryTrafficPercent"] = 10
        document["spec"]["predictor"]["model"]["args"][1] = "--model_id=org/tiny-llm-v2"
        apply(platform, document)
        canary = eventually(
            lambda: [
                p
                for p in serving_pods(core)
                if p.metadata.labels["kiban.dev/revision"] == "llm-00002"
            ],
            what="the canary's pod",
        )
        assert env_of(canary[0])["KIBAN_REPLICA_HOST"] == "0.0.0.0"
        assert eventually(
            lambda: revision_services(core) == ["kbs-llm-00001", "kbs-llm-00002"],
            what="the canary's Service",
        )
        canary_service = core.read_namespaced_service("kbs-llm-00002", NAMESPACE)
        assert canary_service.spec.selector["kiban.dev/revision"] == "llm-00002"

        # The service controller stops, and the service is deleted while it is down.
        platform.services.stop()
        with platform.sessions() as session:
            serving.delete(session, ALICE, "llm", platform.clock.now())
            session.commit()

    # A restarted kiban remembers no Service it made: it finds them by their labels, and
    # removes them with the service's pods.
    with kube_platform(control_plane, tmp_path / "home") as restarted:
        restarted.services.interval_s = 0.2
        restarted.services.probe = probe
        restarted.services.start()
        eventually(lambda: serving_pods(core) == [], what="the pods to go", timeout=60)
        eventually(lambda: revision_services(core) == [], what="the Services to go", timeout=60)
