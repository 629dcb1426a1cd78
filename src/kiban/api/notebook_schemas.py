"""What the API returns for notebooks (camelCase JSON)."""

from __future__ import annotations

from kiban.api.schemas import ApiModel
from kiban.domain.notebook import NotebookSpec, NotebookState, notebook_url
from kiban.store.models_serving import NotebookRow


class NotebookOut(ApiModel):
    """A notebook: where it stands, its URL on kiban (``/nb/<tenant>/<name>/``), its job."""

    name: str
    tenant: str
    owner: str
    state: NotebookState
    url: str
    job_id: str | None
    gpus: int
    queue: str | None
    idle_timeout: float
    """Seconds without activity after which it is culled."""
    max_lifetime: float
    """Seconds after which its run is stopped, active or not."""
    last_activity: float | None
    reason: str | None
    """Why it stopped or failed (None while it starts or runs)."""


def notebook_out(row: NotebookRow) -> NotebookOut:
    spec = NotebookSpec.model_validate(row.spec)
    return NotebookOut(
        name=row.name,
        tenant=row.tenant,
        owner=row.owner,
        state=NotebookState(row.state),
        url=notebook_url(row.tenant, row.name),
        job_id=row.job_id,
        gpus=spec.gpus,
        queue=spec.queue,
        idle_timeout=spec.idle_timeout,
        max_lifetime=spec.max_lifetime,
        last_activity=row.last_activity,
        reason=row.reason,
    )
