"""Nested what-if transactions over a log of changes, shared by the capacity overlay and the
quota book: a change is logged in the innermost open transaction; on exit an uncommitted
transaction's changes are undone, a committed one's become part of the outer one (which can
still undo them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

C = TypeVar("C")


@dataclass(slots=True)
class Transaction(Generic[C]):
    """Changes made so far in one attempt; ``commit`` keeps them, otherwise they are undone."""

    changes: list[C] = field(default_factory=list)
    committed: bool = False

    def commit(self) -> None:
        self.committed = True


@contextmanager
def nested(
    open_transactions: list[Transaction[C]], undo: Callable[[list[C]], None]
) -> Iterator[Transaction[C]]:
    """Open a transaction on ``open_transactions`` (the owner's stack); on exit, ``undo`` its
    changes unless it was committed (``undo`` must log nothing: the owner's guard)."""
    tx: Transaction[C] = Transaction()
    open_transactions.append(tx)
    try:
        yield tx
    finally:
        open_transactions.pop()
        if tx.committed:
            if open_transactions:
                open_transactions[-1].changes.extend(tx.changes)
        else:
            undo(tx.changes)
