"""How much one replica of a service is sent at once, and what the autoscaler aims for.

A service's ``containerConcurrency`` (KServe's and Knative's) caps the requests the router
sends one replica at once; the rest wait in the router's queue, go to whichever replica frees
first, count for the autoscaler, and are refused with 503 once the queue is full. That is the
back-pressure, so kiban's model server gets a cap even when the service names none: twice its
batch size (``--max_batch_size``), one batch running and the next one forming. A custom server's
capacity is unknown: without ``containerConcurrency`` it has no cap, as in Knative.

As in Knative, a capped replica's concurrency target is at most its cap: the soft target of
100 would never be reached by a replica that takes 16 at once, and the queue would grow while
the autoscaler saw nothing to do.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence

from kiban.domain.service import ServiceSpec
from kiban.serving.autoscaler import DEFAULT_CONCURRENCY_TARGET, ScalingPolicy
from kiban.serving.runtime.options import ServerOptions, option_values

BATCHES_PER_REPLICA = 2
"""A model server's default cap, in batches: one running and one forming."""


def runtime_batch_size(args: Sequence[str]) -> int:
    """The model server's ``--max_batch_size`` in a service's args (its default when absent
    or not valid: such args are refused when a service is applied, but one stored before may
    have them, and its replica will say what is wrong)."""
    return _batch_size(tuple(args))


@functools.lru_cache(maxsize=1024)
def _batch_size(args: tuple[str, ...]) -> int:
    """Cached by the args: the controller asks for every service each pass, and building the
    runtime's parser costs about 0.3 ms."""
    try:
        namespace = option_values(args)
    except argparse.ArgumentError:
        return ServerOptions.max_batch_size
    return int(namespace.max_batch_size)


def replica_concurrency(spec: ServiceSpec) -> int:
    """Requests the router sends one replica at once (0: no cap)."""
    if spec.container_concurrency or spec.runtime != "huggingface":
        return spec.container_concurrency
    return BATCHES_PER_REPLICA * runtime_batch_size(spec.args)


def scaling_policy(spec: ServiceSpec) -> ScalingPolicy:
    """The autoscaler's policy for a service; a concurrency target within the replica's cap."""
    target = spec.scale_target
    cap = replica_concurrency(spec)
    if spec.scale_metric == "concurrency" and cap:
        target = min(target or DEFAULT_CONCURRENCY_TARGET, cap)
    return ScalingPolicy(
        metric=spec.scale_metric,
        target=target,
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
    )
