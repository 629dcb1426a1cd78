"""Queue quotas per flavor, and borrowing within cohorts: who may use how many GPUs more.

Kueue's model. Of its nominal quota of a flavor, a queue keeps ``nominal - lending_limit`` to
itself (all of it without a cohort, none of it without a lending limit); the rest goes into its
cohort's shared pool. A queue's use beyond its own part draws on the pool, and the pool's draws
never exceed its size, so a lender's nominal quota is there for it once borrowers give it back
(reclaim). A queue may exceed its nominal by at most its ``borrowing_limit``. The pool's totals
are kept incrementally, so a check costs the same with 5 or 1,000 queues in a cohort.

Extended resources a queue's quota names (``quota: {h100: {gpu: 64, nvidia.com/hostdev: 64}}``)
are limited to the nominal amount: they are neither lent nor borrowed (they come with the GPUs
of a node, and a queue that borrows GPUs in its cohort borrows the nodes' NICs with them only
up to what it was given). A resource the quota does not name is not limited.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TypeVar, cast

from kiban.scheduler.reasons import PendingReason, ReasonCode
from kiban.scheduler.reasons import gpus as gpu_phrase
from kiban.scheduler.snapshot import Extended, QueueView
from kiban.scheduler.what_if import Transaction, nested

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class QuotaVerdict:
    """Whether ``gpus`` more fit the queue's quota of a flavor, and if not, why."""

    fits: bool
    reason: PendingReason | None = None


FITS = QuotaVerdict(True)


@dataclass(frozen=True, slots=True)
class _Terms:
    """What a queue's policy fixes of one flavor for the whole cycle."""

    nominal: int | None
    shared: int
    own: int
    cohort: str | None
    borrowing_limit: int | None


@dataclass(frozen=True, slots=True)
class _QuotaChange:
    queue: str
    flavor: str
    gpus: int  # signed: taken > 0, given < 0
    extended: Extended = ()
    extended_sign: int = 0


class _Plan:
    """What the queues' quotas fix, whatever their use: each (queue, flavor)'s terms and
    ceiling, each cohort's pool, and the refusals written (a refusal's words and numbers
    depend on the plan, the queue's use and what its cohort's pool has lent, nothing else).
    The same quotas make the same plan: it is kept across cycles (``_plan_of``), so a cycle's
    book only counts the use."""

    __slots__ = ("ceilings", "kept", "pool", "queues", "refusals", "terms")

    def __init__(self, queues: Mapping[str, QueueView]) -> None:
        self.queues = queues  # the views it was made from (only their quota fields are read)
        self.terms: dict[tuple[str, str], _Terms] = {}
        self.ceilings: dict[tuple[str, str], int | None] = {}
        self.refusals: dict[tuple[str, str, int, int, int], QuotaVerdict] = {}
        self.pool: dict[tuple[str, str], int] = {}  # (cohort, flavor) -> shared GPUs
        self.kept: dict[Hashable, object] = {}  # what else follows from the quotas (``kept``)
        for q in queues.values():
            if q.cohort is None or q.nominal is None:
                continue
            for flavor in q.nominal:
                key = (q.cohort, flavor)
                self.pool[key] = self.pool.get(key, 0) + self.terms_of(q.name, flavor).shared

    def terms_of(self, queue: str, flavor: str) -> _Terms:
        key = (queue, flavor)
        terms = self.terms.get(key)
        if terms is None:
            terms = self.terms[key] = _compute_terms(self.queues.get(queue), flavor)
        return terms


def _compute_terms(q: QueueView | None, flavor: str) -> _Terms:
    if q is None or q.nominal is None:
        return _Terms(None, 0, 0, None if q is None else q.cohort, None)
    nominal = q.nominal.get(flavor, 0)
    shared = 0
    if q.cohort is not None:
        limit = q.lending_limit.get(flavor)
        shared = nominal if limit is None else min(limit, nominal)
    return _Terms(nominal, shared, nominal - shared, q.cohort, q.borrowing_limit.get(flavor))


_PLANS: dict[tuple[object, ...], _Plan] = {}
_MAX_PLANS = 64  # quota settings kept at once; all forgotten when more come (rare: an edit)
_MAX_KEPT = 4096  # refusals, and what else is kept (``kept``), per plan, likewise


def _plan_of(queues: Mapping[str, QueueView]) -> _Plan:
    """The plan of these queues' quotas: the one made before for the same quotas (compared by
    value: ``QueueView.quota_terms``), else a new one."""
    signature = tuple(q.quota_terms for q in queues.values())
    plan = _PLANS.get(signature)
    if plan is None:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        plan = _PLANS[signature] = _Plan(queues)
    return plan


