"""Reaps the local executor's children as they exit, so that none is left a zombie.

Each replica's shim is a child of the server, and a child that has exited stays a zombie
until its parent waits for it. Waiting when a replica is observed is not enough: the shim
records the exit code just before it exits, so a replica is often settled (and never observed
again) a moment before its process is gone. One thread here waits on a pidfd of each child
(Linux 5.3+) and reaps it the moment it ends; where pidfds are missing, a thread per child
waits instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import subprocess
import threading
from collections.abc import Callable

log = logging.getLogger("kiban.executors.local")


class Reaper:
    """Waits for every child it is given; ``on_reaped(pid)`` is called once each is reaped."""

    def __init__(self, on_reaped: Callable[[int], None]) -> None:
        self._on_reaped = on_reaped
        self._lock = threading.Lock()
        self._incoming: list[subprocess.Popen[bytes]] = []
        self._selector: selectors.BaseSelector | None = None
        self._wake_read = self._wake_write = -1
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, child: subprocess.Popen[bytes]) -> None:
        """Reap ``child`` when it exits (at once if it has already)."""
        with self._lock:
            if self._closed:
                return
            if self._thread is None:
                self._start()
            self._incoming.append(child)
        self._wake()

    def close(self) -> None:
        """Stop watching (children still running are then reaped by nobody until they are
        adopted again; a restarted server observes them by pid and exit file)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._wake()
            thread.join(5)

    # -- the thread -------------------------------------------------------------------------
    def _start(self) -> None:
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_read, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._run, name="kiban-reaper", daemon=True)
        self._thread.start()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):  # a wake is pending already
            os.write(self._wake_write, b"\0")

    def _run(self) -> None:
        selector = self._selector
        assert selector is not None
        try:
            while True:
                with self._lock:
                    closed = self._closed
                    incoming, self._incoming = self._incoming, []
                if closed:
                    return
                for child in incoming:
                    self._register(selector, child)
                for key, _ in selector.select():
                    if key.data is None:
                        with contextlib.suppress(BlockingIOError):
                            os.read(self._wake_read, 4096)
                        continue
                    selector.unregister(key.fd)
                    os.close(key.fd)
                    self._reap(key.data)
        finally:
            for key in list(selector.get_map().values()):
                if key.data is not None:
                    os.close(key.fd)
            selector.close()
            os.close(self._wake_read)
            os.close(self._wake_write)

    def _register(self, selector: selectors.BaseSelector, child: subprocess.Popen[bytes]) -> None:
        try:
            fd = os.pidfd_open(child.pid)
        except ProcessLookupError:  # reaped already (by a poll elsewhere)
            self._reap(child)
            return
        except (AttributeError, OSError):  # no pidfds here: a thread waits for this child
            threading.Thread(
                target=self._reap, args=(child,), name="kiban-reap", daemon=True
            ).start()
            return
        selector.register(fd, selectors.EVENT_READ, child)

    def _reap(self, child: subprocess.Popen[bytes]) -> None:
        try:
            child.wait()  # it has exited (or is about to, off a pidfd): this does not block
        except Exception:  # pragma: no cover - a child is always waitable by its parent
            log.exception("could not reap process %d", child.pid)
            return
        self._on_reaped(child.pid)
