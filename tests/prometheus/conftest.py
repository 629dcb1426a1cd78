"""The Prometheus tier: promtool checks the shipped rules and configuration, and a real
Prometheus scrapes a running kiban. Without ``prometheus``/``promtool`` (installed by
scripts/ensure-prometheus.sh) its tests skip with that hint, which fails under ``CI=true``."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiban.devtools.prometheus import ENSURE_HINT, find_prometheus, find_promtool


@pytest.fixture(scope="session")
def promtool() -> Path:
    found = find_promtool()
    if found is None:
        pytest.skip(f"promtool not found; {ENSURE_HINT}")
    return found


@pytest.fixture(scope="session")
def prometheus_bin() -> Path:
    found = find_prometheus()
    if found is None:
        pytest.skip(f"prometheus not found; {ENSURE_HINT}")
    return found
