"""The ``kiban/v1`` Job manifest: tasks of replicas, resources, launcher and restart policy."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from kiban.domain.extended_resources import is_extended_name, parse_extended
from kiban.domain.job_relations import ArraySpec, Dependency
from kiban.domain.mpi import MpiSpec
from kiban.domain.node_affinity import (
    POD_TASK_LABEL,
    PodAffinity,
    node_constraint,
    node_preference,
    preferred_terms,
    read_pod_affinity,
    required_terms,
)
from kiban.domain.quantity import parse_cpu_millis, parse_duration, parse_memory
from kiban.scheduler.node_match import NodeConstraint, NodePreference
from kiban.scheduler.snapshot import TaskDemand, extended_of

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NUL = "\x00"
"""No string that reaches exec may hold it (the OS refuses it: the launch would fail)."""
RESERVED_ENV = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"}
RESERVED_ENV_PREFIX = "KIBAN_"


def _memory(value: Any) -> int:
    return parse_memory(value)


def _cpu(value: Any) -> int:
    return parse_cpu_millis(value)


def _duration(value: Any) -> float | None:
    return None if value is None else parse_duration(value)


MemoryBytes = Annotated[int, BeforeValidator(_memory), Field(le=2**50)]  # at most 1 PiB
CpuMillis = Annotated[int, BeforeValidator(_cpu), Field(le=10**7)]  # at most 10,000 CPUs
Seconds = Annotated[float | None, BeforeValidator(_duration)]


def field_error(
    title: str, loc: tuple[str | int, ...], message: str, value: Any
) -> ValidationError:
    """A validation error located at ``loc`` (relative to the model validated), so a rule
    checked across fields names the field at fault."""
    details = InitErrorDetails(
        type=PydanticCustomError("spec", "{message}", {"message": message}), loc=loc, input=value
    )
    return ValidationError.from_exception_data(title, [details])


class SpecModel(BaseModel):
    """Base for manifest parts: camelCase keys, unknown keys rejected, immutable."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, frozen=True)


def check_dns_label(value: str, what: str) -> str:
    if not DNS_LABEL.fullmatch(value):  # match() would take "name\n": $ matches before a \n
        raise ValueError(
            f"{what} {value!r} must be lowercase letters, digits and '-', "
            "start and end with a letter or digit, at most 63 characters"
        )
    return value


