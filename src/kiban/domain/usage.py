"""Fair-share usage: resource-seconds with exponential decay, and the standing derived from it.

A tenant's usage ``U`` decays with half-life ``H`` and grows by what it holds: holding a
weighted rate ``r`` (e.g. GPUs x weight) for ``dt`` seconds turns ``U`` into
``U * d + r * H / ln 2 * (1 - d)`` with ``d = 2 ** (-dt / H)``, the exact integral of the
decayed rate, so updating every second or once an hour gives the same number. A tenant that
holds ``r`` for ever tends to ``r * H / ln 2``. This is Slurm's decayed usage (its
``PriorityDecayHalfLife``), kept per tenant.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TypeVar

LN2 = math.log(2.0)
_K = TypeVar("_K")


class Decay:
    """One step of ``dt > 0`` seconds of decay with half-life ``half_life_s``, its exponential
    computed once: a replay moves every tenant's and member's usage by the same step."""

    __slots__ = ("d", "half_life_s")

    def __init__(self, dt: float, half_life_s: float) -> None:
        self.d = math.exp(-LN2 * dt / half_life_s)
        self.half_life_s = half_life_s

    def accrue(self, usage: float, rate: float) -> float:
        """Usage after holding ``rate`` (weighted resources) over the step, decay included."""
        d = self.d
        return usage * d + rate * self.half_life_s / LN2 * (1.0 - d)

    def decay(self, usage: float) -> float:
        """Usage after the step of decay alone."""
        return usage * self.d

    def step(self, usage: dict[_K, float], held: Mapping[_K, float]) -> None:
        """Every usage over the step, in place: ``accrue`` for those holding ``held[key]``
        (added if new), ``decay`` for the others; the same numbers as one call per key, without
        the calls (a replay steps every tenant and member at every instant)."""
        d = self.d
        grow = 1.0 - d
        half_life_s = self.half_life_s
        for key, rate in held.items():
            usage[key] = usage.get(key, 0.0) * d + rate * half_life_s / LN2 * grow
        if len(usage) > len(held):
            for key in usage.keys() - held.keys():
                usage[key] = usage[key] * d


def decay(usage: float, dt: float, half_life_s: float) -> float:
    """Usage after ``dt`` seconds of decay alone."""
    if dt <= 0:
        return usage
    return Decay(dt, half_life_s).decay(usage)


def accrue(usage: float, rate: float, dt: float, half_life_s: float) -> float:
    """Usage after holding ``rate`` (weighted resources) for ``dt`` seconds, decay included."""
    if dt <= 0:
        return usage
    return Decay(dt, half_life_s).accrue(usage, rate)


def weighted_rate(held: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """Resources held now (``gpu``, ``cpu`` in cores, ``memory`` in GiB) times their weights."""
    return sum(amount * weights.get(resource, 0.0) for resource, amount in held.items())


def standing(usage: float, weight: float) -> float:
    """A tenant's fair-share standing: usage per unit of weight; lower goes first."""
    return usage / weight if weight > 0 else math.inf
