"""Tables of long-running workloads behind kiban's routes: inference services, their revisions
and replicas, and notebooks with the key their Jupyter tokens are derived from."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from kiban.store.models import Base


class ServiceRow(Base):
    """An inference service: its tenant's name for it, the spec as last submitted, and which
    revisions take its traffic (``stable``, and a ``canary`` with ``canary_percent``)."""

    __tablename__ = "services"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name"))
    name: Mapped[str] = mapped_column(String(63))
    document: Mapped[dict[str, Any]] = mapped_column(JSON)  # the manifest as submitted
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)  # the normalized ServiceSpec
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    revisions_made: Mapped[int] = mapped_column(Integer, default=0)
    stable_revision: Mapped[int | None] = mapped_column(Integer, nullable=True)
    canary_revision: Mapped[int | None] = mapped_column(Integer, nullable=True)
    canary_percent: Mapped[int] = mapped_column(Integer, default=0)
    # Set by a delete: the controller stops the replicas, then removes the service.
    deleted_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = (Index("ux_services_tenant_name", "tenant", "name", unique=True),)


class ServiceRevision(Base):
    """One revision of a service: the spec that made it (its template) and its state."""

    __tablename__ = "service_revisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    service_id: Mapped[int] = mapped_column(
        ForeignKey("services.id", ondelete="CASCADE"), index=True
    )
    number: Mapped[int] = mapped_column(Integer)
    template_key: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))  # Loading, Ready, Failed, Retired
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)
    ready_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    desired_replicas: Mapped[int] = mapped_column(Integer, default=0)
    crashes: Mapped[int] = mapped_column(Integer, default=0)  # replicas that died before ready


class ServiceReplica(Base):
    """A replica of a revision: the job that runs it (placed by the scheduler like any job)."""

    __tablename__ = "service_replicas"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    service_id: Mapped[int] = mapped_column(
        ForeignKey("services.id", ondelete="CASCADE"), index=True
    )
    revision_id: Mapped[int] = mapped_column(ForeignKey("service_revisions.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    ready: Mapped[bool] = mapped_column(Boolean, default=False)
    ever_ready: Mapped[bool] = mapped_column(Boolean, default=False)
    ended: Mapped[bool] = mapped_column(Boolean, default=False)  # its job's end was accounted


class NotebookRow(Base):
    """A notebook: its tenant's name for it, its owner, its spec (``NotebookSpec``), the job of
    its current or last run, where it stands, Jupyter's last activity, and why it stopped."""

    __tablename__ = "notebooks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name"))
    name: Mapped[str] = mapped_column(String(63))
    owner: Mapped[str] = mapped_column(String(128))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    job_id: Mapped[str | None] = mapped_column(String(80), nullable=True)
    state: Mapped[str] = mapped_column(String(16))  # NotebookState
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float] = mapped_column(Float)  # when its current run was asked for
    ready_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_activity: Mapped[float | None] = mapped_column(Float, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)

    __table_args__ = (Index("ux_notebooks_tenant_name", "tenant", "name", unique=True),)


class NotebookKey(Base):
    """The server-side key Jupyter tokens are derived from (one row; never shown to anyone)."""

    __tablename__ = "notebook_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(128))