class Resources(SpecModel):
    """What one replica needs: whole GPUs, CPU in millicores, memory in bytes, and extended
    resources (``nvidia.com/hostdev: 8``, ``hugepages-2Mi: 1Gi``) written beside them, kept in
    ``extended`` and written back beside them."""

    gpu: int = Field(default=0, ge=0, le=1024)
    cpu: CpuMillis = 1000
    memory: MemoryBytes = 2**30
    extended: dict[str, int] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _gather_extended(cls, data: Any) -> Any:
        """Keys shaped as extended resource names go into ``extended``; others stay (and an
        unknown plain key is refused as an unknown field)."""
        if not isinstance(data, dict):
            return data
        named = {k: v for k, v in data.items() if isinstance(k, str) and is_extended_name(k)}
        if not named and "nvidia.com/gpu" not in data:
            return data
        rest = {k: v for k, v in data.items() if k not in named}
        if "nvidia.com/gpu" in rest:
            raise ValueError("write GPUs as gpu: N (nvidia.com/gpu is what kiban puts on pods)")
        return {**rest, "extended": {**dict(rest.get("extended") or {}), **named}}

    @field_validator("extended", mode="before")
    @classmethod
    def _extended(cls, value: Any) -> Any:
        return parse_extended(value)

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Extended resources beside gpu, cpu and memory, as they were written."""
        data: dict[str, Any] = handler(self)
        extended = data.pop("extended", None) or {}
        data.update(extended)
        return data

    @field_serializer("cpu")
    def _cpu_out(self, value: int) -> str:
        """Millicores written as ``500m``, in Python dumps too: a dumped spec reads back as the
        same spec (an int would read back as cores, 1000 times as many)."""
        return f"{value}m"

    @field_validator("gpu", mode="before")
    @classmethod
    def _gpu_whole(cls, value: Any) -> Any:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError("GPUs are whole numbers")
        return value


IMAGE = re.compile(r"^[^\s]{1,1024}$")
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


class EmptyDirSpec(SpecModel):
    """A scratch directory of the pod: on the node's disk, or in memory (``medium: Memory``,
    what NCCL and MPI need at ``/dev/shm``), at most ``sizeLimit`` bytes."""

    medium: Literal["", "Memory"] = ""
    size_limit: MemoryBytes | None = None

    @field_serializer("size_limit")
    def _size_out(self, value: int | None) -> str | None:
        return None if value is None else str(value)


class VolumeSpec(SpecModel):
    """A volume mounted into the container: a persistent volume claim (``claimName``, e.g. a
    shared ``/data``) or a scratch ``emptyDir`` (``{medium: Memory}`` at ``/dev/shm``)."""

    name: str
    claim_name: str | None = Field(default=None, min_length=1, max_length=253)
    empty_dir: EmptyDirSpec | None = None
    mount_path: str = Field(min_length=1, max_length=4096)
    read_only: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns_label(value, "volume name")

    @model_validator(mode="after")
    def _one_source(self) -> VolumeSpec:
        if (self.claim_name is None) == (self.empty_dir is None):
            raise field_error(
                "VolumeSpec",
                ("claimName",),
                "give exactly one of claimName (a persistent volume claim) and emptyDir",
                self.claim_name,
            )
        return self

    @field_validator("mount_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or "\x00" in value:
            raise ValueError(f"mountPath {value!r} must be an absolute path")
        return value


CAPABILITY = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")


class CapabilitiesSpec(SpecModel):
    """Linux capabilities added to or dropped from the container (``IPC_LOCK`` lets RDMA pin
    memory), named as Kubernetes names them: without ``CAP_``."""

    add: list[str] = Field(default_factory=list, max_length=64)
    drop: list[str] = Field(default_factory=list, max_length=64)

    @field_validator("add", "drop")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not CAPABILITY.match(name) or name.startswith("CAP_"):
                raise ValueError(
                    f"{name!r} is not a capability name (examples: IPC_LOCK, SYS_RESOURCE)"
                )
        return value


class SecurityContextSpec(SpecModel):
    """The container's securityContext as Kubernetes writes it (the fields RDMA and MPI jobs
    use); passed to the pods unchanged."""

    capabilities: CapabilitiesSpec | None = None
    privileged: bool | None = None
    allow_privilege_escalation: bool | None = None
    run_as_user: int | None = Field(default=None, ge=0, le=2**31 - 1)
    run_as_group: int | None = Field(default=None, ge=0, le=2**31 - 1)
    run_as_non_root: bool | None = None
    read_only_root_filesystem: bool | None = None


# Fields that only a container executor (Kubernetes) uses; the local executor ignores them.
CONTAINER_FIELDS = (
    "image",
    "volumes",
    "nodeSelector",
    "affinity",
    "hostNetwork",
    "annotations",
    "securityContext",
)


class TaskSpec(SpecModel):
    """A set of identical replicas of one command.

    ``command`` (then ``args``) is what runs. ``maxReplicasPerNode`` limits how many of the
    task's replicas one node may hold (1: one per node, as ``kiban run --nodes N`` asks; absent:
    no limit), on every executor. ``image``, ``volumes``, ``nodeSelector``, ``affinity``,
    ``hostNetwork`` and ``annotations`` (of the pods) shape the pods on Kubernetes (``affinity``
    is the Kubernetes Affinity object as written); the local executor ignores them with a
    warning.
    """

    name: str = "worker"
    replicas: int = Field(default=1, ge=1, le=10000)
    max_replicas_per_node: int | None = Field(default=None, ge=1, le=10000)
    resources: Resources = Resources()
    command: list[str] = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    nproc_per_node: int | None = Field(default=None, ge=1, le=1024)
    image: str | None = None
    volumes: list[VolumeSpec] = Field(default_factory=list, max_length=64)
    node_selector: dict[str, str] = Field(default_factory=dict)
    affinity: dict[str, Any] | None = None
    host_network: bool = False
    annotations: dict[str, str] = Field(default_factory=dict)
    security_context: SecurityContextSpec | None = None

    def container_fields(self) -> list[str]:
        """The container-only fields this task sets (for the local executor's warning)."""
        values = {
            "image": self.image,
            "volumes": self.volumes,
            "nodeSelector": self.node_selector,
            "affinity": self.affinity,
            "hostNetwork": self.host_network,
            "annotations": self.annotations,
            "securityContext": self.security_context,
        }
        return [name for name in CONTAINER_FIELDS if values[name]]

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        if value is not None and not IMAGE.match(value):
            raise ValueError(f"image {value!r} must be a non-empty reference without spaces")
        return value

    @field_validator("args")
    @classmethod
    def _args(cls, value: list[str]) -> list[str]:
        if any(NUL in part for part in value):
            raise ValueError("must not contain NUL characters")
        return value

    @field_validator("volumes")
    @classmethod
    def _unique_volumes(cls, value: list[VolumeSpec]) -> list[VolumeSpec]:
        names = [v.name for v in value]
        paths = [v.mount_path for v in value]
        for what, items in (("names", names), ("mountPaths", paths)):
            repeated = sorted({n for n in items if items.count(n) > 1})
            if repeated:
                raise ValueError(f"volume {what} must be unique; repeated: {', '.join(repeated)}")
        return value

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not LABEL_KEY.match(key):
                raise ValueError(f"{key!r} is not a valid annotation key")
            if key.startswith("kiban.dev/job"):
                raise ValueError(f"{key} is set by kiban")
        return value

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not LABEL_KEY.match(key):
                raise ValueError(f"{key!r} is not a valid label key")
            if not LABEL_VALUE.match(item):
                raise ValueError(f"{item!r} (for {key}) is not a valid label value")
        return value

    @field_validator("affinity")
    @classmethod
    def _affinity(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        required_terms(value)  # the parts that steer placement must be well formed
        preferred_terms(value)
        return value

    def node_constraint(self) -> NodeConstraint | None:
        """The nodes this task's pods may use on a container executor (None: any)."""
        return node_constraint(self.node_selector, self.affinity)

    def node_preference(self) -> NodePreference | None:
        """The nodes this task's pods would rather use on a container executor (None: none)."""
        return node_preference(self.affinity)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns_label(value, "task name")

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the program to run (the first word) must not be empty")
        if any(NUL in part for part in value):
            raise ValueError("must not contain NUL characters")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: (str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v)
                for k, v in value.items()
            }
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not ENV_NAME.match(key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
            if key in RESERVED_ENV or key.startswith(RESERVED_ENV_PREFIX):
                raise ValueError(f"{key} is set by kiban and cannot be overridden")
            if NUL in item:
                raise ValueError(f"the value of {key} must not contain NUL characters")
        return value


class TopologySpec(SpecModel):
    """Place the gang inside one domain of ``level`` (``required``), or try to (``preferred``).

    The levels are the cluster policy's (``topology.levels``); submission refuses others.
    """

    level: str = Field(min_length=1, max_length=63)
    mode: Literal["required", "preferred"] = "required"

    @property
    def required(self) -> bool:
        return self.mode == "required"


class JobSpec(SpecModel):
    """The ``spec`` of a Job: where it queues, how it launches, and its tasks.

    ``tasks`` comes first so that the rules on other fields can check against it.
    ``masterPort`` fixes ``MASTER_PORT`` on container executors (the local one picks a free port,
    as its jobs share one host). ``indexEnv`` names variables set to each replica's index within
    its task (Volcano's ``env`` plugin sets ``VC_TASK_INDEX``). ``hostsFiles`` gives every
    replica the job's hosts by task as Volcano's ``svc`` plugin does (``<task>.host`` files,
    ``VC_<TASK>_HOSTS``, ``VC_<TASK>_NUM``: ``kiban.executors.task_hosts``).
    """

    tasks: list[TaskSpec] = Field(min_length=1, max_length=64)
    queue: str = "default"
    priority_class: str | None = None
    launcher: Literal["torchrun", "mpirun", "none"] = "none"
    mpi: MpiSpec | None = None
    min_available: int | None = Field(default=None, ge=1)
    max_runtime: Seconds = None
    restart_policy: Literal["Never", "OnFailure"] = "Never"
    backoff_limit: int = Field(default=3, ge=0, le=100)
    termination_grace_period: Seconds = 30.0
    working_dir: str | None = None
    topology: TopologySpec | None = None
    master_port: int | None = Field(default=None, ge=1, le=65535)
    index_env: list[str] = Field(default_factory=list, max_length=16)
    hosts_files: bool = False
    array: ArraySpec | None = None
    depends_on: list[Dependency] = Field(default_factory=list, max_length=64)

    @model_validator(mode="after")
    def _mpi_shape(self) -> JobSpec:
        """An ``mpirun`` job has one launcher replica and a worker task; ``spec.mpi`` only with
        it; slots bound to GPUs are at most the worker's GPUs."""
        if self.launcher != "mpirun":
            if self.mpi is not None:
                raise ValueError("spec.mpi is only for launcher: mpirun")
            return self
        mpi = self.mpi or MpiSpec()
        by_name = {t.name: t for t in self.tasks}
        launcher = by_name.get(mpi.launcher_task)
        worker = by_name.get(mpi.worker_task)
        if launcher is None:
            message = f"launcher: mpirun needs a task named {mpi.launcher_task!r}"
            raise field_error("JobSpec", ("tasks",), message, [t.name for t in self.tasks])
        if launcher.replicas != 1:
            index = self.tasks.index(launcher)
            message = f"task {mpi.launcher_task!r} (the MPI launcher) must have 1 replica"
            raise field_error("JobSpec", ("tasks", index, "replicas"), message, launcher.replicas)
        if worker is None and not mpi.run_launcher_as_worker:
            message = f"launcher: mpirun needs a worker task named {mpi.worker_task!r}"
            raise field_error("JobSpec", ("tasks",), message, [t.name for t in self.tasks])
        gpus = worker.resources.gpu if worker is not None else launcher.resources.gpu
        if mpi.slots_per_worker is not None and gpus and mpi.slots_per_worker > gpus:
            message = (
                f"{mpi.slots_per_worker} slots is more than the worker's GPUs ({gpus}): "
                "each slot is bound to a GPU"
            )
            raise field_error("JobSpec", ("mpi", "slotsPerWorker"), message, mpi.slots_per_worker)
        return self

    @field_validator("index_env")
    @classmethod
    def _index_env(cls, value: list[str]) -> list[str]:
        for key in value:
            if not ENV_NAME.match(key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
            if key in RESERVED_ENV or key.startswith(RESERVED_ENV_PREFIX):
                raise ValueError(f"{key} is set by kiban and cannot be overridden")
        return value

    @field_validator("working_dir")
    @classmethod
    def _working_dir(cls, value: str | None) -> str | None:
        if value is not None and NUL in value:
            raise ValueError("must not contain NUL characters")
        return value

    @field_validator("queue")
    @classmethod
    def _queue(cls, value: str) -> str:
        return check_dns_label(value, "queue name")

    @field_validator("tasks")
    @classmethod
    def _unique_tasks(cls, value: list[TaskSpec]) -> list[TaskSpec]:
        names = [t.name for t in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"task names must be unique; repeated: {', '.join(duplicates)}")
        return value

    @field_validator("min_available")
    @classmethod
    def _gang_fits_job(cls, value: int | None, info: ValidationInfo) -> int | None:
        tasks = info.data.get("tasks")
        if value is not None and tasks is not None:
            total = sum(t.replicas for t in tasks)
            if value > total:
                raise ValueError(
                    f"minAvailable ({value}) is more than the job's replicas ({total})"
                )
        return value

    @field_validator("max_runtime")
    @classmethod
    def _positive_runtime(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError("maxRuntime must be positive")
        return value

    @property
    def total_replicas(self) -> int:
        return sum(t.replicas for t in self.tasks)

    @property
    def gang_size(self) -> int:
        """Replicas that must start together (``minAvailable``, default all)."""
        return self.min_available or self.total_replicas

    @property
    def total_gpus(self) -> int:
        return sum(t.replicas * t.resources.gpu for t in self.tasks)


def task_demands(spec: JobSpec, node_constraints: bool = False) -> tuple[TaskDemand, ...]:
    """What each task asks of the scheduler: its replicas' size and how many a node may hold;
    with ``node_constraints`` (a container executor, which puts them on the pods) also the
    nodes its nodeSelector and required node affinity admit, and those its preferred node
    affinity orders first."""
    return tuple(
        TaskDemand(
            t.name,
            t.replicas,
            t.resources.gpu,
            t.resources.cpu,
            t.resources.memory,
            t.node_constraint() if node_constraints else None,
            t.node_preference() if node_constraints else None,
            t.max_replicas_per_node,
            extended_of(t.resources.extended),
        )
        for t in spec.tasks
    )


class ObjectMeta(SpecModel):
    """The manifest's ``metadata``: a name, labels and annotations."""

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns_label(value, "name")


class JobManifest(SpecModel):
    """A whole ``apiVersion: kiban/v1``, ``kind: Job`` document.

    A task whose pods' required anti-affinity keeps them on distinct hosts (see
    ``node_affinity.read_pod_affinity``) gets ``maxReplicasPerNode: 1``: what it means is what
    kiban does with it.
    """

    api_version: Literal["kiban/v1"]
    kind: Literal["Job"]
    metadata: ObjectMeta
    spec: JobSpec

    def pod_affinity(self, index: int) -> PodAffinity:
        """What task ``index``'s pod (anti-)affinity means, its pods labelled as kiban labels
        them (the job's labels and its task's name)."""
        labels = [{**self.metadata.labels, POD_TASK_LABEL: task.name} for task in self.spec.tasks]
        others = labels[:index] + labels[index + 1 :]
        return read_pod_affinity(self.spec.tasks[index].affinity, labels[index], others)

    @model_validator(mode="after")
    def _spread_by_anti_affinity(self) -> JobManifest:
        tasks = list(self.spec.tasks)
        for i, task in enumerate(tasks):
            spread = task.affinity and task.max_replicas_per_node != 1
            if spread and self.pod_affinity(i).one_per_node:
                tasks[i] = task.model_copy(update={"max_replicas_per_node": 1})
        if tasks == self.spec.tasks:
            return self
        return self.model_copy(update={"spec": self.spec.model_copy(update={"tasks": tasks})})
