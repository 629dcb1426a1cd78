"""What ``GET /api/v1/usage`` returns (camelCase JSON), built from a usage report."""

from __future__ import annotations

from kiban.api.schemas import ApiModel
from kiban.services.accounting import UsageReport, UsageRow


class UsageRowOut(ApiModel):
    """One group in one period (``periodStart`` null: the whole window): GPU- and CPU-hours
    held, attempts and jobs, and the GPU-hours of attempts lost to preemption and to node
    failures; ``cost`` null where no prices are set."""

    tenant: str | None
    key: str | None
    period_start: float | None
    gpu_hours: float
    cpu_hours: float
    attempts: int
    jobs: int
    preempted_gpu_hours: float
    node_lost_gpu_hours: float
    cost: float | None


class UsageReportOut(ApiModel):
    """Usage within ``[since, until)`` (Unix seconds) grouped ``by``, as of ``now``."""

    by: str
    since: float
    until: float
    now: float
    granularity: str | None
    rows: list[UsageRowOut]


def usage_row_out(row: UsageRow) -> UsageRowOut:
    return UsageRowOut(
        tenant=row.tenant,
        key=row.key,
        period_start=row.period_start,
        gpu_hours=row.gpu_hours,
        cpu_hours=row.cpu_hours,
        attempts=row.attempts,
        jobs=row.jobs,
        preempted_gpu_hours=row.preempted_gpu_hours,
        node_lost_gpu_hours=row.node_lost_gpu_hours,
        cost=row.cost,
    )


def usage_report_out(report: UsageReport) -> UsageReportOut:
    return UsageReportOut(
        by=report.by.value,
        since=report.since,
        until=report.until,
        now=report.now,
        granularity=None if report.granularity is None else report.granularity.value,
        rows=[usage_row_out(row) for row in report.rows],
    )
