"""``kiban describe node NAME``: a node's capacity and use, cordon, agent, each health check's
condition, the latest readings per GPU, what changed and what remediation did."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kiban.cli.render import age, cells, conditions_text, current_time, escape, node_status, when
from kiban.scheduler import units
from kiban.sdk.errors import ApiError

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table

    from kiban.sdk.client import Client

SHOWN = 20
"""Changes and actions a table shows (newest first); ``-o wide`` shows all the API gives."""


def fetch_node(api: Client, name: str) -> dict[str, Any]:
    """The node as ``kiban nodes`` lists it, with its ``health`` (``GET /nodes/NAME/health``).
    An unknown node is the API's 404 naming it."""
    health = api.node_health(name)
    node = next((n for n in api.nodes() if n["name"] == name), None)
    if node is None:  # removed between the two calls
        raise ApiError(404, f"node {name} not found")
    return {**node, "health": health}


def node_description(
    node: dict[str, Any], now: float | None = None, wide: bool = False
) -> RenderableType:
    """The node's summary lines, then its conditions, readings, history and actions."""
    from rich.console import Group

    now = current_time() if now is None else now
    health = node["health"]
    free = max(node["gpus"] - node["gpusInUse"], 0)
    labels = ",".join(f"{k}={v}" for k, v in sorted(node["labels"].items())) or "-"
    parts: list[RenderableType] = [
        f"[bold]Node[/bold]       {escape(node['name'])}",
        escape(
            f"Capacity   {node['gpus']} GPUs, {units.cpus(node['cpuMillis'])} CPUs, "
            f"{units.size(int(node['memory']))} of memory"
        ),
        f"Allocated  {node['gpusInUse']} of {node['gpus']} GPUs ({free} free)",
        f"Status     [bold]{escape(node_status(node))}[/bold]{escape(cordon_note(node))}",
        f"Labels     {escape(labels)}",
        f"Agent      {escape(agent_text(health['agent'], now))}",
    ]
    if health["conditions"]:
        notable = conditions_text(node.get("conditions") or [])
        parts += [f"Conditions {escape(notable)}", conditions_table(health["conditions"], now)]
    else:
        parts.append("Conditions none reported (no check has run)")
    parts += reading_parts(health.get("reading"), now)
    history = health["history"] if wide else health["history"][:SHOWN]
    if history:
        parts.append(f"History    {shown_of(history, health['history'])}")
        parts.append(history_table(history))
    actions = health["actions"] if wide else health["actions"][:SHOWN]
    if actions:
        parts.append(f"Actions    {shown_of(actions, health['actions'])}")
        parts.append(actions_table(actions))
    else:
        parts.append("Actions    none taken")
    return Group(*parts)


def cordon_note(node: dict[str, Any]) -> str:
    """What a cordon means for the node, by who set it."""
    if not node["cordoned"]:
        return ""
    if node.get("cordonSource") == "remediation":
        return ": no new work; the health rules lift it after enough healthy checks"
    return ": no new work until an admin uncordons it (kiban uncordon)"


def agent_text(agent: dict[str, Any], now: float) -> str:
    """Where the agent serves and when it last reported; stale when that is too long ago."""
    reported = agent.get("reportedAt")
    if reported is None:
        return "none has reported (its checks are not run)"
    where = agent.get("address") or "no address"
    text = f"{where}, last report {when(reported)} ({age(reported, now)} ago)"
    if agent.get("stale"):
        text += "; STALE: not reported within the agent timeout, its conditions become Unknown"
    return text


def shown_of(shown: list[Any], everything: list[Any]) -> str:
    """``newest first`` or ``the newest 20 of 57 (-o wide: all)``."""
    if len(shown) == len(everything):
        return "newest first"
    return f"the newest {len(shown)} of {len(everything)} (-o wide: all)"


def _table(*columns: str) -> Table:
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column)
    return table


def conditions_table(conditions: list[dict[str, Any]], now: float) -> Table:
    """Each check's condition: status, reason, since when, message."""
    table = _table("  CHECK", "STATUS", "REASON", "SINCE", "MESSAGE")
    for c in conditions:
        since = c["lastTransitionTime"]
        table.add_row(
            *cells(
                f"  {c['type']}",
                c["status"],
                c["reason"],
                f"{when(since)} ({age(since, now)} ago)",
                c["message"] or "-",
            )
        )
    return table


