"""The gate before the scheduler: jobs held for a dependency, for their array's parallelism or
by a budget.

A held job is pending with a ``jobs.gate`` (``JobGate``) and a reason of its own
(``WaitingForDependency`` naming the job it waits for, ``WaitingForArraySlot``,
``BudgetExhausted`` with the budget's figures); the pass's read of pending jobs leaves it out
(the pending index holds only ungated jobs), so 10,000 held array indices cost a pass nothing.
Before each scheduling pass, ``Gates`` lifts the gates that no longer hold: dependencies
resolved (reading only the unresolved ones, and the jobs they name) and array slots freed
(reading only open arrays); and the budget gate holds and releases jobs by the policy's budgets
(``kiban.services.budgets``). With no budget declared, the budget gate reads nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from kiban.domain.budgets import Standing
from kiban.domain.cluster import ClusterPolicy
from kiban.observability.exposition import Family
from kiban.services import budgets, dependencies, job_arrays

log = logging.getLogger("kiban.control")


class BudgetRatios:
    """Each budget's used part as the last pass found it: ``kiban_budget_used_ratio``."""

    def __init__(self) -> None:
        self._ratios: dict[tuple[str, str], float] = {}

    def update(self, standings: list[Standing]) -> None:
        self._ratios = {(s.decl.tenant, s.decl.queue or ""): s.ratio for s in standings}

    def family(self) -> Family:
        family = Family(
            "kiban_budget_used_ratio",
            "The part of a budget used in its current period (1: used up); queue empty for a "
            "budget of the whole tenant.",
            labels=("tenant", "queue"),
        )
        for labels, ratio in sorted(self._ratios.items()):
            family.add(labels, ratio)
        return family

    def get(self, tenant: str, queue: str | None = None) -> float | None:
        return self._ratios.get((tenant, queue or ""))


class BudgetGate:
    """Holds and releases jobs by the policy's budgets; nothing read while none is declared
    (after the jobs a removed budget held have been released once)."""

    def __init__(self, policy: Callable[[Session], ClusterPolicy]) -> None:
        self._policy = policy
        self._may_hold = True  # jobs may still be held by a budget (true at start)
        self.runtimes = budgets.MaxRuntimes()
        self.ratios = BudgetRatios()

    def __call__(self, session: Session, now: float) -> bool:
        policy = self._policy(session)
        if not policy.budgets:
            if not self._may_hold:
                return False
            released = budgets.release_all(session)
            self._may_hold = False
            self.ratios.update([])
            return bool(released)
        self._may_hold = True
        done, standings = budgets.apply_budgets(session, policy, now, self.runtimes)
        self.ratios.update(standings)
        for job_id in done.held:
            log.info("job %s held by a budget", job_id)
        return done.changed


class Gates:
    """Lifts gates before a scheduling pass, in one short transaction."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        policy: Callable[[Session], ClusterPolicy] | None = None,
    ) -> None:
        self._sessions = sessions
        self.budgets = None if policy is None else BudgetGate(policy)

    def __call__(self, now: float) -> bool:
        """True when a job was let through or failed (its dependency never satisfied), or a
        budget held, released or stopped one."""
        with self._sessions() as session:
            changed = dependencies.resolve(session, now)
            changed = job_arrays.release_slots(session) or changed
            if self.budgets is not None:
                changed = self.budgets(session, now) or changed
            session.commit()
        return changed
