"""How the control loop paces its passes and how much each one reads: one frozen value,
checked when it is made, given to the loop when it is built."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kiban.health.preflight import PreflightSettings
from kiban.scheduler.policy import DEFAULT_POLICY, Policy
from kiban.scheduler.reasons import SCHEDULING_WINDOW


class LoopSettingsError(ValueError):
    """A loop setting out of its range; the message names the field and what was wrong."""


@dataclass(frozen=True, slots=True)
class LoopSettings:
    """The control loop's settings.

    ``tick_s``: the longest wait between passes. ``min_interval_s``: the shortest gap between
    two asked-for scheduling passes (a burst of submissions is scheduled together).
    ``resync_s``: a full scheduling pass runs at least this often. ``window``: pending jobs
    per queue that a pass considers. ``forecast_every_s``: how often start times are
    forecast. ``node_sync_s``: how often the executor's nodes are listed again (None: only
    at start, for an executor whose nodes never change). ``engine_policy``: the scheduler
    core's own knobs (the cluster's stored policy is another thing, read every pass).
    ``preflight``: the check of multi-node gangs' nodes before they start.
    ``sweep_every_s``: how often an allreduce sweep of idle nodes is started (None: never).
    """

    tick_s: float = 0.2
    min_interval_s: float = 0.1
    resync_s: float = 5.0
    window: int = SCHEDULING_WINDOW
    forecast_every_s: float = 5.0
    node_sync_s: float | None = None
    engine_policy: Policy = field(default=DEFAULT_POLICY)
    preflight: PreflightSettings = field(default_factory=PreflightSettings)
    sweep_every_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("tick_s", "resync_s", "node_sync_s", "sweep_every_s"):
            positive(name, getattr(self, name))
        for name in ("min_interval_s", "forecast_every_s"):
            not_negative(name, getattr(self, name))
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise LoopSettingsError(
                f"window: must be a whole number of at least 1, not {self.window!r}"
            )
        if not isinstance(self.engine_policy, Policy):
            raise LoopSettingsError(f"engine_policy: must be a Policy, not {self.engine_policy!r}")
        if not isinstance(self.preflight, PreflightSettings):
            raise LoopSettingsError(f"preflight: must be PreflightSettings, not {self.preflight!r}")


def seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise LoopSettingsError(f"{name}: must be a number of seconds, not {value!r}")
    return float(value)


def positive(name: str, value: object) -> None:
    if value is None and name in ("node_sync_s", "sweep_every_s"):
        return
    if seconds(name, value) <= 0:
        raise LoopSettingsError(f"{name}: must be more than 0 seconds, not {value!r}")


def not_negative(name: str, value: object) -> None:
    if seconds(name, value) < 0:
        raise LoopSettingsError(f"{name}: must be 0 seconds or more, not {value!r}")
