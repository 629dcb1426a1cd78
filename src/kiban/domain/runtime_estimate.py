"""Run-time estimates learned online from the jobs that finished before.

A job is known before it runs by who submitted it, its name, its command, its size and its
queue. The estimate of its run time is the median of the recent runs that share the most
specific of these keys with enough history, backing off to coarser ones and finally to the
queue's whole distribution:

1. user + name + command + GPUs   (the same job again: Slurm users' own time limits)
2. user + name
3. user + GPUs
4. tenant + GPUs
5. queue                          (the queue's distribution of recent runs)

Per-user, per-name templates follow Smith, Foster & Taylor ("Predicting application run times
using historical information", JSSPP 1998) and Helios' QSSF, which predicts a job's GPU time
from the same user's earlier jobs of the same name (Hu et al., SC '21). The statistic is the
median, at every level, because GPU job run times are heavy-tailed (Tiresias, NSDI '19; most
Philly jobs are minutes long, a few run for days): a mean is pulled by the few very long or
crashed runs, the median is not, and it minimises the absolute error the error figure below
measures. A high quantile would make backfill safer but every ETA later; since an estimate
never stops a job (``maxRuntime`` stays the only limit) and backfill loses little when a
backfilled job overruns (EASY's reservation moves, Tsafrir et al. 2007), the median it is.

Memory is bounded: the newest ``window`` runs per key and the ``max_keys`` most recently used
keys. The estimator measures itself: before learning a job's true run time it predicts it, and
``error_summary`` reports the median absolute percentage error of those predictions.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from statistics import median

DEFAULT_WINDOW = 50
"""Recent runs kept per key: enough for a stable median, few enough to follow a change."""

DEFAULT_MAX_KEYS = 20_000
"""Keys kept (least recently used dropped first): bounds memory whatever the history."""

DEFAULT_ERROR_WINDOW = 5_000
"""Recent prediction errors the error figure is taken over."""

HEAVY_TAIL_GROWTH = 1.5
"""A job past its estimate is expected to run this many times what it has run so far: a
Pareto tail of shape 3 has a mean residual life of half the age reached (t / (alpha - 1))."""


class EstimateLevel(StrEnum):
    """Which history an estimate came from, most specific first (the order of backing off)."""

    USER_NAME_COMMAND_GPUS = "user+name+command+gpus"
    USER_NAME = "user+name"
    USER_GPUS = "user+gpus"
    TENANT_GPUS = "tenant+gpus"
    QUEUE = "queue median"


LEVEL_WEIGHT: dict[EstimateLevel, float] = {
    EstimateLevel.USER_NAME_COMMAND_GPUS: 0.9,
    EstimateLevel.USER_NAME: 0.8,
    EstimateLevel.USER_GPUS: 0.6,
    EstimateLevel.TENANT_GPUS: 0.5,
    EstimateLevel.QUEUE: 0.3,
}
"""How far a level's runs speak for a new job at best: the same job again says most."""


@dataclass(frozen=True, slots=True)
class JobFeatures:
    """What a job is known by before it runs (None: not known, e.g. a trace without users)."""

    tenant: str
    user: str | None  # the submitting member
    name: str | None  # job name without the random suffix
    command: str | None  # a digest of the command (``command_digest``)
    gpus: int
    queue: str


@dataclass(frozen=True, slots=True)
class RuntimeEstimate:
    """An estimated run time, the history it came from, and how far to trust it (0..1)."""

    seconds: float
    basis: str  # e.g. "user+name+gpus (12 runs)", "queue median (340 runs)"
    samples: int
    confidence: float
    level: EstimateLevel = EstimateLevel.QUEUE


def command_digest(command: Sequence[str]) -> str:
    """A short, stable digest of a command line (arguments joined unambiguously)."""
    joined = "\x00".join(command).encode()
    return hashlib.sha256(joined).hexdigest()[:16]


def planned_runtime(estimate_s: float, elapsed_s: float) -> float:
    """The run time to plan with for a running job: its estimate, or once it has run close to
    or past it, ``HEAVY_TAIL_GROWTH`` times what it has run (so its planned end stays ahead)."""
    return max(estimate_s, HEAVY_TAIL_GROWTH * elapsed_s)


