"""The fair order of one cycle: each queue's jobs in its own order (with a tenant's members
interleaved by their standing, ``fair_tree``), queue heads taken by their tenant's standing,
lowest first; jobs that preempted first, then those of scavenger queues (idle capacity only),
jobs of unknown queues last."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from operator import itemgetter

from kiban.scheduler.fair_tree import FairTree
from kiban.scheduler.policy import OrderKey
from kiban.scheduler.snapshot import PendingJob, QueueView, Snapshot

_KEY = itemgetter(0)
_Entry = tuple[float, tuple[float | int | str, ...], str]  # (standing, job's key, queue)


def fair_order(
    snapshot: Snapshot,
    queues: Mapping[str, QueueView],
    order_key: OrderKey,
    standing: Callable[[str], float],
    dropped: Container[str] | None,
    members: FairTree,
) -> Iterator[PendingJob]:
    """Jobs in order: each queue's own order, queue heads by standing (lowest first).

    A queue's own order is the policy's, with its members' jobs interleaved by the members'
    standing within the tenant (``fair_tree``).

    Jobs for which victims were stopped (they hold nominated nodes) come first: the fair order
    chose them when it preempted for them, and the quota and nodes freed are theirs; were they
    left to the fair order again, a borrower could take that room back and be preempted again,
    round after round. The jobs of scavenger queues come after all others' (they run on what
    the others leave idle), and jobs of unknown queues last. A heap entry's standing may be stale
    after an admission of the same tenant; such an entry is pushed back with its new standing
    before it is used. A queue named in ``dropped`` (looked at as the order goes) yields no
    more jobs from its heap entry on: the jobs behind a blocked StrictFIFO head.
    """
    ordered, preemptors, one_member = _by_queue_in_order(snapshot, queues, order_key)
    ordered, place_keys = _members_ordered(ordered, members, order_key, one_member)

    def key_of(name: str, k: int) -> tuple[float | int | str, ...]:
        keys = place_keys.get(name)  # a queue reordered by member: each place keeps its key
        return keys[k] if keys is not None else order_key(ordered[name][k])

    yield from preemptors
    skip = {job.id for job in preemptors}
    unknown: list[PendingJob] = []
    heaps: tuple[list[_Entry], list[_Entry]] = ([], [])  # other queues', then scavenger ones'
    next_index: dict[str, int] = {}
    for name, jobs in ordered.items():
        queue = queues.get(name)
        if queue is None:
            unknown.extend(job for job in jobs if job.id not in skip)
            continue
        k = _skip(jobs, 0, skip)
        if k < len(jobs):
            head = jobs[k]
            next_index[name] = k
            heaps[queue.scavenger].append((standing(head.tenant), key_of(name, k), name))
    for heap in heaps:
        heapq.heapify(heap)
        while heap:
            was, key, name = heapq.heappop(heap)
            if dropped is not None and name in dropped:
                continue
            jobs = ordered[name]
            job = jobs[next_index[name]]
            now_standing = standing(job.tenant)
            if now_standing > was:
                heapq.heappush(heap, (now_standing, key, name))
                continue
            k = next_index[name]
            count = len(jobs)
            while True:
                yield job
                k += 1
                if skip:  # preemptors were yielded first
                    k = _skip(jobs, k, skip)
                next_index[name] = k
                if k >= count or (dropped is not None and name in dropped):
                    break
                job = jobs[k]
                now_standing = standing(job.tenant)
                if heap:
                    top = heap[0][0]
                    # Its key is needed only if it goes back on the heap or ties the top's
                    # standing (most jobs: lower, yielded at once; the key never made).
                    if top < now_standing:
                        heapq.heappush(heap, (now_standing, key_of(name, k), name))
                        break
                    if top == now_standing:
                        entry = (now_standing, key_of(name, k), name)
                        if heap[0] <= entry:
                            heapq.heappush(heap, entry)
                            break
                # Below every entry of the heap: the next pop would give it back at once (its
                # standing read just now), so it is yielded without the push and the pop.
    unknown.sort(key=order_key)
    yield from unknown


def _members_ordered(
    ordered: Mapping[str, Sequence[PendingJob]],
    members: FairTree,
    order_key: OrderKey,
    one_member: AbstractSet[str],
) -> tuple[Mapping[str, Sequence[PendingJob]], dict[str, list[tuple[float | int | str, ...]]]]:
    """Each queue's jobs with its tenants' members interleaved by their standing (fair
    share's second level, ``fair_tree``), and for the queues so reordered the key of each
    place. Queues of one member, or of jobs naming none, are left as they are (and unkeyed):
    those the snapshot's index names (``one_member``) without a look at their jobs."""
    place_keys: dict[str, list[tuple[float | int | str, ...]]] = {}
    reordered: dict[str, Sequence[PendingJob]] | None = None
    for name, jobs in ordered.items():
        if name in one_member or not members.mixes_members(jobs):
            continue
        keyed = [(order_key(job), job) for job in jobs]
        members.order_members(keyed)
        if reordered is None:
            reordered = dict(ordered)  # the snapshot's index is shared: never changed in place
        reordered[name] = [job for _key, job in keyed]
        place_keys[name] = [key for key, _job in keyed]
    return (ordered if reordered is None else reordered), place_keys


def _skip(jobs: Sequence[PendingJob], k: int, skip: Container[str]) -> int:
    """The index of the first job from ``k`` on that is not in ``skip`` (preemptors)."""
    while k < len(jobs) and jobs[k].id in skip:
        k += 1
    return k


def _by_queue_in_order(
    snapshot: Snapshot, queues: Mapping[str, QueueView], order_key: OrderKey
) -> tuple[Mapping[str, Sequence[PendingJob]], list[PendingJob], AbstractSet[str]]:
    """Each queue's jobs in its order, and the jobs holding nominated nodes of known queues in
    order (they are also in their queue's list, where the fair order skips them). Taken from
    the snapshot's ``pending_index`` when it is sorted by the same key, else keyed and sorted
    here: keys are total orders (they end in the job id), so both give the same order. With
    them, the queues the index knows to hold one member's jobs only."""
    index = snapshot.pending_index
    if index is not None and index.order_key is order_key:
        nominated = [job for job in index.nominated if job.queue in queues]
        return index.by_queue, sorted(nominated, key=order_key), index.one_member
    keyed: dict[str, list[tuple[tuple[float | int | str, ...], PendingJob]]] = {}
    preemptors: list[PendingJob] = []
    for job in snapshot.pending:
        if job.nominated_nodes and job.queue in queues:
            preemptors.append(job)
            continue
        keyed.setdefault(job.queue, []).append((order_key(job), job))
    ordered: dict[str, Sequence[PendingJob]] = {}
    for name, jobs in keyed.items():
        jobs.sort(key=_KEY)
        ordered[name] = [job for _key, job in jobs]
    return ordered, sorted(preemptors, key=order_key), frozenset()
