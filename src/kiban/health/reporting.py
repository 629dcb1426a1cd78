"""Send each pass's report to the control plane (``POST /api/v1/nodes/{name}/health``).

A control plane that is down or refuses a report never stops the agent: the report is retried a
few times with a growing pause, then dropped (the next pass sends a fresh one), and the failure
is logged and counted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from kiban.health.report import NodeHealthReply, NodeHealthReport

log = logging.getLogger(__name__)


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
        path = f"/api/v1/nodes/{quote(report.reading.node, safe='')}/health"
        body = report.model_dump_json(by_alias=True)
        headers = {"Content-Type": "application/json"}
        for attempt in range(self.attempts):
            if attempt:
                self.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = self.client.post(path, content=body, headers=headers)
            except httpx.HTTPError as exc:
                log.warning("report of %s not sent: %s", report.reading.node, exc)
                continue
            if response.status_code == 200:
                try:
                    return NodeHealthReply.model_validate_json(response.content)
                except ValidationError as exc:
                    log.warning("the control plane's reply is not a NodeHealthReply: %s", exc)
                    return None
            log.warning(
                "report of %s refused: HTTP %d %s",
                report.reading.node,
                response.status_code,
                response.text[:200],
            )
            if response.status_code < 500 and response.status_code != 429:
                break  # the same report would be refused again
        self.failures += 1
        return None

    def close(self) -> None:
        self.client.close()