def reading_parts(reading: dict[str, Any] | None, now: float) -> list[RenderableType]:
    """The latest reading's line, and its GPUs' table."""
    if reading is None:
        return ["Readings   none yet"]
    taken = reading["taken_at"]
    line = f"Readings   taken {when(taken)} ({age(taken, now)} ago)"
    if reading.get("driver_version"):
        line += f", driver {reading['driver_version']}"
    if not reading["nvml_available"]:
        line += f"; NVML unavailable: {reading.get('error') or 'no reason given'}"
    elif reading.get("error"):
        line += f"; {reading['error']}"
    parts: list[RenderableType] = [escape(line)]
    if reading["gpus"]:
        parts.append(gpus_table(reading["gpus"]))
    return parts


def gpus_table(gpus: list[dict[str, Any]]) -> Table:
    """One row per GPU: telemetry, then the counters the checks read."""
    table = _table(
        "  GPU", "UTIL", "MEMORY", "TEMP", "POWER", "ECC DBE", "REMAPPED", "PCIE", "XIDS", "STATE"
    )
    for g in gpus:
        table.add_row(
            *cells(
                f"  {g['index']}",
                number(g.get("utilization_percent"), "%"),
                memory_text(g.get("memory_used_mib"), g.get("memory_free_mib")),
                number(g.get("temperature_c"), "C"),
                number(g.get("power_w"), "W"),
                ecc_text(g),
                remap_text(g),
                pcie_text(g),
                ",".join(str(x["code"]) for x in g.get("xids") or ()) or "-",
                gpu_state(g),
            )
        )
    return table


def number(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:g}{unit}"


def memory_text(used: float | None, free: float | None) -> str:
    """``1200/81559 MiB`` (used of total)."""
    if used is None:
        return "-"
    if free is None:
        return f"{used:g} MiB"
    return f"{used:g}/{used + free:g} MiB"


def counter(value: int | None) -> str:
    return "-" if value is None else str(value)


def ecc_text(g: dict[str, Any]) -> str:
    """Uncorrectable ECC errors: volatile (since the driver loaded) / aggregate (lifetime)."""
    volatile, aggregate = g.get("ecc_volatile_uncorrectable"), g.get("ecc_aggregate_uncorrectable")
    if volatile is None and aggregate is None:
        return "-"
    return f"{counter(volatile)}/{counter(aggregate)}"


def remap_text(g: dict[str, Any]) -> str:
    """Remapped rows, correctable / uncorrectable, and a pending remap or a failed one."""
    correctable, uncorrectable = (
        g.get("remapped_rows_correctable"),
        g.get("remapped_rows_uncorrectable"),
    )
    text = "-"
    if correctable is not None or uncorrectable is not None:
        text = f"{counter(correctable)}/{counter(uncorrectable)}"
    if g.get("remap_failure"):
        text += " FAILED"
    elif g.get("remap_pending"):
        text += " pending"
    return text


def pcie_text(g: dict[str, Any]) -> str:
    """``gen5 x16``; below the maximum, the maximum too: ``gen3 x8 (max gen5 x16)``."""
    gen, width = g.get("pcie_link_gen"), g.get("pcie_link_width")
    if gen is None and width is None:
        return "-"
    text = f"gen{counter(gen)} x{counter(width)}"
    gen_max, width_max = g.get("pcie_link_gen_max"), g.get("pcie_link_width_max")
    below = (gen is not None and gen_max is not None and gen < gen_max) or (
        width is not None and width_max is not None and width < width_max
    )
    if below:
        text += f" (max gen{counter(gen_max)} x{counter(width_max)})"
    return text


def gpu_state(g: dict[str, Any]) -> str:
    """``ok``, ``lost`` (off the bus) or ``not responding``, with what failed."""
    if g.get("lost"):
        state = "lost"
    elif not g.get("responding", True):
        state = "not responding"
    else:
        return "ok"
    return f"{state}: {g['error']}" if g.get("error") else state


def history_table(history: list[dict[str, Any]]) -> Table:
    table = _table("  TIME", "CHECK", "STATUS", "REASON", "MESSAGE")
    for h in history:
        table.add_row(
            *cells(f"  {when(h['at'])}", h["type"], h["status"], h["reason"], h["message"] or "-")
        )
    return table


def actions_table(actions: list[dict[str, Any]]) -> Table:
    table = _table("  TIME", "ACTION", "CHECK", "RULE", "OUTCOME", "READING", "DETAIL")
    for a in actions:
        table.add_row(
            *cells(
                f"  {when(a['at'])}",
                a["action"],
                a["check"],
                a["rule"],
                a["outcome"],
                a["reading"] or "-",
                a["detail"] or "-",
            )
        )
    return table
