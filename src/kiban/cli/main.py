"""``kiban``: run the platform, submit and watch jobs, look at queues and nodes.

Start-up is kept short (``kiban bench cli`` measures it): this module imports only Typer and
small things, and names every command in ``COMMANDS`` with the module it lives in, which is
imported only when that command is called (``kiban ls`` loads ``kiban.cli.jobs``, not the
benchmarks, the admin commands or the server). Each command imports what it needs when it runs
(the HTTP client and Rich for ``kiban ls``). ``tests/cli/test_startup.py`` checks what ``kiban
ls`` imports, ``tests/cli/test_lazy_commands.py`` that the registry lists each command as its
own help does.
"""

from __future__ import annotations

import sys
from typing import Annotated, Final

import typer

from kiban.cli import HELP_MARKUP, INTERRUPTED_EXIT, coercion
from kiban.cli.lazy_group import Kind, Lazy, LazyGroup
from kiban.domain.errors import SpecError
from kiban.sdk.errors import ApiError

COMMANDS: Final[dict[str, Lazy]] = {
    "up": Lazy(
        "kiban.cli.up:up_commands",
        "Run the whole platform in the foreground: API, scheduler and an executor. One at a "
        "time per home, and per PostgreSQL database: a second is refused, naming the first.",
    ),
    "run": Lazy(
        "kiban.cli.jobs:job_commands",
        "Run a command as a job: ``kiban run --nodes 2 --gpus-per-node 4 -- torchrun train.py``.",
    ),
    "submit": Lazy(
        "kiban.cli.jobs:job_commands",
        "Submit a job manifest; prints the job id alone on stdout.",
    ),
    "ls": Lazy(
        "kiban.cli.jobs:job_commands",
        "List jobs, newest first; a waiting job's reason and forecast start (ETA). An array is "
        "one line: its indices counted by state (``kiban describe ARRAY`` shows them).",
        at_once=True,
    ),
    "describe": Lazy(
        "kiban.cli.jobs:job_commands",
        "A job's spec, state, placement, pending reason, positions, forecast start, its "
        "tenant's standing, preemptor, last checkpoint and events (of an array's id: its "
        "indices by state); as ``describe service NAME``, a service's revisions, replicas, "
        "traffic split, latency and URL; as ``describe node NAME``, a node's capacity, use, "
        "cordon, agent, health checks, latest GPU readings, their history and the remediation "
        "actions taken. ``-o wide`` adds the manifest as stored (a node: its whole history).",
        at_once=True,
    ),
    "logs": Lazy(
        "kiban.cli.jobs:job_commands",
        "A replica's output (rank 0 unless told) on stdout; where it ran on stderr.",
        at_once=True,
    ),
    "wait": Lazy(
        "kiban.cli.jobs:job_commands",
        "Wait for a job to finish; exit 0 only if it succeeded (2 if the timeout came first). "
        "For an array: until every index has ended; exit 0 only if every index succeeded.",
    ),
    "cancel": Lazy(
        "kiban.cli.jobs:job_commands",
        "Cancel jobs: running replicas get SIGTERM, then SIGKILL after the grace period. An "
        "array's id cancels every index of it that has not ended.",
    ),
    "checkpoint": Lazy(
        "kiban.cli.jobs:job_commands",
        "Report that a running job saved a checkpoint now (preemption prefers jobs that lose "
        "less).",
    ),
    "queues": Lazy(
        "kiban.cli.cluster:cluster_commands",
        "Queues per flavor: nominal, used, borrowed, lent, pending; the tenant's usage, "
        "standing. ``-o wide`` adds the borrowing and lending limits and the fair-share weight.",
        at_once=True,
    ),
    "nodes": Lazy(
        "kiban.cli.cluster:cluster_commands",
        "Nodes with their GPUs, use, health, who cordoned them, and their health checks' "
        "conditions that are not False (``GpuEcc``: failing; ``GpuXid?``: Unknown; ``ok``: "
        "none); ``-o wide`` adds free GPUs and the health message of healthy nodes too.",
        at_once=True,
    ),
    "cordon": Lazy(
        "kiban.cli.cluster:cluster_commands",
        "Take a node out of scheduling (admin): no new work; running jobs keep running.",
    ),
    "uncordon": Lazy(
        "kiban.cli.cluster:cluster_commands",
        "Let a cordoned node take new work again (admin).",
    ),
    "serve": Lazy(
        "kiban.cli.serving:serve_command",
        "Create or change an inference service; prints its URL on stdout.",
    ),
    "services": Lazy(
        "kiban.cli.serving:services_command",
        "List inference services: state, ready replicas, traffic split and URL.",
        at_once=True,
    ),
    "promote": Lazy(
        "kiban.cli.serving:promote_command",
        "Send all of a service's traffic to its canary revision.",
    ),
    "rollback": Lazy(
        "kiban.cli.serving:rollback_command",
        "Drop a service's canary (or bring back the revision before the stable one).",
    ),
    "chat": Lazy(
        "kiban.cli.serving:chat_command",
        "Chat with a text-generation service in the terminal; the reply streams as it is made. "
        "An empty line or end of input ends the chat.",
    ),
    "delete": Lazy(
        "kiban.cli.serving:delete_command",
        "Delete an inference service: its replicas stop, then it is gone (``kiban cancel`` ends"
        " a job).",
    ),
    "model-server": Lazy(
        "kiban.cli.up:up_commands",
        "Run the model server alone, as kiban runs it for each replica of a service (its "
        "options, KServe's names included: ``kiban model-server --help``).",
    ),
    "share": Lazy(
        "kiban.cli.share:share_command",
        "Each member's fair share within its tenant: weight and its part of the tenant's "
        "weights, raw and decayed usage (weighted GPU-hours), part of the tenant's decayed "
        "usage, standing (decayed usage per weight, in hours; lower goes first within the "
        "tenant) and rank.",
        at_once=True,
    ),
    "usage": Lazy(
        "kiban.cli.usage:usage_command",
        "Usage within a window from the accounting records: GPU-hours, CPU-hours, attempts and "
        "jobs, and the GPU-hours lost to preemption and to node failures (a member sees their "
        "tenant's, an admin every tenant's).",
        at_once=True,
    ),
    "audit": Lazy(
        "kiban.cli.audit:audit_command",
        "The audit log, newest first (admin): every request that changed state or tried to, "
        "denials included. ``verify`` (or ``--verify``) checks that no record was changed or "
        "removed; ``anchor`` prints the last record's SEQ:HASH to keep outside the store, and "
        "``verify --anchor`` then also shows records removed from the end.",
        at_once=True,
    ),
    "sim": Lazy(
        "kiban.cli.sim:sim_command",
        "Replay a trace through the same scheduler core as the control loop, in simulated time.",
    ),
    "node-agent": Lazy(
        "kiban.cli.node_agent:node_agent_command",
        "Check the GPUs of one node (or the local executor's nodes) through NVML every "
        "interval: conditions in node-problem-detector's shape, reported to kiban and served as"
        " /metrics.",
    ),
    "admin": Lazy(
        "kiban.cli.admin:admin_app",
        "Create and delete tenants, tokens and queues.",
        Kind.GROUP,
    ),
    "policy": Lazy(
        "kiban.cli.policy:policy_app",
        "Read and change the cluster policy: flavors, cohorts, queues, priority classes, fair "
        "share, topology.",
        Kind.GROUP,
    ),
    "budgets": Lazy(
        "kiban.cli.budgets:budgets_app",
        "Budgets: GPU-hours or cost per tenant and period, and extensions (admins grant them).",
        Kind.GROUP,
    ),
    "health": Lazy(
        "kiban.cli.health:health_app",
        "Node health: run the GPU checks now, or an allreduce sweep of the idle nodes.",
        Kind.GROUP,
    ),
    "notebook": Lazy(
        "kiban.cli.notebook:notebook_app",
        "Notebooks: JupyterLab on the cluster at KIBAN_URL/nb/TENANT/NAME/, stopped when idle "
        "(its directory kept; start it again to come back).",
        Kind.GROUP,
    ),
    "dev": Lazy(
        "kiban.cli.dev:dev_app",
        "Developer tools: a local Kubernetes control plane with fake GPU nodes.",
        Kind.GROUP,
    ),
    "bench": Lazy(
        "kiban.cli.bench:bench_app",
        "Benchmarks: each starts its own kiban servers and throwaway stores.",
        Kind.GROUP,
    ),
}
"""Every command of ``kiban``, in the order ``kiban --help`` lists them: where each lives, and
its line in that list."""


