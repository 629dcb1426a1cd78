"""The ``health.preflight`` section of the cluster policy: what preflight makes of a placed
node whose agent does not answer its check in time.

An agent that stops reporting makes its node's conditions Unknown after
``health.agentTimeoutSeconds`` (never healthy), and preflight judges such a node the same way:
with ``unreachableAgent: failIfStale`` (the default) a node whose agent does not answer and
whose last report is older than that timeout fails its preflight (it is excluded from the job
and the gang placed again); one whose last report is recent is judged on what it reported, and
passes with a note if that was healthy (an agent that merely timed out once). ``pass`` lets
every unanswering agent's node pass with a note, as kiban did before.
"""

from __future__ import annotations

from enum import StrEnum

from kiban.domain.jobspec import SpecModel


class UnreachableAgent(StrEnum):
    """What preflight does with a node whose agent did not answer in time."""

    FAIL_IF_STALE = "failIfStale"  # fail when its last report is older than the agent timeout
    PASS = "pass"  # pass with a note, whatever its last report


class PreflightDecl(SpecModel):
    """``health.preflight``: ``unreachableAgent``, see the module's docstring."""

    unreachable_agent: UnreachableAgent = UnreachableAgent.FAIL_IF_STALE
