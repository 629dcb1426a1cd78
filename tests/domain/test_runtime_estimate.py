"""The run-time estimator learning from a scripted history: figures computed by hand."""

from __future__ import annotations

import math

import pytest

from kiban.domain.runtime_estimate import (
    EstimateLevel,
    JobFeatures,
    RuntimeEstimator,
    command_digest,
    planned_runtime,
)


def features(
    user: str | None = "alice",
    name: str | None = "train",
    command: str | None = "c1",
    gpus: int = 8,
    tenant: str = "vision",
    queue: str = "vision-q",
) -> JobFeatures:
    return JobFeatures(tenant=tenant, user=user, name=name, command=command, gpus=gpus, queue=queue)


def learned(*runs: tuple[JobFeatures, float], **options: int) -> RuntimeEstimator:
    estimator = RuntimeEstimator(**options)
    for at, (f, seconds) in enumerate(runs):
        estimator.observe(f, seconds, at=float(at))
    return estimator


TWO_RUNS = learned((features(), 100.0), (features(), 300.0))


def test_the_same_job_again_is_the_median_of_its_runs_with_its_confidence() -> None:
    got = TWO_RUNS.estimate(features())
    assert got is not None
    assert got.seconds == 200.0  # median(100, 300)
    assert got.level is EstimateLevel.USER_NAME_COMMAND_GPUS
    assert got.basis == "user+name+command+gpus (2 runs)"
    assert got.samples == 2
    # 0.9 (level) * 2/3 (two runs) / (1 + 100/200) (median deviation 100 around 200) = 0.4
    assert got.confidence == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("asked", "level"),
    [
        (features(command="c2"), EstimateLevel.USER_NAME),  # another command, same name
        (features(name="eval", command="c9"), EstimateLevel.USER_GPUS),  # same user and size
        (features(user="bob", name="x", command="y"), EstimateLevel.TENANT_GPUS),
        (features(user=None, name=None, command=None), EstimateLevel.TENANT_GPUS),  # trace
        (features(name="eval", gpus=4), EstimateLevel.QUEUE),  # only the queue has history
        (features(user="bob", gpus=4, tenant="nlp"), EstimateLevel.QUEUE),
    ],
)
def test_backs_off_to_the_most_specific_key_with_history(
    asked: JobFeatures, level: EstimateLevel
) -> None:
    got = TWO_RUNS.estimate(asked)
    assert got is not None
    assert (got.level, got.seconds, got.samples) == (level, 200.0, 2)
    assert got.basis == f"{level.value} (2 runs)"


def test_no_estimate_without_history_in_its_queue_or_tenant_and_size() -> None:
    assert TWO_RUNS.estimate(features(tenant="nlp", queue="nlp-q")) is None
    assert learned((features(), 100.0)).estimate(features()) is None  # 1 run < min_samples


def test_a_finer_key_with_too_few_runs_gives_way_to_a_coarser_one() -> None:
    estimator = learned(
        (features(command="c1"), 100.0),
        (features(command="c2"), 500.0),
        (features(command="c2"), 600.0),
    )
    got = estimator.estimate(features(command="c1"))  # c1 has 1 run: user+name answers
    assert got is not None
    assert (got.level, got.seconds) == (EstimateLevel.USER_NAME, 500.0)  # median(100,500,600)


def test_coarser_levels_are_trusted_less_for_the_same_runs() -> None:
    same = TWO_RUNS.estimate(features())
    queue_only = TWO_RUNS.estimate(features(name="eval", gpus=4))
    assert same is not None and queue_only is not None
    assert queue_only.confidence == 0.1333  # 0.3 * 2/3 / 1.5, to four places
    assert queue_only.confidence < same.confidence


def test_error_figure_is_over_predictions_made_before_each_run_was_known() -> None:
    estimator = learned(
        (features(), 100.0),  # nothing known: no prediction
        (features(), 300.0),  # one run: no prediction
        (features(), 250.0),  # predicted 200: |200-250|/250 = 0.2
        (features(), 100.0),  # predicted median(100,300,250) = 250: 1.5
        (features(), 200.0),  # predicted median(100,300,250,100) = 175: 0.125
    )
    summary = estimator.error_summary()
    assert summary["mdape"] == pytest.approx(20.0)  # median(0.2, 1.5, 0.125) in percent
    assert summary["samples"] == 3.0
    assert summary["observed"] == 5.0


def test_no_error_figure_before_any_prediction_is_checked() -> None:
    summary = RuntimeEstimator().error_summary()
    assert math.isnan(summary["mdape"])
    assert summary["samples"] == 0.0


def test_keeps_only_the_newest_runs_of_a_key() -> None:
    estimator = learned(
        (features(), 10.0), (features(), 20.0), (features(), 30.0), (features(), 1000.0), window=3
    )
    got = estimator.estimate(features())
    assert got is not None
    assert (got.seconds, got.samples) == (30.0, 3)  # median(20, 30, 1000); 25 with all four


def test_keeps_only_the_most_recently_used_keys() -> None:
    other = features(user="bob", tenant="nlp", queue="nlp-q")
    # each full observation files five keys: bob's five push out alice's five
    estimator = learned(
        (features(), 100.0), (features(), 100.0), (other, 5.0), (other, 5.0), max_keys=5
    )
    assert estimator.estimate(features()) is None
    assert estimator.estimate(other) is not None


def test_a_negative_run_time_is_refused_and_learns_nothing() -> None:
    estimator = RuntimeEstimator(min_samples=1)
    with pytest.raises(ValueError, match="runtime_s"):
        estimator.observe(features(), -1.0, at=0.0)
    assert estimator.estimate(features()) is None


@pytest.mark.parametrize(
    ("estimate", "elapsed", "planned"),
    [(100.0, 10.0, 100.0), (100.0, 80.0, 120.0), (100.0, 200.0, 300.0)],
)
def test_a_running_job_near_or_past_its_estimate_is_planned_to_run_longer(
    estimate: float, elapsed: float, planned: float
) -> None:
    assert planned_runtime(estimate, elapsed) == planned


def test_command_digest_tells_arguments_apart() -> None:
    assert command_digest(["python", "a b"]) != command_digest(["python", "a", "b"])
    assert command_digest(["python", "x"]) == command_digest(["python", "x"])
    assert len(command_digest(["x"])) == 16