class QuotaBook:
    """GPUs in use per (queue, flavor), with each cohort's shared pool and what is drawn on it."""

    def __init__(self, queues: Iterable[QueueView] | Mapping[str, QueueView]) -> None:
        """``queues``: the views, or them by name (read only: shared with the caller)."""
        self.queues: Mapping[str, QueueView] = (
            queues if isinstance(queues, Mapping) else {q.name: q for q in queues}
        )
        plan = self._plan = _plan_of(self.queues)
        self._used: dict[tuple[str, str], int] = {}
        self._pool = plan.pool  # shared by the books of one plan: never changed
        self._drawn: dict[tuple[str, str], int] = {}  # (cohort, flavor) -> drawn on the pool
        self._terms = plan.terms  # shared too: filled on first use, from the quotas alone
        self._version = 0  # bumped by every change
        self._extended_used: dict[tuple[str, str], dict[str, int]] = {}
        self._transactions: list[Transaction[_QuotaChange]] = []
        self._undoing = False
        used = self._used
        drawn = self._drawn
        for q in self.queues.values():
            if q.extended_used:  # most queues' jobs hold none
                for flavor, amounts in q.extended_used.items():
                    self._extended_used[(q.name, flavor)] = dict(amounts)
            cohort = q.cohort
            for flavor, gpus in q.used.items():
                used[(q.name, flavor)] = gpus
                if cohort is None:
                    continue
                over = gpus - plan.terms_of(q.name, flavor).own
                if over > 0:
                    key = (cohort, flavor)
                    drawn[key] = drawn.get(key, 0) + over

    def kept(self, key: Hashable, make: Callable[[], _T]) -> _T:
        """``make()``, made once for the queues' quotas and ``key`` and kept across cycles:
        only for what follows from the quotas (the views of the queues the key names, with
        their nominal quotas and limits) and from the key alone."""
        kept = self._plan.kept
        if key in kept:
            return cast(_T, kept[key])
        if len(kept) >= _MAX_KEPT:
            kept.clear()
        made = kept[key] = make()
        return made

    # -- reading ---------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        """A number that changes at every take or give, of GPUs or extended resources (an undo
        included): equal numbers within a cycle, the same use of every quota."""
        return self._version

    def terms(self, queue: str, flavor: str) -> _Terms:
        """The queue's nominal, shared and own parts of a flavor and its limits (memoized)."""
        terms = self._terms.get((queue, flavor))
        return terms if terms is not None else self._plan.terms_of(queue, flavor)

    def used(self, queue: str, flavor: str) -> int:
        return self._used.get((queue, flavor), 0)

    def nominal(self, queue: str, flavor: str) -> int | None:
        """The queue's nominal GPUs of a flavor; None when it has no quota (or is not known)."""
        return self.terms(queue, flavor).nominal

    def shared(self, queue: str, flavor: str) -> int:
        """The part of the queue's nominal quota that it puts into its cohort's pool."""
        return self.terms(queue, flavor).shared

    def own(self, queue: str, flavor: str) -> int:
        """The part of its nominal quota that only the queue itself may use."""
        return self.terms(queue, flavor).own

    def draw(self, queue: str, flavor: str, extra: int = 0) -> int:
        """What the queue's use (plus ``extra``) takes from its cohort's pool."""
        return max(self.used(queue, flavor) + extra - self.terms(queue, flavor).own, 0)

    def borrowed(self, queue: str, flavor: str) -> int:
        """GPUs the queue uses beyond its nominal quota (victim searches ask it of every
        running job's queue: two look-ups once the terms are known)."""
        key = (queue, flavor)
        terms = self._terms.get(key)
        if terms is None:
            terms = self.terms(queue, flavor)
        nominal = terms.nominal
        if nominal is None:
            return 0
        over = self._used.get(key, 0) - nominal
        return over if over > 0 else 0

    def cohort_can_lend(self, queue: str, flavor: str) -> int:
        """GPUs of the pool the queue could use beyond its nominal quota now."""
        q = self.queues.get(queue)
        if q is None or q.cohort is None:
            return 0
        key = (q.cohort, flavor)
        free = self._pool.get(key, 0) - self._drawn.get(key, 0)
        own_unused = max(self.shared(queue, flavor) - self.draw(queue, flavor), 0)
        return max(free - own_unused, 0)

    def ceiling(self, queue: str, flavor: str) -> int | None:
        """The most GPUs of a flavor the queue could ever hold (None: no limit). It depends on
        the queues' quotas and limits alone, never on their use, so it is worked out once."""
        key = (queue, flavor)
        ceilings = self._plan.ceilings
        if key not in ceilings:
            ceilings[key] = self._ceiling(queue, flavor)
        return ceilings[key]

    def _ceiling(self, queue: str, flavor: str) -> int | None:
        q = self.queues[queue]
        nominal = self.nominal(queue, flavor)
        if nominal is None:
            return None
        if q.cohort is None:
            return nominal
        others = self._pool.get((q.cohort, flavor), 0) - self.shared(queue, flavor)
        limit = q.borrowing_limit.get(flavor)
        return nominal + (others if limit is None else min(limit, others))

    # -- checking --------------------------------------------------------------------------------
    def check(self, queue: str, flavor: str, gpus: int) -> QuotaVerdict:
        """Whether the queue may take ``gpus`` more of a flavor now, and why not if it may not."""
        key = (queue, flavor)
        terms = self._terms.get(key)
        if terms is None:
            terms = self.terms(queue, flavor)
        nominal = terms.nominal
        if nominal is None or gpus == 0:
            return FITS
        used = self._used.get(key, 0)
        if used + gpus <= terms.own:
            return FITS
        drawn = 0
        if terms.cohort is not None:
            pool_key = (terms.cohort, flavor)
            drawn = self._drawn.get(pool_key, 0)
            if terms.borrowing_limit is None or used + gpus - nominal <= terms.borrowing_limit:
                more = max(used + gpus - terms.own, 0) - max(used - terms.own, 0)
                if drawn + more <= self._pool.get(pool_key, 0):
                    return FITS
        # The refusal depends on the plan, the queue's use and its cohort's draws alone: the
        # same numbers, in this cycle or a later one, the same reason (written once).
        refusals = self._plan.refusals
        asked = (queue, flavor, gpus, used, drawn)
        verdict = refusals.get(asked)
        if verdict is None:
            if len(refusals) >= _MAX_KEPT:
                refusals.clear()
            verdict = refusals[asked] = self._refusal(queue, flavor, gpus, nominal, used)
        return verdict

    def _refusal(self, queue: str, flavor: str, gpus: int, nominal: int, used: int) -> QuotaVerdict:
        """Why ``gpus`` more do not fit; only called once ``check`` found that they do not."""
        q = self.queues[queue]
        free = max(nominal - used, 0)
        details: dict[str, object] = {
            "queue": queue,
            "flavor": flavor,
            "needed_gpus": gpus,
            "nominal_gpus": nominal,
            "in_use_gpus": used,
            "free_gpus": free,
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
        if q.cohort is None:
            return QuotaVerdict(
                False,
                reason=PendingReason(
                    ReasonCode.QUEUE_QUOTA_EXHAUSTED,
                    f"needs {gpu_phrase(gpus, flavor)}; queue {queue} has {free} free of {nominal}",
                    details,
                ),
            )
        already = self.borrowed(queue, flavor)
        borrow = max(used + gpus - nominal, 0)
        limit = q.borrowing_limit.get(flavor)
        if limit is not None and borrow > limit:
            return QuotaVerdict(
                False,
                reason=PendingReason(
                    ReasonCode.QUEUE_QUOTA_EXHAUSTED,
                    f"needs {gpu_phrase(gpus, flavor)}; queue {queue} has {free} free of "
                    f"{nominal} and borrows {already} of the {limit} it may borrow",
                    {**details, "borrowed_gpus": already, "borrowing_limit_gpus": limit},
                ),
            )
        # The only way left: the cohort's pool has not enough room (check's own test).
        can_lend = self.cohort_can_lend(queue, flavor)
        if used + gpus <= nominal:
            message = (
                f"needs {gpu_phrase(gpus, flavor)}; queue {queue} has {free} free of "
                f"{nominal}, lent to other queues of cohort {q.cohort} until they give it back"
            )
        else:
            message = (
                f"needs {gpu_phrase(gpus, flavor)}; queue {queue} has {free} free of "
                f"{nominal} and cohort {q.cohort} can lend {can_lend}"
            )
        return QuotaVerdict(
            False,
            reason=PendingReason(
                ReasonCode.COHORT_EXHAUSTED,
                message,
                {**details, "cohort": q.cohort, "cohort_can_lend_gpus": can_lend},
            ),
        )

    def extended_nominal(self, queue: str, flavor: str) -> dict[str, int]:
        """The extended resources the queue's quota of a flavor limits, and to how much."""
        q = self.queues.get(queue)
        if q is None or q.nominal is None:
            return {}
        return dict(q.extended_nominal.get(flavor, {}))

    def extended_used(self, queue: str, flavor: str, name: str) -> int:
        return self._extended_used.get((queue, flavor), {}).get(name, 0)

    def check_extended(self, queue: str, flavor: str, extended: Extended) -> QuotaVerdict:
        """Whether the queue may take these extended resources more of a flavor now (only
        those its quota names are limited, to the nominal amount: never borrowed)."""
        q = self.queues.get(queue)
        if not extended or q is None or q.nominal is None:
            return FITS
        limits = q.extended_nominal.get(flavor)
        if not limits:
            return FITS
        for name, amount in extended:
            nominal = limits.get(name)
            if nominal is None:
                continue
            used = self.extended_used(queue, flavor, name)
            if used + amount <= nominal:
                continue
            details: dict[str, object] = {
                "queue": queue,
                "flavor": flavor,
                "resource": name,
                "needed": amount,
                "nominal": nominal,
                "in_use": used,
                "free": max(nominal - used, 0),
            }
            if amount > nominal:
                return QuotaVerdict(
                    False,
                    PendingReason(
                        ReasonCode.EXCEEDS_QUEUE_QUOTA,
                        f"needs {amount} {name}{_on(flavor)}; queue {queue} can never hold "
                        f"more than {nominal}",
                        details,
                    ),
                )
            return QuotaVerdict(
                False,
                PendingReason(
                    ReasonCode.QUEUE_QUOTA_EXHAUSTED,
                    f"needs {amount} {name}{_on(flavor)}; queue {queue} has "
                    f"{max(nominal - used, 0)} free of {nominal}",
                    details,
                ),
            )
        return FITS

    def take_extended(self, queue: str, flavor: str, extended: Extended) -> None:
        self._change_extended(queue, flavor, extended, 1)

    def give_extended(self, queue: str, flavor: str, extended: Extended) -> None:
        self._change_extended(queue, flavor, extended, -1)

    def _change_extended(self, queue: str, flavor: str, extended: Extended, sign: int) -> None:
        if not extended or queue not in self.queues:
            return
        if self._transactions and not self._undoing:
            self._transactions[-1].changes.append(_QuotaChange(queue, flavor, 0, extended, sign))
        self._version += 1
        used = self._extended_used.setdefault((queue, flavor), {})
        for name, amount in extended:
            used[name] = used.get(name, 0) + sign * amount

    # -- changing --------------------------------------------------------------------------------
    def take(self, queue: str, flavor: str, gpus: int) -> None:
        self._change(queue, flavor, gpus)

    def give(self, queue: str, flavor: str, gpus: int) -> None:
        self._change(queue, flavor, -gpus)

    def _change(self, queue: str, flavor: str, delta: int) -> None:
        q = self.queues.get(queue)
        if q is None or delta == 0:
            return
        if self._transactions and not self._undoing:
            self._transactions[-1].changes.append(_QuotaChange(queue, flavor, delta))
        self._version += 1
        own = self.terms(queue, flavor).own
        used_key = (queue, flavor)
        used = self._used.get(used_key, 0)
        self._used[used_key] = used + delta
        if q.cohort is None:
            return
        key = (q.cohort, flavor)
        change = max(used + delta - own, 0) - max(used - own, 0)
        self._drawn[key] = self._drawn.get(key, 0) + change

    def transaction(self) -> AbstractContextManager[Transaction[_QuotaChange]]:
        """Group changes; unless committed, they are all undone on exit. Transactions nest: a
        committed inner one becomes part of the outer one, which can still undo it (a victim
        search asks what fits once victims' quota is given back, then undoes it)."""
        return nested(self._transactions, self._undo)

    def _undo(self, changes: list[_QuotaChange]) -> None:
        self._undoing = True  # an undo is recorded in no transaction (an outer one never saw it)
        try:
            for change in reversed(changes):
                if change.extended_sign:
                    self._change_extended(
                        change.queue, change.flavor, change.extended, -change.extended_sign
                    )
                else:
                    self._change(change.queue, change.flavor, -change.gpus)
        finally:
            self._undoing = False


def _on(flavor: str) -> str:
    return "" if flavor == "default" else f" of flavor {flavor}"
