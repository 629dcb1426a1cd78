"""Where a dependency stands, for each condition and each way the job (or array) it names
stands: a table of cases over the pure ``verdict``."""

from __future__ import annotations

import pytest

from kiban.domain.job_relations import DependencyCondition as C
from kiban.services.dependencies import Outcome, Verdict, verdict

RUNNING = Outcome(ended=False, some_unsuccessful=False, state="Running")
SUCCEEDED = Outcome(ended=True, some_unsuccessful=False, state="Succeeded")
FAILED = Outcome(ended=True, some_unsuccessful=True, state="Failed")
CANCELLED = Outcome(ended=True, some_unsuccessful=True, state="Cancelled")
GONE = Outcome(ended=True, some_unsuccessful=True, missing=True)
# an array: one index failed, others still run
ARRAY_PARTLY_FAILED = Outcome(ended=False, some_unsuccessful=True)


@pytest.mark.parametrize(
    ("condition", "outcome", "expected"),
    [
        (C.SUCCEEDED, RUNNING, Verdict.WAIT),
        (C.SUCCEEDED, SUCCEEDED, Verdict.HOLDS),
        (C.SUCCEEDED, FAILED, Verdict.NEVER),
        (C.SUCCEEDED, CANCELLED, Verdict.NEVER),
        (C.SUCCEEDED, ARRAY_PARTLY_FAILED, Verdict.NEVER),  # known before the rest end
        (C.FAILED, RUNNING, Verdict.WAIT),
        (C.FAILED, SUCCEEDED, Verdict.NEVER),
        (C.FAILED, FAILED, Verdict.HOLDS),
        (C.FAILED, CANCELLED, Verdict.HOLDS),  # afternotok: any end but success
        (C.FAILED, ARRAY_PARTLY_FAILED, Verdict.WAIT),  # an array's end is all its indices'
        (C.FINISHED, RUNNING, Verdict.WAIT),
        (C.FINISHED, SUCCEEDED, Verdict.HOLDS),
        (C.FINISHED, FAILED, Verdict.HOLDS),
        (C.FINISHED, ARRAY_PARTLY_FAILED, Verdict.WAIT),
        (C.FINISHED, GONE, Verdict.NEVER),
    ],
)
def test_verdict(condition: C, outcome: Outcome, expected: Verdict) -> None:
    assert verdict(condition, outcome) is expected
