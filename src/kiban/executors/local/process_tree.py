"""Every process under one, found through their parents, whatever process group they joined.

A replica's stop signals its process group; a program that moves its children to groups of
their own (OpenMPI's daemon puts each rank in its own) would leave them behind. The tree is
frozen first (SIGSTOP, walked again until nothing new appears: a stopped process starts
nothing), then killed, so no child is born between the walk and the kill.
"""

from __future__ import annotations

import contextlib
import os
import signal

import psutil

MAX_WALKS = 20
"""Walks of a tree still growing at most (each one stops what it finds, so a few suffice)."""


def descendants(pid: int) -> list[psutil.Process]:
    """The live processes under ``pid`` (children first); empty when it is gone."""
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


def kill_descendants(pid: int) -> list[int]:
    """Stop, then kill, every process under ``pid`` (not ``pid`` itself); their pids."""
    stopped: dict[int, psutil.Process] = {}
    for _ in range(MAX_WALKS):
        found = [p for p in descendants(pid) if p.pid not in stopped]
        if not found:
            break
        for process in found:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGSTOP)
            stopped[process.pid] = process
    for process in stopped.values():
        with contextlib.suppress(psutil.Error):
            process.send_signal(signal.SIGKILL)
    return sorted(stopped)


def signal_descendants(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to each process under ``pid`` and to each process group they lead."""
    for process in descendants(pid):
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            process.send_signal(sig)
            if os.getpgid(process.pid) == process.pid:
                os.killpg(process.pid, sig)
