"""Fair share in two levels, as Slurm's Fair Tree: tenants first, then members within a tenant.

The first level is the tenants' standing (decayed usage per weight, ``Snapshot.standings``):
the core takes queue heads by it, lowest first, and the fair-share preemption ground compares
it. The second level, here, ranks the members of one tenant by their own standing (their
decayed usage per member weight, ``Snapshot.member_standings``), so a member who used more
waits behind a teammate who used less. A member's usage only ever adds to its tenant's, so how
a tenant's members split its use changes nothing between tenants.

Within a queue, the jobs of each member keep the policy's order (priority, then first come);
the queue's next job is the member head with the highest priority, then the member with the
lowest standing, then the policy's order. Within one cycle, each job taken counts
``admission_charge_s`` GPU-seconds per GPU against its member (per member weight), as the
tenant level does, so that one member with little usage does not take the whole queue ahead
of every teammate. A job without a member (traces without users, jobs of a token without
one) belongs to the tenant's anonymous member, ``""``, of standing zero unless the snapshot
says otherwise.

The fair-share ground of preemption: across tenants, the preemptor tenant's standing after
admission must be lower than the victim's tenant's (as before); within one tenant (a
teammate's job in a borrowing queue of the same cohort), the preemptor member's standing
after admission must be lower than the victim member's. Both are strict, so two jobs never
preempt each other back and forth.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from kiban.scheduler.snapshot import PendingJob, RunningJob, Snapshot

ANONYMOUS = ""
"""The member of a job that names none."""

MemberKey = tuple[str, str]
"""(tenant, member): members are named within their tenant."""

_K = TypeVar("_K")


def _name(member: str | None) -> str:
    return member if member is not None else ANONYMOUS


def member_key(tenant: str, member: str | None) -> MemberKey:
    """The key of a job's member in the snapshot's member maps."""
    return (tenant, _name(member))


@dataclass(frozen=True, slots=True)
class FairTree:
    """The members' standings and weights of one snapshot, and the charge per admitted GPU."""

    standings: Mapping[MemberKey, float]
    weights: Mapping[MemberKey, float]
    charge_per_gpu_s: float

    @classmethod
    def of(cls, snapshot: Snapshot, charge_per_gpu_s: float) -> FairTree:
        """The second level of the snapshot's fair share (``Policy.admission_charge_s``): the
        same object again for the same snapshot and charge (asked once per victim search)."""
        last = _LAST.get(cls)  # one read: another thread may replace it whole meanwhile
        if last is not None and last[0] is snapshot and last[1] == charge_per_gpu_s:
            return last[2]
        tree = cls(snapshot.member_standings, snapshot.member_weights, charge_per_gpu_s)
        _LAST[cls] = (snapshot, charge_per_gpu_s, tree)
        return tree

    def standing(self, tenant: str, member: str | None) -> float:
        """The member's decayed usage per its weight (0 for a member with no usage yet)."""
        return self.standings.get(member_key(tenant, member), 0.0)

    def weight(self, tenant: str, member: str | None) -> float:
        """The member's weight in its tenant (1 unless the policy gives another)."""
        weight = self.weights.get(member_key(tenant, member), 1.0)
        return weight if weight > 0 else 1.0

    def charge(self, job: PendingJob) -> float:
        """What admitting the job adds to its member's standing within one cycle."""
        return job.total_gpus * self.charge_per_gpu_s / self.weight(job.tenant, job.member)

    def order_members(self, jobs: list[tuple[_K, PendingJob]]) -> None:
        """Reorder one queue's jobs, given sorted by the policy's keys, in place: within each
        tenant, member heads by priority, then member standing (charged for each job taken),
        then the policy's order.

        Each tenant's jobs keep the places its jobs held, and each place keeps its key: the
        queue's order between tenants, and its head's key (which breaks ties between queues of
        equal standing), do not depend on how a tenant's members split its jobs. Jobs of one
        member only (the common case) stay as they are.
        """
        if not self.mixes_members([job for _key, job in jobs]):
            return  # no members known, or one member only: the policy's order
        places: dict[str, list[int]] = {}
        for i, (_key, job) in enumerate(jobs):
            places.setdefault(job.tenant, []).append(i)
        reordered = [item[1] for item in jobs]
        for tenant, indices in places.items():
            ordered = self._by_member(tenant, [jobs[i][1] for i in indices])
            for place, job in zip(indices, ordered, strict=True):
                reordered[place] = job
        jobs[:] = [(key, job) for (key, _old), job in zip(jobs, reordered, strict=True)]

    @staticmethod
    def mixes_members(jobs: Sequence[PendingJob]) -> bool:
        """Whether a queue's jobs are of more than one member (of one tenant or several):
        only then does the second level change their order."""
        if len(jobs) < 2:
            return False
        first = jobs[0]
        return any(job.member is not None for job in jobs) and any(
            job.member != first.member or job.tenant != first.tenant for job in jobs
        )

    def _by_member(self, tenant: str, jobs: list[PendingJob]) -> list[PendingJob]:
        """One tenant's jobs, in the policy's order, interleaved by member standing."""
        lists: dict[str, list[PendingJob]] = {}
        for job in jobs:
            lists.setdefault(_name(job.member), []).append(job)
        if len(lists) < 2:
            return jobs
        projected = {name: self.standing(tenant, name) for name in lists}
        position = {id(job): i for i, job in enumerate(jobs)}
        # (-priority, standing, the head's place in the policy's order, member, its index)
        heap: list[tuple[int, float, int, str, int]] = []
        for name, items in lists.items():
            head = items[0]
            heap.append((-head.priority, projected[name], position[id(head)], name, 0))
        heapq.heapify(heap)
        ordered: list[PendingJob] = []
        while heap:
            _priority, _standing, _place, name, index = heapq.heappop(heap)
            items = lists[name]
            job = items[index]
            ordered.append(job)
            projected[name] += self.charge(job)
            if index + 1 < len(items):
                head = items[index + 1]
                entry = (-head.priority, projected[name], position[id(head)], name, index + 1)
                heapq.heappush(heap, entry)
        return ordered

    def reaches(self, job: PendingJob, standing_after: float, tenant: str, other: float) -> bool:
        """Whether the fair-share ground may look at a queue of ``tenant`` (tenant standing
        ``other``) for ``job``, whose tenant's standing after admission is ``standing_after``:
        another tenant only if it stands higher; the job's own tenant always (its members are
        compared one victim at a time, ``outranks``)."""
        return tenant == job.tenant or standing_after < other

    def outranks(
        self, job: PendingJob, standing_after: float, victim: RunningJob, victim_standing: float
    ) -> bool:
        """Whether ``job`` may preempt ``victim`` on the fair-share ground: across tenants by
        the tenants' standings (``standing_after`` is the job's tenant's after admission,
        ``victim_standing`` the victim's tenant's), within a tenant by the members'."""
        if victim.tenant != job.tenant:
            return standing_after < victim_standing
        if _name(victim.member) == _name(job.member):
            return False
        mine = self.standing(job.tenant, job.member) + self.charge(job)
        return mine < self.standing(victim.tenant, victim.member)


_LAST: dict[type[FairTree], tuple[Snapshot, float, FairTree]] = {}
"""The last tree ``FairTree.of`` made, with its snapshot (kept alive, so no other snapshot
takes its ``id``) and charge."""
