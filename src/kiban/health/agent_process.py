"""``kiban up`` runs one ``kiban node-agent`` process for all the local executor's nodes.

Each node's GPUs are the physical GPUs behind its GPU ids: its own ``gpu_devices`` where the
machine has GPUs enough for every virtual node to have its own (``kiban up --nodes 2
--gpus-per-node 1`` on two GPUs), else ``0 .. gpus-1``, shared by every virtual node, as the
local executor sets ``CUDA_VISIBLE_DEVICES`` for a replica; the agent reads those. Virtual GPUs
beyond the machine's own (``--gpus-per-node 8`` on a one-GPU machine) are not read, nor
expected: there is nothing there to check, and their absence is no fault.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

STOP_GRACE_S = 2.0  # the agent keeps nothing: a kill after this loses no state


@dataclass(frozen=True)
class AgentNode:
    """A node the agent checks and the physical GPUs (indices) that are its own."""

    name: str
    gpus: tuple[int, ...]

    @classmethod
    def local(
        cls, name: str, gpus: int, physical: int | None, devices: Sequence[int] = ()
    ) -> AgentNode:
        """A local node of ``gpus`` GPUs on a machine of ``physical`` (None: do not clamp, as
        for readings from a directory, which stand for GPUs that are not here); ``devices``:
        the machine's GPUs that are the node's own (empty: ``0 .. gpus-1``)."""
        if devices and physical is not None:
            return cls(name, tuple(d for d in devices if d < physical))
        count = gpus if physical is None else min(gpus, physical)
        return cls(name, tuple(range(count)))


def agent_arguments(
    nodes: Sequence[AgentNode],
    *,
    url: str | None,
    interval_s: float,
    readings_dir: Path | None = None,
) -> list[str]:
    """``kiban node-agent``'s arguments (after the program) for these nodes."""
    args = ["node-agent", "--interval", f"{interval_s:g}"]
    if url is not None:
        args += ["--url", url]
    for node in nodes:
        args += ["--node", f"{node.name}=" + ",".join(str(i) for i in node.gpus)]
    if readings_dir is not None:
        args += ["--readings-dir", str(readings_dir)]
    return args


class AgentProcess:
    """The agent as a child process; the token travels in its environment, not its arguments
    (which other users of the machine can read)."""

    def __init__(self, arguments: Sequence[str], token: str | None) -> None:
        self.arguments = list(arguments)
        self.token = token
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(os.environ)
        env.pop("KIBAN_URL", None)
        if self.token is not None:
            env["KIBAN_TOKEN"] = self.token
        else:
            env.pop("KIBAN_TOKEN", None)
        program = [sys.executable, "-c", "from kiban.cli.main import main; main()"]
        # Its standard input is a pipe only we hold open: when we exit, however we exit
        # (kill -9 too), it reads the end of it and stops (--with-parent), never an orphan.
        self.process = subprocess.Popen(
            [*program, *self.arguments, "--with-parent"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``STOP_GRACE_S``."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            log.warning("the node agent did not stop within %g s; killing it", STOP_GRACE_S)
            process.kill()
            process.wait()
