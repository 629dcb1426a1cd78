"""Submitting jobs straight to a platform's store, as the API would, for tests that drive the
control loop without HTTP. Kept apart from ``kiban.testing`` so that importing the builders
does not import the store and services."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kiban.platform import Platform
from kiban.services import jobs
from kiban.services.auth import Principal

ADMIN = Principal(name="admin", tenant=None, is_admin=True)


def submit_to_platform(
    platform: Platform, document: Mapping[str, Any], principal: Principal = ADMIN
) -> str:
    """Store the manifest as a new job at the platform clock's now, committed; its id."""
    with platform.sessions() as session:
        job = jobs.submit(
            session, principal, dict(document), facts=platform.facts, at=platform.clock.now()
        )
        session.commit()
        return job.id
