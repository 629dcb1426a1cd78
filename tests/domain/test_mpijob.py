"""MPI Operator MPIJob manifests and Volcano's mpi/ssh plugins: what each field becomes in
kiban's ``launcher: mpirun`` Job, and what is refused, where."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from kiban.domain.errors import SpecError
from kiban.domain.manifests import load_document, parse_job_manifest, parse_submission
from kiban.domain.mpi import MpiImplementation
from kiban.domain.mpijob import translate
from kiban.domain.volcano import TRANSLATED_ANNOTATION
from kiban.domain.volcano import translate as translate_volcano

GI = 2**30

# Shaped like the MPI Operator's pi example (v2beta1): a launcher running mpirun, workers
# running sshd, the keys mounted where the image's user keeps them.
MPIJOB = """
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: pi
  namespace: research
spec:
  slotsPerWorker: 2
  sshAuthMountPath: /home/mpiuser/.ssh
  mpiImplementation: OpenMPI
  launcherCreationPolicy: WaitForWorkersReady
  runPolicy:
    cleanPodPolicy: Running
    backoffLimit: 2
    activeDeadlineSeconds: 3600
    ttlSecondsAfterFinished: 60
    schedulingPolicy: {queue: research, minAvailable: 3, scheduleTimeoutSeconds: 100}
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - image: registry.example/mpi-pi:openmpi
              name: mpi-launcher
              securityContext: {runAsUser: 1000}
              command: [mpirun, -n, "4", /home/mpiuser/pi]
              resources:
                limits: {cpu: 1, memory: 1Gi}
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - image: registry.example/mpi-pi:openmpi
              name: mpi-worker
              command: [/usr/sbin/sshd]
              args: [-De, -f, /home/mpiuser/.sshd_config]
              resources:
                limits: {cpu: 2, memory: 4Gi, nvidia.com/gpu: 2}
"""

# Shaped like Volcano's mpi plugin example: the plugins named, a master running mpiexec over
# MPI_HOST, workers running sshd, the master's TaskCompleted ending the job.
VOLCANO_MPI = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: lm-mpi-job
spec:
  minAvailable: 3
  schedulerName: volcano
  plugins:
    ssh: []
    svc: []
    mpi: ["--master=mpimaster", "--worker=mpiworker", "--port=22"]
  tasks:
    - replicas: 2
      name: mpiworker
      template:
        spec:
          containers:
            - command: [/bin/sh, -c, "mkdir -p /var/run/sshd; /usr/sbin/sshd -D"]
              image: registry.example/mpi-example:0.0.1
              name: mpiworker
              resources:
                limits: {nvidia.com/gpu: 1}
    - replicas: 1
      name: mpimaster
      policies:
        - {event: TaskCompleted, action: CompleteJob}
      template:
        spec:
          containers:
            - command: [/bin/sh, -c, "mpiexec --allow-run-as-root --host ${MPI_HOST} -np 2 hello"]
              image: registry.example/mpi-example:0.0.1
              name: mpimaster
"""


def doc(text: str) -> dict[str, Any]:
    return load_document(text)


def test_an_mpijob_becomes_an_mpirun_job_of_a_launcher_and_workers() -> None:
    result = translate(doc(MPIJOB))
    spec = result.manifest.spec
    assert spec.launcher == "mpirun"
    assert [(t.name, t.replicas) for t in spec.tasks] == [("launcher", 1), ("worker", 2)]
    assert spec.mpi is not None
    assert spec.mpi.slots_per_worker == 2
    assert spec.mpi.implementation is MpiImplementation.OPEN_MPI
    assert spec.mpi.ssh_auth_mount_path == "/home/mpiuser/.ssh"
    assert (spec.mpi.launcher_task, spec.mpi.worker_task) == ("launcher", "worker")
    launcher, worker = spec.tasks
    assert launcher.command == ["mpirun", "-n", "4", "/home/mpiuser/pi"]
    assert launcher.image == "registry.example/mpi-pi:openmpi"
    assert worker.command == ["/usr/sbin/sshd"]
    assert worker.args == ["-De", "-f", "/home/mpiuser/.sshd_config"]
    assert (worker.resources.gpu, worker.resources.memory) == (2, 4 * GI)
    assert (launcher.resources.gpu, launcher.resources.cpu) == (0, 1000)
    # runPolicy: what kiban has
    assert (spec.backoff_limit, spec.restart_policy) == (2, "OnFailure")
    assert spec.max_runtime == 3600
    assert (spec.queue, spec.min_available) == ("research", 3)
    meta = result.manifest.metadata
    assert meta.annotations[TRANSLATED_ANNOTATION] == "kubeflow.org/v2beta1"
    warnings = " ".join(result.warnings)
    for ignored in (
        "spec.runPolicy.ttlSecondsAfterFinished",
        "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds",
        "metadata.namespace",
    ):
        assert ignored in warnings
    assert "securityContext" not in warnings  # the container's passes through to its pod
    assert launcher.security_context is not None
    assert launcher.security_context.run_as_user == 1000


