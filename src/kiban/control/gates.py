"""The gate before the scheduler: jobs held for a dependency or for their array's parallelism.

A held job is pending with a ``jobs.gate`` (``JobGate``) and a reason of its own
(``WaitingForDependency`` naming the job it waits for, ``WaitingForArraySlot``); the pass's
read of pending jobs leaves it out (the pending index holds only ungated jobs), so 10,000
held array indices cost a pass nothing. Before each scheduling pass, ``Gates`` lifts the gates
that no longer hold: dependencies resolved (reading only the unresolved ones, and the jobs they
name) and array slots freed (reading only open arrays).
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session, sessionmaker

from kiban.services import dependencies, job_arrays

log = logging.getLogger("kiban.control")


class Gates:
    """Lifts gates before a scheduling pass, in one short transaction."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def __call__(self, now: float) -> bool:
        """True when a job was let through or failed (its dependency never satisfied)."""
        with self._sessions() as session:
            changed = dependencies.resolve(session, now)
            changed = job_arrays.release_slots(session) or changed
            session.commit()
        return changed
