"""Queue quotas per flavor, and borrowing within cohorts: who may use how many GPUs more.

A queue may always use its nominal quota of a flavor. Beyond it, a queue in a cohort borrows
what the other members leave unused, within its own ``borrowing_limit`` and each lender's
``lending_limit`` (Kueue's model). The cohort's lendable GPUs are summed incrementally, so a
check costs the same with 5 or 1,000 queues in a cohort.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kiban.scheduler.reasons import PendingReason, ReasonCode
from kiban.scheduler.reasons import gpus as gpu_phrase
from kiban.scheduler.snapshot import QueueView


@dataclass(frozen=True, slots=True)
class QuotaVerdict:
    """Whether ``gpus`` more fit the queue's quota of a flavor, and how many would be borrowed."""

    fits: bool
    borrowed: int = 0
    reason: PendingReason | None = None


FITS = QuotaVerdict(True)


class QuotaBook:
    """GPUs in use per (queue, flavor), with each cohort's lendable and borrowed totals."""

    def __init__(self, queues: Iterable[QueueView]) -> None:
        self.queues = {q.name: q for q in queues}
        self._used: dict[tuple[str, str], int] = {}
        self._members: dict[str, list[str]] = {}
        # Per (cohort, flavor): what members lend of their unused nominal, what they borrow.
        self._lendable: dict[tuple[str, str], int] = {}
        self._borrowed: dict[tuple[str, str], int] = {}
        self._lendable_when_idle: dict[tuple[str, str], int] = {}
        for q in self.queues.values():
            for flavor, gpus in q.used.items():
                self._used[(q.name, flavor)] = gpus
            if q.cohort is None:
                continue
            self._members.setdefault(q.cohort, []).append(q.name)
            for flavor in self._flavors_of(q):
                key = (q.cohort, flavor)
                self._lendable[key] = self._lendable.get(key, 0) + self.lendable(q.name, flavor)
                self._borrowed[key] = self._borrowed.get(key, 0) + self.borrowed(q.name, flavor)
                idle = self._lend_cap(q, flavor, q.nominal.get(flavor, 0) if q.nominal else 0)
                self._lendable_when_idle[key] = self._lendable_when_idle.get(key, 0) + idle

    @staticmethod
    def _flavors_of(q: QueueView) -> set[str]:
        return set(q.nominal or ()) | set(q.used)

    @staticmethod
    def _lend_cap(q: QueueView, flavor: str, unused: int) -> int:
        limit = q.lending_limit.get(flavor)
        return unused if limit is None else min(unused, limit)

    # -- reading ---------------------------------------------------------------------------------
    def used(self, queue: str, flavor: str) -> int:
        return self._used.get((queue, flavor), 0)

    def nominal(self, queue: str, flavor: str) -> int | None:
        """The queue's nominal GPUs of a flavor; None when it has no quota (or is not known)."""
        q = self.queues.get(queue)
        return None if q is None or q.nominal is None else q.nominal.get(flavor, 0)

    def borrowed(self, queue: str, flavor: str) -> int:
        nominal = self.nominal(queue, flavor)
        return 0 if nominal is None else max(self.used(queue, flavor) - nominal, 0)

    def lendable(self, queue: str, flavor: str) -> int:
        """What the queue lends its cohort now: its unused nominal, within its lending limit."""
        nominal = self.nominal(queue, flavor)
        if nominal is None:
            return 0
        q = self.queues[queue]
        return self._lend_cap(q, flavor, max(nominal - self.used(queue, flavor), 0))

    def cohort_can_lend(self, queue: str, flavor: str) -> int:
        """GPUs of a flavor the other members of the queue's cohort could lend it now."""
        cohort = self.queues[queue].cohort
        if cohort is None:
            return 0
        key = (cohort, flavor)
        lendable = self._lendable.get(key, 0) - self.lendable(queue, flavor)
        borrowed = self._borrowed.get(key, 0) - self.borrowed(queue, flavor)
        return max(lendable - borrowed, 0)

    def members(self, cohort: str) -> list[str]:
        return self._members.get(cohort, [])

    def ceiling(self, queue: str, flavor: str) -> int | None:
        """The most GPUs of a flavor the queue could ever hold (None: no limit)."""
        q = self.queues[queue]
        nominal = self.nominal(queue, flavor)
        if nominal is None:
            return None
        if q.cohort is None:
            return nominal
        key = (q.cohort, flavor)
        own = self._lend_cap(q, flavor, nominal)
        others = self._lendable_when_idle.get(key, 0) - own
        limit = q.borrowing_limit.get(flavor)
        return nominal + (others if limit is None else min(limit, others))

    # -- checking --------------------------------------------------------------------------------
    def check(self, queue: str, flavor: str, gpus: int) -> QuotaVerdict:
        """Whether the queue may take ``gpus`` more of a flavor now, and why not if it may not."""
        q = self.queues[queue]
        nominal = self.nominal(queue, flavor)
        if nominal is None or gpus == 0:
            return FITS
        used = self.used(queue, flavor)
        if used + gpus <= nominal:
            return FITS
        details: dict[str, object] = {
            "queue": queue,
            "flavor": flavor,
            "needed_gpus": gpus,
            "nominal_gpus": nominal,
            "in_use_gpus": used,
            "free_gpus": max(nominal - used, 0),
        }
        ceiling = self.ceiling(queue, flavor)
        assert ceiling is not None
        if gpus > ceiling:
            extra = f" (borrowing included, {ceiling})" if ceiling > nominal else ""
            return QuotaVerdict(
                False,
                reason=PendingReason(
                    ReasonCode.EXCEEDS_QUEUE_QUOTA,
                    f"needs {gpu_phrase(gpus, flavor)}; queue {queue} can never hold more than "
                    f"{nominal}{extra}",
                    {**details, "ceiling_gpus": ceiling},
                ),
            )
        free = max(nominal - used, 0)
        if q.cohort is None:
            return QuotaVerdict(
                False,
                reason=PendingReason(
                    ReasonCode.QUEUE_QUOTA_EXHAUSTED,
                    f"needs {gpu_phrase(gpus, flavor)}; queue {queue} has {free} free of {nominal}",
                    details,
                ),
            )
        to_borrow = used + gpus - nominal - self.borrowed(queue, flavor)
        already = self.borrowed(queue, flavor)
        limit = q.borrowing_limit.get(flavor)
        if limit is not None and already + to_borrow > limit:
            return QuotaVerdict(
                False,
                reason=PendingReason(
                    ReasonCode.QUEUE_QUOTA_EXHAUSTED,
                    f"needs {gpu_phrase(gpus, flavor)}; queue {queue} has {free} free of {nominal} "
                    f"and borrows {already} of the {limit} it may borrow",
                    {**details, "borrowed_gpus": already, "borrowing_limit_gpus": limit},
                ),
            )
        can_lend = self.cohort_can_lend(queue, flavor)
        if to_borrow > can_lend:
            return QuotaVerdict(
                False,
                reason=PendingReason(
                    ReasonCode.COHORT_EXHAUSTED,
                    f"needs {gpu_phrase(gpus, flavor)}; queue {queue} has {free} free of {nominal} "
                    f"and cohort {q.cohort} can lend {can_lend}",
                    {**details, "cohort": q.cohort, "cohort_can_lend_gpus": can_lend},
                ),
            )
        return QuotaVerdict(True, borrowed=to_borrow)

    # -- changing --------------------------------------------------------------------------------
    def take(self, queue: str, flavor: str, gpus: int) -> None:
        self._change(queue, flavor, gpus)

    def give(self, queue: str, flavor: str, gpus: int) -> None:
        self._change(queue, flavor, -gpus)

    def _change(self, queue: str, flavor: str, delta: int) -> None:
        q = self.queues.get(queue)
        if q is None or delta == 0:
            return
        before = (self.lendable(queue, flavor), self.borrowed(queue, flavor))
        self._used[(queue, flavor)] = self.used(queue, flavor) + delta
        if q.cohort is None:
            return
        key = (q.cohort, flavor)
        self._lendable[key] = self._lendable.get(key, 0) + self.lendable(queue, flavor) - before[0]
        self._borrowed[key] = self._borrowed.get(key, 0) + self.borrowed(queue, flavor) - before[1]
