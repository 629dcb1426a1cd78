"""When the policy calls a job's GPUs idle: utilization under a threshold for a window.

The cluster file's ``idleGpus`` section (``utilizationPercent``, ``window``); the control loop
compares the agents' latest readings with it (``kiban.observability.idle_gpus``), and a job idle
for the whole window gets a ``GpusIdle`` event and shows in ``kiban_job_idle_gpus``.
"""

from __future__ import annotations

import math

from pydantic import Field, field_validator

from kiban.domain.declarations import Duration
from kiban.domain.jobspec import SpecModel

DEFAULT_IDLE_UTILIZATION_PERCENT = 5.0
DEFAULT_IDLE_WINDOW_S = 30 * 60.0


class IdleGpusDecl(SpecModel):
    """``utilizationPercent``: a GPU under it is idle; ``window``: for how long before the job
    holding it is called idle (examples: 30m, 2h, 600)."""

    utilization_percent: float = Field(
        default=DEFAULT_IDLE_UTILIZATION_PERCENT, ge=0, le=100, allow_inf_nan=False
    )
    window: Duration = DEFAULT_IDLE_WINDOW_S

    @field_validator("window")
    @classmethod
    def _positive(cls, value: float) -> float:
        if not 0 < value < math.inf:
            raise ValueError("window must be a positive duration (examples: 30m, 2h)")
        return value