class KibanGroup(LazyGroup):
    registry = COMMANDS


coercion.install()

app = typer.Typer(
    cls=KibanGroup,
    rich_markup_mode=HELP_MARKUP,
    name="kiban",
    help="kiban: a multi-tenant GPU platform. Start it with `kiban up`, then `kiban run` or "
    "`kiban submit` jobs from another terminal.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)


def show_version(value: bool) -> None:
    if value:
        from kiban import __version__

        sys.stdout.write(f"kiban {__version__}\n")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="print the version and exit", callback=show_version, is_eager=True
        ),
    ] = False,
) -> None:
    """kiban: a multi-tenant GPU platform."""


def ends_at_once() -> bool:
    """Whether this call may end without the interpreter's teardown: it ran no command
    (``--version``, ``--help``, a completion of the first word) or one that only reads."""
    name = KibanGroup.resolved
    return name is None or COMMANDS[name].at_once


def auth_hint() -> str:
    """What to do about a refused token: where the CLI took it from."""
    from kiban.sdk.client import default_home, env_value

    if env_value("KIBAN_TOKEN"):
        return "the server refused the token in KIBAN_TOKEN (unset it to use the kiban home's)"
    token_file = default_home() / "token"
    return (
        f"set KIBAN_TOKEN, or KIBAN_HOME to the directory where `kiban up` wrote its token "
        f"(looked for {token_file})"
    )


def error_line(message: str) -> None:
    from kiban.cli import render
    from kiban.cli.quick import warmed

    warmed()  # a request that failed while Rich loaded for it (kiban.cli.connection)
    from rich.markup import escape

    render.err.print(f"[red]error:[/red] {escape(message)}", highlight=False)


def skip_httpx_command_line() -> None:
    """Keep httpx from importing its own command line (click, Rich's progress bars and
    Pygments), which it does when those are installed and skips when it is missing
    (``httpx[cli]`` is optional): kiban's CLI never runs it, and not importing it takes about a
    third off the HTTP client's import. Done by the entry point, before httpx is imported."""
    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


def main() -> None:
    """Entry point: turn API and spec errors into one readable line and a non-zero exit, and
    Ctrl-C that no command caught (while its modules load, or an error line is written) into
    the shell's exit code for it, without a traceback."""
    try:
        _run(sys.argv[1:])
    except KeyboardInterrupt:
        sys.exit(INTERRUPTED_EXIT)


def _run(args: list[str]) -> None:
    skip_httpx_command_line()
    try:
        app(args, prog_name="kiban")
    except ApiError as exc:
        message = exc.message
        if exc.status == 401:
            message += f"; {auth_hint()}"
        error_line(message)
        sys.exit(1)
    except SpecError as exc:
        error_line(str(exc))
        sys.exit(1)
    except BrokenPipeError:
        sys.exit(0)


if __name__ == "__main__":
    main()
