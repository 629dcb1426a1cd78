"""The addresses of an inference service's revisions, on executors that give each its own (a
Kubernetes Service, ``kbs-<revision>``): one for every revision that takes traffic, none left
for any other.

Which exist is listed from the executor at the first pass and every ``resync_s`` after, not
only remembered: one made before a restart of the control plane, for a service deleted
meanwhile, would outlive it otherwise; one deleted by hand is made again. The executor's calls
are looked up at each use (``publish_revision``, ``unpublish_revision``,
``published_revisions``): the local executor has none of them, and then nothing here acts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kiban.executors.base import Executor

log = logging.getLogger("kiban.services.controller")

RESYNC_S = 300.0
"""How often the Services are listed again: one list call per five minutes is nothing, and it
heals within minutes what memory alone never would (a Service deleted by hand, whose revision
would stay without one; one made by another control plane)."""

RevisionKey = tuple[str, str]
"""(tenant, revision name)"""


@dataclass
class RevisionServices:
    """The revisions' Services known to exist, and the calls that make and remove them."""

    executor: Executor
    resync_s: float = RESYNC_S
    published: dict[RevisionKey, str] = field(default_factory=dict)
    """(tenant, revision) to the Service's address."""
    _listed_at: float | None = None

    def _calls(
        self,
    ) -> tuple[Callable[[str, str, str, int], str], Callable[[str, str], None]] | None:
        publish = getattr(self.executor, "publish_revision", None)
        unpublish = getattr(self.executor, "unpublish_revision", None)
        return None if publish is None or unpublish is None else (publish, unpublish)

    def sync(self, now: float) -> None:
        """Learn which Services exist from the executor, at the first call and every
        ``resync_s``; a listing that fails is tried again the next call, ``published``
        staying as it was meanwhile."""
        listing = getattr(self.executor, "published_revisions", None)
        if listing is None or self._calls() is None:
            return
        if self._listed_at is not None and now - self._listed_at < self.resync_s:
            return
        try:
            self.published = dict(listing())
        except Exception as exc:
            log.warning("could not list the revisions' Services: %s", exc)
            return
        self._listed_at = now

    def publish(self, tenant: str, service: str, revision: str, port: int) -> None:
        """Make the Service of a revision that takes traffic, unless it exists (a failure is
        tried again the next pass)."""
        calls = self._calls()
        if calls is None or (tenant, revision) in self.published:
            return
        try:
            self.published[(tenant, revision)] = calls[0](tenant, service, revision, port)
        except Exception as exc:
            log.warning("could not publish revision %s: %s", revision, exc)

    def remove_unrouted(self, routed: set[RevisionKey]) -> None:
        """Remove every Service no service routes to; one that cannot be removed stays in
        ``published``, so the next pass tries again."""
        calls = self._calls()
        if calls is None:
            return
        for key in [k for k in self.published if k not in routed]:
            tenant, name = key
            try:
                calls[1](tenant, name)
            except Exception as exc:
                log.warning("could not remove the Service of revision %s: %s", name, exc)
                continue
            del self.published[key]
