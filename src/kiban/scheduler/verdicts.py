"""Waiting verdicts shared, within one cycle, by the jobs of one queue and gang shape.

A contended BestEffortFIFO window holds thousands of jobs of a few shapes, and between two
admissions most of them wait for a reason already written: the quota refusal, the capacity
shortfall, the reservation in the way. Judging a job (``core._judge``) is a deterministic
function of its queue, its gang shape, whether it may backfill before each flavor's first
reservation, and what the cycle has decided so far (``Cycle.judging_state``), as long as it
searches for no victims and holds no nodes of its own. When judging one job left that state as
it found it, a job of the same key judged at the same state is judged alike: its reason is
reused, and the cycle's cost between two changes is a look-up per job, not a judging.

A StrictFIFO queue's next job is judged only after its head was found ``Unschedulable`` (any
other wait blocks the rest of the queue): until then no verdict of the queue could ever be
looked up, and its heads, the most of a contended StrictFIFO replay's judgings, skip the key.
"""

from __future__ import annotations

from kiban.scheduler.backfill import backfills
from kiban.scheduler.cycle import Cycle
from kiban.scheduler.snapshot import PendingJob, QueueStrategy, QueueView
from kiban.scheduler.wait_replay import Waiting

VerdictKey = tuple[object, ...]

_STRICT_FIFO = QueueStrategy.STRICT_FIFO  # read per job visited: a module name is read faster


class Verdicts:
    """The waiting reasons of one cycle by ``key``, and the cycle's state as last read.

    The state is read again only after a judging (``judging``): looking a reason up changes
    nothing, so between two judgings what was read once holds for every job looked up: the
    state, whether victim searches are left, the jobs judged apart, each flavor's first
    reservation.
    """

    __slots__ = (
        "_apart",
        "_cycle",
        "_firsts",
        "_known",
        "_passed",
        "_searching",
        "_stamp",
        "_stamps",
    )

    def __init__(self, cycle: Cycle) -> None:
        self._cycle = cycle
        self._known: dict[VerdictKey, Waiting] = {}
        self._stamps: dict[tuple[object, ...], int] = {}  # each state seen, numbered
        self._stamp: int | None = None  # the number of the state now (None: read it again)
        self._searching = False
        self._apart: set[str] = set()
        self._firsts: dict[tuple[str, ...], tuple[float | None, ...]] = {}
        self._passed: set[str] = set()  # StrictFIFO queues whose next jobs are judged too

    def key(self, job: PendingJob, queue: QueueView) -> VerdictKey | None:
        """What judging the job depends on (None: it depends on the job itself: it could search
        for victims, which counts the search and reads its priority; it holds nodes kept for
        it; or victims are stopping for it; or it is the first job judged of a StrictFIFO queue
        this cycle, or follows only admitted ones: none of its queue's verdicts is kept yet,
        and one kept for it would be read only if it is ``Unschedulable``, see ``passed``)."""
        if queue.strategy is _STRICT_FIFO and queue.name not in self._passed:
            return None
        stamp = self._stamp
        if stamp is None:
            stamp = self._read()
        if self._searching and not queue.scavenger:
            return None
        if job.id in self._apart:
            return None
        cycle = self._cycle
        if not cycle.reservation_count:  # may_backfill is asked only when some nodes are kept
            return (stamp, queue.name, job.shape, ())
        flavors = cycle.flavors_for(queue)
        firsts = self._firsts.get(flavors)
        if firsts is None:
            firsts = self._firsts[flavors] = tuple(
                None if first is None else first.at
                for first in (cycle.first_reservation(f, job.id) for f in flavors)
            )
        return (stamp, queue.name, job.shape, backfills(cycle, job, firsts))

    def passed(self, queue: str) -> None:
        """A job of the StrictFIFO queue waits as ``Unschedulable``, so the next ones are judged:
        from now on they keep and look up verdicts."""
        self._passed.add(queue)

    def known(self, key: VerdictKey) -> Waiting | None:
        """Why a job of this key waits, when one was judged at the same state and left it (the
        very outcome, shared: it is immutable)."""
        return self._known.get(key)

    def judging(self) -> None:
        """A job is about to be judged: the state may change, and is read again when next asked."""
        self._stamp = None

    def keep(self, key: VerdictKey, waiting: Waiting) -> None:
        """Keep the wait of a job of ``key`` just judged waiting, if judging it changed nothing
        that ``judging_state`` reads (else a job of its key might be judged otherwise now: a
        failed shape just kept, a reservation just made, capacity just taken)."""
        if self._read() == key[0]:
            self._known[key] = waiting

    def _read(self) -> int:
        """Read the cycle's state again; its number (a state seen before keeps its number)."""
        cycle = self._cycle
        state = cycle.judging_state()
        stamp = self._stamp = self._stamps.setdefault(state, len(self._stamps))
        self._searching = cycle.may_search_victims()  # searches are counted apart from state
        self._apart = cycle.apart()
        self._firsts.clear()
        return stamp
