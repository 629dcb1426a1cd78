"""A replica's cap on requests at once, and the autoscaler's target within it."""

from __future__ import annotations

from typing import Any

import pytest

from kiban.domain.service import ServiceSpec
from kiban.serving.capacity import replica_concurrency, runtime_batch_size, scaling_policy


def spec(**fields: Any) -> ServiceSpec:
    base: dict[str, Any] = {"runtime": "huggingface", "model_name": "m", "model_id": "o/m"}
    return ServiceSpec.model_validate(base | fields)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], 8),
        (["--max_batch_size", "4"], 4),
        (["--dtype", "float16", "--max-batch-size=3"], 3),
        (["--max_batch_size", "0"], 8),  # not valid: the replica will say so; the default here
        (["--max_batch_size"], 8),
        (["--unknown", "x", "--max_batch_size", "32"], 32),
    ],
)
def test_the_model_servers_batch_size_is_read_from_the_args(args: list[str], expected: int) -> None:
    assert runtime_batch_size(args) == expected


def test_a_model_server_takes_two_batches_at_once_unless_the_service_says() -> None:
    assert replica_concurrency(spec()) == 16
    assert replica_concurrency(spec(args=["--max_batch_size", "2"])) == 4
    assert replica_concurrency(spec(container_concurrency=3)) == 3
    custom = spec(runtime="custom", model_id=None, command=["serve"])
    assert replica_concurrency(custom) == 0  # its capacity is unknown: no cap


def test_the_concurrency_target_stays_within_the_cap() -> None:
    assert scaling_policy(spec()).target == 16  # Knative's 100 would never be reached
    assert scaling_policy(spec(scale_target=5)).target == 5
    assert scaling_policy(spec(scale_target=50, container_concurrency=10)).target == 10
    assert scaling_policy(spec(scale_metric="rps", scale_target=50)).target == 50
    assert scaling_policy(spec(scale_metric="cpu")).target is None  # its default: 80%
    custom = spec(runtime="custom", model_id=None, command=["serve"])
    assert scaling_policy(custom).target is None
    bounds = scaling_policy(spec(min_replicas=0, max_replicas=4))
    assert (bounds.min_replicas, bounds.max_replicas) == (0, 4)
