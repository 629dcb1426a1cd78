"""Names of a job's Kubernetes objects stay within Kubernetes' limits (no server)."""

from __future__ import annotations

import pytest

from kiban.domain.jobspec import DNS_LABEL
from kiban.executors.kubernetes.naming import (
    job_key,
    make_handle,
    namespace_for,
    parse_handle,
    pod_name,
    service_name,
)


def test_long_job_ids_get_short_distinct_keys_and_valid_names() -> None:
    long_a = "a" * 57 + "-abc123"
    long_b = "a" * 57 + "-abc124"
    assert job_key("train-x1y2z3") == "train-x1y2z3"
    assert len(job_key(long_a)) <= 40 and job_key(long_a) != job_key(long_b)
    for name in (service_name(long_a, 100), pod_name(long_a, 100, 9999)):
        assert DNS_LABEL.match(name), name
    assert service_name("9lives-abc123", 1)[0].isalpha()  # Services need a leading letter


def test_namespace_per_tenant_is_checked() -> None:
    assert namespace_for("kiban-", "vision") == "kiban-vision"
    with pytest.raises(ValueError, match="not a valid DNS label"):
        namespace_for("kiban-", "x" * 60)


def test_handles_round_trip_and_junk_is_refused() -> None:
    assert parse_handle(make_handle("ns", "pod", "uid-1")) == ("ns", "pod", "uid-1")
    with pytest.raises(ValueError, match="not a pod handle"):
        parse_handle("1234")
