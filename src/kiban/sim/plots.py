"""``kiban sim --plot DIR``: PNGs of every replayed policy, side by side.

- ``allocation.png``: GPUs allocated and jobs waiting over time;
- ``jct_cdf.png``: the CDF of job completion times;
- ``tenant_share.png``: each tenant's share of the allocated GPUs over time, one panel per policy.

Series are steps (a value holds until the next point); they are resampled on a regular grid of
at most ``POINTS`` instants so that a 100-day trace draws in a second.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kiban.sim.engine import Series, SimOutcome
from kiban.sim.metrics import completed, jct
from kiban.sim.run import PolicyResult

Drawn = Sequence[tuple[str, SimOutcome]]
POINTS = 2000
DAY = 86400.0


def write_plots(results: Sequence[PolicyResult], directory: Path) -> list[Path]:
    """Draw the three figures into ``directory`` (made if needed); return their paths."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError(
            "--plot needs matplotlib, a dependency of kiban: reinstall it (pip install -e .)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    drawn = [(r.policy.name, r.outcome) for r in results if r.outcome is not None]
    if not drawn:
        return []
    origin = min(outcome.start_s for _, outcome in drawn)
    paths = [
        _allocation(plt, drawn, origin, directory / "allocation.png"),
        _jct_cdf(plt, drawn, directory / "jct_cdf.png"),
        _tenant_share(plt, drawn, origin, directory / "tenant_share.png"),
    ]
    return paths


def _grid(series: Series, origin: float, end: float) -> tuple[list[float], list[int]]:
    """Indices of the series' step values on a regular grid of days since ``origin``."""
    count = min(POINTS, max(len(series.times), 2))
    span = max(end - origin, 1.0)
    days = [i * span / (count - 1) / DAY for i in range(count)]
    picks = [max(bisect.bisect_right(series.times, origin + d * DAY) - 1, 0) for d in days]
    return days, picks


def _allocation(plt: Any, drawn: Drawn, origin: float, path: Path) -> Path:
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True)
    for name, outcome in drawn:
        series = outcome.series
        if series is None or not series.times:
            continue
        days, picks = _grid(series, origin, outcome.end_s)
        top.step(
            days,
            [series.allocated[i] for i in picks],
            where="post",
            lw=0.8,
            label=name,
        )
        bottom.step(days, [series.waiting[i] for i in picks], where="post", lw=0.8, label=name)
    total = drawn[0][1].total_gpus
    top.axhline(total, color="grey", lw=0.6, ls="--")
    top.set_ylabel(f"GPUs allocated (of {total:,})")
    bottom.set_ylabel("jobs waiting")
    bottom.set_xlabel("days since the first submission")
    top.legend(loc="upper right", fontsize="small")
    top.set_title("GPUs allocated and jobs waiting over time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _jct_cdf(plt: Any, drawn: Drawn, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, outcome in drawn:
        values = sorted(jct(r) for r in completed(outcome.runs))
        if not values:
            continue
        step = max(len(values) // POINTS, 1)
        xs = [*values[::step], values[-1]]
        ys = [i / len(values) for i in range(0, len(values), step)] + [1.0]
        ax.plot([max(x, 1.0) for x in xs], ys, lw=1.2, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF")
    ax.grid(True, which="both", lw=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _tenant_share(plt: Any, drawn: Drawn, origin: float, path: Path) -> Path:
    shown = [(n, o) for n, o in drawn if o.series is not None and o.series.times]
    fig, axes = plt.subplots(
        1, max(len(shown), 1), figsize=(5.5 * max(len(shown), 1), 4.5), sharey=True, squeeze=False
    )
    colors = plt.get_cmap("tab20").colors
    everyone = sorted({t for _, o in shown if o.series for t in o.series.by_tenant})
    for ax, (name, outcome) in zip(axes[0], shown, strict=False):
        series = outcome.series
        assert series is not None
        days, picks = _grid(series, origin, outcome.end_s)
        tenants = everyone  # the same order, so each tenant has one color in every panel
        stacks = []
        for tenant in tenants:
            points = series.by_tenant.get(tenant, [])
            stacks.append(
                [
                    points[i] / series.allocated[i]
                    if i < len(points) and series.allocated[i]
                    else 0.0
                    for i in picks
                ]
            )
        ax.stackplot(days, stacks, labels=tenants, step="post", lw=0, colors=colors)
        ax.set_title(name)
        ax.set_xlabel("days")
        ax.set_ylim(0, 1)
    axes[0][0].set_ylabel("share of allocated GPUs")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 8), fontsize="x-small")
    fig.suptitle("Each tenant's share of the allocated GPUs over time")
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
