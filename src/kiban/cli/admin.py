"""``kiban admin``: tenants, their tokens and queues (needs the admin token)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from kiban.cli import render
from kiban.domain.errors import SpecError

admin_app = typer.Typer(
    rich_markup_mode=render.HELP_MARKUP,
    help="Create tenants, member tokens and queues.",
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
    name: Annotated[str, typer.Argument(help="who the token is for")],
) -> None:
    """Create a member's token; prints it alone on stdout (it is shown only once)."""
    from kiban.sdk.client import Client

    with Client() as api:
        token = api.create_token(tenant, name)
    print(token)


@admin_app.command("create-queue")
def create_queue(
    name: Annotated[str, typer.Argument(help="queue name")],
    tenant: Annotated[str, typer.Option(help="tenant that owns it")],
    gpu_quota: Annotated[
        int | None, typer.Option(help="GPU quota, for a policy without flavors (default: none)")
    ] = None,
    quota: Annotated[
        list[str] | None,
        typer.Option(help="nominal GPUs of a flavor, FLAVOR=N (repeatable), e.g. h100=8"),
    ] = None,
    cohort: Annotated[str | None, typer.Option(help="cohort it borrows and lends in")] = None,
    strategy: Annotated[str, typer.Option(help="StrictFIFO or BestEffortFIFO")] = "StrictFIFO",
) -> None:
    """Add a queue for a tenant to the policy (a new policy version)."""
    entry: dict[str, Any] = {}
    if quota:
        per_flavor: dict[str, Any] = {}
        for item in quota:
            flavor, sep, amount = item.partition("=")
            if not sep or not amount.strip().isdigit():
                raise SpecError.single("--quota", f"expected FLAVOR=N such as h100=8, not {item!r}")
            per_flavor[flavor.strip()] = {"gpu": int(amount)}
        entry["quota"] = per_flavor
    if cohort:
        entry["cohort"] = cohort
    from kiban.sdk.client import Client

    with Client() as api:
        api.create_queue(name, tenant, gpu_quota, strategy, **entry)
    render.err.print(f"queue {name} created for tenant {tenant}")


@admin_app.command("tenants")
def tenants() -> None:
    """List tenants."""
    from kiban.sdk.client import Client

    with Client() as api:
        for tenant in api.tenants():
            render.out.print(tenant["name"])