def _keys(f: JobFeatures) -> list[tuple[EstimateLevel, tuple[object, ...]]]:
    """The keys a job's history is filed under, most specific first; a key needing a feature
    the job lacks (None) is left out."""
    keys: list[tuple[EstimateLevel, tuple[object, ...]]] = []
    if f.user is not None and f.name is not None and f.command is not None:
        keys.append(
            (
                EstimateLevel.USER_NAME_COMMAND_GPUS,
                (f.tenant, f.user, f.name, f.command, f.gpus),
            )
        )
    if f.user is not None and f.name is not None:
        keys.append((EstimateLevel.USER_NAME, (f.tenant, f.user, f.name)))
    if f.user is not None:
        keys.append((EstimateLevel.USER_GPUS, (f.tenant, f.user, f.gpus)))
    keys.append((EstimateLevel.TENANT_GPUS, (f.tenant, f.gpus)))
    keys.append((EstimateLevel.QUEUE, (f.queue,)))
    return keys


def _confidence(level: EstimateLevel, runs: Sequence[float], middle: float) -> float:
    """The level's weight, times n/(n+1) (more runs, more trust), times 1/(1+d) where d is
    the runs' median absolute deviation relative to their median (spread runs, less trust)."""
    n = len(runs)
    spread = median(abs(r - middle) for r in runs) / middle if middle > 0 else 1.0
    return round(LEVEL_WEIGHT[level] * n / (n + 1) / (1.0 + spread), 4)


class RuntimeEstimator:
    """Learns run times online (``observe``) and predicts them (``estimate``); pure, no I/O.

    A key answers once it holds ``min_samples`` runs; the queue level, the last resort,
    answers from ``min_samples`` too. Not thread-safe: one owner feeds and asks it.
    """

    def __init__(
        self,
        *,
        window: int = DEFAULT_WINDOW,
        max_keys: int = DEFAULT_MAX_KEYS,
        min_samples: int = 2,
        error_window: int = DEFAULT_ERROR_WINDOW,
    ) -> None:
        if window < 1 or max_keys < 1 or min_samples < 1 or error_window < 1:
            raise ValueError("window, max_keys, min_samples and error_window must be >= 1")
        self.window = window
        self.max_keys = max_keys
        self.min_samples = min_samples
        self._runs: OrderedDict[tuple[EstimateLevel, tuple[object, ...]], deque[float]] = (
            OrderedDict()
        )
        self._errors: deque[float] = deque(maxlen=error_window)
        self._observed = 0

    def observe(self, features: JobFeatures, runtime_s: float, at: float) -> None:
        """Learn that a job with these features ran ``runtime_s`` seconds (finished at
        ``at``). It is first predicted from what was known before, for the error figure."""
        if runtime_s < 0:
            raise ValueError(f"runtime_s must be >= 0, got {runtime_s}")
        before = self.estimate(features)
        if before is not None and runtime_s > 0:
            self._errors.append(abs(before.seconds - runtime_s) / runtime_s)
        self._observed += 1
        for key in _keys(features):
            runs = self._runs.get(key)
            if runs is None:
                runs = self._runs[key] = deque(maxlen=self.window)
                if len(self._runs) > self.max_keys:
                    self._runs.popitem(last=False)
            else:
                self._runs.move_to_end(key)
            runs.append(runtime_s)

    def estimate(self, features: JobFeatures) -> RuntimeEstimate | None:
        """The median of the most specific key's recent runs with enough of them (None: no
        key has ``min_samples`` runs yet)."""
        for level, key in _keys(features):
            runs = self._runs.get((level, key))
            if runs is None or len(runs) < self.min_samples:
                continue
            middle = median(runs)
            n = len(runs)
            return RuntimeEstimate(
                seconds=float(middle),
                basis=f"{level.value} ({n} runs)",
                samples=n,
                confidence=_confidence(level, runs, middle),
                level=level,
            )
        return None

    def error_summary(self) -> dict[str, float]:
        """``mdape``: median absolute percentage error (in percent) of the predictions made
        before each observed run; ``samples``: how many predictions it is over; ``observed``:
        runs learned. ``mdape`` is NaN while no prediction has been checked."""
        errors = self._errors
        return {
            "mdape": 100.0 * median(errors) if errors else float("nan"),
            "samples": float(len(errors)),
            "observed": float(self._observed),
        }
