"""The logs of pods that ended are kept when kiban deletes the pods, and ``read_log`` serves
them after; a scripted stand-in for the API records the order of the calls (KWOK's fake nodes
serve no logs, so the kube tier cannot show one)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from kiban.executors.base import ReplicaRef
from kiban.executors.kubernetes import KubernetesOptions, executor, pod_logs, stopping_logs
from kiban.executors.kubernetes.executor import KubernetesExecutor
from kiban.executors.kubernetes.kept_logs import KeptLogs, LogTail

Obj = dict[str, Any]
NAMESPACE = "kiban-t"
JOB = "train-abc123"


def pod(rank: int, phase: str, attempt: int = 1) -> Obj:
    return {
        "metadata": {
            "namespace": NAMESPACE,
            "name": f"kb-{JOB}-{attempt}-{rank}",
            "uid": f"u{attempt}-{rank}",
            "labels": {
                "kiban.dev/job": JOB,
                "kiban.dev/attempt": str(attempt),
                "kiban.dev/rank": str(rank),
            },
        },
        "spec": {"nodeName": "node-0"},
        "status": {"phase": phase},
    }


def ref(rank: int, attempt: int = 1) -> ReplicaRef:
    name = f"kb-{JOB}-{attempt}-{rank}"
    return ReplicaRef(JOB, attempt, "worker", rank, rank, f"{NAMESPACE}/{name}/u{attempt}-{rank}")


class ScriptedCluster:
    """Pods by name, their logs, and every call that reads a log or deletes something."""

    def __init__(self, *pods: Obj) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.logs: dict[str, bytes] = {}
        self.streams: dict[str, list[bytes | Exception]] = {}  # followed logs, chunk by chunk
        self.calls: list[str] = []

    # the API
    def read_pod(self, namespace: str, name: str) -> Obj:
        if name not in self.pods:
            raise ApiException(status=404)
        return self.pods[name]

    def read_pod_log(
        self, namespace: str, name: str, container: str, tail_lines: int | None = None
    ) -> bytes:
        self.calls.append(f"log {name}" if tail_lines is None else f"log {name} tail")
        if name not in self.logs:
            raise ApiException(status=500, reason="the node serves no logs")
        return self.logs[name]

    def follow_pod_log(
        self,
        namespace: str,
        name: str,
        container: str,
        *,
        tail_lines: int | None,
        timeout_s: float,
    ) -> Iterator[bytes]:
        self.calls.append(f"follow {name}" if tail_lines else f"follow {name} whole")
        if name not in self.streams:
            raise ApiException(status=500, reason="the node serves no logs")
        for chunk in self.streams[name]:
            if isinstance(chunk, Exception):
                raise chunk
            yield chunk

    def delete_pod(self, namespace: str, name: str, **kwargs: Any) -> None:
        self.calls.append(f"delete pod {name}")
        self.pods.pop(name, None)

    def delete_service(self, namespace: str, name: str) -> None:
        self.calls.append(f"delete service {name}")

    def delete_secret(self, namespace: str, name: str) -> None:
        self.calls.append(f"delete secret {name}")

    def list_nodes(self, label_selector: str = "") -> list[Obj]:
        return [{"metadata": {"name": "node-0"}}]

    def list_pods(self, **selectors: str) -> Obj:
        return {"items": []}

    def close(self) -> None:
        pass

    # the pod cache
    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def get(self, namespace: str, name: str) -> Obj | None:
        return self.pods.get(name)

    def select(self, labels: dict[str, str]) -> list[Obj]:
        return [
            p
            for p in self.pods.values()
            if all(p["metadata"]["labels"].get(k) == v for k, v in labels.items())
        ]


def make(
    monkeypatch: pytest.MonkeyPatch, cluster: ScriptedCluster, log_dir: Path | None
) -> KubernetesExecutor:
    monkeypatch.setattr(executor, "CoreApi", lambda _client: cluster)
    monkeypatch.setattr(executor, "PodCache", lambda *_args: cluster)
    return KubernetesExecutor(object(), KubernetesOptions(), log_dir=log_dir)  # type: ignore[arg-type]


def test_the_logs_of_an_attempt_that_ended_are_kept_before_anything_is_deleted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cluster = ScriptedCluster(pod(0, "Failed"), pod(1, "Succeeded"))
    cluster.logs = {f"kb-{JOB}-1-0": b"rank 0: CUDA error\n", f"kb-{JOB}-1-1": b"rank 1 done\n"}
    kube = make(monkeypatch, cluster, tmp_path)
    kube.stop(ref(0), force=True)
    kube.stop(ref(1), force=True)
    kube.close()  # waits for the keeping in the background
    assert cluster.calls == [
        f"log kb-{JOB}-1-0 tail",  # its end only, however long it is
        f"delete pod kb-{JOB}-1-0",
        f"log kb-{JOB}-1-1 tail",  # before the Service, which owns the pod, is deleted
        f"delete service kb-{JOB}-1",
        f"delete secret kb-{JOB}-1-env",  # by name: the attempt's credentials, if it had any
        f"delete pod kb-{JOB}-1-1",
    ]
    assert not cluster.pods
    assert kube.read_log(JOB, 0, 0, 1000) == (b"rank 0: CUDA error\n", 19)
    assert kube.read_log(JOB, 1, 5, 1000) == (b"1 done\n", 12)


@pytest.mark.parametrize("force", [False, True])
def test_a_running_pod_stopped_is_deleted_at_once_and_its_log_followed_to_its_end(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, force: bool
) -> None:
    """A cancel or a preemption: the pod and its log go once the container ends, so the log
    is followed from the deletion on; what the job printed while stopping is kept too."""
    name = f"kb-{JOB}-1-0"
    cluster = ScriptedCluster(pod(0, "Running"))
    cluster.streams = {name: [b"step 41\nstep 42\n", b"SIGTERM: saving a checkpoint\n", b"saved\n"]}
    kube = make(monkeypatch, cluster, tmp_path)
    kube.stop(ref(0), force=force)
    assert cluster.calls[0] == f"delete pod {name}"  # at once, on the caller's thread
    kube.close()  # waits for the follower
    assert cluster.calls[:2] == [f"delete pod {name}", f"follow {name}"]
    assert not cluster.pods
    whole = b"step 41\nstep 42\nSIGTERM: saving a checkpoint\nsaved\n"
    assert kube.read_log(JOB, 0, 0, 1000) == (whole, len(whole))


def test_a_pod_stopped_twice_is_followed_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name = f"kb-{JOB}-1-0"
    cluster = ScriptedCluster(pod(0, "Running"))
    cluster.streams = {name: [b"one\n"]}
    cluster.delete_pod = lambda namespace, name, **kw: cluster.calls.append(f"delete {name}")  # type: ignore[method-assign]
    kube = make(monkeypatch, cluster, tmp_path)
    release = threading.Event()
    original = cluster.follow_pod_log

    def slow_follow(*args: Any, **kwargs: Any) -> Iterator[bytes]:
        release.wait(5)  # still following when the forced stop comes
        yield from original(*args, **kwargs)

    cluster.follow_pod_log = slow_follow  # type: ignore[method-assign]
    kube.stop(ref(0), force=False)
    cluster.pods[name]["metadata"]["deletionTimestamp"] = "now"
    kube.stop(ref(0), force=True)  # the grace period is over
    release.set()
    kube.close()
    assert cluster.calls.count(f"follow {name}") == 1
    assert cluster.calls.count(f"delete {name}") == 2
    assert kube.read_log(JOB, 0, 0, 100)[0] == b"one\n"


def test_a_followed_log_that_breaks_off_keeps_what_was_read_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name = f"kb-{JOB}-1-0"
    cluster = ScriptedCluster(pod(0, "Running"))
    cluster.streams = {name: [b"step 1\n", ConnectionResetError("node went away")]}
    kube = make(monkeypatch, cluster, tmp_path)
    kube.stop(ref(0), force=False)
    kube.close()
    assert kube.read_log(JOB, 0, 0, 1000)[0] == (
        b"step 1\n\n[kiban: the rest of this log could not be read]\n"
    )


def test_a_stopped_pod_whose_node_serves_no_log_keeps_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cluster = ScriptedCluster(pod(0, "Running"))  # no stream: following fails at once
    kube = make(monkeypatch, cluster, tmp_path)
    kube.stop(ref(0), force=False)
    kube.close()
    assert f"follow kb-{JOB}-1-0" in cluster.calls
    assert KeptLogs(tmp_path).newest_attempt(JOB, 0) is None


def test_a_pod_on_a_node_that_is_gone_is_not_followed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lost = pod(0, "Running")
    lost["spec"]["nodeName"] = "node-9"  # not among the cluster's nodes
    cluster = ScriptedCluster(lost)
    cluster.streams = {f"kb-{JOB}-1-0": [b"x\n"]}
    kube = make(monkeypatch, cluster, tmp_path)
    kube.nodes()
    kube.stop(ref(0), force=False)
    kube.close()
    assert cluster.calls == [f"delete pod kb-{JOB}-1-0"]


def test_beyond_the_followers_limit_a_stopped_pod_is_deleted_without_its_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = ScriptedCluster(pod(0, "Running"), pod(1, "Running"), pod(2, "Running"))
    release = threading.Event()

    def held(*_args: Any, **_kwargs: Any) -> Iterator[bytes]:
        release.wait(5)
        yield b"log\n"

    cluster.follow_pod_log = held  # type: ignore[method-assign]
    monkeypatch.setattr(stopping_logs, "LOG_FOLLOWERS", 1)
    kube = make(monkeypatch, cluster, tmp_path)
    kube.stop(ref(0), force=False)
    kube.stop(ref(1), force=False)
    kube.stop(ref(2), force=False)
    refusals = [r.getMessage() for r in caplog.records if "not kept" in r.getMessage()]
    assert len(refusals) == 1 and f"kb-{JOB}-1-1's is not" in refusals[0]  # once, not per pod
    release.set()
    kube.close()
    assert not cluster.pods  # both deleted all the same
    assert KeptLogs(tmp_path).newest_attempt(JOB, 0) == 1
    assert KeptLogs(tmp_path).newest_attempt(JOB, 1) is None


def test_a_followed_tail_holds_about_its_limit_and_counts_the_rest(tmp_path: Path) -> None:
    tail = LogTail(limit=10)
    for n in range(100):
        tail.add(b"%03d," % n)  # 400 bytes
    assert len(tail.data) <= 2 * 10 + 4
    kept = KeptLogs(tmp_path, limit=10)
    kept.keep(JOB, 1, 0, bytes(tail.data), dropped=tail.dropped)
    assert kept.read(JOB, 1, 0) == (
        b"[kiban: the first 390 bytes of this log were not kept]\n7,098,099,"
    )


def test_without_a_log_dir_nothing_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = ScriptedCluster(pod(0, "Failed"))
    kube = make(monkeypatch, cluster, None)
    kube.stop(ref(0), force=True)
    kube.close()
    assert cluster.calls == [
        f"delete pod kb-{JOB}-1-0",
        f"delete service kb-{JOB}-1",
        f"delete secret kb-{JOB}-1-env",
    ]


def test_a_newer_attempts_pod_is_read_rather_than_an_older_kept_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    KeptLogs(tmp_path).keep(JOB, 1, 0, b"attempt 1\n")
    cluster = ScriptedCluster(pod(0, "Running", attempt=2))
    cluster.logs = {f"kb-{JOB}-2-0": b"attempt 2\n"}
    kube = make(monkeypatch, cluster, tmp_path)
    assert kube.read_log(JOB, 0, 0, 100)[0] == b"attempt 2\n"
    cluster.pods.clear()  # gone, and its log was not kept (it was cancelled while running)
    assert kube.read_log(JOB, 0, 0, 100)[0] == b"attempt 1\n"
    kube.close()


def test_a_long_log_keeps_its_end(tmp_path: Path) -> None:
    kept = KeptLogs(tmp_path, limit=10)
    kept.keep(JOB, 3, 2, b"0123456789abcdefghij")
    assert kept.newest_attempt(JOB, 2) == 3
    assert (
        kept.read(JOB, 3, 2) == b"[kiban: the first 10 bytes of this log were not kept]\nabcdefghij"
    )
    assert list((tmp_path / JOB / "3").iterdir()) == [tmp_path / JOB / "3" / "2.log"]


def test_only_job_ids_name_kept_logs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a DNS label"):
        KeptLogs(tmp_path).path("../../etc", 1, 0)
    assert KeptLogs(tmp_path).newest_attempt("../x", 0) is None


def test_a_live_log_read_in_chunks_is_fetched_once_and_again_only_at_its_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The API serves a log only whole: without a copy, each 64 KiB chunk fetched all of it."""
    cluster = ScriptedCluster(pod(0, "Running"))
    name = f"kb-{JOB}-1-0"
    cluster.logs = {name: bytes(range(256)) * 800}  # 200 KiB
    kube = make(monkeypatch, cluster, None)
    monkeypatch.setattr(pod_logs, "LOG_REFETCH_S", 3600.0)  # no second passes in this read
    offset, read = 0, b""
    while chunk := kube.read_log(JOB, 0, offset, 64 * 1024)[0]:
        read += chunk
        offset += len(chunk)
    assert read == cluster.logs[name]
    assert cluster.calls == [f"log {name}"]  # one fetch for four chunks and the end

    cluster.logs[name] += b"more\n"
    monkeypatch.setattr(pod_logs, "LOG_REFETCH_S", 0.0)  # as if a second had passed
    assert kube.read_log(JOB, 0, offset, 64 * 1024) == (b"more\n", offset + 5)
    assert cluster.calls == [f"log {name}", f"log {name}"]
    kube.close()


