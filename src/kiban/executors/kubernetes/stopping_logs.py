"""The logs of pods stopped while they ran (a cancel, a preemption, a deadline), kept.

Such a pod is deleted with its grace period and goes, with its log, as soon as its container
ends: its log is followed from the deletion to that end, from a thread of its own, and kept
then (``kept_logs``), with what the job printed while stopping.
"""

from __future__ import annotations

import logging
import threading
import time

from kiban.executors.kubernetes.api import CoreApi, Obj
from kiban.executors.kubernetes.kept_logs import KEPT_LOG_LINES, KeptLogs, LogTail
from kiban.executors.kubernetes.naming import ATTEMPT_LABEL, RANK_LABEL
from kiban.executors.kubernetes.pods import CONTAINER

log = logging.getLogger("kiban.executors.kubernetes")

LOG_FOLLOWERS = 32
"""Logs of stopping pods followed at once, each by a thread until its container ends; a pod
stopped beyond these has its log not kept (a warning says so)."""
FOLLOW_MARGIN_S = 30.0
"""A followed log is given up this long after its pod's grace period (a node that never ends it)."""
FOLLOWERS_CLOSE_S = 5.0
"""How long closing waits for the logs being followed to end."""
DEFAULT_GRACE_S = 30  # Kubernetes' own terminationGracePeriodSeconds


def attempt_and_rank(pod: Obj) -> tuple[int, int]:
    labels = pod["metadata"].get("labels") or {}
    return int(labels.get(ATTEMPT_LABEL, 0)), int(labels.get(RANK_LABEL, 0))


class StoppingPodLogs:
    """Followers of the logs of pods deleted while they ran, at most ``LOG_FOLLOWERS``."""

    def __init__(self, api: CoreApi, kept: KeptLogs) -> None:
        self.api = api
        self.kept = kept
        self._lock = threading.Lock()
        self._followers: dict[str, threading.Thread] = {}  # by pod uid
        self._full_told = False  # warned that all followers are busy, since a slot freed

    def follow(self, job_id: str, pod: Obj, grace: int | None) -> None:
        """Follow the log of a pod just deleted while it ran, from a thread of its own, and
        keep it when its container ends (the pod and its log go a moment later)."""
        meta = pod["metadata"]
        uid = meta.get("uid", "")
        if grace is None:
            grace = int(
                (pod.get("spec") or {}).get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
            )
        with self._lock:
            if uid in self._followers:
                return  # stopped again (forced after its grace period): followed already
            if len(self._followers) >= LOG_FOLLOWERS:
                if not self._full_told:  # once, not for each pod of a large gang
                    log.warning(
                        "the logs of stopping pods are not kept while %d are followed already: "
                        "%s/%s's is not, nor are others' until one ends",
                        LOG_FOLLOWERS,
                        meta["namespace"],
                        meta["name"],
                    )
                    self._full_told = True
                return
            thread = threading.Thread(
                target=self._follow_then_keep,
                args=(job_id, pod, grace + FOLLOW_MARGIN_S),
                name=f"kiban-kube-follow-{meta['name']}",
                daemon=True,
            )
            self._followers[uid] = thread
        thread.start()

    def close(self) -> None:
        """Wait a little for the logs being followed (daemons: one still following at exit is
        not waited for)."""
        give_up = time.monotonic() + FOLLOWERS_CLOSE_S
        with self._lock:
            followers = list(self._followers.values())
        for thread in followers:
            thread.join(max(give_up - time.monotonic(), 0.0))

    def _follow_then_keep(self, job_id: str, pod: Obj, timeout_s: float) -> None:
        try:
            self._follow_log(job_id, pod, timeout_s)
        except Exception:
            log.exception("following the log of %s failed", pod["metadata"].get("name"))
        finally:  # after the log is written: closing waits for the followers it finds
            with self._lock:
                self._followers.pop(pod["metadata"].get("uid", ""), None)
                self._full_told = False

    def _follow_log(self, job_id: str, pod: Obj, timeout_s: float) -> None:
        meta = pod["metadata"]
        attempt, rank = attempt_and_rank(pod)
        tail = LogTail(self.kept.limit)
        give_up = time.monotonic() + timeout_s
        try:
            for chunk in self.api.follow_pod_log(
                meta["namespace"],
                meta["name"],
                CONTAINER,
                tail_lines=KEPT_LOG_LINES,
                timeout_s=timeout_s,
            ):
                tail.add(chunk)
                if time.monotonic() > give_up:
                    tail.add(b"\n[kiban: this log was followed for %ds; not after]\n" % timeout_s)
                    break
        except Exception as exc:  # gone already, the node serves no logs, or it broke off
            log.debug(
                "log of %s/%s not followed to its end: %s", meta["namespace"], meta["name"], exc
            )
            if not tail.data:
                return
            tail.add(b"\n[kiban: the rest of this log could not be read]\n")
        self.kept.keep(job_id, attempt, rank, bytes(tail.data), dropped=tail.dropped)
