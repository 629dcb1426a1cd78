"""Revisions and traffic: which revision of a service serves which share of its requests.

A service has at most two revisions taking traffic: the ``stable`` one and a ``canary`` with a
percentage. A canary at 100% is a rollout that completes by itself once the canary is ready
(a new service's first revision is such a canary). Traffic only reaches a revision that has a
ready replica, so a canary that is still loading, or one that failed, leaves the stable one
with everything (KServe routes the same way: a revision takes traffic once Ready).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class RevisionState(StrEnum):
    """Where a revision is: loading its model, serving, failed to start, or out of use."""

    LOADING = "Loading"
    READY = "Ready"
    FAILED = "Failed"
    RETIRED = "Retired"

    @property
    def live(self) -> bool:
        """Whether the revision may still take traffic (and so keeps replicas)."""
        return self in (RevisionState.LOADING, RevisionState.READY)


@dataclass(frozen=True)
class TrafficTargets:
    """The service's rollout as stored: revision numbers and the canary's share."""

    stable: int | None
    canary: int | None
    canary_percent: int


def serving_revisions(revisions: Iterable[tuple[int, str, bool]]) -> set[int]:
    """The revisions, given as (number, state, has a ready replica), that take their share of
    traffic: live ones that became Ready, even at zero replicas (their requests wait while a
    replica starts, as Knative's activator has them), or that have a ready replica. One still
    loading takes none while another serves."""
    return {
        number
        for number, state, has_ready in revisions
        if RevisionState(state).live and (state == RevisionState.READY.value or has_ready)
    }


def traffic_split(targets: TrafficTargets, serving: set[int]) -> dict[int, int]:
    """Percent of requests per revision number, given which revisions serve
    (``serving_revisions``).

    With none serving the targets still get the traffic (requests wait for a replica), the
    stable one first: the split is never empty while the service has a live revision.
    """
    stable, canary = targets.stable, targets.canary
    if canary is not None and canary in serving and stable is not None and stable in serving:
        percent = max(0, min(100, targets.canary_percent))
        split = {stable: 100 - percent, canary: percent}
        return {number: share for number, share in split.items() if share > 0}
    if stable is not None and stable in serving:
        return {stable: 100}
    if canary is not None and canary in serving:
        return {canary: 100}
    if stable is not None:
        return {stable: 100}
    if canary is not None:
        return {canary: 100}
    return {}


def revision_name(service: str, number: int) -> str:
    """A revision's name as users see it (``x-kiban-revision``): ``<service>-00002``."""
    return f"{service}-{number:05d}"