def test_a_live_pods_log_is_followed_from_the_readers_offset(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name = f"kb-{JOB}-1-0"
    cluster = ScriptedCluster(pod(0, "Running"))
    cluster.streams = {name: [b"0123", b"45", b"6789"]}
    kube = make(monkeypatch, cluster, tmp_path)
    live = kube.follow_log(JOB, 0, 5)
    assert live is not None
    assert cluster.calls == []  # nothing asked of the API server until the first chunk
    assert b"".join(live) == b"56789"
    assert cluster.calls == [f"follow {name} whole"]  # from its start: the API has no offset
    kube.close()


@pytest.mark.parametrize("case", ["no pod", "ended", "deleting", "kept is newer"])
def test_nothing_is_followed_where_no_live_pod_is_the_newest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, case: str
) -> None:
    pods = {
        "no pod": [],
        "ended": [pod(0, "Succeeded")],
        "deleting": [pod(0, "Running")],
        "kept is newer": [pod(0, "Running")],
    }[case]
    if case == "deleting":
        pods[0]["metadata"]["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    if case == "kept is newer":
        KeptLogs(tmp_path).keep(JOB, 1, 0, b"kept\n")
    kube = make(monkeypatch, ScriptedCluster(*pods), tmp_path)
    assert kube.follow_log(JOB, 0, 0) is None
    kube.close()


def test_a_live_log_bigger_than_the_cache_is_still_fetched_once_for_all_its_chunks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The one read last is kept whatever its size; older copies go to keep the bytes bounded."""
    big, small = f"kb-{JOB}-1-0", f"kb-{JOB}-1-1"
    cluster = ScriptedCluster(pod(0, "Running"), pod(1, "Running"))
    cluster.logs = {big: bytes(range(256)) * 800, small: b"rank 1\n"}  # 200 KiB and 7 bytes
    kube = make(monkeypatch, cluster, None)
    monkeypatch.setattr(pod_logs, "LOG_REFETCH_S", 3600.0)
    monkeypatch.setattr(pod_logs, "LOG_CACHE_BYTES", 100 * 1024)  # less than the big log
    assert kube.read_log(JOB, 1, 0, 64 * 1024)[0] == b"rank 1\n"
    offset, read = 0, b""
    while chunk := kube.read_log(JOB, 0, offset, 64 * 1024)[0]:
        read += chunk
        offset += len(chunk)
    assert read == cluster.logs[big]
    assert cluster.calls == [f"log {small}", f"log {big}"]  # once each, not once per chunk
    kube.read_log(JOB, 1, 0, 64 * 1024)  # the small one's copy went to make room
    assert cluster.calls[-1] == f"log {small}" and len(cluster.calls) == 3
    kube.close()
