"""``kiban admin``: tenants, their tokens and queues (an admin's token; a tenant-admin's for
their own tenant's tokens and queues)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from kiban.cli import render
from kiban.cli.output import Output, OutputOpt, print_document
from kiban.domain.errors import SpecError
from kiban.domain.roles import TOKEN_ROLES, Role

admin_app = typer.Typer(
    rich_markup_mode=render.HELP_MARKUP,
    help="Create and delete tenants, tokens and queues.",
    no_args_is_help=True,
)


@admin_app.command("create-tenant")
def create_tenant(name: Annotated[str, typer.Argument(help="tenant (team) name")]) -> None:
    """Create a tenant."""
    from kiban.sdk.client import Client

    with Client() as api:
        api.create_tenant(name)
    render.err.print(f"tenant {name} created")


@admin_app.command("create-token")
def create_token(
    tenant: Annotated[str, typer.Argument(help="tenant the member belongs to")],
    name: Annotated[str, typer.Argument(help="the member the token is for (a user name)")],
    role: Annotated[
        str,
        typer.Option(help=f"the token's role: {', '.join(r.value for r in TOKEN_ROLES)}"),
    ] = Role.MEMBER.value,
    expires: Annotated[
        str | None, typer.Option(help="how long it lives, e.g. 30d or 12h (default: no end)")
    ] = None,
) -> None:
    """Create a member's token; prints it alone on stdout (it is shown only once).
    Tenant-admins may create member and viewer tokens of their own tenant."""
    from kiban.sdk.client import Client

    with Client() as api:
        token = api.create_token(tenant, name, role=role, expires=expires)
    print(token)


@admin_app.command("tokens")
def tokens(
    tenant: Annotated[str | None, typer.Argument(help="only this tenant's")] = None,
    all_: Annotated[
        bool, typer.Option("--all", help="the revoked tokens too (default: active ones only)")
    ] = False,
    output: OutputOpt = Output.TABLE,
) -> None:
    """List tokens: id, member, role, created, expires, last use, revoked (never the secret)."""
    from kiban.sdk.client import Client

    with Client() as api:
        rows = api.tokens(tenant, revoked=all_)
    if output.structured:
        print_document(rows, output)
        return
    from rich.table import Table  # here: a command that prints no table does not load rich

    table = Table(box=None, pad_edge=False, header_style="bold")
    columns = ["ID", "TENANT", "MEMBER", "ROLE", "CREATED", "EXPIRES", "LAST USE"]
    for column in columns + (["REVOKED"] if all_ else []):
        table.add_column(column)
    for row in rows:
        cells = [
            row["id"],
            row["tenant"] or "-",
            row["member"],
            row["role"],
            _date(row["createdAt"]),
            _date(row["expiresAt"]),
            _date(row["lastUsedAt"]),
        ]
        if all_:
            revoked = row.get("revokedAt")
            cells.append("-" if revoked is None else f"{_date(revoked)} by {row['revokedBy']}")
        table.add_row(*render.cells(*cells))
    render.out.print(table)


def _date(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


@admin_app.command("revoke-token")
def revoke_token(
    token_id: Annotated[int, typer.Argument(help="the token's id (kiban admin tokens)")],
) -> None:
    """Revoke a token: its next request is refused."""
    from kiban.sdk.client import Client

    with Client() as api:
        row = api.revoke_token(token_id)
    render.err.print(f"token {row['id']} of {row['member']} ({row['role']}) revoked")


Drain = Annotated[
    bool,
    typer.Option(
        help="cancel its unfinished jobs, delete its services, stop its notebooks, and delete "
        "it once they have ended"
    ),
]
Wait = Annotated[
    float, typer.Option(help="with --drain: seconds to wait for its jobs and services to end")
]


def _deleted(delete: Any, what: str, drain: bool, wait: float) -> None:
    """Call ``delete`` until it has deleted (a drain asks again while its jobs end)."""
    deadline = time.monotonic() + wait
    while True:
        answer = delete()
        if answer["deleted"]:
            render.err.print(f"{what} deleted")
            return
        if time.monotonic() >= deadline:
            render.err.print(f"{what} not deleted yet: {answer['message']}")
            raise typer.Exit(1)
        time.sleep(1.0)


@admin_app.command("delete-tenant")
def delete_tenant(
    name: Annotated[str, typer.Argument(help="tenant (team) name")],
    drain: Drain = False,
    wait: Wait = 300.0,
) -> None:
    """Delete a tenant: refused while it has unfinished jobs, services or running notebooks
    (unless --drain). Its tokens are revoked and its queues leave the policy; its history
    stays."""
    from kiban.sdk.client import Client

    with Client() as api:
        _deleted(lambda: api.delete_tenant(name, drain), f"tenant {name}", drain, wait)


@admin_app.command("delete-queue")
def delete_queue(
    name: Annotated[str, typer.Argument(help="queue name")],
    drain: Drain = False,
    wait: Wait = 300.0,
) -> None:
    """Remove a queue from the policy: refused while it has unfinished jobs, services or
    running notebooks (unless --drain)."""
    from kiban.sdk.client import Client

    with Client() as api:
        _deleted(lambda: api.delete_queue(name, drain), f"queue {name}", drain, wait)


@admin_app.command("queue-strategy")
def queue_strategy(
    name: Annotated[str, typer.Argument(help="queue name")],
    strategy: Annotated[
        str,
        typer.Argument(
            help="StrictFIFO, BestEffortFIFO, LeastAttainedService or ShortestExpectedService"
        ),
    ],
) -> None:
    """Change a queue's strategy (an admin, or its tenant's tenant-admin)."""
    from kiban.sdk.client import Client

    with Client() as api:
        api.change_queue(name, strategy)
    render.err.print(f"queue {name}: strategy {strategy}")


QuotaItems = Annotated[
    list[str] | None,
    typer.Option(
        "--quota",
        help="nominal amount of a flavor, FLAVOR=N for its GPUs (repeatable), e.g. h100=8; "
        "FLAVOR.RESOURCE=N for an extended resource (h100.nvidia.com/hostdev=8); gpu=N in a "
        "policy without flavors",
    ),
]
Weight = Annotated[
    float | None, typer.Option("--weight", help="fair-share weight (fairShareWeight)")
]


def quota_of(items: list[str], field: str = "--quota") -> dict[str, Any]:
    """A queue's quota from ``FLAVOR=N``, ``FLAVOR.RESOURCE=N`` or ``gpu=N`` items; a bad item
    is named (field ``field``)."""
    quota: dict[str, Any] = {}
    for item in items:
        key, sep, amount = item.partition("=")
        key, amount = key.strip(), amount.strip()
        if not sep or not key or not amount.isdigit():
            raise SpecError.single(
                field, f"expected FLAVOR=N (h100=8), FLAVOR.RESOURCE=N or gpu=N, not {item!r}"
            )
        flavor, dot, resource = key.partition(".")
        if key == "gpu":
            quota["gpu"] = int(amount)
        else:
            quota.setdefault(flavor, {"gpu": 0})[resource if dot else "gpu"] = int(amount)
    if "gpu" in quota and len(quota) > 1:
        raise SpecError.single(
            field,
            "gpu=N is the quota of a policy without flavors: name flavors or give gpu=N alone",
        )
    return quota


@admin_app.command("create-queue")
def create_queue(
    name: Annotated[str, typer.Argument(help="queue name")],
    tenant: Annotated[str, typer.Option(help="tenant that owns it")],
    gpu_quota: Annotated[
        int | None, typer.Option(help="GPU quota, for a policy without flavors (default: none)")
    ] = None,
    quota: QuotaItems = None,
    cohort: Annotated[str | None, typer.Option(help="cohort it borrows and lends in")] = None,
    strategy: Annotated[
        str,
        typer.Option(
            help="StrictFIFO, BestEffortFIFO, LeastAttainedService or ShortestExpectedService"
        ),
    ] = "StrictFIFO",
    weight: Weight = None,
) -> None:
    """Add a queue for a tenant to the policy (a new policy version). A tenant-admin may, for
    their own tenant, with a quota within the limits admins set."""
    entry: dict[str, Any] = {}
    if quota:
        entry["quota"] = quota_of(quota)
    if cohort:
        entry["cohort"] = cohort
    if weight is not None:
        entry["fairShareWeight"] = weight
    from kiban.sdk.client import Client

    with Client() as api:
        api.create_queue(name, tenant, gpu_quota, strategy, **entry)
    render.err.print(f"queue {name} created for tenant {tenant}")


@admin_app.command("queue-quota")
def queue_quota(
    name: Annotated[str, typer.Argument(help="queue name")],
    amounts: Annotated[
        list[str],
        typer.Argument(
            help="its whole new quota: FLAVOR=N for GPUs (h100=8), FLAVOR.RESOURCE=N for an "
            "extended resource, gpu=N in a policy without flavors",
            show_default=False,
        ),
    ],
    weight: Weight = None,
) -> None:
    """Set a queue's quota (and --weight): a new policy version. Its tenant's tenant-admins may,
    while the tenant's queues stay within the limits admins set (refused otherwise, naming the
    field, the ceiling and the total)."""
    settings: dict[str, Any] = {"quota": quota_of(amounts, "amounts")}
    if weight is not None:
        settings["fairShareWeight"] = weight
    from kiban.sdk.client import Client

    with Client() as api:
        api.change_queue(name, **settings)
    render.err.print(f"queue {name}: quota {' '.join(amounts)}")


@admin_app.command("tenants")
def tenants() -> None:
    """List tenants."""
    from kiban.sdk.client import Client

    with Client() as api:
        for tenant in api.tenants():
            render.out.print(tenant["name"])