def test_an_mpijob_is_dispatched_by_kind_and_stored_as_a_kiban_job() -> None:
    submission = parse_submission(doc(MPIJOB))
    assert submission.document["apiVersion"] == "kiban/v1"
    assert parse_job_manifest(submission.document) == submission.manifest
    assert parse_job_manifest(doc(MPIJOB)) == submission.manifest


def test_the_operators_defaults_are_written_out() -> None:
    """slotsPerWorker defaults to 1 in the Operator (not to the worker's GPUs as in kiban's
    own Job); workers default to one replica; the launcher restarts on failure."""
    data = doc(MPIJOB)
    del data["spec"]["slotsPerWorker"], data["spec"]["mpiImplementation"]
    del data["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    del data["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"]
    del data["spec"]["runPolicy"]
    spec = translate(data).manifest.spec
    assert spec.mpi is not None and spec.mpi.slots_per_worker == 1
    assert spec.mpi.implementation is MpiImplementation.OPEN_MPI
    assert spec.tasks[1].replicas == 1
    assert spec.restart_policy == "Never"


@pytest.mark.parametrize("implementation", ["Intel", "MPICH"])
def test_other_implementations_are_kept(implementation: str) -> None:
    data = doc(MPIJOB)
    data["spec"]["mpiImplementation"] = implementation
    spec = translate(data).manifest.spec
    assert spec.mpi is not None and spec.mpi.implementation == implementation


def test_args_without_a_command_run_as_the_command_with_a_warning() -> None:
    data = doc(MPIJOB)
    container = data["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    container["args"] = container.pop("command")
    result = translate(data)
    assert result.manifest.spec.tasks[0].command == ["mpirun", "-n", "4", "/home/mpiuser/pi"]
    assert any("runs its args as the command" in w for w in result.warnings)


def test_a_launcher_running_as_worker_needs_no_worker() -> None:
    data = doc(MPIJOB)
    del data["spec"]["mpiReplicaSpecs"]["Worker"]
    data["spec"]["runLauncherAsWorker"] = True
    data["spec"]["runPolicy"]["schedulingPolicy"].pop("minAvailable")
    spec = translate(data).manifest.spec
    assert [t.name for t in spec.tasks] == ["launcher"]
    assert spec.mpi is not None and spec.mpi.run_launcher_as_worker


def test_at_startup_is_accepted_with_a_note_that_workers_come_first() -> None:
    data = doc(MPIJOB)
    data["spec"]["launcherCreationPolicy"] = "AtStartup"
    assert any("once every worker runs" in w for w in translate(data).warnings)


@pytest.mark.parametrize(
    ("path", "value", "field", "says"),
    [
        (["spec", "mpiImplementation"], "MVAPICH", "spec.mpiImplementation", "unknown MPI"),
        (["spec", "mpiReplicaSpecs", "Worker"], None, "spec.mpiReplicaSpecs.Worker", "without"),
        (
            ["spec", "mpiReplicaSpecs", "Worker", "replicas"],
            0,
            "spec.mpiReplicaSpecs.Worker.replicas",
            "a launcher without workers",
        ),
        (
            ["spec", "mpiReplicaSpecs", "Launcher"],
            None,
            "spec.mpiReplicaSpecs.Launcher",
            "launcher",
        ),
        (
            ["spec", "mpiReplicaSpecs", "Launcher", "replicas"],
            2,
            "spec.mpiReplicaSpecs.Launcher.replicas",
            "must have 1 replica",
        ),
        (["spec", "slotsPerWorker"], 4, "spec.slotsPerWorker", "more than the worker's GPUs (2)"),
        (["spec", "slotsPerWorker"], 0, "spec.slotsPerWorker", "greater than or equal to 1"),
        (
            ["spec", "mpiReplicaSpecs", "Chief"],
            {"replicas": 1},
            "spec.mpiReplicaSpecs.Chief",
            "unknown field",
        ),
        (["spec", "launcherCreationPolicy"], "Later", "spec.launcherCreationPolicy", "Later"),
        (["spec", "runPolicy", "cleanPodPolicy"], "Some", "spec.runPolicy.cleanPodPolicy", "Some"),
        (["spec", "runPolicy", "suspend"], True, "spec.runPolicy.suspend", "suspended"),
        (
            ["spec", "mpiReplicaSpecs", "Worker", "restartPolicy"],
            "Sometimes",
            "spec.mpiReplicaSpecs.Worker.restartPolicy",
            "unknown policy",
        ),
        (
            ["spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers", 0, "args"],
            None,
            "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].command",
            "entrypoint",
        ),
        (["spec", "slotPerWorker"], 1, "spec.slotPerWorker", "unknown field"),
    ],
)
def test_a_bad_field_is_refused_naming_its_mpijob_path(
    path: list[Any], value: Any, field: str, says: str
) -> None:
    data = copy.deepcopy(doc(MPIJOB))
    if path[-1] == "args":  # a worker with neither command nor args
        del data["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
            "command"
        ]
    node: Any = data
    for part in path[:-1]:
        node = node[part]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    with pytest.raises(SpecError) as caught:
        parse_submission(data)
    fields = [p.field for p in caught.value.problems]
    assert field in fields, caught.value.problems
    assert says in str(caught.value)


# -- Volcano's mpi and ssh plugins ---------------------------------------------------------------


def test_volcano_mpi_plugin_makes_the_master_the_mpi_launcher() -> None:
    result = translate_volcano(doc(VOLCANO_MPI))
    spec = result.manifest.spec
    assert spec.launcher == "mpirun"
    assert [t.name for t in spec.tasks] == ["mpimaster", "mpiworker"]  # the launcher first
    assert spec.mpi is not None
    assert (spec.mpi.launcher_task, spec.mpi.worker_task) == ("mpimaster", "mpiworker")
    assert spec.mpi.ssh_auth_mount_path == "/root/.ssh"
    assert spec.mpi.slots_per_worker is None  # kiban's default: the worker's GPUs
    assert spec.tasks[0].command[-1].endswith("-np 2 hello")
    assert spec.hosts_files  # the mpi plugin implies svc: the hosts files and VC_* variables


def test_volcano_mpi_plugin_alone_still_gives_the_hosts_files() -> None:
    data = doc(VOLCANO_MPI)
    data["spec"]["plugins"].pop("svc", None)
    assert translate_volcano(data).manifest.spec.hosts_files


def test_volcano_ssh_plugin_places_the_keys() -> None:
    data = doc(VOLCANO_MPI)
    data["spec"]["plugins"]["ssh"] = ["--ssh-key-file-path=/home/mpi/.ssh", "--no-root"]
    result = translate_volcano(data)
    assert result.manifest.spec.mpi is not None
    assert result.manifest.spec.mpi.ssh_auth_mount_path == "/home/mpi/.ssh"
    assert any("--no-root" in w for w in result.warnings)


def test_volcano_mpi_plugin_defaults_to_tasks_named_master_and_worker() -> None:
    data = doc(VOLCANO_MPI)
    data["spec"]["plugins"]["mpi"] = []
    data["spec"]["tasks"][0]["name"] = "worker"
    data["spec"]["tasks"][1]["name"] = "master"
    spec = translate_volcano(data).manifest.spec
    assert spec.mpi is not None
    assert (spec.mpi.launcher_task, spec.mpi.worker_task) == ("master", "worker")


@pytest.mark.parametrize(
    ("plugins", "field", "says"),
    [
        ({"mpi": ["--master=chief"]}, "spec.plugins.mpi", "'chief'"),
        ({"mpi": ["--port=70000"]}, "spec.plugins.mpi", "not a TCP port"),
        (
            {"mpi": ["--master=mpimaster", "--worker=mpiworker", "--hosts=4"]},
            "spec.plugins.mpi[2]",
            "unknown argument",
        ),
        ({"ssh": []}, "spec.plugins.ssh", "with the mpi plugin"),
        (
            {"ssh": ["--ssh-private-key=abc"], "mpi": ["--master=mpimaster", "--worker=mpiworker"]},
            "spec.plugins.ssh",
            "generates",
        ),
        (
            {
                "mpi": ["--master=mpimaster", "--worker=mpiworker"],
                "pytorch": ["--master=mpimaster", "--worker=mpiworker"],
            },
            "spec.plugins.mpi",
            "exclude each other",
        ),
    ],
)
def test_volcano_mpi_and_ssh_plugins_refuse_bad_arguments(
    plugins: dict[str, Any], field: str, says: str
) -> None:
    data = doc(VOLCANO_MPI)
    data["spec"]["plugins"] = plugins
    with pytest.raises(SpecError) as caught:
        translate_volcano(data)
    assert field in [p.field for p in caught.value.problems], caught.value.problems
    assert says in str(caught.value)


def test_volcano_mpi_job_with_a_third_task_is_refused() -> None:
    data = doc(VOLCANO_MPI)
    extra = copy.deepcopy(data["spec"]["tasks"][0])
    extra["name"] = "monitor"
    data["spec"]["tasks"].append(extra)
    with pytest.raises(SpecError) as caught:
        translate_volcano(data)
    assert "monitor" in str(caught.value)


def test_the_example_mpijob_translates_without_a_warning() -> None:
    path = Path(__file__).parents[2] / "examples" / "mpijob-allreduce.yaml"
    submission = parse_submission(load_document(path.read_text()))
    spec = submission.manifest.spec
    assert [(t.name, t.replicas) for t in spec.tasks] == [("launcher", 1), ("worker", 3)]
    assert spec.tasks[0].command[:3] == ["mpirun", "-n", "3"]
    assert submission.warnings == ()


def test_workers_kept_apart_by_anti_affinity_on_the_operators_labels_get_one_per_node() -> None:
    data = doc(MPIJOB)
    worker = data["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchLabels": {
                            "training.kubeflow.org/job-name": "pi",
                            "training.kubeflow.org/job-role": "worker",
                        }
                    },
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    submission = parse_submission(data)
    launcher, workers = submission.manifest.spec.tasks
    assert (launcher.max_replicas_per_node, workers.max_replicas_per_node) == (None, 1)
    assert submission.pod_affinity(1).one_per_node
    assert not submission.pod_affinity(0).one_per_node
