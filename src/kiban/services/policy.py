"""The cluster policy: its versions, and applying a new one all at once or not at all.

Applying a policy (``apply_policy``), in one transaction that the caller commits:

1. Validate the document: every problem names its field (422).
2. Stop if the document is the current one: the same document is not a new version.
3. Check it against the store (409): each flavor matches some node; a queue the policy drops,
   or gives to another tenant, has no unfinished jobs.
4. Write the next version, the document as written.
5. Create, update and remove queues, and create the tenants they name.
6. Work out the drain plan: queues left holding more GPUs of a flavor than the new policy lets
   them hold now (their over-quota use, ``kiban.services.quota_ledger``), and how it comes back.
7. Record events: the policy's, each changed queue's, a warning for each queue to drain.

A rejected policy raises before anything is committed, so it leaves nothing behind.

Two choices, and why:

- **A quota below what a queue uses now is accepted, with a drain plan.** Refusing it would
  make admins cancel work before they may shrink a quota, at the busy times when that is most
  needed. Instead running jobs keep running (the policy change preempts nothing by itself);
  the queue starts no new work of that flavor until its use is back within what it may hold:
  its quota plus what its cohort can lend it now (a borrowing limit is not enough when no
  queue lends). The GPUs come back as its jobs end (by the latest end their maxRuntimes
  give, when they all have one) or, when another queue of its cohort has quota of the flavor,
  by preemption when that queue needs it. The plan is in the answer, the policy's event and a
  warning event of each queue concerned; ``kiban queues`` shows the same GPUs as over quota.
- **A queue dropped from the policy is removed only when it has no unfinished jobs**
  (pending, admitted, running or stopping); otherwise the policy is refused (409) naming the
  queue and its jobs. Removing it anyway would strand those jobs in a queue no policy
  describes. Finished jobs keep the queue's name in their history. Moving a queue to another
  tenant is refused on the same condition (its jobs belong to the old tenant).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from kiban.domain.cluster import (
    ClusterConfig,
    ClusterPolicy,
    QueueDecl,
    parse_policy,
)
from kiban.domain.declarations import DEFAULT_QUEUE_ENTRY
from kiban.domain.errors import FieldProblem, SpecError
from kiban.domain.jobspec import check_dns_label
from kiban.domain.manifests import json_problem
from kiban.domain.states import TERMINAL
from kiban.services import events
from kiban.services.auth import Principal
from kiban.services.errors import Conflict, InvalidInput, invalid
from kiban.services.quota_ledger import freed_by, ledger, quota_book
from kiban.store.models import Job, PolicyVersion, Queue, Tenant
from kiban.store.models_nodes import Node

POLICY_OBJECT = "cluster"  # events of the policy: kind "Policy", name "cluster"
MAX_ACTOR = 128  # the width of policy_versions.created_by
BUILT_IN: dict[str, Any] = {}  # the document of the built-in default policy


@dataclass(frozen=True)
class PolicyRecord:
    """A version of the policy: the document as written, and what it means."""

    version: int  # 0: the built-in default, never applied
    document: dict[str, Any]
    policy: ClusterPolicy
    created_at: float | None = None
    created_by: str | None = None


@dataclass(frozen=True)
class DrainStep:
    """A queue using more GPUs of a flavor than the new policy lets it hold now (``allowed``:
    its quota, plus what its cohort can lend it now), and how the rest comes back: as its jobs
    end (``by``: the latest time their maxRuntimes give; None when some have none), and by
    preemption when ``reclaimable`` (another queue of its cohort has quota of the flavor and
    takes it back when it needs it)."""

    queue: str
    flavor: str
    in_use: int
    allowed: int
    cohort: str | None = None
    reclaimable: bool = False
    by: float | None = None

    @property
    def over_quota(self) -> int:
        return self.in_use - self.allowed

    def __str__(self) -> str:
        flavor = self.flavor
        text = (
            f"queue {self.queue} uses {self.in_use} {flavor} GPUs, {self.over_quota} more than "
            f"the {self.allowed} the policy now lets it use"
        )
        if self.cohort is not None:
            text += f" (its quota and what cohort {self.cohort} can lend it now)"
        text += (
            f": its running jobs keep running; new {flavor} work waits until its use is back "
            f"within {self.allowed}"
        )
        if self.reclaimable:
            text += (
                f"; a queue of cohort {self.cohort} that needs its own {flavor} quota takes "
                "them back by preemption"
            )
        if self.by is not None:
            at = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.by))
            text += f"; its jobs' maxRuntime gives them back by {at} at the latest"
        else:
            text += "; otherwise they come back as its jobs end (no maxRuntime says when)"
        return text


@dataclass(frozen=True)
class PolicyChange:
    """What applying a policy did."""

    version: int
    changed: bool
    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    drain: tuple[DrainStep, ...] = field(default_factory=tuple)

    @property
    def summary(self) -> str:
        """What changed, without the drain plan."""
        if not self.changed:
            return f"policy version {self.version} is already the current one; nothing changed"
        parts = [f"policy version {self.version} applied"]
        for what, names in (
            ("created", self.created),
            ("updated", self.updated),
            ("removed", self.removed),
        ):
            if names:
                parts.append(f"queues {what}: {', '.join(names)}")
        return "; ".join(parts)

    @property
    def message(self) -> str:
        """What changed and the drain plan, in one line (the policy's event)."""
        if not self.drain:
            return self.summary
        return f"{self.summary}; drain plan: " + "; ".join(str(step) for step in self.drain)


# -- reading ------------------------------------------------------------------------------------
def _record(row: PolicyVersion) -> PolicyRecord:
    return PolicyRecord(
        version=row.version,
        document=row.document,
        policy=parse_policy(row.document),
        created_at=row.created_at,
        created_by=row.created_by,
    )


def policy_generation(session: Session) -> int:
    """The number of the newest version (0: none yet); cheap, for callers that cache."""
    return int(session.scalar(select(func.max(PolicyVersion.version))) or 0)


def latest_record(session: Session) -> PolicyRecord | None:
    """The newest applied version, or None when no policy was ever applied."""
    row = session.scalar(select(PolicyVersion).order_by(PolicyVersion.version.desc()).limit(1))
    return None if row is None else _record(row)


def current_record(session: Session) -> PolicyRecord:
    """The newest version, or the built-in default (version 0) when none was applied."""
    return latest_record(session) or PolicyRecord(0, dict(BUILT_IN), parse_policy(BUILT_IN))


def current_policy(session: Session) -> ClusterPolicy:
    """The policy in force: the newest version's, or the built-in default."""
    return current_record(session).policy


class PolicyCache:
    """The current policy, parsed again only when a new version appears (one cheap query)."""

    def __init__(self) -> None:
        self._record: PolicyRecord | None = None

    @property
    def known(self) -> ClusterPolicy | None:
        """The policy the last ``get`` returned (None before the first), read without a query."""
        return None if self._record is None else self._record.policy

    def get(self, session: Session) -> ClusterPolicy:
        generation = policy_generation(session)
        if self._record is None or self._record.version != generation:
            self._record = current_record(session)
        return self._record.policy


def list_versions(session: Session, principal: Principal, limit: int = 50) -> list[PolicyVersion]:
    """Applied versions, newest first (admins only)."""
    principal.require_admin()
    if not 1 <= limit <= 1000:
        raise invalid("limit", "must be between 1 and 1000")
    query = select(PolicyVersion).order_by(PolicyVersion.version.desc()).limit(limit)
    return list(session.scalars(query))


# -- applying -----------------------------------------------------------------------------------
def validate_document(document: Any) -> ClusterPolicy:
    """The policy a document describes; InvalidInput (422) naming each offending field."""
    if not isinstance(document, dict):
        raise invalid("", "a policy is a mapping (flavors, cohorts, queues, priorityClasses...)")
    problem = json_problem(document)
    if problem is not None:
        raise invalid(*problem)
    try:
        return parse_policy(document)
    except SpecError as exc:
        raise InvalidInput(exc.problems) from None


def change_policy(session: Session, principal: Principal, document: Any, at: float) -> PolicyChange:
    """``PUT /policy``: an admin replaces the policy."""
    principal.require_admin()
    return apply_policy(session, document, actor=principal.name, at=at)


def apply_policy(
    session: Session, document: Any, actor: str, at: float, nodes_known: bool = True
) -> PolicyChange:
    """Validate ``document`` and make it the current policy (see the module's docstring).

    ``nodes_known``: whether the store's nodes are all the nodes there are (then a flavor that
    none of them matches is refused); False while an executor has not reported yet.
    """
    # 1. Validate the document.
    policy = validate_document(document)
    # 2. The same document is not a new version (and, in force already, is not checked again).
    latest = latest_record(session)
    if latest is not None and latest.document == document:
        return PolicyChange(version=latest.version, changed=False)
    # 3. Check it against the store.
    rows = {q.name: q for q in session.scalars(select(Queue))}
    _check_against_store(session, policy, rows, nodes_known)
    # 4. Write the next version.
    version = (latest.version if latest is not None else 0) + 1
    session.add(
        PolicyVersion(
            version=version, document=document, created_at=at, created_by=actor[:MAX_ACTOR]
        )
    )
    try:
        session.flush()
    except IntegrityError:
        raise Conflict(
            "the policy was changed by someone else meanwhile; read it again and retry"
        ) from None
    # 5. Create, update and remove queues.
    created, updated, removed = _apply_queues(session, policy, rows, version, at)
    # 6. The drain plan.
    drain = tuple(_drain_plan(session, policy))
    change = PolicyChange(version, True, created, updated, removed, drain)
    # 7. Events.
    events.record(
        session,
        kind="Policy",
        name=POLICY_OBJECT,
        reason="Applied",
        message=f"{change.message} (by {actor})",
        at=at,
        warning=bool(drain),
    )
    for step in drain:
        queue = policy.queue(step.queue)
        events.record(
            session,
            kind="Queue",
            name=step.queue,
            tenant=queue.tenant if queue else None,
            reason="QuotaBelowUsage",
            message=f"{step} (policy version {version})",
            at=at,
            warning=True,
        )
    return change


def apply_startup_policy(
    session: Session, config: ClusterConfig | None, at: float
) -> PolicyChange | None:
    """At ``kiban up``: apply the cluster file's policy, or the built-in one on a new store.

    A file that only lists ``nodes`` keeps the policy in the store. A file with a policy makes
    it current when it differs (changes made through the API since are replaced; the history
    keeps them).
    """
    if config is not None and config.declares_policy:
        return apply_policy(session, config.policy_document(), actor="kiban up --config", at=at)
    if latest_record(session) is None:
        return apply_policy(session, dict(BUILT_IN), actor="kiban up (built-in policy)", at=at)
    return None


def add_queue(session: Session, principal: Principal, entry: dict[str, Any], at: float) -> Queue:
    """``POST /queues``: a new policy version with one more queue (entry as in ``queues``).

    Problems are reported with paths inside the entry (``quota.gpu``), as for any request.
    """
    principal.require_admin()
    name = entry.get("name")
    tenant = entry.get("tenant")
    for key, value in (("name", name), ("tenant", tenant)):
        if not isinstance(value, str):
            raise invalid(key, "required: a name")
        try:
            check_dns_label(value, "name")
        except ValueError as exc:
            raise invalid(key, str(exc)) from None
    if session.get(Tenant, tenant) is None:
        raise invalid("tenant", f"tenant {tenant} does not exist")
    record = current_record(session)
    if record.policy.queue(str(name)) is not None:
        raise Conflict(f"queue {name} already exists")
    queues = list(record.document.get("queues", [DEFAULT_QUEUE_ENTRY]))
    prefix = f"queues[{len(queues)}]"
    document = {**record.document, "queues": [*queues, entry]}
    try:
        apply_policy(session, document, actor=f"{principal.name} (create queue {name})", at=at)
    except InvalidInput as exc:
        raise InvalidInput(relative_problems(exc.problems, prefix)) from None
    queue = session.get(Queue, name)
    assert queue is not None
    return queue


def ensure_tenant(session: Session, name: str, at: float) -> Tenant:
    """The tenant ``name``, created if missing (a policy's queues name their tenants)."""
    tenant = session.get(Tenant, name)
    if tenant is None:
        tenant = Tenant(name=name, created_at=at)
        session.add(tenant)
        session.flush()
    elif tenant.deleted_at is not None:  # deleted before: a queue of its brings it back
        tenant.created_at, tenant.deleted_at = at, None
    return tenant


def relative_problems(problems: Iterable[FieldProblem], prefix: str) -> list[FieldProblem]:
    """Problems of a policy entry at ``prefix`` (``queues[3]``) with paths inside the entry
    (``quota.gpu``), as a request that sent the entry alone is answered."""
    relative = []
    for problem in problems:
        path = problem.field
        if path == prefix:
            path = ""
        elif path.startswith(prefix + "."):
            path = path[len(prefix) + 1 :]
        relative.append(FieldProblem(path, problem.message))
    return relative


def _check_against_store(
    session: Session, policy: ClusterPolicy, rows: dict[str, Queue], nodes_known: bool
) -> None:
    conflicts: list[str] = []
    if nodes_known and policy.flavors:
        nodes = session.execute(select(Node.name, Node.labels).order_by(Node.name)).all()
        for i, flavor in enumerate(policy.flavors):
            if not any(flavor.matches(labels or {}) for _, labels in nodes):
                shown = ", ".join(name for name, _ in nodes[:5]) + (
                    " ..." if len(nodes) > 5 else ""
                )
                conflicts.append(
                    f"flavors[{i}]: flavor {flavor.name} ({flavor.labels_text()}) matches none "
                    f"of the {len(nodes)} nodes" + (f" ({shown})" if nodes else "")
                )
    unfinished = _unfinished_jobs(session)
    for name, row in sorted(rows.items()):
        decl = policy.queue(name)
        count = unfinished.get(name, 0)
        if not count:
            continue
        if decl is None:
            conflicts.append(
                f"queue {name} is not in the policy but has {count} unfinished job(s); cancel "
                "them or let them finish before removing it"
            )
        elif decl.tenant != row.tenant:
            conflicts.append(
                f"queues[{policy.queues.index(decl)}].tenant: queue {name} has {count} "
                f"unfinished job(s) of tenant {row.tenant}; they must finish before it moves "
                f"to tenant {decl.tenant}"
            )
    if conflicts:
        raise Conflict("policy refused: " + "; ".join(conflicts))


def _unfinished_jobs(session: Session) -> dict[str, int]:
    terminal = [state.value for state in TERMINAL]
    query = select(Job.queue, func.count()).where(Job.state.not_in(terminal)).group_by(Job.queue)
    return {queue: int(count) for queue, count in session.execute(query).all()}


def _per_flavor(amounts: dict[str, int]) -> dict[str, Any]:
    return {flavor: {"gpu": gpus} for flavor, gpus in amounts.items()}


def _with_extended(quota: dict[str, Any], decl: QueueDecl) -> dict[str, Any]:
    """The quota with the extended resources it names beside each flavor's GPUs."""
    for flavor, resources in decl.extended_nominal.items():
        quota[flavor] = {**quota.get(flavor, {"gpu": 0}), **resources}
    return quota


def _queue_values(decl: QueueDecl) -> dict[str, Any]:
    nominal = decl.nominal
    return {
        "tenant": decl.tenant,
        "cohort": decl.cohort,
        "quota": None if nominal is None else _with_extended(_per_flavor(nominal), decl),
        "borrowing_limit": _per_flavor(decl.borrowing),
        "lending_limit": _per_flavor(decl.lending),
        "strategy": decl.strategy,
        "fair_share_weight": decl.fair_share_weight,
    }


def describe_queue(decl: QueueDecl) -> str:
    """``quota h100:16 a100:8, cohort research, BestEffortFIFO``."""
    nominal = decl.nominal
    quota = "none" if nominal is None else " ".join(f"{f}:{n}" for f, n in nominal.items())
    for flavor, resources in decl.extended_nominal.items():
        quota += "".join(f" {flavor}:{name}={amount}" for name, amount in resources.items())
    parts = [f"quota {quota or '0'}"]
    if decl.cohort:
        parts.append(f"cohort {decl.cohort}")
    parts.append(decl.strategy)
    return ", ".join(parts)


def _apply_queues(
    session: Session, policy: ClusterPolicy, rows: dict[str, Queue], version: int, at: float
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    created: list[str] = []
    updated: list[str] = []
    for decl in policy.queues:
        ensure_tenant(session, decl.tenant, at)
        values = _queue_values(decl)
        row = rows.get(decl.name)
        if row is None:
            session.add(Queue(name=decl.name, created_at=at, **values))
            created.append(decl.name)
            reason = "Created"
        elif any(getattr(row, key) != value for key, value in values.items()):
            for key, value in values.items():
                setattr(row, key, value)
            updated.append(decl.name)
            reason = "Updated"
        else:
            continue
        events.record(
            session,
            kind="Queue",
            name=decl.name,
            tenant=decl.tenant,
            reason=reason,
            message=f"queue {decl.name}: {describe_queue(decl)} (policy version {version})",
            at=at,
        )
    removed = sorted(name for name in rows if policy.queue(name) is None)
    for name in removed:
        row = rows[name]
        session.delete(row)
        events.record(
            session,
            kind="Queue",
            name=name,
            tenant=row.tenant,
            reason="Removed",
            message=f"queue {name} removed: not in policy version {version}",
            at=at,
        )
    return tuple(created), tuple(updated), tuple(removed)


def _drain_plan(session: Session, policy: ClusterPolicy) -> list[DrainStep]:
    """Queues that hold more GPUs of a flavor than the policy lets them hold now: their use
    that no one lends (``kiban.services.quota_ledger``'s over quota), with how it comes back."""
    session.flush()  # the queues as the new policy has them
    book = quota_book(session, policy)
    steps = []
    for flavor in sorted({flavor for q in book.queues.values() for flavor in q.used}):
        for name, share in ledger(book, flavor).items():
            if not share.over_quota:
                continue
            used = book.used(name, flavor)
            cohort = book.queues[name].cohort
            lenders = [
                other
                for other in book.queues.values()
                if cohort is not None and other.cohort == cohort and other.name != name
            ]
            steps.append(
                DrainStep(
                    queue=name,
                    flavor=flavor,
                    in_use=used,
                    allowed=used - share.over_quota,
                    cohort=cohort,
                    reclaimable=any((book.nominal(o.name, flavor) or 0) > 0 for o in lenders),
                    by=freed_by(session, policy, name, flavor, share.over_quota),
                )
            )
    return sorted(steps, key=lambda step: (step.queue, step.flavor))
