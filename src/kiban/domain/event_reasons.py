"""Why an event of a job or an inference service was recorded: the reasons submissions, the
control loop, its stops and the service controller give.

The values are the text stored in ``events.reason`` (and shown by ``kiban describe``), so they
never change; a new reason is a new member.
"""

from __future__ import annotations

from enum import StrEnum


class JobEventReason(StrEnum):
    """The reason of an event recorded on a job while it runs, stops or ends."""

    SUBMITTED = "Submitted"  # stored in its queue
    SUBMITTED_WITH_WARNINGS = "SubmittedWithWarnings"  # stored; some of its fields are ignored
    CHECKPOINTED = "Checkpointed"  # it reported a checkpoint (kiban checkpoint)
    ADMITTED = "Admitted"  # placed: its replicas are being launched
    STARTED = "Started"  # every replica launched
    LAUNCH_FAILED = "LaunchFailed"  # a replica could not be launched: the attempt ends
    REPLICA_WAITING = "ReplicaWaiting"  # a running replica waits (its image being pulled)
    REPLICA_EXITED = "ReplicaExited"  # a replica exited, or was lost
    REPLICA_FAILED = "ReplicaFailed"  # the job stops because a replica failed or was lost
    SUCCEEDED = "Succeeded"
    DEADLINE_EXCEEDED = "DeadlineExceeded"  # it ran longer than its maxRuntime
    PREEMPTED = "Preempted"  # stopped to make room for another job
    NODE_UNHEALTHY = "NodeUnhealthy"  # stopped because a node of its replicas is unhealthy
    CANCELLING = "Cancelling"  # a user cancelled it; its replicas are stopping
    KILLED = "Killed"  # its grace period ran out; its replicas were killed
    CANCELLED = "Cancelled"
    REQUEUED = "Requeued"  # back in its queue after its replicas stopped
    RESTARTING = "Restarting"  # launched again after a failure (restartPolicy OnFailure)
    FAILED = "Failed"
    GPUS_IDLE = "GpusIdle"  # its GPUs read under the idle threshold for the idle window
    PREFLIGHT_FAILED = "PreflightFailed"  # a placed node failed its check: excluded, re-placed
    EPILOGUE_CHECK = "EpilogueCheck"  # it failed on a node that saw a new Xid or ECC event
    SWEEP_YIELDED = "SweepYielded"  # an allreduce sweep's job gave way to waiting work
    EXCLUSION_ENDED = "ExclusionEnded"  # a node it kept off passed K healthy checks: allowed again
    CULLED = "Culled"  # a notebook idle longer than its idleTimeout: stopped, its directory kept
    NOTEBOOK_NOT_READY = "NotebookNotReady"  # a notebook's server did not answer in time
    NOTEBOOK_STOPPED = "NotebookStopped"  # its owner (or an admin) stopped the notebook
    DEPENDENCY_NEVER_SATISFIED = "DependencyNeverSatisfied"  # what it waited for ended otherwise
    STOP_INTENT_UNKNOWN = "StopIntentUnknown"  # written by migration 0013 for a stored intent


class ServiceEventReason(StrEnum):
    """The reason of an event recorded on an inference service (``events.reason``, shown by
    ``kiban describe service``)."""

    CREATED = "Created"
    UPDATED = "Updated"  # a new revision was applied
    APPLIED_WITH_WARNINGS = "AppliedWithWarnings"
    REVISION_READY = "RevisionReady"  # a revision's replicas answer: it serves
    REVISION_FAILED = "RevisionFailed"  # its model failed to load, or its replicas kept crashing
    REVISION_RETIRED = "RevisionRetired"
    PROMOTED = "Promoted"  # the canary became the stable revision
    ROLLED_BACK = "RolledBack"
    DELETED = "Deleted"  # a user deleted it: its replicas stop
    REMOVED = "Removed"  # every replica stopped: the service is gone
