"""The addresses of an inference service's revisions, on executors that give each its own (a
Kubernetes Service, ``kbs-<revision>``): one for every revision that takes traffic, none left
for any other.

Which exist is listed from the executor at the first pass and every ``resync_s`` after, not
only remembered: one made before a restart of the control plane, for a service deleted
meanwhile, would outlive it otherwise; one deleted by hand is made again. The executor's calls
are the executor's ``RevisionAddresses`` capability, where it declares one: the local executor
has none, and then nothing here acts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kiban.executors.base import Executor, RevisionAddresses

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

    def _addresses(self) -> RevisionAddresses | None:
        return self.executor.offers.revisions

    def sync(self, now: float) -> None:
        """Learn which Services exist from the executor, at the first call and every
        ``resync_s``; a listing that fails is tried again the next call, ``published``
        staying as it was meanwhile."""
        addresses = self._addresses()
        if addresses is None:
            return
        if self._listed_at is not None and now - self._listed_at < self.resync_s:
            return
        try:
            self.published = dict(addresses.published_revisions())
        except Exception as exc:
            log.warning("could not list the revisions' Services: %s", exc)
            return
        self._listed_at = now

    def publish(self, tenant: str, service: str, revision: str, port: int) -> None:
        """Make the Service of a revision that takes traffic, unless it exists (a failure is
        tried again the next pass)."""
        addresses = self._addresses()
        if addresses is None or (tenant, revision) in self.published:
            return
        try:
            address = addresses.publish_revision(tenant, service, revision, port)
            self.published[(tenant, revision)] = address
        except Exception as exc:
            log.warning("could not publish revision %s: %s", revision, exc)

    def remove_unrouted(self, routed: set[RevisionKey]) -> None:
        """Remove every Service no service routes to; one that cannot be removed stays in
        ``published``, so the next pass tries again."""
        addresses = self._addresses()
        if addresses is None:
            return
        for key in [k for k in self.published if k not in routed]:
            tenant, name = key
            try:
                addresses.unpublish_revision(tenant, name)
            except Exception as exc:
                log.warning("could not remove the Service of revision %s: %s", name, exc)
                continue
            del self.published[key]
