"""Recording and reading events: the history of every job, node and policy change."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from kiban.store.models import Event, Job


def new_event(
    *,
    kind: str,
    name: str,
    reason: str,
    message: str,
    at: float,
    tenant: str | None = None,
    warning: bool = False,
) -> Event:
    """An event not yet in any session."""
    return Event(
        object_kind=kind,
        object_name=name,
        tenant=tenant,
        type="Warning" if warning else "Normal",
        reason=reason,
        message=message,
        at=at,
    )


def record(
    session: Session,
    *,
    kind: str,
    name: str,
    reason: str,
    message: str,
    at: float,
    tenant: str | None = None,
    warning: bool = False,
) -> Event:
    """Add an event to the session (committed with the change it describes)."""
    event = new_event(
        kind=kind,
        name=name,
        reason=reason,
        message=message,
        at=at,
        tenant=tenant,
        warning=warning,
    )
    session.add(event)
    return event


def record_for_job(
    session: Session, job: Job, reason: str, message: str, at: float, *, warning: bool = False
) -> Event:
    """``record`` of an event of ``job`` (its kind, id and tenant)."""
    return record(
        session,
        kind="Job",
        name=job.id,
        tenant=job.tenant,
        reason=reason,
        message=message,
        at=at,
        warning=warning,
    )


def for_object(session: Session, kind: str, name: str, after_id: int = 0) -> list[Event]:
    """Events of one object in the order they happened."""
    query = (
        select(Event)
        .where(Event.object_kind == kind, Event.object_name == name, Event.id > after_id)
        .order_by(Event.id)
    )
    return list(session.scalars(query))
