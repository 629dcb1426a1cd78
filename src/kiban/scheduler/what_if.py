"""Nested what-if transactions over a log of changes, shared by the capacity overlay and the
quota book: a change is logged in the innermost open transaction; on exit an uncommitted
transaction's changes are undone, a committed one's become part of the outer one (which can
still undo them)."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Generic, TypeVar

C = TypeVar("C")


class Transaction(Generic[C]):
    """Changes made so far in one attempt; ``commit`` keeps them, otherwise they are undone.

    Its own context manager (``nested``): a class rather than a generator context manager, as
    what-ifs open several per judged job (each placement, each victim search), and entering and
    leaving a generator cost several times as much."""

    __slots__ = ("_open", "_undo", "changes", "committed")

    def __init__(
        self, open_transactions: list[Transaction[C]], undo: Callable[[list[C]], None]
    ) -> None:
        self._open = open_transactions
        self._undo = undo
        self.changes: list[C] = []
        self.committed = False

    def commit(self) -> None:
        self.committed = True

    def __enter__(self) -> Transaction[C]:
        self._open.append(self)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        stack = self._open
        stack.pop()
        if self.committed:
            if stack:
                stack[-1].changes.extend(self.changes)
        else:
            self._undo(self.changes)


def nested(
    open_transactions: list[Transaction[C]], undo: Callable[[list[C]], None]
) -> Transaction[C]:
    """Open a transaction on ``open_transactions`` (the owner's stack) when entered; on exit,
    ``undo`` its changes unless it was committed (``undo`` must log nothing: the owner's guard)."""
    return Transaction(open_transactions, undo)
