"""A throwaway Prometheus server for tests, and PromQL helpers to evaluate rules and panels.

The server is Debian's ``prometheus`` package (install it with
``scripts/ensure-prometheus.sh``), started on a free port of 127.0.0.1 with its storage in a
fresh temporary directory and a configuration that scrapes one kiban through its HTTP service
discovery (``/api/v1/discovery/prometheus``), as ``deploy/prometheus/prometheus.yml`` does::

    with ThrowawayPrometheus(discovery_url, rule_files=[alerts]) as prom:
        prom.wait_for_targets(lambda targets: ...)
        series = prom.query("sum(kiban_node_gpus)")

The server is stopped and its directory removed on leaving the ``with`` block.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx
import yaml

__all__ = [
    "ENSURE_HINT",
    "PrometheusError",
    "ThrowawayPrometheus",
    "comparisons_as_bool",
    "find_prometheus",
    "find_promtool",
    "split_top_level_or",
]

ENSURE_HINT = "run scripts/ensure-prometheus.sh to install Prometheus (Debian's prometheus package)"
BIN_ENV_VAR = "KIBAN_PROMETHEUS_BIN"
"""Environment variable naming a directory holding ``prometheus`` and ``promtool``."""


class PrometheusError(RuntimeError):
    """The throwaway server did not start, or a query failed."""


def _find(name: str) -> Path | None:
    override = os.environ.get(BIN_ENV_VAR)
    if override:
        candidate = Path(override) / name
        return candidate if os.access(candidate, os.X_OK) else None
    found = shutil.which(name)
    return Path(found) if found else None


def find_prometheus() -> Path | None:
    """The ``prometheus`` server binary (``$KIBAN_PROMETHEUS_BIN``, else PATH), or None."""
    return _find("prometheus")


def find_promtool() -> Path | None:
    """The ``promtool`` binary (``$KIBAN_PROMETHEUS_BIN``, else PATH), or None."""
    return _find("promtool")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class Target:
    """One active scrape target as ``/api/v1/targets`` shows it."""

    labels: dict[str, str]
    health: str  # "up", "down" or "unknown"
    last_error: str
    scrape_url: str


class ThrowawayPrometheus:
    """A Prometheus in a temporary directory scraping one kiban's discovery endpoint.

    Args:
        discovery_url: kiban's ``.../api/v1/discovery/prometheus``.
        rule_files: rule files to load (evaluated every ``interval_s``).
        interval_s: scrape, discovery refresh and rule evaluation interval.
        start_timeout: seconds to wait for the server to be ready.
    """

    def __init__(
        self,
        discovery_url: str,
        *,
        rule_files: Sequence[Path] = (),
        interval_s: float = 1.0,
        start_timeout: float = 60.0,
    ) -> None:
        self.discovery_url = discovery_url
        self.rule_files = [Path(p).resolve() for p in rule_files]
        self.interval_s = interval_s
        self.start_timeout = start_timeout
        self._base: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = None

    @property
    def url(self) -> str:
        if self._port is None:
            raise PrometheusError("the throwaway Prometheus is not started")
        return f"http://127.0.0.1:{self._port}"

    @property
    def log_path(self) -> Path:
        if self._base is None:
            raise PrometheusError("the throwaway Prometheus is not started")
        return self._base / "prometheus.log"

    def config(self) -> dict[str, Any]:
        """The configuration: deploy/prometheus/prometheus.yml's scrape job, at test pace."""
        interval = f"{max(1, round(self.interval_s * 1000))}ms"
        return {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [
                {
                    "job_name": "kiban",
                    "honor_labels": True,
                    "scrape_timeout": interval,
                    "http_sd_configs": [{"url": self.discovery_url, "refresh_interval": interval}],
                }
            ],
        }

    def start(self) -> None:
        binary = find_prometheus()
        if binary is None:
            raise PrometheusError(f"prometheus not found; {ENSURE_HINT}")
        self._base = Path(tempfile.mkdtemp(prefix="kiban-prometheus-"))
        config = self._base / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config()))
        self._port = _free_port()
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [
                    str(binary),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self._base / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self._port}",
                    "--storage.tsdb.retention.time=1h",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self._proc.poll() is not None:
                raise PrometheusError(
                    f"prometheus exited with code {self._proc.returncode}:\n{self.log_tail()}"
                )
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise PrometheusError(f"prometheus not ready in {self.start_timeout:g}s")
            time.sleep(0.1)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=15)
        self._proc = None
        if self._base is not None:
            shutil.rmtree(self._base, ignore_errors=True)
            self._base = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except (OSError, PrometheusError):
            return "(no log)"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- the HTTP API ------------------------------------------------------------------------
    def _get(self, path: str, **params: str) -> Any:
        answer = httpx.get(f"{self.url}{path}", params=params, timeout=10.0)
        body = answer.json()
        if answer.status_code != 200 or body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('error', answer.text)}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now (a scalar becomes one sample)."""
        data = self._get("/api/v1/query", query=expr)
        if data["resultType"] == "vector":
            result: list[dict[str, Any]] = data["result"]
            return result
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        raise PrometheusError(f"{expr}: a {data['resultType']}, not an instant vector")

    def targets(self) -> list[Target]:
        data = self._get("/api/v1/targets", state="active")
        return [
            Target(
                labels=t["labels"],
                health=t["health"],
                last_error=t.get("lastError", ""),
                scrape_url=t.get("scrapeUrl", ""),
            )
            for t in data["activeTargets"]
        ]

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule, with its ``health`` and ``lastError``."""
        groups = self._get("/api/v1/rules")["groups"]
        return [rule for group in groups for rule in group["rules"]]

    def wait_for(self, check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
        """Poll ``check`` until it holds; fail naming ``what`` (and the log) after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise PrometheusError(f"waited {timeout:g}s for {what}:\n{self.log_tail()}")
            time.sleep(0.2)


# -- PromQL ------------------------------------------------------------------------------------
_COMPARISONS = ("==", "!=", ">=", "<=", ">", "<")
_QUOTES = "\"'`"


def _scan(expr: str) -> list[tuple[int, int]]:
    """(position, parenthesis depth) of each character outside strings, label matchers
    (``{...}``) and range selectors (``[...]``): where operators may be."""
    found: list[tuple[int, int]] = []
    depth = 0
    inside = ""  # the open quote, "{" or "[", or "" outside them
    i = 0
    while i < len(expr):
        char = expr[i]
        if inside and inside in _QUOTES:
            if char == "\\":
                i += 2
                continue
            if char == inside:
                inside = ""
        elif inside == "{":
            if char in _QUOTES:
                # a string inside a matcher: skip to its end
                end = i + 1
                while end < len(expr) and expr[end] != char:
                    end += 2 if expr[end] == "\\" else 1
                i = end
            elif char == "}":
                inside = ""
        elif inside == "[":
            if char == "]":
                inside = ""
        elif char in _QUOTES or char in "{[":
            inside = char
        else:
            if char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
            found.append((i, depth))
        i += 1
    return found


def _is_word_at(expr: str, i: int, word: str) -> bool:
    end = i + len(word)
    before = expr[i - 1] if i > 0 else " "
    after = expr[end] if end < len(expr) else " "
    return (
        expr[i:end] == word
        and not (before.isalnum() or before in "_:")
        and not (after.isalnum() or after in "_:")
    )


def comparisons_as_bool(expr: str) -> str:
    """``expr`` with ``bool`` after every comparison operator that lacks it.

    A comparison filters: ``x > 5`` drops the series where it does not hold. With ``bool`` it
    answers 0 or 1 for every series instead, so the expression returns series whenever the
    series it reads exist, whether or not the condition holds now.
    """
    out: list[str] = []
    last = 0
    positions = [i for i, _ in _scan(expr)]
    outside = set(positions)
    skip_to = -1
    for i in positions:
        if i < skip_to:
            continue
        operator = next(
            (op for op in _COMPARISONS if expr.startswith(op, i) and i + len(op) - 1 in outside),
            None,
        )
        if operator is None:
            continue
        end = i + len(operator)
        rest = expr[end:].lstrip()
        if not _is_word_at(rest, 0, "bool"):
            out.append(expr[last:end])
            out.append(" bool" if expr[end : end + 1].isspace() else " bool ")
            last = end
        skip_to = end
    out.append(expr[last:])
    return "".join(out)


def split_top_level_or(expr: str) -> list[str]:
    """The operands of ``expr``'s top-level ``or`` (outside every parenthesis), stripped."""
    parts: list[str] = []
    start = 0
    for i, depth in _scan(expr):
        if depth == 0 and i >= start and _is_word_at(expr, i, "or"):
            parts.append(expr[start:i].strip())
            start = i + 2
    parts.append(expr[start:].strip())
    return parts
