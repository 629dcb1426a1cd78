"""Send each pass's reports to the control plane: one node's on its own
(``POST /api/v1/nodes/{name}/health``), several nodes' of one pass in batches
(``POST /api/v1/nodes/health``, at most ``MAX_BATCH_REPORTS`` each).

A control plane that is down or refuses a report never stops the agent: the report is retried a
few times with a growing pause, then dropped (the next pass sends a fresh one), and the failure
is logged and counted. A batch refused as a whole (one node the control plane does not know, or
a control plane older than the batch route) is sent again node by node, so that one bad report
does not silence the others.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from kiban.health.report import (
    MAX_BATCH_REPORTS,
    NodeHealthBatch,
    NodeHealthBatchReply,
    NodeHealthReply,
    NodeHealthReport,
)

log = logging.getLogger(__name__)

BATCH_PATH = "/api/v1/nodes/health"


class ControlPlaneReporter:
    """Posts reports with the admin token; ``transport`` and ``sleep`` are seams for tests."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        attempts: int = 3,
        backoff_s: float = 0.5,
        timeout_s: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.sleep = sleep
        self.failures = 0  # reports given up on
        self.client = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
            transport=transport,
        )

    def report(self, report: NodeHealthReport) -> NodeHealthReply | None:
        """The control plane's reply, or None when it could not be reached or refused."""
        node = report.reading.node
        path = f"/api/v1/nodes/{quote(node, safe='')}/health"
        answer, _ = self._post(path, report.model_dump_json(by_alias=True), f"report of {node}")
        if answer is None:
            self.failures += 1
            return None
        try:
            return NodeHealthReply.model_validate_json(answer.content)
        except ValidationError as exc:
            log.warning("the control plane's reply is not a NodeHealthReply: %s", exc)
            return None

    def report_many(self, reports: Sequence[NodeHealthReport]) -> dict[str, NodeHealthReply | None]:
        """Each node's reply (None: not taken), the reports sent in batches; a single report
        goes to the per-node route."""
        if len(reports) == 1:
            return {reports[0].reading.node: self.report(reports[0])}
        replies: dict[str, NodeHealthReply | None] = {}
        for start in range(0, len(reports), MAX_BATCH_REPORTS):
            replies.update(self._batch(reports[start : start + MAX_BATCH_REPORTS]))
        return replies

    def _batch(self, reports: Sequence[NodeHealthReport]) -> dict[str, NodeHealthReply | None]:
        body = NodeHealthBatch(reports=list(reports)).model_dump_json(by_alias=True)
        answer, refused = self._post(BATCH_PATH, body, f"reports of {len(reports)} nodes")
        if refused:  # sent again one by one: the others are taken, the bad one refused alone
            return {report.reading.node: self.report(report) for report in reports}
        replies: dict[str, NodeHealthReply | None] = {r.reading.node: None for r in reports}
        if answer is None:
            self.failures += len(reports)
            return replies
        try:
            taken = NodeHealthBatchReply.model_validate_json(answer.content).replies
        except ValidationError as exc:
            log.warning("the control plane's reply is not a NodeHealthBatchReply: %s", exc)
            return replies
        return {node: taken.get(node) for node in replies}

    def _post(self, path: str, body: str, what: str) -> tuple[httpx.Response | None, bool]:
        """POST ``body`` with retries: the 200 answer (None when given up) and whether the
        control plane refused it (a 4xx other than 429: sending it again would not help)."""
        headers = {"Content-Type": "application/json"}
        for attempt in range(self.attempts):
            if attempt:
                self.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = self.client.post(path, content=body, headers=headers)
            except httpx.HTTPError as exc:
                log.warning("%s not sent: %s", what, exc)
                continue
            if response.status_code == 200:
                return response, False
            log.warning("%s refused: HTTP %d %s", what, response.status_code, response.text[:200])
            if response.status_code < 500 and response.status_code != 429:
                return None, True  # the same body would be refused again
        return None, False

    def close(self) -> None:
        self.client.close()
